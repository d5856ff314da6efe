#!/usr/bin/env python3
"""Peak RSS of the largest accepted snapshot imports (the seed's limits must stay under 100 MB).

    .venv/bin/python scripts/bench/import_rss.py [--skip-vault] [--skip-http]

Each case runs in a fresh process on a fresh workspace, so the figure is that import's peak
(VmHWM / ru_maxrss), start-up included:
  - seed, CLI:  `mateclaw-mem import` of 16 daily notes of 1 MB (16 MB, at every limit);
  - seed, HTTP: the same zip POSTed to a running daemon's `/import` (its peak before and after: the
    daemon idles at ~75 MB with every service built, so its growth is the import's part);
  - vault, CLI: 40 files of 4.9 MB with `snapshot-vault-import: true` (196 MB; was a 436 MB peak
    when the importer held every entry in memory).
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
import time
import zipfile
from pathlib import Path

import httpx

MB = 1024 * 1024
LIMIT_MB = 100


def make_zip(path: Path, count: int, size: int, daily: bool) -> Path:
    line = "- a line of a note, long enough to look like a real one, with a number: {:08d}\n"
    with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_DEFLATED) as zf:
        for i in range(count):
            head = f"# note {i}\n\n"
            body = "".join(line.format(n) for n in range((size - len(head)) // len(line.format(0))))
            text = (head + body).ljust(size, "\n")[:size]
            name = f"memory/2026-01-{i + 1:02d}.md" if daily else f"vault/note-{i:03d}.md"
            zf.writestr(name, text)
    return path


def env_for(root: Path, config: str) -> dict[str, str]:
    cfg = root / "bench.yaml"
    cfg.write_text("timezone: Europe/Berlin\n" + config, encoding="utf-8")
    env = {k: v for k, v in os.environ.items() if not k.startswith("MATECLAW_")}
    env.update(MATECLAW_CONFIG=str(cfg), MATECLAW_WORKSPACE=str(root / "ws"))
    return env


def cli(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "mateclaw_mem.cli.main", *args], env=env, capture_output=True,
                          text=True, check=False)


def cli_case(name: str, archive: Path, config: str) -> float:
    with tempfile.TemporaryDirectory(prefix="bench-rss-") as tmp:
        env = env_for(Path(tmp), config)
        cli(env, "init")
        t0 = time.perf_counter()
        proc = subprocess.Popen([sys.executable, "-m", "mateclaw_mem.cli.main", "import", str(archive), "--json"],
                                env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        _, status, usage = os.wait4(proc.pid, 0)  # this child's own peak, not the max over all children
        seconds = time.perf_counter() - t0
        err = proc.stderr.read().decode("utf-8", "replace") if proc.stderr else ""
        proc.returncode = os.waitstatus_to_exitcode(status)
        if proc.returncode != 0:
            raise SystemExit(f"{name}: import failed ({proc.returncode}): {err.strip()[:300]}")
        mb = usage.ru_maxrss / 1024  # KiB on Linux
        print(f"{name:<12} {archive.stat().st_size / MB:6.1f} MB zip  peak RSS {mb:6.1f} MB  {seconds:5.1f} s")
        return mb


def vm_hwm(pid: int) -> float:
    text = Path(f"/proc/{pid}/status").read_text(encoding="utf-8")
    return int(re.search(r"VmHWM:\s+(\d+) kB", text)[1]) / 1024  # type: ignore[index]


def http_case(archive: Path) -> float:
    with tempfile.TemporaryDirectory(prefix="bench-rss-http-") as tmp:
        env = env_for(Path(tmp), "")
        log = Path(tmp) / "server.log"
        with open(log, "w", encoding="utf-8") as out:
            proc = subprocess.Popen([sys.executable, "-m", "mateclaw_mem.cli.main", "serve", "--port", "0"],
                                    env=env, stdout=out, stderr=subprocess.STDOUT)
        try:
            url = ""
            for _ in range(300):
                m = re.search(r"listening on (http://\S+)", log.read_text(encoding="utf-8"))
                if m:
                    url = m[1]
                    break
                time.sleep(0.1)
            if not url:
                raise SystemExit("the daemon did not start:\n" + log.read_text(encoding="utf-8"))
            idle = vm_hwm(proc.pid)
            t0 = time.perf_counter()
            with open(archive, "rb") as fh:
                r = httpx.post(f"{url}/api/v1/agents/default/workspace/memory/import",
                               files={"file": ("s.zip", fh, "application/zip")}, timeout=300)
            seconds = time.perf_counter() - t0
            if r.status_code != 200:
                raise SystemExit(f"HTTP import failed: {r.status_code} {r.text[:300]}")
            peak = vm_hwm(proc.pid)
            print(f"{'seed HTTP':<12} {archive.stat().st_size / MB:6.1f} MB zip  peak RSS {peak:6.1f} MB  "
                  f"{seconds:5.1f} s  (daemon idle peak {idle:.1f} MB: the import added {peak - idle:.1f} MB)")
            return peak - idle
        finally:
            proc.terminate()
            proc.wait(timeout=20)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--skip-vault", action="store_true")
    parser.add_argument("--skip-http", action="store_true")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-zips-") as tmp:
        seed = make_zip(Path(tmp) / "seed.zip", 16, MB, daily=True)  # 16 x 1 MB: every seed limit at once
        peaks = {"seed CLI": cli_case("seed CLI", seed, "")}
        if not args.skip_http:
            peaks["seed HTTP (growth)"] = http_case(seed)
        if not args.skip_vault:
            vault = make_zip(Path(tmp) / "vault.zip", 40, int(4.9 * MB), daily=False)
            peaks["vault CLI"] = cli_case("vault CLI", vault, "mate:\n  memory:\n    snapshot-vault-import: true\n")
    worst = max(peaks, key=lambda k: peaks[k])
    # The daemon's own footprint (FastAPI, MCP, every service) is there before any import: its part
    # is what the import adds to it; an import process (the CLI) is measured whole.
    print(f"largest: {worst} {peaks[worst]:.1f} MB; limit {LIMIT_MB} MB: "
          f"{'ok' if peaks[worst] < LIMIT_MB else 'OVER'}")
    worst_mb = peaks[worst]
    sys.exit(0 if worst_mb < LIMIT_MB else 1)


if __name__ == "__main__":
    from _load import load_average  # scripts/bench/_load.py (this script's folder is on sys.path)
    main()
    print(load_average())
