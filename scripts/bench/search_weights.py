"""Search file weights: does ranking core files above the daily ledger (the seed's order) cost anything?

Builds one workspace that looks like a few weeks of use -- the shipped AGENTS.md / SOUL.md seeds,
a PROFILE.md and MEMORY.md a person would have, structured entries, 30 days of daily notes in which
the same facts were first said in passing -- and runs two sets of labelled queries under each weight
table (scope `all`, what `mateclaw-mem search` and the workspace search tool use):

- core: the answer's home is a core file (PROFILE.md, MEMORY.md, AGENTS.md); a daily note mentions it too;
- ledger: the answer is only in one daily note; the core files share words with the query.

Prints Hit@1 and MRR (of the first hit in the expected file) per set and weight table. Figures only.

    python scripts/bench/search_weights.py
"""

from __future__ import annotations

import sys
import tempfile
from datetime import datetime, timedelta
from pathlib import Path
from zoneinfo import ZoneInfo

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from mateclaw_mem.clock import ManualClock
from mateclaw_mem.runtime.services import Services
from mateclaw_mem.settings import SearchSettings, load_settings

TZ = ZoneInfo("Europe/Berlin")
NOW = datetime(2026, 11, 30, 9, 0, tzinfo=TZ)
AGENT = "default"
OLD = {"MEMORY.md": 1.0, "daily": 0.7, "PROFILE.md": 0.5, "AGENTS.md": 0.3, "SOUL.md": 0.3, "structured": 0.9,
       "archive": 0.4}
NEW = dict(SearchSettings.model_fields["file_weights"].default)

PROFILE = """# Profile

## Profile

- name: Alice Moreau
- employer: Acme Robotics, data platform team
- location: Lyon, France
- languages: French, English, some German
- diet: vegetarian, no cilantro
- editor: Neovim with a dark theme
- answers: short, with code first
"""

MEMORY = """# Memory

## Projects

- Warehouse migration: moving the analytics warehouse from Redshift to Postgres 16, due end of Q1.
- Blog: static site on Hugo, hosted on a small VPS; posts in French and English.

## Decisions

- Use dbt for transformations; no stored procedures.
- Weekly report goes out on Monday mornings, as a PDF.

## Open threads

- Find a dentist near Croix-Rousse.
- Renew the passport before the March trip to Montreal.
"""

# (day offset, title, body): facts said in passing, plus things that only live in the ledger.
DAILY = [
    (29, "Intro", "- Alice mentioned she works at Acme Robotics on the data platform."),
    (27, "Warehouse", "- Talked about the Redshift to Postgres migration; worried about the deadline."),
    (25, "Bike", "- Bike chain snapped on the way to work; bought a new one at Cycles Verts."),
    (22, "Food", "- Alice is vegetarian; found a ramen place on Rue Mercière she likes."),
    (20, "dbt", "- Decided on dbt models for the migration after comparing with stored procedures."),
    (18, "Concert", "- Tickets for the Nuits de Fourvière concert on July 4th, row F."),
    (15, "Report", "- The Monday report PDF failed because the chart font was missing on the server."),
    (12, "Hugo", "- Blog theme switched to PaperMod; the RSS feed broke and was fixed."),
    (10, "Plants", "- Repotted the fiddle leaf fig; water every ten days."),
    (8, "Passport", "- Passport appointment booked at the prefecture for December 12th."),
    (6, "Sister", "- Her sister Claire moves to Bordeaux in January; help with the van."),
    (4, "Laptop", "- Laptop battery swelling; Acme IT replaces it next week."),
    (2, "Chess", "- Started a chess club on Thursdays at the office, five members."),
    (1, "Dentist", "- Called two dentists; Dr. Faure near Croix-Rousse has a slot in January."),
]

# query, expected file(s), space-separated
CORE = [
    ("where does Alice work", "PROFILE.md"),
    ("Acme Robotics employer", "PROFILE.md"),
    ("is she vegetarian", "PROFILE.md structured/user.md"),  # either holds the answer
    ("which editor does she use", "PROFILE.md"),
    ("what languages does Alice speak", "PROFILE.md"),
    ("warehouse migration Postgres deadline", "MEMORY.md"),
    ("dbt or stored procedures", "MEMORY.md"),
    ("weekly report Monday PDF", "MEMORY.md"),
    ("Hugo blog hosting", "MEMORY.md"),
    ("how should I answer short code first", "PROFILE.md"),
    ("which memory tool to search earlier notes", "AGENTS.md"),
    ("where do stable facts about the person go", "AGENTS.md"),
]
LEDGER = [
    ("bike chain", "memory/2026-11-05.md"),
    ("ramen Rue Mercière", "memory/2026-11-08.md"),
    ("concert tickets Fourvière", "memory/2026-11-12.md"),
    ("chart font missing on the server", "memory/2026-11-15.md"),
    ("PaperMod RSS feed", "memory/2026-11-18.md"),
    ("fiddle leaf fig water", "memory/2026-11-20.md"),
    ("passport appointment prefecture", "memory/2026-11-22.md"),
    ("Claire Bordeaux van", "memory/2026-11-24.md"),
    ("laptop battery", "memory/2026-11-26.md"),
    ("chess club Thursday", "memory/2026-11-28.md"),
    ("dentist slot in January", "memory/2026-11-29.md"),  # MEMORY.md names the dentist too
    ("what did Alice say about Acme IT", "memory/2026-11-26.md"),  # PROFILE.md names Acme too
]


def build(root: Path, weights: dict[str, float]) -> Services:
    cfg = root / "cfg.yaml"
    cfg.write_text("timezone: Europe/Berlin\nsearch:\n  watch: false\n", encoding="utf-8")
    svc = Services(load_settings(cfg, root / "ws", {"search": {"file_weights": weights}}), ManualClock(NOW))
    if not (root / "ws" / AGENT).exists():
        svc.store.ensure_agent(AGENT)
        for rel, text in (("PROFILE.md", PROFILE), ("MEMORY.md", MEMORY)):
            snap = svc.store.read(AGENT, rel)
            head = snap.text[: len(snap.text) - len(snap.body)]
            svc.store.write(AGENT, rel, head + text, expected_sha=snap.sha, actor="person")
        for days, title, body in DAILY:
            svc.store.append_daily(AGENT, title, body, actor="extraction", when=NOW - timedelta(days=days))
        svc.structured.remember(AGENT, "user", "diet", "Vegetarian; avoids cilantro.", actor="api")
    return svc


def score(svc: Services, queries: list[tuple[str, str]]) -> tuple[float, float, list[str]]:
    hit1, rr, misses = 0, 0.0, []
    for query, expected in queries:
        good = set(expected.split())
        ranked = [h.file for h in svc.search.search(query, agent=AGENT, scope="all", limit=10).hits]
        first = next((i for i, f in enumerate(ranked) if f in good), None)
        if first == 0:
            hit1 += 1
        else:
            misses.append(f"{query!r}: top {ranked[:3]}")
        rr += 1 / (first + 1) if first is not None else 0.0
    return hit1 / len(queries), rr / len(queries), misses


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        for name, weights in (("old (PROFILE 0.5, AGENTS 0.3)", OLD), ("new (core above daily)", NEW)):
            svc = build(root, weights)
            try:
                svc.search.search("warm up", agent=AGENT)  # the first search builds the index
                print(f"weights {name}: {weights}")
                for label, queries in (("core", CORE), ("ledger", LEDGER)):
                    h1, mrr, misses = score(svc, queries)
                    print(f"  {label:6} n={len(queries):2}  Hit@1 {h1:.2f}  MRR {mrr:.3f}")
                    for miss in misses:
                        print(f"      miss {miss}")
            finally:
                svc.close()


if __name__ == "__main__":
    main()
