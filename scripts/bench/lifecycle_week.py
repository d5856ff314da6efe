"""A scripted week through the whole memory lifecycle, in rules mode and in model mode (against the
scripted OpenAI-compatible server), printing a table of checks.

    python scripts/bench/lifecycle_week.py [--mode rules|model|both]

Day 1 the person states facts (dark mode, tea without sugar, a dentist); days 2-4 some recur; day 5
they correct one ("actually I switched to light mode"); day 6 they ask to forget one ("please forget
that I take my tea without sugar"); day 7 they say it again. Every night a dream runs and its
morning card is read. Then: trust after 120 unused days at half-life 60, and after a confirmation.
Real services, real files, real SQLite, a real loopback model server; only the clock is scripted.
"""

from __future__ import annotations

import argparse
import re
import sys
import tempfile
import zipfile
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from mateclaw_mem.clock import ManualClock  # noqa: E402
from mateclaw_mem.conversations.aml import AmlMessage  # noqa: E402
from mateclaw_mem.memory.extraction import rules  # noqa: E402
from mateclaw_mem.runtime.services import Services  # noqa: E402
from mateclaw_mem.settings import load_settings  # noqa: E402
from tests.support.model_server import ModelServer  # noqa: E402

TZ = ZoneInfo("Europe/Berlin")
AGENT = "default"
START = datetime(2026, 11, 2, 9, 0, tzinfo=TZ)
TEA = "I take my tea without sugar"
USER = "dana"
DAYS: list[list[str]] = [
    ["I prefer dark mode in the editor.", f"{TEA}.", "Remember that my dentist is Dr Ng on Elm Street."],
    ["I prefer dark mode in the editor, always.", "We decided to use Postgres 16 for billing."],
    ["I use Neovim and tmux every day.", f"{TEA}, by the way."],
    ["I prefer dark mode in the editor.", "We decided to use Postgres 16 for billing."],
    ["Actually I switched to light mode, not dark mode.", "I use Neovim and tmux every day."],
    [f"Please forget that {TEA}."],
    [f"{TEA}."],
]


def asserts_dark(line: str) -> bool:
    """A line that states dark mode as the person's preference (not "..., not dark mode")."""
    return "dark mode" in line and "not dark mode" not in line


def model_answer(body: dict[str, Any]) -> dict[str, Any]:
    """A scripted model: extraction keeps each NEW first-person statement as a MEMORY.md bullet (as an
    edit citing its message); a dream answers "no change" (rules mode promotes on its own)."""
    system = str(body["messages"][0]["content"])
    prompt = str(body["messages"][-1]["content"])
    if "You consolidate the long-term memory" in system:
        return {"should_update": False, "reason": "MEMORY.md already holds what recurs"}
    if "You keep the long-term memory" not in system:
        return {"facts": []}
    edits = []
    for line in prompt.splitlines():
        if line.startswith("[NEW #") and " user] " in line:
            head, text = line.split(" user] ", 1)
            evidence = [head.split("#", 1)[1].split()[0]]
            corrected = re.search(r",\s*not\s+(.+?)[.!]*$", text)
            memory = prompt.split("<<< MEMORY.md (current body) >>>", 1)[-1].split("<<< end >>>", 1)[0]
            olds = [ln[2:] for ln in memory.splitlines() if corrected and ln.startswith("- ")
                    and corrected.group(1).lower() in ln.lower()]
            if olds:  # as the prompt asks: a correction updates the old line(s)
                edits.extend({"op": "update", "file": "MEMORY.md", "old": old, "text": text.strip(),
                              "evidence": evidence} for old in olds[:1])
                edits.extend({"op": "remove", "file": "MEMORY.md", "old": old, "evidence": evidence}
                             for old in olds[1:])
            elif any(_gist(text) == _gist(ln) for ln in memory.splitlines() if ln.startswith("- ")):
                continue  # the same fact again: a model does not write it twice
            elif rules.facts_from_text(text) or rules.is_explicit_remember(text):
                edits.append({"op": "add", "file": "MEMORY.md", "section": "Notes", "text": text.strip(),
                              "evidence": evidence})
    if not edits:
        return {"should_update": False, "reason": "nothing new"}
    return {"should_update": True, "reason": "new statements", "edits": edits,
            "daily_entry": {"title": "Noted", "body": "\n".join(f"- {e['text']}" for e in edits)}}


def _gist(text: str) -> str:
    return " ".join(re.sub(r"[^a-z0-9 ]+", " ", text.lower().lstrip("- ")).split()[:4])


def build(tmp: Path, mode: str, server: ModelServer | None) -> tuple[Services, ManualClock]:
    cfg = tmp / "mateclaw.yaml"
    lines = ["timezone: Europe/Berlin", "aml-agent: default", "mate:", "  memory:", "    min-messages-for-summarize: 0",
             "    cooldown-minutes: 0", "    fact:", "      projection-enabled: true", "      forget-enabled: true",
             "      trust-half-life-days: 60", "      contradiction-check-enabled: true"]
    if mode == "model" and server is not None:
        lines += ["model:", f"  base-url: {server.base_url}", "  model: bench", "  max-retries: 0"]
    cfg.write_text("\n".join(lines) + "\n", encoding="utf-8")
    clock = ManualClock(START)
    services = Services(load_settings(cfg, tmp / "workspace"), clock)
    services.store.ensure_agent(AGENT)
    _ = services.file_index, services.facts, services.contradictions, services.forget
    services.extraction.start()
    return services, clock


def everywhere(services: Services, text: str) -> dict[str, bool]:
    """Where `text` can still be found (case-insensitive)."""
    needle = text.lower()
    flat = " ".join(re.sub(r"[^a-z0-9]+", " ", needle).split())

    def has(haystack: str) -> bool:
        return flat in " ".join(re.sub(r"[^a-z0-9]+", " ", haystack.lower()).split())

    files = [f for f in services.store.walk_files(AGENT) if has(f.path.read_text(encoding="utf-8", errors="replace"))]
    convs = [c for day in range(1, len(DAYS) + 1) for c in (f"d{day}", f"aml-d{day}")]
    logged = any(has(m.content) for conv in convs for m in services.log.messages(AGENT, conv, owner=USER))
    search = services.search.search(text, agent=AGENT, limit=10, record=False)
    found_search = any(has(h.snippet or "") for h in search.hits)
    aml = services.aml.search(text, USER, 10)
    found_aml = any(has(item.content or "") for item in aml)
    ctx = services.context.build(AGENT, query="how do I take my tea?", current="how do I take my tea?")
    in_context = has("\n".join(str(m.get("content", "")) for m in ctx.messages))
    out = Path(tempfile.mkdtemp()) / "export.zip"
    services.transfer.export(AGENT, out)
    with zipfile.ZipFile(out) as zf:
        exported = any(has(zf.read(n).decode("utf-8", "replace")) for n in zf.namelist())
    return {"files": bool(files), "log": logged, "search": found_search, "AML search": found_aml,
            "context": in_context, "export": exported}


def run(mode: str) -> list[tuple[str, bool, str]]:
    checks: list[tuple[str, bool, str]] = []
    server = ModelServer(responder=model_answer).start() if mode == "model" else None
    with tempfile.TemporaryDirectory() as tmpdir:
        services, clock = build(Path(tmpdir), mode, server)
        try:
            cards: list[tuple[str, bool]] = []
            for day, turns in enumerate(DAYS, 1):
                clock.set(START + timedelta(days=day - 1))
                for i, text in enumerate(turns):
                    clock.advance(timedelta(minutes=7))
                    # The person is "dana" everywhere: as the AML user and in chat (an owner; isolation off,
                    # so the files are shared). The AML face logs the words first, then the chat turn.
                    services.aml.add(f"d{day}-{i}", USER, f"aml-d{day}", [AmlMessage("user", text)])
                    services.extraction.record_turn(AGENT, f"d{day}", text, "Noted.", owner=USER)
                    services.extraction.wait_idle(60)
                if day == 1:
                    checks.append(("facts appear on day 1", len(services.facts.list(AGENT, None)) > 0,
                                   f"{len(services.facts.list(AGENT, None))} facts"))
                clock.set(START + timedelta(days=day, hours=-21))  # 03:00 the next night
                out = services.dreaming.dream(AGENT, trigger="schedule")
                card = services.morning_card.card(AGENT, None)
                same = card is not None and card.get("run_id", card.get("report", {}).get("run_id")) == out.run_id
                cards.append((out.run_id, same))
                services.morning_card.seen(AGENT, None)
                if day == 5:
                    current = " ".join(services.store.read(AGENT, rel).body for rel in ("PROFILE.md", "MEMORY.md"))
                    stale = [ln for ln in current.lower().splitlines() if asserts_dark(ln)]
                    checks.append(("day 5: the correction supersedes the day-1 claim in the files",
                                   "light mode" in current.lower() and not stale,
                                   f"still current: {stale[0][:50]!r}" if stale else "light mode current"))
                    pairs = [p for p in services.contradictions.list(AGENT, None) if "dark" in
                             (p.a.text + p.b.text).lower()]
                    checks.append(("day 5: no open inbox pair keeps dark mode alive", not pairs,
                                   f"{len(pairs)} open pair(s) about it"))
                    report = (card or {}).get("report") or {}
                    kept = [k["text"] for k in report.get("kept", [])] + [r.get("text", "") for r in
                                                                          report.get("rejected", [])]
                    shown = [*(p.get("text", "") for p in report.get("promoted", [])),
                             *(f.get("text", "") for f in (card or {}).get("facts", []))]
                    wrong = [t for t in shown if asserts_dark(t.lower())]
                    marked = any("corrected later" in k for k in kept)
                    checks.append(("day 5: the card never offers the day-1 claim as current", not wrong,
                                   f"offered: {wrong[0][:50]!r}" if wrong else
                                   ("kept back as 'corrected later'" if marked else "not on the card")))
                if day == 6:
                    gone = everywhere(services, TEA)
                    for place, still in gone.items():
                        checks.append((f"day-6 forget: claim gone from {place}", not still,
                                       "found" if still else "gone"))
            checks.append(("each morning card is that night's report", all(s for _, s in cards),
                           f"{sum(s for _, s in cards)}/{len(cards)} nights"))
            back = everywhere(services, TEA)
            checks.append(("day 7: saying it again does not bring it back (files)", not back["files"],
                           "found" if back["files"] else "gone"))
            # Trust: a fact nobody touches for 120 days at half-life 60, then a confirmation.
            fact = services.facts.list(AGENT, None, query="Neovim")[0]
            start = services.facts.get(AGENT, None, fact.id).trust
            clock.set(clock.now() + timedelta(days=121))
            services.facts.rebuild()
            faded = services.facts.get(AGENT, None, fact.id).trust
            checks.append(("120 unused days at half-life 60: trust <= 0.25 x start", faded <= 0.25 * start + 1e-9,
                           f"{start:.3f} -> {faded:.3f}"))
            confirmed = services.facts.confirm(AGENT, None, fact.id).trust
            checks.append(("a confirmation resets the decay", confirmed >= start, f"{faded:.3f} -> {confirmed:.3f}"))
        finally:
            services.close()
            if server is not None:
                server.stop()
    return checks


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mode", choices=("rules", "model", "both"), default="both")
    args = parser.parse_args()
    modes = ("rules", "model") if args.mode == "both" else (args.mode,)
    failed = 0
    for mode in modes:
        checks = run(mode)
        print(f"\nlifecycle week, {mode} mode")
        print(f"{'check':<66}{'result':>8}  detail")
        print("-" * 100)
        for name, ok, detail in checks:
            failed += not ok
            print(f"{name:<66}{'ok' if ok else 'FAIL':>8}  {detail}")
    print(f"\n{failed} check(s) failed")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    from _load import load_average  # scripts/bench/_load.py (this script's folder is on sys.path)
    main()
    print(load_average())
