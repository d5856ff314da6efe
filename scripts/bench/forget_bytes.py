#!/usr/bin/env python3
"""Forget, proven by bytes: claims planted in every store, forgotten with --now, then every byte of the
workspace scanned after a restart (goal: 0 occurrences of every claim; every control still found).

    .venv/bin/python scripts/bench/forget_bytes.py [--claims 6] [--filler 0] [--legacy]

One workspace; each claim, with a control sentence beside it (never forgotten), goes into MEMORY.md,
PROFILE.md, SOUL.md, structured entries (user and feedback: the SOUL.md proposal), an archived month
(gzip), three days of daily notes a rules dream promotes (DREAMS.md, the dream report, the morning
card), a chat turn (log, both indexes, the extraction run), an AML Add of another person, a search
whose query is the claim (the retrieval log) and a prompt (a turn record); the first claim also a
contradiction the person ignored. Then each claim is forgotten for the workspace's person and for
the AML person, with `--now` and a receipt; the services are closed and started again, searches and
a prompt run, and the whole workspace is scanned (memory/forget/scan.py: gzip unpacked, databases and
their WAL read raw).

Prints per claim: occurrences before, per-store removals, occurrences after the restart (goal 0),
the control's occurrences after (goal > 0), the receipt's own verdict and forget time; then totals
and `os.getloadavg()` (2 shared cores: a slow forget under load is the machine).

`--filler N` first logs N unrelated turns (AML Adds of 50 turns each, several people): a bigger log.db
and messages.db, so the forget time shows the scrub's cost (each changed database is vacuumed).
`--legacy` keeps only the holders a forget had before the registry (files, archives, the log and its
indexes, history): what was left behind then.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from datetime import datetime, timedelta
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from _figures import record  # noqa: E402  (this script's folder is on sys.path)

from mateclaw_mem.clock import ManualClock  # noqa: E402
from mateclaw_mem.conversations.aml import AmlMessage  # noqa: E402
from mateclaw_mem.memory.forget import scan  # noqa: E402
from mateclaw_mem.runtime.services import Services  # noqa: E402
from mateclaw_mem.settings import load_settings  # noqa: E402

AGENT, ANN = "default", "ann"
CLAIMS = [
    ("I take my tea without sugar", "the quartz lantern hangs in the hallway"),
    ("My sister Wren lives in Tromsø", "the blue kayak is stored behind the shed"),
    ("I am allergic to hazelnuts", "our wifi router sits on the bookshelf"),
    ("The garage door code is 4417", "the spare keys hang by the fridge"),
    ("我喝茶不加糖", "书架上放着一盏旧台灯"),
    ("I prefer window seats on long flights", "the piano was tuned in early spring"),
    ("My therapist appointment is every Thursday", "the balcony plants need water twice a week"),
    ("Ich trinke meinen Kaffee schwarz", "der Hund schläft gern unter dem Tisch"),
]
LEGACY = ("facts", "memory files", "month archives", "conversation log", "history")
CONFIG = """timezone: Europe/Berlin
aml-agent: default
mate:
  memory:
    min-messages-for-summarize: 0
    cooldown-minutes: 0
    soul-update-interval: 3
    fact:
      projection-enabled: true
      forget-enabled: true
      contradiction-check-enabled: true
"""


def services(root: Path, clock: ManualClock) -> Services:
    cfg = root / "bench.yaml"
    cfg.write_text(CONFIG, encoding="utf-8")
    s = Services(load_settings(cfg, root / "ws"), clock)
    s.store.ensure_agent(AGENT)
    _ = s.file_index, s.contradictions, s.soul
    return s


def append(s: Services, rel: str, text: str) -> None:
    snap = s.store.read(AGENT, rel)
    s.store.write(AGENT, rel, (snap.text if snap.exists else "") + text, expected_sha=snap.sha, actor="person")


def plant(s: Services, clock: ManualClock, claims: list[tuple[str, str]]) -> None:
    for i, (claim, control) in enumerate(claims):
        both = f"- {claim}\n- {control}"
        s.store.append_daily(AGENT, f"Notes {i}", both, actor="extraction", when=clock.now() - timedelta(days=90 + i))
        for day in (3, 2, 1):
            s.store.append_daily(AGENT, f"Notes {i}", both, actor="extraction", when=clock.now() - timedelta(days=day))
    s.dreaming.rotate(AGENT)
    s.dreaming.dream(AGENT)  # before MEMORY.md says them: a dream does not promote what it already says
    for i, (claim, control) in enumerate(claims):
        both = f"- {claim}\n- {control}\n"
        append(s, "MEMORY.md", f"\n## Notes {i}\n{both}")
        append(s, "PROFILE.md", f"\n## Habits {i}\n{both}")
        append(s, "SOUL.md", f"\nShe told me: {claim}. And {control}.\n")
        for key, text in ((f"c{i}", claim), (f"k{i}", control)):
            s.structured.remember(AGENT, "user", key, text, actor="person")
            s.structured.remember(AGENT, "feedback", f"{key} rule", text, actor="person")
        s.extraction.record_turn(AGENT, f"c{i}", f"Hello. Please remember: {claim}. Also {control}.", "Noted.")
        s.aml.add_json(f"r{i}", ANN, f"s{i}", [AmlMessage("user", f"By the way, {claim}. And {control}."),
                                              AmlMessage("assistant", "Good to know.")])
        s.search.search(claim, agent=AGENT)
        s.search.search(control, agent=AGENT)
        s.context.build(AGENT, query=claim, current=claim)
    claim = claims[0][0]
    append(s, "MEMORY.md", f"\n## Office\n- At the office {claim}\n- At the office I take my tea with sugar\n")
    for pair in s.contradictions.list(AGENT, None):
        s.contradictions.resolve(AGENT, None, pair.id, "IGNORE")
    s.extraction.wait_idle(timeout=120)
    s.file_index.sync_messages(s.log)


def occurrences(root: Path, phrase: str) -> tuple[int, int]:
    """(occurrences, files) of the phrase in every byte under root."""
    hits = scan.walk(root, {"p": scan.patterns(phrase)}).hits["p"]
    return sum(h["count"] for h in hits), len(hits)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--claims", type=int, default=6, help=f"how many claims (at most {len(CLAIMS)})")
    ap.add_argument("--legacy", action="store_true", help="only the holders a forget had before the registry")
    ap.add_argument("--filler", type=int, default=0, help="unrelated turns logged first (a bigger workspace)")
    args = ap.parse_args()
    claims = CLAIMS[: max(1, min(args.claims, len(CLAIMS)))]
    clock = ManualClock(datetime(2026, 11, 30, 9, 15).astimezone())
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        ws = root / "ws"
        s = services(root, clock)
        t0 = time.perf_counter()
        for start in range(0, args.filler, 50):
            turns = [AmlMessage("user" if j % 2 == 0 else "assistant", f"Filler turn {start + j}: we talked about "
                                f"the weather in city number {(start + j) % 97} and trains on line {j}.")
                     for j in range(min(50, args.filler - start))]
            s.aml.add_json(f"f{start}", f"user{start % 7}", f"fs{start}", turns)
        plant(s, clock, claims)
        print(f"planted {len(claims)} claims (+ controls) in {time.perf_counter() - t0:.1f} s; workspace "
              f"{sum(p.stat().st_size for p in ws.rglob('*') if p.is_file()):,} bytes")
        if args.legacy:
            s.forget.holders = [h for h in s.forget.holders if h.name in LEGACY]
        before = {c: occurrences(ws, c) for c, _ in claims}
        rows = []
        for claim, _ in claims:
            t = time.perf_counter()
            mine = s.forget.forget(AGENT, None, claim, actor="person", now=True, receipt=True)
            ann = s.forget.forget(AGENT, ANN, claim, actor="person", now=True, receipt=True)
            ms = (time.perf_counter() - t) * 1000 / 2
            removed = {st["store"]: st.get("removed", 0) for st in mine.stores}
            for st in ann.stores:
                removed[st["store"]] = removed.get(st["store"], 0) + int(st.get("removed") or 0)
            rows.append((claim, ann, removed, ms))
        s.close()
        again = services(root, clock)  # a restart: nothing derived may bring a claim back
        again.build()
        for claim, _ in claims:
            again.search.search(claim, agent=AGENT, record=False)
        again.context.build(AGENT, query="what do you know about me?", current="what do you know about me?")
        again.close()

        total_after = total_control = 0
        print(f"\n{'claim':44} {'before':>12} {'after':>6} {'control':>8} {'receipt':>8} {'forget ms':>9}"
              "  removed per store")
        for claim, ann, removed, ms in rows:
            control = dict(claims)[claim]
            after, _ = occurrences(ws, claim)
            kept, _ = occurrences(ws, control)
            total_after += after
            total_control += kept > 0
            verdict = ann.scan["proof"] if ann.scan else "-"
            stores = ", ".join(f"{k} {v}" for k, v in removed.items() if v)
            b, f = before[claim]
            print(f"{claim[:44]:44} {f'{b} in {f} files':>12} {after:>6} {kept:>8} {verdict:>8} {ms:>9.0f}  {stores}")
        load = os.getloadavg()
        mode = "legacy holders" if args.legacy else "all holders"
        print(f"\n{mode}: {total_after} occurrence(s) of {len(claims)} forgotten claims left after a restart "
              f"(goal 0); controls found for {total_control}/{len(claims)} (goal all)")
        print(f"loadavg {load[0]:.2f} {load[1]:.2f} {load[2]:.2f} (2 shared cores)")
        if not args.legacy:
            record("forget: occurrences of forgotten claims left in the workspace's bytes", total_after, "",
                   goal="0", met=total_after == 0)
    return 0 if (total_after == 0 or args.legacy) and total_control == len(claims) else 1


if __name__ == "__main__":
    raise SystemExit(main())
