#!/bin/bash
# What the launchd agent (com.mateclaw.mem.plist) runs: `mateclaw-mem serve` from this repo's .venv,
# with two exit codes turned into a clean stop.
#
# launchd's KeepAlive can restart a job after any unsuccessful exit (SuccessfulExit=false) but has no
# way to exempt particular exit codes, the way systemd's RestartPreventExitStatus=5 6 does. So this
# maps the two that a restart cannot fix to 0: 5 (another daemon holds the workspace) and 6 (a
# configuration error). launchd then leaves the job stopped instead of retrying every 10 seconds
# forever; every other failure still restarts.
set -u
here="$(cd "$(dirname "$0")" && pwd)"
"$here/../../.venv/bin/mateclaw-mem" serve "$@" &
child=$!
# launchd's SIGTERM (bootout, kickstart -k) reaches this script: pass it on, then wait for the
# daemon's own clean shutdown (running extractions finish) and report its exit status, not ours.
trap 'kill -TERM "$child" 2>/dev/null' TERM INT HUP
while :; do
  wait "$child"
  rc=$?
  kill -0 "$child" 2>/dev/null || break  # still there: `wait` was cut short by a signal
done
case "$rc" in
  5 | 6)
    echo "launchd-serve: mateclaw-mem exited $rc ($([ "$rc" = 5 ] && echo "another daemon holds the workspace" || echo "configuration error")); not restarting." \
      "Fix it, then: launchctl kickstart gui/$(id -u)/com.mateclaw.mem" >&2
    exit 0
    ;;
esac
exit "$rc"
