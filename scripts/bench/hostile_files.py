#!/usr/bin/env python3
"""Hostile hand-saved memory files against the real daemon: no stall past the bound, SIGTERM <= 5 s.

    .venv/bin/python scripts/bench/hostile_files.py [--only NAME] [--bound 2.0] [--sigterm-after 0.5]

Each case is a MEMORY.md a person might save (or a tool might drop) into a fresh workspace:

- `headings-100k`: 100,000 `##` headings, each with a bullet (~3.3 MB);
- `prose-50mb`: 50 MB of prose lines, a heading every 200 lines;
- `binary`: 2 MB of random bytes;
- `invalid-utf8`: 1 MB of notes with one byte that is not UTF-8 in the middle;
- `alias-bomb`: YAML front matter whose aliases expand to 10^9 values ("billion laughs"), then notes.

For each, `mateclaw-mem serve` (this interpreter, fact projection on) is started on a seeded
workspace, the file is copied in as a person would save it, and then, one after the other: the
index catches up (a word planted at the file's end is searched for), a context build over HTTP, the
Memory Browser's view of the file, a facts rebuild, a machine write into the file (`write-memory`
append), then a facts rebuild is started and SIGTERM sent `--sigterm-after` seconds later.

A probe thread asks `/health`, the facts list and a workspace search in turn throughout; "stall" is
the longest any probe waited during a step (a lock held across long work shows up there). Prints, per
file: each step's time, its largest stall, the SIGTERM -> exit time, the prompt size, the view's
bytes, peak RSS (VmHWM), and whether the file's bytes were unchanged before the machine write.

Then `mem0-huge` and `mem0-drip`: the daemon with Mem0 listed, in front of tests/support's Mem0 server
answering 80 MB, or one byte every 50 ms: five context builds each (time, HTTP status), what Mem0
pushed, peak RSS, SIGTERM -> exit. Last line: stalls over the bound, the slowest SIGTERM, load average.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(Path(__file__).resolve().parent))

from _daemon import start_daemon  # noqa: E402  (this script's folder is on sys.path)

MARK = "zanzibarquokka"  # planted at each readable file's end: found = the whole file was indexed
MEM = "/api/v1/memory/default"
WS = "/api/v1/agents/default/workspace/memory"


def _headings(n: int) -> bytes:
    body = "# Memory\n\n" + "".join(f"## Heading {i}\n\n- note {i}: the {i}th thing to keep\n\n" for i in range(n))
    return (body + f"## Last\n\n- {MARK} is the last note\n").encode()


def _prose(size: int) -> bytes:
    rng = random.Random(7)
    words = ["garden", "ticket", "Berlin", "coffee", "piano", "invoice", "river", "meeting", "sister", "bike"]
    lines, total, n = ["# Memory\n\n"], 0, 0
    while total < size:
        if n % 200 == 0:
            line = f"## Part {n // 200}\n\n"
        else:
            line = " ".join(rng.choice(words) for _ in range(14)) + f" ({n}).\n"
        lines.append(line)
        total += len(line)
        n += 1
    lines.append(f"\n## Last\n\n- {MARK} is the last note\n")
    return "".join(lines).encode()


def _invalid_utf8() -> bytes:
    half = _prose(500_000)
    return half + b"\n- a byte that is not UTF-8: \xff\xfe here\n" + half


def _alias_bomb() -> bytes:
    rows = ['a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]']
    for i, name in enumerate("bcdefghi"):
        prev = "abcdefghi"[i]
        rows.append(f"{name}: &{name} [" + ",".join([f"*{prev}"] * 9) + "]")
    front = "---\n" + "\n".join(rows) + "\n---\n"
    return (front + "# Memory\n\n## Notes\n\n- coffee black\n" + f"- {MARK} is the last note\n").encode()


CASES: dict[str, Callable[[], bytes]] = {
    "headings-100k": lambda: _headings(100_000),
    "prose-50mb": lambda: _prose(50_000_000),
    "binary": lambda: random.Random(3).randbytes(2_000_000),
    "invalid-utf8": _invalid_utf8,
    "alias-bomb": _alias_bomb,
}
UNREADABLE = {"binary", "invalid-utf8"}  # not text: nothing of them is indexed; the daemon names them


class Probe:
    """Asks cheap questions in a loop; `worst()` is the longest wait since the last `reset()`."""

    def __init__(self, url: str) -> None:
        self.url, self._worst, self._stop = url, 0.0, threading.Event()
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        paths = ["/health", f"{MEM}/facts?query=coffee", f"{WS}/search?q=coffee"]
        with httpx.Client(base_url=self.url, timeout=600) as c:
            i = 0
            while not self._stop.is_set():
                t = time.perf_counter()
                try:
                    c.get(paths[i % len(paths)])
                except httpx.HTTPError:
                    if self._stop.is_set():
                        return
                took = time.perf_counter() - t
                with self._lock:
                    self._worst = max(self._worst, took)
                i += 1
                self._stop.wait(0.1)

    def reset(self) -> float:
        with self._lock:
            worst, self._worst = self._worst, 0.0
        return worst

    def stop(self) -> None:
        self._stop.set()


def _rss_peak_mb(pid: int) -> float:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return float("nan")


def run_case(name: str, data: bytes, args: argparse.Namespace) -> dict[str, Any]:
    tmp = Path(tempfile.mkdtemp(prefix=f"hostile-{name}-"))
    cfg = tmp / "mateclaw.yaml"
    limit = "" if args.max_bytes is None else f"    memory-file-max-bytes: {args.max_bytes}\n"
    cfg.write_text("timezone: Europe/Berlin\nmate:\n  memory:\n" + limit
                   + "    fact:\n      projection-enabled: true\n", encoding="utf-8")
    ws = tmp / "ws"
    env = {k: v for k, v in os.environ.items() if not k.startswith("MATECLAW_")}
    cmd = [sys.executable, "-m", "mateclaw_mem.cli.main", "serve", "--workspace", str(ws), "--config", str(cfg),
           "--port", "0"]
    out: dict[str, Any] = {"file": name, "bytes": len(data)}
    steps: dict[str, tuple[float, float, str]] = {}  # step -> (seconds, worst stall, note)
    t = time.perf_counter()
    proc, url = start_daemon(cmd, tmp / "daemon.log", env=env, cwd=tmp, timeout=120, until_ready=True)
    if url is None:
        out["error"] = "did not start: " + (tmp / "daemon.log").read_text(errors="replace")[-800:]
        proc.kill()
        return out
    steps["start"] = (time.perf_counter() - t, 0.0, "")
    target = ws / "default" / "MEMORY.md"
    probe = Probe(url)
    client = httpx.Client(base_url=url, timeout=600)

    def step(label: str, fn: Callable[[], str]) -> None:
        probe.reset()
        t0 = time.perf_counter()
        try:
            note = fn()
        except httpx.HTTPError as exc:
            note = f"error {type(exc).__name__}"
        steps[label] = (time.perf_counter() - t0, probe.reset(), note)

    def index() -> str:
        tmp_copy = target.with_name(".MEMORY.md.incoming")
        tmp_copy.write_bytes(data)
        os.replace(tmp_copy, target)  # as an editor saves
        deadline = time.monotonic() + args.index_timeout
        while name in UNREADABLE and time.monotonic() < deadline:
            if "not UTF-8" in (tmp / "daemon.log").read_text(errors="replace"):
                return "named in the log as not UTF-8, not indexed"
            time.sleep(0.2)
        while time.monotonic() < deadline:
            r = client.get(f"{WS}/search", params={"q": MARK})
            if r.status_code == 200 and any("MEMORY.md" in json.dumps(h) for h in r.json().get("hits", [])):
                return "whole file found"
            time.sleep(0.2)
        return f"mark not found in {args.index_timeout:.0f} s"

    def context() -> str:
        r = client.post(f"{MEM}/context", json={"query": "what do I keep about coffee?"})
        if r.status_code != 200:
            return f"HTTP {r.status_code}"
        prompt = json.dumps(r.json())
        out["prompt_chars"] = len(prompt)
        return f"{len(prompt):,} chars"

    def view() -> str:
        r = client.get("/ui/files/view", params={"path": "MEMORY.md"})
        out["view_bytes"] = len(r.content)
        warned = "over" in r.text and "part" in r.text.lower()
        return f"HTTP {r.status_code}, {len(r.content):,} bytes{', warns' if warned else ''}"

    def facts() -> str:
        r = client.post(f"{MEM}/facts/rebuild")
        return f"HTTP {r.status_code} {r.text[:80]}"

    def machine_write() -> str:
        r = client.post(f"{WS}/write-memory", json={"path": "MEMORY.md", "strategy": "append",
                                                    "content": "- the bench wrote this line"})
        return f"HTTP {r.status_code} {r.text[:100]}"

    def status() -> str:
        r = client.get("/api/v1/status")
        text = r.text
        checks = (("oversized", '"oversized":true' in text.replace(" ", "")),
                  ("unreadable", "unreadable_files" in text), ("frontmatter error", "YAML alias" in text))
        flags = [w for w, hit in checks if hit]
        return f"HTTP {r.status_code}, flags: {', '.join(flags) or 'none'}"

    step("index", index)
    step("status", status)
    step("context", context)
    step("ui view", view)
    step("facts rebuild", facts)
    # Before the machine write: a file that is odd but small (the alias bomb) may take an appended line.
    out["unchanged"] = hashlib.sha256(target.read_bytes()).hexdigest() == hashlib.sha256(data).hexdigest()
    step("machine write", machine_write)
    out["rss_peak_mb"] = _rss_peak_mb(proc.pid)
    threading.Thread(target=lambda: _quiet(lambda: client.post(f"{MEM}/facts/rebuild")), daemon=True).start()
    time.sleep(args.sigterm_after)
    probe.stop()
    out["sigterm_exit_s"] = _sigterm_seconds(proc)
    out["steps"] = steps
    out["warnings"] = [ln.split(" ", 2)[-1][:160] for ln in (tmp / "daemon.log").read_text(errors="replace")
                       .splitlines() if "WARNING" in ln][:4]
    client.close()
    shutil.rmtree(tmp, ignore_errors=True)
    return out


def _sigterm_seconds(proc: subprocess.Popen[Any]) -> float:
    """SIGTERM to exit, in seconds (inf, and killed, past two minutes)."""
    t0 = time.perf_counter()
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(timeout=120)
        return time.perf_counter() - t0
    except Exception:
        proc.kill()
        return float("inf")


def run_mem0(mode: str, args: argparse.Namespace) -> dict[str, Any]:
    """A Mem0 answering `mode` (tests/support/mem0_server.py: "huge" 80 MB, "drip" one byte per 50 ms)
    behind the real daemon: each context build's time against the prefetch budget, RSS, SIGTERM."""
    sys.path.insert(0, str(ROOT))
    from tests.support.mem0_server import SEARCH, Mem0Server

    tmp = Path(tempfile.mkdtemp(prefix=f"hostile-mem0-{mode}-"))
    out: dict[str, Any] = {"file": f"mem0-{mode}"}
    with Mem0Server() as mem0:
        mem0.modes[SEARCH] = mode
        mem0.hold()
        cfg = tmp / "mateclaw.yaml"
        cfg.write_text("timezone: Europe/Berlin\nmate:\n  memory:\n    providers: [search_hits, "
                       f"{{name: mem0, baseUrl: '{mem0.base_url}'}}]\n", encoding="utf-8")
        env = {k: v for k, v in os.environ.items() if not k.startswith("MATECLAW_")}
        cmd = [sys.executable, "-m", "mateclaw_mem.cli.main", "serve", "--workspace", str(tmp / "ws"), "--config",
               str(cfg), "--port", "0"]
        proc, url = start_daemon(cmd, tmp / "daemon.log", env=env, cwd=tmp, timeout=120, until_ready=True)
        if url is None:
            proc.kill()
            return {**out, "error": "did not start"}
        times = []
        with httpx.Client(base_url=url, timeout=600) as c:
            for _ in range(5):
                t = time.perf_counter()
                r = c.post(f"{MEM}/context", json={"query": "tea", "owner": "user:42"})
                times.append((time.perf_counter() - t, r.status_code))
            out["error_seen"] = ((c.get("/api/v1/status").json().get("providers") or {}).get("providers", {})
                                 .get("mem0", {}).get("last_error"))
        out["rss_peak_mb"] = _rss_peak_mb(proc.pid)
        out["times"] = times
        out["sent_mb"] = mem0.sent.get(SEARCH, 0) / 1e6
        out["sigterm_exit_s"] = _sigterm_seconds(proc)
        mem0.release()
    shutil.rmtree(tmp, ignore_errors=True)
    return out


def _quiet(fn: Callable[[], Any]) -> None:
    try:
        fn()
    except Exception:  # the daemon is being stopped under it: that is the point
        pass


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", action="append", help="run only these cases (repeatable)")
    ap.add_argument("--bound", type=float, default=2.0, help="a probe wait longer than this is a stall")
    ap.add_argument("--sigterm-after", type=float, default=0.5, help="seconds into a facts rebuild")
    ap.add_argument("--index-timeout", type=float, default=180.0)
    ap.add_argument("--max-bytes", type=int, help="mate.memory.memory-file-max-bytes (0: no limit, the unbounded "
                    "work that only SIGTERM's deadline stops); default: the shipped 1 MiB")
    args = ap.parse_args()
    stalls, worst_term = 0, 0.0
    for name, make in CASES.items():
        if args.only and name not in args.only:
            continue
        r = run_case(name, make(), args)
        print(f"\n{name}: {r['bytes']:,} bytes", flush=True)
        if "error" in r:
            print("  ", r["error"])
            stalls += 1
            continue
        for label, (secs, stall, note) in r["steps"].items():
            flag = "  STALL" if stall > args.bound else ""
            stalls += stall > args.bound
            print(f"  {label:<14} {secs:7.2f} s   largest stall {stall:6.2f} s{flag}   {note}")
        worst_term = max(worst_term, r["sigterm_exit_s"])
        print(f"  SIGTERM -> exit {r['sigterm_exit_s']:.2f} s; prompt {r.get('prompt_chars', 0):,} chars; "
              f"view {r.get('view_bytes', 0):,} bytes; peak RSS {r['rss_peak_mb']:.0f} MB; "
              f"file unchanged before the machine write: {r['unchanged']}")
        for w in r["warnings"]:
            print(f"  log: {w}")
    for mode in ("huge", "drip"):
        if args.only and f"mem0-{mode}" not in args.only:
            continue
        r = run_mem0(mode, args)
        print(f"\nmem0-{mode}: prefetch timeout 1.5 s per provider, 2.5 s in all; Mem0 timeoutMs 3000, "
              "maxAnswerBytes 1 MiB", flush=True)
        if "error" in r:
            print("  ", r["error"])
            continue
        print("  context builds: " + ", ".join(f"{t:.2f} s (HTTP {code})" for t, code in r["times"]))
        print(f"  largest {max(t for t, _ in r['times']):.2f} s; Mem0 pushed {r['sent_mb']:.1f} MB; peak RSS "
              f"{r['rss_peak_mb']:.0f} MB; SIGTERM -> exit {r['sigterm_exit_s']:.2f} s; status: {r['error_seen']}")
        worst_term = max(worst_term, r["sigterm_exit_s"])
    print(f"\nstalls over {args.bound:.1f} s: {stalls}; slowest SIGTERM -> exit: {worst_term:.2f} s; "
          f"load average {os.getloadavg()}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
