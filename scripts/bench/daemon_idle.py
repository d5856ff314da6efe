#!/usr/bin/env python3
"""The idle daemon's footprint: RSS, CPU and wake-ups of `mateclaw-mem serve` doing nothing.

    .venv/bin/python scripts/bench/daemon_idle.py [--seconds 60] [--workspace DIR]

Starts the daemon on a temp workspace (or DIR) on a free loopback port, waits until it listens,
lets it settle, then samples it for `--seconds`. Prints RSS (start, end, peak), CPU time used and
CPU share, threads, and context switches per second across all threads (a polling loop shows up
here long before it shows up as CPU). Aim: RSS under 120 MB, CPU near zero. Linux (/proc) only.
"""

from __future__ import annotations

import argparse
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from _figures import record  # scripts/bench/_figures.py (this script's folder is on sys.path)

SETTLE_SECONDS = 3.0


def proc_stat(pid: int) -> tuple[float, int]:
    """(CPU seconds user+system, RSS bytes) of a process."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    ticks = os.sysconf("SC_CLK_TCK")
    cpu = (int(fields[11]) + int(fields[12])) / ticks  # utime, stime
    rss = int(fields[21]) * os.sysconf("SC_PAGE_SIZE")
    return cpu, rss


def switches(pid: int) -> tuple[int, int]:
    """(threads, context switches summed over them)."""
    total = 0
    tasks = list(Path(f"/proc/{pid}/task").iterdir())
    for task in tasks:
        try:
            status = (task / "status").read_text()
        except FileNotFoundError:
            continue
        total += sum(int(n) for n in re.findall(r"ctxt_switches:\s+(\d+)", status))
    return len(tasks), total


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seconds", type=float, default=60.0, help="how long to sample (default 60)")
    ap.add_argument("--workspace", help="workspace to serve (default: a fresh temp one)")
    args = ap.parse_args()
    if not Path("/proc/self/stat").exists():
        print("this bench reads /proc; run it on Linux", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory() as tmp:
        workspace = args.workspace or str(Path(tmp) / "workspace")
        log_path = Path(tmp) / "daemon.log"
        env = {k: v for k, v in os.environ.items() if not k.startswith("MATECLAW_")}
        cmd = [sys.executable, "-m", "mateclaw_mem.cli.main", "serve", "--workspace", workspace, "--port", "0"]
        with log_path.open("wb") as log:
            proc = subprocess.Popen(cmd, cwd=tmp, env=env, stdout=log, stderr=subprocess.STDOUT,
                                    stdin=subprocess.DEVNULL)
        try:
            t0 = time.monotonic()
            while "listening on" not in log_path.read_text(errors="replace"):
                if proc.poll() is not None or time.monotonic() - t0 > 60:
                    print(log_path.read_text(errors="replace"), file=sys.stderr)
                    print("the daemon did not start", file=sys.stderr)
                    return 1
                time.sleep(0.1)
            startup = time.monotonic() - t0
            time.sleep(SETTLE_SECONDS)
            cpu0, rss0 = proc_stat(proc.pid)
            _, sw0 = switches(proc.pid)
            start = time.monotonic()
            peak = rss0
            while (elapsed := time.monotonic() - start) < args.seconds:
                time.sleep(min(1.0, args.seconds - elapsed))
                peak = max(peak, proc_stat(proc.pid)[1])
            elapsed = time.monotonic() - start
            cpu1, rss1 = proc_stat(proc.pid)
            threads, sw1 = switches(proc.pid)
        finally:
            proc.send_signal(signal.SIGTERM)
            try:
                code = proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                proc.kill()
                code = -9
        mb = 1024 * 1024
        print(f"idle daemon over {elapsed:.0f} s (after {SETTLE_SECONDS:.0f} s to settle; start-up {startup:.2f} s)")
        print(f"  RSS          start {rss0 / mb:6.1f} MB   end {rss1 / mb:6.1f} MB   peak {peak / mb:6.1f} MB"
              f"   (aim < 120 MB)")
        print(f"  CPU          {cpu1 - cpu0:6.2f} s used   {100 * (cpu1 - cpu0) / elapsed:5.2f} % of one core")
        record("idle daemon RSS (end)", rss1 / mb, "MB", goal="< 120 MB", met=rss1 / mb < 120)
        record("idle daemon CPU", 100 * (cpu1 - cpu0) / elapsed, "% of a core")
        print(f"  threads      {threads}")
        print(f"  ctx switches {(sw1 - sw0) / elapsed:6.1f} /s (all threads)")
        print(f"  stop         exit code {code} after SIGTERM")
    return 0


if __name__ == "__main__":
    from _load import load_average  # scripts/bench/_load.py (this script's folder is on sys.path)
    rc = main()
    print(load_average())
    sys.exit(rc)
