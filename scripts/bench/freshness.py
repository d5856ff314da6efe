#!/usr/bin/env python3
"""Freshness: how long after a person's save a word is found by HTTP search (prints figures).

    .venv/bin/python scripts/bench/freshness.py [--edits 25] [--burst 1000] [--idle 10]

Starts a real daemon (`mateclaw-mem serve`, port 0) on a temp workspace of about 1,000 sections
spread over 100 daily notes, waits until they are indexed, then:

- hand edits: `--edits` times, a plain `open(path, "w")` save of a daily note with one new section
  holding a unique word, then HTTP search for the word every ~5 ms until it is found; prints the
  median, p95 and max of save -> found (aim: <= 250 ms median, <= 500 ms p95); then `--edits // 2`
  editor-style saves (a hidden temp file, `os.replace` over the note) the same way;
- burst: `--burst` new files written at once (a `git checkout`), then the time until the last one
  is searchable;
- idle: the daemon's CPU over `--idle` seconds after the burst (from /proc/PID/stat).

Linux (/proc) only. Exit code 0 unless the daemon did not start or a word was never found.
"""

from __future__ import annotations

import argparse
import os
import random
import signal
import statistics
import string
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx
from _daemon import start_daemon  # scripts/bench/_daemon.py (this script's folder is on sys.path)
from _figures import record  # scripts/bench/_figures.py

SEARCH = "/api/v1/agents/default/workspace/memory/search"
POLL = 0.005
BURST_POLL = 0.025  # searching every 5 ms would take the daemon's CPU from the burst it measures
GIVE_UP = 30.0


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")  # utime + stime


def word(rng: random.Random) -> str:
    # Letters only: one token for every tokenizer, never seen in the corpus.
    return "zq" + "".join(rng.choice(string.ascii_lowercase) for _ in range(10))


def note(day: int, sections: int, rng: random.Random) -> str:
    topics = ["garden", "budget", "travel", "reading", "cooking", "running", "music", "work", "family", "health"]
    lines = [f"# 2025-03-{day:02d}" if day <= 31 else f"# Note {day}", ""]
    for i in range(sections):
        t = topics[(day + i) % len(topics)]
        lines += [f"## {t.title()} {i}", f"Notes about {t}: " + " ".join(rng.sample(topics, 5)) + ".", ""]
    return "\n".join(lines)


def found(client: httpx.Client, q: str) -> bool:
    r = client.get(SEARCH, params={"q": q, "scope": "files", "limit": 5})
    return r.status_code == 200 and bool(r.json().get("hits"))


def wait_found(client: httpx.Client, q: str, start: float, poll: float = POLL) -> float:
    while True:
        if found(client, q):
            return time.monotonic() - start
        if time.monotonic() - start > GIVE_UP:
            raise SystemExit(f"'{q}' was not searchable after {GIVE_UP:.0f} s")
        time.sleep(poll)


def pct(values: list[float], p: float) -> float:
    s = sorted(values)
    return s[min(len(s) - 1, round(p * (len(s) - 1)))]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--edits", type=int, default=25)
    ap.add_argument("--burst", type=int, default=1000)
    ap.add_argument("--idle", type=float, default=10.0)
    ap.add_argument("--seed", type=int, default=7)
    args = ap.parse_args()
    if not Path("/proc/self/stat").exists():
        print("this bench reads /proc; run it on Linux", file=sys.stderr)
        return 2
    rng = random.Random(args.seed)
    with tempfile.TemporaryDirectory() as tmp:
        ws = Path(tmp) / "ws"
        notes = ws / "default" / "memory"
        notes.mkdir(parents=True)
        for day in range(1, 101):
            (notes / f"2025-{1 + day // 29:02d}-{1 + day % 28:02d}-{day}.md").write_text(
                note(day, 10, rng), encoding="utf-8")
        config = Path(tmp) / "mateclaw.yaml"
        config.write_text("timezone: UTC\n", encoding="utf-8")
        log_path = Path(tmp) / "daemon.log"
        env = {k: v for k, v in os.environ.items() if not k.startswith("MATECLAW_")}
        cmd = [sys.executable, "-m", "mateclaw_mem.cli.main", "serve", "--workspace", str(ws), "--config",
               str(config), "--port", "0"]
        t0 = time.monotonic()
        proc, url = start_daemon(cmd, log_path, env=env, cwd=Path(tmp))
        try:
            if url is None:
                print(log_path.read_text(errors="replace"), file=sys.stderr)
                print("the daemon did not start", file=sys.stderr)
                return 1
            with httpx.Client(base_url=url, timeout=30) as client:
                while not found(client, "garden"):  # the start-up reconcile has indexed the corpus
                    if time.monotonic() - t0 > 60:
                        print("the corpus was never indexed", file=sys.stderr)
                        return 1
                    time.sleep(0.05)
                time.sleep(1.0)
                files = sorted(notes.glob("*.md"))
                for style, count in (("plain open('w')", args.edits), ("temp file + rename", args.edits // 2)):
                    lat: list[float] = []
                    for i in range(count):
                        path = files[rng.randrange(len(files))]
                        w = word(rng)
                        text = path.read_text(encoding="utf-8") + f"\n## Hand edit {i}\nRemember {w} today.\n"
                        start = time.monotonic()
                        if style.startswith("plain"):
                            with open(path, "w", encoding="utf-8") as f:  # truncate, then write
                                f.write(text)
                        else:
                            temp = path.with_name(f".{path.name}.{i}.tmp")
                            temp.write_text(text, encoding="utf-8")
                            os.replace(temp, path)
                        lat.append(wait_found(client, w, start))
                        time.sleep(rng.uniform(0.2, 0.5))
                    if not lat:
                        continue
                    ms = [x * 1000 for x in lat]
                    print(f"hand edit -> searchable over HTTP ({len(ms)} saves, {style}, ~1k sections)")
                    print(f"  median {statistics.median(ms):7.1f} ms   p95 {pct(ms, 0.95):7.1f} ms   "
                          f"max {max(ms):7.1f} ms   (aim <= 250 / <= 500)")
                    med, p95 = statistics.median(ms), pct(ms, 0.95)
                    record(f"hand edit -> searchable median ({style})", med, "ms", goal="<= 250 ms", met=med <= 250)
                    record(f"hand edit -> searchable p95 ({style})", p95, "ms", goal="<= 500 ms", met=p95 <= 500)

                burst = notes / "burst"
                burst.mkdir()
                words = [word(rng) for _ in range(args.burst)]
                start = time.monotonic()
                for n, w in enumerate(words):
                    (burst / f"b{n:04d}.md").write_text(f"# Burst {n}\n\n## Item\nThe {w} entry.\n",
                                                        encoding="utf-8")
                written = time.monotonic() - start
                # The last file written and a sample of the rest: the burst is done when all are found.
                wait_found(client, words[-1], start, BURST_POLL)
                for w in rng.sample(words, min(50, len(words))):
                    wait_found(client, w, start, BURST_POLL)
                all_found = time.monotonic() - start
                print(f"burst of {args.burst} new files (written in {written * 1000:.0f} ms)")
                print(f"  all searchable {all_found * 1000:7.0f} ms after the first write")
                record(f"burst of {args.burst} new files: all searchable", all_found * 1000, "ms")
                time.sleep(1.0)
                c0 = cpu_seconds(proc.pid)
                time.sleep(args.idle)
                used = cpu_seconds(proc.pid) - c0
                print(f"idle after the burst: {used:.2f} s CPU over {args.idle:.0f} s "
                      f"({100 * used / args.idle:.2f} % of one core)")
                record("idle CPU after the burst", 100 * used / args.idle, "% of a core")
        finally:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                proc.kill()
    return 0


if __name__ == "__main__":
    from _load import load_average  # scripts/bench/_load.py (this script's folder is on sys.path)
    rc = main()
    print(load_average())
    sys.exit(rc)
