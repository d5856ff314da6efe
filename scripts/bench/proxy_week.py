"""A chat week through the chat proxy learns what the same week through the turns endpoint learns.

    .venv/bin/python scripts/bench/proxy_week.py [--chats-per-day 6] [--seed 7]

Two fresh workspaces, rules mode, the same controlled clock: one gets a scripted week posted to
`/api/v1/memory/default/conversations/<id>/turns`, the other the same week as a chat client would send
it through `/v1/chat/completions` (the real `openai` SDK; the whole history re-sent each request, as
clients do), with the scripted OpenAI-compatible server as the user's model answering the same words
the turns endpoint was given. After each day: extraction of that day's chats and that night's dream.
Then the memory files of both are compared (daily notes, PROFILE.md, MEMORY.md, structured/), with the
HH:MM of a daily-note heading and run ids left out, and DREAMS.md apart (see below). Printed: files
compared, files that differ (goal 0), turns logged by each (the proxy must not log the re-sent history
twice, nor skip a message said twice).
"""

from __future__ import annotations

import argparse
import os
import random
import re
import sys
import tempfile
import time
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

import httpx
import openai

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from mateclaw_mem.api.app import create_app  # noqa: E402
from mateclaw_mem.clock import ManualClock  # noqa: E402
from mateclaw_mem.runtime.services import Services  # noqa: E402
from mateclaw_mem.settings import load_settings  # noqa: E402
from tests.support.model_server import ModelServer  # noqa: E402
from tests.support.server import ApiServer  # noqa: E402

TZ = ZoneInfo("Europe/Berlin")
SAID = [
    "My name is Dana Whitfield.", "I work at Northwind Labs as a platform engineer.", "I live in Rotterdam.",
    "I prefer short answers with code first.", "I use Neovim and tmux every day.",
    "Remember that the staging cluster is called kiwi.", "We decided to use Postgres 16 for billing.",
    "I went hiking in the Ardennes last weekend with my sister.", "We adopted a second cat called Miso.",
    "Please note the on-call rotation changes on Mondays.", "I'm training for a half marathon in October.",
    "How do I rotate journald logs?", "Write a bash one-liner for the ten largest files.",
]
ANSWER = "Noted - here is what I would do."
_VOLATILE = re.compile(r"^## \d\d:\d\d |dream-default-\d{8}T\d{6}|\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d[+\-Z:0-9.]*|"
                       r"\(\d+ ms\)|conversation [0-9a-f-]+", re.M)


def week(chats_per_day: int, seed: int) -> list[list[list[str]]]:
    """Days of chats of user messages."""
    rng = random.Random(seed)
    return [[[rng.choice(SAID) for _ in range(rng.randint(2, 4))] for _ in range(chats_per_day)] for _ in range(7)]


def run(plan: list[list[list[str]]], via: str, root: Path, upstream: ModelServer) -> tuple[dict[str, str], int]:
    start = datetime(2026, 11, 2, 9, 0, tzinfo=TZ)
    clock = ManualClock(start)
    settings = load_settings(workspace=root / via, overrides={
        "timezone": "Europe/Berlin", "mate": {"memory": {"min-messages-for-summarize": 2}},
        "proxy": {"upstream": {"base-url": upstream.base_url, "model": "week"}}})
    services = Services(settings, clock)
    services.seed_agents()
    services.build()
    server = ApiServer(create_app(services, mcp=False)).start()
    try:
        client = openai.OpenAI(base_url=server.url + "/v1", api_key="x", max_retries=0)
        with httpx.Client(base_url=server.url, timeout=30) as h:
            for d, chats in enumerate(plan):
                for c, said in enumerate(chats):
                    name = f"day{d}-chat{c}"
                    conv = f"chat-{name}"  # the proxy's id for a client's X-Mateclaw-Conversation
                    clock.set(start + timedelta(days=d, minutes=10 * c))
                    history: list[dict[str, Any]] = []
                    for text in said:
                        if via == "turns":
                            h.post(f"/api/v1/memory/default/conversations/{conv}/turns",
                                   json={"user": text, "assistant": ANSWER}).raise_for_status()
                        else:
                            history.append({"role": "user", "content": text})
                            client.chat.completions.create(model="week", messages=history,  # type: ignore[arg-type]
                                                           extra_headers={"X-Mateclaw-Conversation": name})
                            history.append({"role": "assistant", "content": ANSWER})
                            _logged(services, conv, len(history))  # the proxy learns after the answer
                    services.extraction.extract_now("default", conv)
                clock.set(start + timedelta(days=d, hours=14, minutes=59))
                services.dreaming.dream("default", trigger="scheduled")
        logged = len(services.log.since(0))
    finally:
        server.stop()
        services.close()
    folder = root / via / "default"
    files = {}
    for p in sorted(folder.rglob("*.md")):
        rel = str(p.relative_to(folder))
        files[rel] = _VOLATILE.sub("<x>", p.read_text(encoding="utf-8"))
    return files, logged


def _logged(services: Services, conv: str, n: int, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while len(services.log.messages("default", conv)) < n and time.monotonic() < deadline:
        time.sleep(0.01)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--chats-per-day", type=int, default=6)
    ap.add_argument("--seed", type=int, default=7)
    args = ap.parse_args()
    plan = week(args.chats_per_day, args.seed)
    with ModelServer(default=ANSWER, model="week") as upstream, tempfile.TemporaryDirectory() as tmp:
        turns, logged_turns = run(plan, "turns", Path(tmp), upstream)
        proxied, logged_proxy = run(plan, "proxy", Path(tmp), upstream)
    # DREAMS.md is compared apart: the proxy assembles a real prompt for every request, and the search
    # hits in it are retrievals that Dreaming scores candidates by - the turns endpoint makes none.
    differ = sorted(rel for rel in set(turns) | set(proxied)
                    if rel != "DREAMS.md" and turns.get(rel) != proxied.get(rel))
    diary_same = turns.get("DREAMS.md") == proxied.get("DREAMS.md")
    load = os.getloadavg()
    said = sum(len(c) for day in plan for c in day)
    print(f"load average {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}; a week of {sum(len(d) for d in plan)} chats, "
          f"{said} user messages, rules mode")
    print(f"messages logged: turns endpoint {logged_turns}, chat proxy {logged_proxy} (each {2 * said} expected)")
    print(f"memory files compared (daily notes, PROFILE.md, MEMORY.md, structured/): "
          f"{len((set(turns) | set(proxied)) - {'DREAMS.md'})}, differing: {len(differ)} (goal 0)")
    print("DREAMS.md: " + ("the same" if diary_same else "differs in candidate scores: the proxy's prompts "
                           "are retrievals Dreaming counts, the turns endpoint makes none"))
    for rel in differ:
        print(f"  differs: {rel}")
        if os.environ.get("SHOW_DIFF"):
            import difflib
            print("".join(difflib.unified_diff(turns.get(rel, "").splitlines(True),
                                               proxied.get(rel, "").splitlines(True), n=0))[:3000])


if __name__ == "__main__":
    main()
