#!/usr/bin/env python3
"""Randomized campaign: requests racing the build of the routes the daemon leaves until it listens
(api/deferred.py). Every answer must be the one the app built whole gives to the same request: no
request answered by another route, none lost, none hung, and the schema never cached half-built.

    .venv/bin/python scripts/bench/deferred_routes_races.py [--trials 2000] [--seed 1]

Each trial: an app made with `defer_routes=True` over the same real services, then a random batch of
requests (real paths of the hot and the later routers, unknown paths, wrong methods, bad bodies,
now and then `/openapi.json`) sent through the app's ASGI interface on an event loop thread, at
random moments before, during and after `deferred.finish()` runs on the main thread. Answers are
compared (status and body) with the whole app's. Prints counts; a nonzero `wrong`, `hung` or
`errors` is a bug.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import sys
import tempfile
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from _services import bench_services  # scripts/bench/_services.py

from mateclaw_mem.api.app import create_app

# (method, path, body): read-only or refused requests, so every answer is the same each time.
REQUESTS: list[tuple[str, str, bytes | None]] = [
    ("GET", "/api/v1/memory/default/dreaming/status", None),  # a later route
    ("GET", "/api/v1/memory/default/summarize/runs/nope", None),  # a later route's 404
    ("GET", "/agents/me", None),  # the seed's Clawdiators shape, documented
    ("GET", "/api/v1/agents/me", None),  # the same, hidden
    ("GET", "/api/v1/agents/me/harness-lineage", None),
    ("GET", "/api/v1/agents/default/workspace/memory", None),
    ("GET", "/api/v1/memory/default/facts", None),
    ("GET", "/api/v1/memory/default/facts/contradictions", None),  # a literal before /facts/{id}
    ("GET", "/api/v1/memory/default/facts/123", None),
    ("POST", "/api/v1/memory/default/context", b'{"query": 5}'),  # refused by validation
    ("POST", "/api/v1/memory/default/context", b"not json"),
    ("DELETE", "/api/v1/memory/default/dreaming/status", None),  # a later route's 405
    ("GET", "/no/such/path", None),
    ("GET", "/api/v1/agents/default/nothing-here", None),
    ("POST", "/health", None),  # a hot route's 405
    ("GET", "/v1/aml/search", None),  # a hot route, wrong method
    ("POST", "/v1/aml/search", b'{"query": ""}'),
    ("GET", "/api/v1/agents", None),  # the agents router (hot)
]
SCHEMA = ("GET", "/openapi.json", None)


async def call(app: Any, method: str, path: str, body: bytes | None) -> tuple[int, bytes]:
    headers = [(b"host", b"127.0.0.1")]
    if body is not None:
        headers += [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    scope = {"type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": method, "scheme": "http",
             "path": path, "raw_path": path.encode(), "query_string": b"", "root_path": "", "headers": headers,
             "client": ("127.0.0.1", 50000), "server": ("127.0.0.1", 8000)}
    sent = False

    async def receive() -> dict[str, Any]:
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": body or b"", "more_body": False}
        await asyncio.sleep(3600)  # a client that stays connected
        return {"type": "http.disconnect"}

    status, chunks = 0, []

    async def send(message: dict[str, Any]) -> None:
        nonlocal status
        if message["type"] == "http.response.start":
            status = message["status"]
        elif message["type"] == "http.response.body":
            chunks.append(message.get("body", b""))

    await app(scope, receive, send)
    return status, b"".join(chunks)


def normal(answer: tuple[int, bytes]) -> tuple[int, Any]:
    status, body = answer
    try:
        return status, json.loads(body)
    except ValueError:
        return status, body


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--trials", type=int, default=2000)
    parser.add_argument("--seed", type=int, default=1)
    opts = parser.parse_args()
    rng = random.Random(opts.seed)
    counts: Counter[str] = Counter()
    loop = asyncio.new_event_loop()
    threading.Thread(target=loop.run_forever, name="loop", daemon=True).start()

    def run(coro: Any, timeout: float = 30) -> Any:
        return asyncio.run_coroutine_threadsafe(coro, loop).result(timeout)

    with tempfile.TemporaryDirectory() as tmp:
        services = bench_services(Path(tmp))
        services.seed_agents()
        services.build()
        try:
            whole = create_app(services, mcp=False)
            expected = {r: normal(run(call(whole, *r))) for r in [*REQUESTS, SCHEMA]}
            started = time.perf_counter()
            for _ in range(opts.trials):
                app = create_app(services, mcp=False, defer_routes=True)
                batch = rng.choices(REQUESTS, k=rng.randint(1, 8))
                if rng.random() < 0.05:
                    batch.append(SCHEMA)
                delays = [rng.choice((0.0, rng.uniform(0, 0.004))) for _ in batch]

                async def send_all(app: Any = app, batch: list = batch, delays: list = delays) -> list:
                    async def one(sent: tuple, delay: float) -> tuple[int, Any]:
                        await asyncio.sleep(delay)
                        return normal(await call(app, *sent))

                    return await asyncio.gather(*(one(r, d) for r, d in zip(batch, delays, strict=True)),
                                                return_exceptions=True)

                pending = asyncio.run_coroutine_threadsafe(send_all(), loop)
                time.sleep(rng.choice((0.0, rng.uniform(0, 0.003))))
                assert app.deferred is not None
                app.deferred.finish()
                counts["held by the catch-all"] += app.deferred.held
                try:
                    answers = pending.result(10)
                except TimeoutError:
                    counts["hung"] += 1
                    pending.cancel()
                    continue
                for request, answer in zip(batch, answers, strict=True):
                    if isinstance(answer, BaseException):
                        counts["errors"] += 1
                        print(f"error: {request[0]} {request[1]}: {answer!r}", file=sys.stderr)
                    elif request[1] == "/health" or answer == expected[request]:
                        counts["same answer"] += 1
                    else:
                        counts["wrong"] += 1
                        print(f"wrong: {request[0]} {request[1]}: {answer[0]} {str(answer[1])[:300]}\n"
                              f"  whole app: {expected[request][0]} {str(expected[request][1])[:300]}", file=sys.stderr)
                counts["requests"] += len(batch)
                counts["trials"] += 1
            elapsed = time.perf_counter() - started
        finally:
            services.close()
            loop.call_soon_threadsafe(loop.stop)
    print(f"{counts['trials']} trials, {counts['requests']} requests in {elapsed:.1f} s (seed {opts.seed})")
    for key in ("held by the catch-all", "same answer", "wrong", "hung", "errors"):
        print(f"  {key:<22} {counts[key]}")


if __name__ == "__main__":
    from _load import load_average  # scripts/bench/_load.py (this script's folder is on sys.path)
    main()
    print(load_average())
