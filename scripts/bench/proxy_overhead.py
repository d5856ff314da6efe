"""What the chat proxy adds to a chat: time to first token and total, through the daemon against
straight to the upstream, interleaved (one of each per round, alternating which goes first).

    .venv/bin/python scripts/bench/proxy_overhead.py [--rounds 200] [--history 1000]

The upstream is the scripted OpenAI-compatible server of the tests (loopback, answers at once), so
what is measured is the proxy: memory assembly (recall over `--history` logged turns), the window
defense, the relay. The daemon is a real `mateclaw-mem serve` subprocess (rules mode). Streaming
requests with the `openai` SDK. Goal (issue 37): ≤ 15 ms p50 added before the first token.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import httpx
import openai

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))
from _daemon import start_daemon  # noqa: E402

from tests.support.model_server import ModelServer  # noqa: E402

CLI = [sys.executable, "-m", "mateclaw_mem.cli.main"]
ANSWER = "Sure - here is a short answer that streams in about twenty small chunks for the bench."


def timed(client: openai.OpenAI, question: str) -> tuple[float, float]:
    t0 = time.perf_counter()
    first = None
    stream = client.chat.completions.create(model="bench", stream=True,
                                            messages=[{"role": "user", "content": question}])
    for chunk in stream:
        if first is None and chunk.choices and chunk.choices[0].delta.content:
            first = time.perf_counter()
    end = time.perf_counter()
    return ((first or end) - t0) * 1000, (end - t0) * 1000


def pct(values: list[float], q: float) -> float:
    values = sorted(values)
    return values[min(len(values) - 1, int(q * len(values)))]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=200)
    ap.add_argument("--history", type=int, default=1000, help="turns logged before timing (what recall searches)")
    args = ap.parse_args()
    with ModelServer(default=ANSWER, model="bench") as upstream, tempfile.TemporaryDirectory() as tmp:
        ws = Path(tmp)
        (ws / "mateclaw.yaml").write_text(
            f"proxy:\n  upstream:\n    base-url: {upstream.base_url}\n    model: bench\n", encoding="utf-8")
        env = {**os.environ, "MATECLAW_CONFIG": str(ws / "mateclaw.yaml")}
        proc, url = start_daemon([*CLI, "--workspace", str(ws / "w"), "serve", "--port", "0"], ws / "serve.log",
                                 env=env, cwd=ws, until_ready=True)
        if url is None:
            sys.exit(f"the daemon did not start:\n{(ws / 'serve.log').read_text()}")
        try:
            with httpx.Client(timeout=30) as h:
                for i in range(args.history):
                    h.post(f"{url}/api/v1/memory/default/conversations/c{i % 50}/turns",
                           json={"user": f"Day {i}: I walked the dog to the lake number {i} and met Sam.",
                                 "assistant": "Nice walk!"}).raise_for_status()
            direct = openai.OpenAI(base_url=upstream.base_url, api_key="x", max_retries=0)
            proxied = openai.OpenAI(base_url=f"{url}/v1", api_key="x", max_retries=0)
            for _ in range(5):  # warm both paths (connections, the message view)
                timed(direct, "warm up")
                timed(proxied, "warm up")
            ttft: dict[str, list[float]] = {"direct": [], "proxy": []}
            total: dict[str, list[float]] = {"direct": [], "proxy": []}
            added: list[float] = []
            for r in range(args.rounds):
                q = f"Where did I walk the dog on day {r}?"
                order = [("direct", direct), ("proxy", proxied)]
                got = {}
                for name, client in order if r % 2 == 0 else order[::-1]:
                    got[name] = timed(client, q)
                    ttft[name].append(got[name][0])
                    total[name].append(got[name][1])
                added.append(got["proxy"][0] - got["direct"][0])
        finally:
            proc.terminate()
            proc.wait(timeout=20)
    load = os.getloadavg()
    print(f"load average {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}; {args.rounds} interleaved rounds, "
          f"{args.history} logged turns, streaming")
    print(f"{'':24} {'p50 ms':>8} {'p95 ms':>8}")
    for name in ("direct", "proxy"):
        print(f"{'first token, ' + name:24} {statistics.median(ttft[name]):8.1f} {pct(ttft[name], 0.95):8.1f}")
        print(f"{'total, ' + name:24} {statistics.median(total[name]):8.1f} {pct(total[name], 0.95):8.1f}")
    print(f"{'added before 1st token':24} {statistics.median(added):8.1f} {pct(added, 0.95):8.1f}"
          f"   (goal: <= 15 ms p50)")


if __name__ == "__main__":
    main()
