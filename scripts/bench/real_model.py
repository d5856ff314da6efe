"""Drive every model path of the product against a real OpenAI-compatible server (llama.cpp's, from
scripts/bench/real_model.sh) through the real services on a temp workspace, and print per step what
the model cost and what it wrote.

    python scripts/bench/real_model.py --base-url http://127.0.0.1:PORT/v1 --model NAME
        [--label NAME] [--fold] [--quick]

Steps: probe, extraction (a scripted week: turns over 3 days with two "remember" requests and one
correction, a ManualClock playing the timer as scripts/bench/extraction_week.py does), window summary
(context assembly of a long conversation), dream, structured consolidation, AML facts. Counts come
from the usage log (one row per call, ".repair" rows for the repair round trip) and the failure table
(model_step_failures), both in log.db. Then two verdicts: "files harmed" (a hand-written line that was
there before is gone, or a placeholder such as `...` was written) and "remember requests lost" (the
request's words are nowhere in PROFILE.md, MEMORY.md, structured/ or the daily notes).

Settings for a CPU server (the YAML this writes; see README "Small local models"): timeout-seconds 60
plus 20 s per 1,000 prompt tokens and 90 s per 1,000 answer tokens, max-retries 1 (a timeout is never
retried), one call per server, max-tokens 400 (dream 600, structured consolidation 500, AML facts
300), extraction answers 500 tokens, window summaries 200 tokens, summary-wait-ms -1 (the bench waits
for the model summary instead of serving the rules digest).
"""

from __future__ import annotations

import argparse
import re
import sqlite3
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import Path
from zoneinfo import ZoneInfo

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from mateclaw_mem.clock import ManualClock  # noqa: E402
from mateclaw_mem.conversations.aml import AmlMessage  # noqa: E402
from mateclaw_mem.errors import MateclawError  # noqa: E402
from mateclaw_mem.memory.extraction.service import ExtractionService  # noqa: E402
from mateclaw_mem.runtime.services import Services  # noqa: E402
from mateclaw_mem.settings import load_settings  # noqa: E402

TZ = ZoneInfo("Europe/Berlin")
AGENT = "default"
START = datetime(2026, 11, 23, 8, 30, tzinfo=TZ)  # a Monday

# What a person wrote by hand before the week starts: none of it may be lost.
HAND_PROFILE = "## Profile\n\n- name: Dana Whitfield\n- employer: Northwind Labs\n"
HAND_MEMORY = ("# MEMORY.md — long-term memory\n\n## Work\n\n- Maintains the billing service (Python, Postgres)\n"
               "- Standup is at 10:00 every weekday\n")
# Earlier daily notes (as extraction writes them) so the dream has recurring evidence to weigh.
EARLIER_NOTES = [
    (datetime(2026, 11, 20, 9, 30, tzinfo=TZ), "Planning", "- Project Atlas deadline: December 15\n"
     "- User prefers dark mode in the editor"),
    (datetime(2026, 11, 21, 10, 0, tzinfo=TZ), "Standup", "- Project Atlas deadline: December 15\n"
     "- User runs on Sunday mornings"),
    (datetime(2026, 11, 22, 18, 0, tzinfo=TZ), "Weekend", "- User runs on Sunday mornings in the park"),
]
# Structured entries (machine-written: consolidation may merge them) with near-duplicates.
STRUCTURED = [
    ("editor", "Uses Neovim with tmux."), ("editor2", "Uses Neovim and tmux every day."),
    ("coffee", "Drinks flat white without sugar."), ("coffee2", "Drinks flat white, no sugar."),
    ("city", "Lives in Rotterdam."), ("home", "Lives in Rotterdam, near the harbour."),
    ("lang", "Prefers short answers with code first."), ("music", "Listens to jazz while working."),
]


@dataclass
class Turn:
    day: int
    minute: int  # after 08:30 that day
    conversation: str
    user: str
    assistant: str = "Got it."


WEEK = [
    Turn(0, 0, "mon-1", "Hi! I'm setting up my new laptop today, I use dark mode everywhere.",
         "Nice. Want help with dotfiles?"),
    Turn(0, 3, "mon-1", "Yes please. I prefer fish shell over bash and I use Neovim.",
         "Here is a minimal fish config for Neovim users."),
    Turn(0, 7, "mon-1", "Remember that the staging cluster is called kiwi.", "Noted: staging is kiwi."),
    Turn(0, 12, "mon-1", "How do I make fish load my aliases on start?", "Put them in ~/.config/fish/config.fish."),
    Turn(1, 60, "tue-1", "We decided to use Postgres 16 for the billing service migration.",
         "Good choice; plan the upgrade window."),
    Turn(1, 64, "tue-1", "Can you write a SQL query that lists the ten largest tables?",
         "SELECT relname, pg_total_relation_size(relid) FROM pg_catalog.pg_statio_user_tables ORDER BY 2 DESC "
         "LIMIT 10;"),
    Turn(1, 70, "tue-1", "Please remember: Priya owns the release checklist.", "Noted: Priya owns it."),
    Turn(1, 75, "tue-1", "thanks, that works", "You're welcome."),
    Turn(2, 30, "wed-1", "Actually I switched to light mode, dark mode hurt my eyes in the office.",
         "Light mode it is."),
    Turn(2, 34, "wed-1", "My timezone is Europe/Amsterdam, by the way.", "Noted."),
    Turn(2, 40, "wed-1", "Give me three names for a feature flag about invoice batching.",
         "invoice_batching, batch_invoices_v2, invoices.batch_mode."),
]
QUICK_WEEK = [WEEK[0], WEEK[2], WEEK[3], WEEK[6], WEEK[8], WEEK[9]]
# Each remember request, and the words that must be found somewhere in memory for it to count as kept.
REMEMBER = {"the staging cluster is called kiwi": ["kiwi"], "Priya owns the release checklist": ["priya"]}
PLACEHOLDER = re.compile(r"^[\s\-*#>]*(\.\.\.|…|one sentence.*|title|body|text|string|null|none)?[\s.…]*$",
                         re.IGNORECASE)

AML_CHAT = [
    ("Caroline: What are your cats called?", 0),
    ("Melanie: Luna and Oliver! They keep me busy.", 1),
    ("Caroline: I'm moving to Lisbon next spring for a new job.", 2),
    ("Melanie: Lisbon! You always wanted to live by the sea.", 3),
]


# -- the workspace and what changed --------------------------------------------------------------


def snapshot(root: Path) -> dict[str, list[str]]:
    return {str(p.relative_to(root)): p.read_text(encoding="utf-8").splitlines()
            for p in sorted(root.rglob("*.md")) if ".mateclaw" not in p.parts}


def changes(before: dict[str, list[str]], after: dict[str, list[str]]) -> tuple[list[str], int, int, list[str]]:
    """(files changed, lines added, lines removed, added lines) between two snapshots."""
    files, added, removed, new_lines = [], 0, 0, []
    for rel in sorted(set(before) | set(after)):
        a, b = before.get(rel, []), after.get(rel, [])
        if a == b:
            continue
        files.append(rel)
        plus = [ln for ln in b if ln not in a]
        added += len(plus)
        removed += len([ln for ln in a if ln not in b])
        new_lines += [f"{rel}: {ln}" for ln in plus]
    return files, added, removed, new_lines


def is_placeholder(line: str) -> bool:
    s = line.strip()
    if not s or s.startswith("<!--") or set(s) <= {"-", "#", "*", "=", "|", ":"}:
        return False
    return bool(PLACEHOLDER.match(s)) or s.endswith(" ...") or s == "## ..."


# -- counting from log.db -------------------------------------------------------------------------


def _max_ids(db: Path) -> tuple[int, int]:
    with sqlite3.connect(db) as conn:
        u = conn.execute("SELECT COALESCE(MAX(id), 0) FROM llm_usage").fetchone()[0]
        f = conn.execute("SELECT COALESCE(MAX(id), 0) FROM model_step_failures").fetchone()[0]
    return u, f


@dataclass
class StepRow:
    name: str
    calls: int = 0
    first_ok: int = 0
    repaired: int = 0
    failed: dict[str, int] = field(default_factory=dict)
    prompt_tokens: int = 0
    completion_tokens: int = 0
    latencies: list[float] = field(default_factory=list)
    files: list[str] = field(default_factory=list)
    added: int = 0
    removed: int = 0
    note: str = ""
    seconds: float = 0.0


def count(db: Path, since: tuple[int, int], row: StepRow) -> None:
    """Fill `row` from the calls and step failures recorded after `since`.

    Attempts are the first calls of the step; an attempt counts as "after repair" when a `.repair`
    call followed it and the step did not fail invalid_output; failures are the failure table's rows
    (by kind), so a run that failed without a call (a guard, a timeout) counts too."""
    with sqlite3.connect(db) as conn:
        calls = conn.execute("SELECT step, prompt_tokens, completion_tokens, latency_ms, ok, error_kind FROM "
                             "llm_usage WHERE id > ? AND step != 'probe'", (since[0],)).fetchall()
        fails = conn.execute("SELECT kind, COUNT(*) FROM model_step_failures WHERE id > ? GROUP BY kind",
                             (since[1],)).fetchall()
    row.calls = len(calls)
    row.prompt_tokens = sum(c[1] for c in calls)
    row.completion_tokens = sum(c[2] for c in calls)
    row.latencies = [c[3] / 1000 for c in calls]
    firsts = [c for c in calls if not c[0].endswith(".repair")]
    repairs = [c for c in calls if c[0].endswith(".repair")]
    row.failed = {k: n for k, n in fails}
    invalid = row.failed.get("invalid_output", 0)
    row.repaired = max(0, len(repairs) - invalid)
    other_fail = sum(n for k, n in row.failed.items() if k != "invalid_output")
    row.first_ok = max(0, len(firsts) - len(repairs) - other_fail)


# -- the steps ------------------------------------------------------------------------------------


def write_settings(root: Path, base_url: str, model: str, fold: bool) -> Path:
    cfg = root / "bench.yaml"
    cfg.write_text(f"""timezone: Europe/Berlin
mate:
  memory:
    summary-max-tokens: 500
    structured-consolidation-min-entries: 4
  agent:
    conversation:
      window:
        summary-max-tokens: 200
        summary-wait-ms: -1
model:
  base-url: {base_url}
  model: {model}
  timeout-seconds: 60
  timeout-per-1k-prompt-tokens: 20
  timeout-per-1k-answer-tokens: 90
  max-retries: 1
  max-concurrent-calls: 1
  max-tokens: 400
  step-max-tokens:
    consolidation: 600
    structured_consolidation: 500
    aml_facts: 300
  system-prompt: {"fold" if fold else "system"}
  temperature: 0.2
""", encoding="utf-8")
    return cfg


def seed(services: Services) -> None:
    store = services.store
    for rel, text in (("PROFILE.md", HAND_PROFILE), ("MEMORY.md", HAND_MEMORY)):
        snap = store.read(AGENT, rel)
        store.write(AGENT, rel, text, expected_sha=snap.sha, actor="person")
    for when, title, body in EARLIER_NOTES:
        store.append_daily(AGENT, title, body, actor="extraction", when=when)
    for key, text in STRUCTURED:
        services.structured.remember(AGENT, "user", key, text, actor="api")


def step_probe(services: Services) -> str:
    probe = services.model_probe
    if probe is None:
        return "no probe (rules mode?)"
    return probe.run().line()


def step_extraction(services: Services, clock: ManualClock, turns: list[Turn]) -> str:
    svc = ExtractionService(services.settings, services.store, services.log, clock=clock, model=services.use_model,
                            timers=False, remember=lambda *a, **k: services.structured.remember(*a, **k))
    svc.start()

    def fire_due(until: datetime) -> None:
        # What the timer would do: start trailing runs (and remember retries) whose time came.
        while True:
            dues = [b["next_run"] for b in svc.status()["buckets"] if b["next_run"]]
            due = min((datetime.fromisoformat(d) for d in dues), default=None)
            if due is None or due > until:
                return
            clock.set(max(due, clock.now()))
            svc.run_due()
            svc.wait_idle(3600)

    try:
        for t in turns:
            when = START + timedelta(days=t.day, minutes=t.minute)
            fire_due(when)
            clock.set(max(when, clock.now()))
            svc.record_turn(AGENT, t.conversation, t.user, t.assistant)
            svc.wait_idle(3600)
        fire_due(START + timedelta(days=3, hours=12))
        runs = svc.runs(limit=1000)
    finally:
        svc.shutdown()
    outcomes: dict[str, int] = {}
    for r in runs:
        outcomes[r["outcome"]] = outcomes.get(r["outcome"], 0) + 1
    kinds: dict[str, int] = {}
    for r in runs:
        if r["outcome"] == "error":
            kinds[r.get("error_kind") or "?"] = kinds.get(r.get("error_kind") or "?", 0) + 1
    return (f"{len(runs)} runs: " + ", ".join(f"{k} {v}" for k, v in sorted(outcomes.items()))
            + (f" (errors by kind: {', '.join(f'{k} {v}' for k, v in sorted(kinds.items()))})" if kinds else ""))


def step_summary(services: Services) -> str:
    history: list[dict[str, str]] = []
    for i in range(14):
        history.append({"role": "user", "content": f"Question {i}: how should the billing export handle "
                                                  f"invoices in currency number {i}? " + "Details follow. " * 20})
        history.append({"role": "assistant", "content": f"Answer {i}: convert at the daily rate and keep the "
                                                       f"original amount. " + "More detail here. " * 20})
    ctx = services.context.build(AGENT, history=history, current="And what about refunds?", budget=2500,
                                 conversation_id="long-chat")
    w = ctx.window
    text = (w.summary or "").replace("\n", " ")
    return f"stage {w.stage}, source {w.summary_source}: {text[:90]!r}"


def step_dream(services: Services, clock: ManualClock) -> str:
    clock.set(START + timedelta(days=3, hours=18, minutes=30))
    out = services.dreaming.dream(AGENT)
    return f"{out.status}: {(out.reason or '')[:100]}"


def step_structured(services: Services) -> str:
    try:
        report = services.structured_consolidation.run()
    except MateclawError as exc:
        return f"error: {exc.message}"
    return ", ".join(f"{b.type} {b.status} {b.before}->{b.after}" + (f" ({b.detail[:70]})" if b.status == "error"
                                                                     else "") for b in report.buckets) or "no buckets"


def step_aml(services: Services) -> str:
    ts = int(START.timestamp() * 1000)
    aml = services.aml
    aml.add("bench-1", "u1", "s1", [AmlMessage("user", text, ts + i * 60_000) for text, i in AML_CHAT])
    if aml.facts is None:
        return "no fact extractor (rules mode?)"
    aml.facts.run_pending()
    facts = aml.facts.store.facts_since(0)
    job = aml.facts.store.job("bench-1")
    status = getattr(job, "status", "?") if job else "no job"
    return f"job {status}, {len(facts)} facts" + (f": {facts[0].text[:70]!r}" if facts else "")


def capture_answers(services: Services) -> dict[str, list[str]]:
    """The first answers per step, for the report: the shared client's `chat` is wrapped to copy
    what came back (observation only; nothing is changed)."""
    answers: dict[str, list[str]] = {}
    client = services.model
    if client is None:
        return answers
    chat = client.chat

    def observed(*args: object, **kwargs: object) -> object:
        result = chat(*args, **kwargs)  # type: ignore[arg-type]
        texts = answers.setdefault(str(kwargs.get("step", "?")), [])
        if len(texts) < 3:
            texts.append(" ".join(str(getattr(result, "text", "")).split())[:200])
        return result

    client.chat = observed  # type: ignore[method-assign]
    return answers


# -- the run --------------------------------------------------------------------------------------


def fmt_row(r: StepRow) -> str:
    lat = f"{statistics.median(r.latencies):.1f}/{max(r.latencies):.1f}" if r.latencies else "-"
    failed = sum(r.failed.values())
    kinds = ",".join(f"{k}:{n}" for k, n in sorted(r.failed.items()))
    return (f"{r.name:<12}{r.calls:>6}{r.first_ok:>7}{r.repaired:>8}{failed:>7}  {kinds or '-':<26}"
            f"{r.prompt_tokens:>8}{r.completion_tokens:>7}{lat:>12}{r.seconds:>8.0f}{len(r.files):>6}"
            f"{'+' + str(r.added):>6}{'-' + str(r.removed):>6}")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--base-url", required=True)
    ap.add_argument("--model", required=True)
    ap.add_argument("--label", default="")
    ap.add_argument("--fold", action="store_true", help="model.system-prompt: fold (Gemma-style templates)")
    ap.add_argument("--quick", action="store_true", help="6 turns and a shorter run of the other steps")
    ap.add_argument("--keep", type=Path, help="copy the workspace here at the end")
    args = ap.parse_args()
    turns = QUICK_WEEK if args.quick else WEEK
    with tempfile.TemporaryDirectory(prefix="real-model-") as tmp:
        root = Path(tmp)
        settings = load_settings(write_settings(root, args.base_url, args.model, args.fold), root / "ws")
        clock = ManualClock(START - timedelta(hours=1))
        services = Services(settings, clock)
        services.store.ensure_agent(AGENT)
        seed(services)
        ws = Path(settings.workspace)
        db = settings.log_db
        base = snapshot(ws)
        rows: list[StepRow] = []
        notes: list[str] = []
        added_lines: list[str] = []
        answers = capture_answers(services)
        probe_line = step_probe(services)
        steps = [
            ("extraction", lambda: step_extraction(services, clock, turns)),
            ("summary", lambda: step_summary(services)),
            ("dream", lambda: step_dream(services, clock)),
            ("structured", lambda: step_structured(services)),
            ("aml_facts", lambda: step_aml(services)),
        ]
        try:
            for name, run in steps:
                before_files, since, t0 = snapshot(ws), _max_ids(db), time.monotonic()
                row = StepRow(name)
                try:
                    row.note = run()
                except Exception as exc:  # a bench reports a crash as a row, then goes on
                    row.note = f"CRASH {type(exc).__name__}: {exc}"
                row.seconds = time.monotonic() - t0
                count(db, since, row)
                row.files, row.added, row.removed, plus = changes(before_files, snapshot(ws))
                added_lines += plus
                rows.append(row)
                notes.append(f"{name}: {row.note}")
                print(f"[{args.label or args.model}] {name} done in {row.seconds:.0f} s: {row.note}", flush=True)
            final = snapshot(ws)
            with sqlite3.connect(db) as conn:
                reasons = conn.execute("SELECT step, kind, reason FROM model_step_failures ORDER BY id").fetchall()
        finally:
            services.close()
        harmed: dict[str, list[str]] = {}
        hand = {"PROFILE.md": HAND_PROFILE, "MEMORY.md": HAND_MEMORY}
        for rel, lines in base.items():
            name = Path(rel).name
            # The person's lines, and every line of the earlier daily notes (no step may drop them).
            keep = [ln for ln in hand[name].splitlines() if ln.startswith("- ")] if name in hand and \
                Path(rel).parent.name == AGENT else (lines if "/memory/" in f"/{rel}" else [])
            gone = [ln for ln in keep if ln not in final.get(rel, [])]
            if gone:
                harmed.setdefault(rel, []).extend(f"removed {ln!r}" for ln in gone)
        for entry in added_lines:
            rel, line = entry.split(": ", 1)
            if is_placeholder(line):
                harmed.setdefault(rel, []).append(f"placeholder {line!r}")
        kept_text = "\n".join("\n".join(lines) for rel, lines in final.items()
                              if any(k in rel for k in ("PROFILE.md", "MEMORY.md", "structured/", "memory/"))
                              and "DREAMS" not in rel).lower()
        wanted = {k: v for k, v in REMEMBER.items() if any(k.lower() in t.user.lower() for t in turns)}
        lost = [k for k, words in wanted.items() if not all(w in kept_text for w in words)]
        if args.keep:
            import shutil
            shutil.copytree(ws, args.keep, dirs_exist_ok=True)

    print()
    print(f"== {args.label or args.model}: {len(turns)} turns over 3 days; probe: {probe_line}")
    header = (f"{'step':<12}{'calls':>6}{'first':>7}{'repair':>8}{'failed':>7}  {'failure kinds':<26}"
              f"{'prompt':>8}{'compl':>7}{'p50/max s':>12}{'wall s':>8}{'files':>6}{'lines':>6}{'':>6}")
    print(header)
    print("-" * len(header))
    for r in rows:
        print(fmt_row(r))
    print("-" * len(header))
    for n in notes:
        print(f"  {n}")
    tps = [r.completion_tokens / max(1e-9, sum(r.latencies)) for r in rows if r.latencies]
    if tps:
        total_c = sum(r.completion_tokens for r in rows)
        total_l = sum(sum(r.latencies) for r in rows)
        print(f"  answer tokens per second of call time: {total_c / max(1e-9, total_l):.1f}")
    for step, texts in answers.items():
        for text in texts[:2]:
            print(f"  answer {step}: {text!r}")
    for step, kind, reason in reasons[-6:]:
        print(f"  failure {step}/{kind}: {reason[:150]}")
    print(f"files harmed: {sum(len(v) for v in harmed.values())}"
          + "".join(f"\n  {rel}: {'; '.join(v[:4])}" for rel, v in harmed.items()))
    print(f"remember requests lost: {len(lost)}" + (f" ({'; '.join(lost)})" if lost else "")
          + f" of {len(wanted)}")
    return 0


if __name__ == "__main__":
    from _load import load_average  # scripts/bench/_load.py (this script's folder is on sys.path)
    rc = main()
    print(load_average())
    raise SystemExit(rc)
