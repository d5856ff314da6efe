"""Replay a scripted week of chat against the test model server: our extraction vs the seed's.

    python scripts/bench/extraction_week.py [--turns-per-day 36] [--seed 7]

Ours: the real ExtractionService (model mode) on a temp workspace with a controlled clock; trailing
runs fire when their cooldown ends (as the timer would). The seed: on a trigger that passes the gates
outside the cooldown, send the conversation's last 30 messages plus the FULL daily note; triggers
during the cooldown are dropped. Both talk to a real OpenAI-compatible server on loopback with the
same scripted model behaviour and the same system prompt; the server counts tokens the same way.
"""

from __future__ import annotations

import argparse
import random
import sys
import tempfile
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from mateclaw_mem.clock import ManualClock  # noqa: E402
from mateclaw_mem.conversations.log import ConversationLog  # noqa: E402
from mateclaw_mem.llm.client import ModelClient  # noqa: E402
from mateclaw_mem.llm.prompts.extraction import ExtractionResult, TranscriptMessage, build_messages  # noqa: E402
from mateclaw_mem.llm.usage import UsageLog  # noqa: E402
from mateclaw_mem.memory.extraction import rules  # noqa: E402
from mateclaw_mem.memory.extraction.input import MESSAGE_CHARS  # noqa: E402
from mateclaw_mem.memory.extraction.service import ExtractionService  # noqa: E402
from mateclaw_mem.settings import load_settings  # noqa: E402
from mateclaw_mem.workspace.store import WorkspaceStore  # noqa: E402
from tests.support.model_server import ModelServer  # noqa: E402

TZ = ZoneInfo("Europe/Berlin")
AGENT = "default"
COOLDOWN_MIN = 5
SEED_TRANSCRIPT = 30

FACTS = [
    "My name is Dana Whitfield.", "I work at Northwind Labs as a platform engineer.", "I live in Rotterdam.",
    "I prefer short answers with code first.", "I hate YAML anchors.", "I use Neovim and tmux every day.",
    "Remember that the staging cluster is called kiwi.", "We decided to use Postgres 16 for the billing service.",
    "Let's go with Terraform for the new VPC.", "Please note the on-call rotation changes on Mondays.",
    "Actually, I work at Northwind Labs as a staff engineer now.", "My timezone is Europe/Amsterdam.",
    "Don't forget that Priya owns the release checklist.", "I like Rust for CLI tools.",
    "记住：周五之前要交季度报告。", "我们决定用 Grafana 做监控。",
]
CHATTER = [
    "How do I rotate the logs in journald without losing the last week?",
    "Can you explain the difference between a mutex and a semaphore with an example?",
    "Write a bash one-liner that finds the ten largest files under /var.",
    "Why does my Docker build cache get invalidated when I only change a comment?",
    "Summarise this error: connection reset by peer during TLS handshake.",
    "What's a good way to structure a Python package with optional extras?",
    "Give me three options for naming this feature flag.",
    "Review this SQL: SELECT * FROM orders WHERE created_at > now() - interval '1 day'.",
    "thanks, that works",
    "ok",
    "Translate 'deployment window' into German and Dutch.",
    "How can I make this regex non-greedy?",
]
FILLER = (
    "Here is a detailed answer. First, consider the constraints you mentioned and the trade-offs between "
    "simplicity and robustness. A common approach is to start with the smallest change that solves the problem, "
    "then measure. In practice you would also add a test that reproduces the issue, so the fix stays fixed. "
)


@dataclass
class Turn:
    when: datetime
    conversation: str
    user: str
    assistant: str


def scripted_week(turns_per_day: int, seed: int) -> list[Turn]:
    rnd = random.Random(seed)
    start = datetime(2026, 11, 23, tzinfo=TZ)  # a Monday
    turns: list[Turn] = []
    fact_i = 0
    for day in range(7):
        t = start + timedelta(days=day, hours=8, minutes=rnd.randint(0, 40))
        sessions = rnd.randint(3, 5)
        per_session = max(2, turns_per_day // sessions)
        for s in range(sessions):
            conv = f"d{day}-s{s}"
            for _ in range(per_session):
                if rnd.random() < 0.18:
                    user = FACTS[fact_i % len(FACTS)]
                    fact_i += 1
                else:
                    user = rnd.choice(CHATTER)
                answer = (FILLER * rnd.randint(2, 6))[: rnd.randint(500, 1600)]
                turns.append(Turn(t, conv, user, answer))
                t += timedelta(minutes=rnd.randint(1, 4), seconds=rnd.randint(0, 59))
            t += timedelta(minutes=rnd.randint(45, 150))
    return turns


def make_responder(answer_with: str):
    """A scripted model that records facts found in NEW user lines (deduplicated against MEMORY.md),
    answering with `edits` (what our prompt asks for) or with the seed's whole new `memory_update`."""

    def responder(body: dict[str, Any]) -> dict[str, Any]:
        prompt = body["messages"][-1]["content"]
        memory = prompt.split("<<< MEMORY.md (current body) >>>\n", 1)[1].split("\n<<< end >>>", 1)[0]
        memory = "" if memory == "(empty)" else memory
        facts: list[tuple[str, str]] = []
        for line in prompt.splitlines():
            if line.startswith("[NEW") and " user] " in line:
                head, text = line.split(" user] ", 1)
                msg_id = head.split("#", 1)[1].split()[0] if "#" in head else ""
                if rules.facts_from_text(text) and f"- {text}" not in memory and text not in [f for _, f in facts]:
                    facts.append((msg_id, text))
        if not facts:
            return {"should_update": False, "reason": "nothing new worth keeping"}
        answer: dict[str, Any] = {
            "should_update": True,
            "reason": "new facts",
            "daily_entry": {"title": "Noted", "body": "\n".join(f"- {f}" for _, f in facts)},
        }
        if answer_with == "edits":
            answer["edits"] = [{"op": "add", "file": "MEMORY.md", "section": "Notes", "text": f, "evidence": [i]}
                               for i, f in facts]
        else:
            answer["memory_update"] = memory.rstrip("\n") + "\n" + "".join(f"- {f}\n" for _, f in facts)
            answer["profile_update"] = ""
        return answer

    return responder


# The seed's request: the whole files back (our prompt before it asked for edits).
SEED_SYSTEM_PROMPT = """You keep the long-term memory of an AI assistant about the person it works with.
Keep: stable facts about the person (name, role, employer, location, timezone, tools, likes, dislikes,
preferences), corrections, decisions, projects, commitments, and anything they asked you to remember.
Skip: small talk, questions, hypotheticals, the assistant's own answers.
Rules:
- Only NEW messages are new; SEEN ones were handled before and are context only.
- Write in the person's own language. Never record secrets (passwords, keys, tokens, [REDACTED:...]).
- A correction replaces the old value; never keep both.
- memory_update / profile_update: the FULL new body of MEMORY.md / PROFILE.md, keeping what you do not
  change; "" when that file needs no change. PROFILE.md holds `- key: value` lines under `## Profile`.
- daily_entry: title of at most 30 characters and a few bullet points, or null.
Answer with one JSON object only:
{"should_update": bool, "reason": "one sentence", "daily_entry": {"title": "...", "body": "..."} | null,
 "memory_update": "...", "profile_update": "...",
 "structured": [{"type": "user|feedback|project|reference", "key": "...", "text": "..."}]}"""


@dataclass
class SeedSim:
    """The seed's behaviour, minimally: last 30 messages + full daily note per cooldown window."""

    client: ModelClient
    clock: ManualClock
    memory: str = "# MEMORY.md — long-term memory\n"
    profile: str = "## Profile\n"
    daily: dict[str, str] = field(default_factory=dict)
    convs: dict[str, list[tuple[str, str, datetime]]] = field(default_factory=dict)
    cooldown_until: datetime | None = None
    calls: int = 0

    def turn(self, t: Turn) -> None:
        msgs = self.convs.setdefault(t.conversation, [])
        msgs.append(("user", t.user, t.when))
        msgs.append(("assistant", t.assistant, t.when))
        explicit = rules.is_explicit_remember(t.user)
        if not explicit and (len(msgs) < 4 or len(t.user.strip()) < 10):
            return
        if not explicit and self.cooldown_until is not None and t.when < self.cooldown_until:
            return  # the seed drops it: the lost tail
        day = t.when.strftime("%Y-%m-%d")
        transcript = [
            TranscriptMessage(i, t.conversation, role, text[:MESSAGE_CHARS], when.strftime("%H:%M"), True)
            for i, (role, text, when) in enumerate(msgs[-SEED_TRANSCRIPT:])
        ]
        messages = build_messages(agent=AGENT, now=t.when.strftime("%Y-%m-%d %H:%M"), profile=self.profile,
                                  memory=self.memory, daily=self.daily.get(day, ""), transcript=transcript)
        messages[0]["content"] = SEED_SYSTEM_PROMPT
        result = self.client.chat_json(messages, ExtractionResult, step="seed")
        self.calls += 1
        if result.should_update:
            if result.memory_update.strip():
                self.memory = result.memory_update
            if result.daily_entry:
                self.daily[day] = (self.daily.get(day, f"# {day}\n") + f"\n## {t.when:%H:%M} "
                                   f"{result.daily_entry.title}\n\n{result.daily_entry.body}\n")
        self.cooldown_until = t.when + timedelta(minutes=COOLDOWN_MIN)


def run_ours(turns: list[Turn], server: ModelServer, tmp: Path) -> dict[str, Any]:
    tmp.mkdir(parents=True, exist_ok=True)
    cfg = tmp / "mateclaw.yaml"
    cfg.write_text("timezone: Europe/Berlin\n", encoding="utf-8")
    settings = load_settings(cfg, tmp / "workspace", {"model": {"base_url": server.base_url, "model": "bench"}})
    clock = ManualClock(turns[0].when)
    store = WorkspaceStore.from_settings(settings, clock)
    store.ensure_agent(AGENT)
    log = ConversationLog(settings.state_dir / "log.db")
    client = ModelClient.from_settings(settings, usage=UsageLog(settings.log_db))  # what Services.model builds
    svc = ExtractionService(settings, store, log, clock=clock, model=lambda: client, timers=False)
    svc.start()  # workers on; the timer is played by fire_due() below

    def fire_due(until: datetime) -> None:
        # What the timer would do: start trailing runs whose time came before `until`.
        while True:
            dues = [b["next_run"] for b in svc.status()["buckets"] if b["next_run"]]
            due = min((datetime.fromisoformat(d) for d in dues), default=None)
            if due is None or due > until:
                return
            clock.set(max(due, clock.now()))
            svc.run_due()
            svc.wait_idle(60)

    for t in turns:
        fire_due(t.when)
        clock.set(t.when)
        svc.record_turn(AGENT, t.conversation, t.user, t.assistant)
        svc.wait_idle(60)
    fire_due(turns[-1].when + timedelta(hours=1))
    runs = svc.runs(limit=10_000)
    outcome = {
        "runs": len(runs),
        "errors": sum(1 for r in runs if r["outcome"] == "error"),
        "memory_lines": store.read(AGENT, "MEMORY.md").body.count("\n- "),
    }
    svc.shutdown()
    client.close()
    log.close()
    return outcome


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--turns-per-day", type=int, default=36)
    parser.add_argument("--seed", type=int, default=7)
    args = parser.parse_args()
    turns = scripted_week(args.turns_per_day, args.seed)
    convs = len({t.conversation for t in turns})
    with tempfile.TemporaryDirectory() as tmpdir, ModelServer(responder=make_responder("edits")) as ours_server, \
            ModelServer(responder=make_responder("whole")) as whole_server, \
            ModelServer(responder=make_responder("whole")) as seed_server:
        ours = run_ours(turns, ours_server, Path(tmpdir) / "edits")
        whole = run_ours(turns, whole_server, Path(tmpdir) / "whole")
        seed_client = ModelClient(base_url=seed_server.base_url, model="bench", timeout_seconds=30)
        seed = SeedSim(seed_client, ManualClock(turns[0].when))
        for t in turns:
            seed.turn(t)
        seed_client.close()
        u_ours, u_whole, u_seed = ours_server.usage, whole_server.usage, seed_server.usage
    print(f"Scripted week: {len(turns)} turns, {convs} conversations, 7 days; cooldown {COOLDOWN_MIN} min")
    print()
    header = f"{'':<34}{'model calls':>12}{'prompt tok':>12}{'compl. tok':>12}{'total tok':>12}"
    print(header)
    print("-" * len(header))
    rows = (("seed (30 msgs + full daily note)", u_seed), ("ours, whole-file answers (before)", u_whole),
            ("ours, edit answers (now)", u_ours))
    for name, u in rows:
        print(f"{name:<34}{u['calls']:>12}{u['prompt_tokens']:>12}{u['completion_tokens']:>12}{u['total_tokens']:>12}")
    ratio = u_ours["total_tokens"] / max(1, u_seed["total_tokens"])
    print("-" * len(header))
    print(f"{'ours / seed':<34}{u_ours['calls'] / max(1, u_seed['calls']):>12.2f}"
          f"{u_ours['prompt_tokens'] / max(1, u_seed['prompt_tokens']):>12.2f}"
          f"{u_ours['completion_tokens'] / max(1, u_seed['completion_tokens']):>12.2f}{ratio:>12.2f}")
    print()
    print(f"{'answer tokens per call':<34}" + "".join(
        f"{u['completion_tokens'] / max(1, u['calls']):>12.0f}" for _, u in rows) + "   (seed / before / now)")
    print(f"{'prompt tokens per call':<34}" + "".join(
        f"{u['prompt_tokens'] / max(1, u['calls']):>12.0f}" for _, u in rows) + "   (seed / before / now)")
    print(f"before: {whole['runs']} runs ({whole['errors']} errors), MEMORY.md bullet lines {whole['memory_lines']}")
    print(f"ours: {ours['runs']} runs recorded ({ours['errors']} errors), MEMORY.md bullet lines: "
          f"{ours['memory_lines']}; seed MEMORY.md bullet lines: {seed.memory.count(chr(10) + '- ')}")


if __name__ == "__main__":
    from _load import load_average  # scripts/bench/_load.py (this script's folder is on sys.path)
    main()
    print(load_average())
