"""The Memory Browser at scale: server time per page and page weight with 10k memory sections.

Generates daily notes of 50 `##` sections each (a quarter Chinese) up to `--sections`, a MEMORY.md
with `--facts` claims (fact projection on), one dream report and one contradiction, then requests
every page over a real uvicorn on loopback. Server time is the request's wall time on loopback (the
client and the network stack add well under a millisecond here). Prints p50/p95 per page, the HTML
bytes and the script bytes each page loads. Figures only, no assertions.

    python scripts/bench/ui_pages.py                       # 10k sections, 300 facts, 20 rounds
    python scripts/bench/ui_pages.py --sections 1000 --rounds 50
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import tempfile
import time
from datetime import timedelta
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import httpx

from mateclaw_mem.api.app import create_app
from mateclaw_mem.runtime.services import Services
from mateclaw_mem.settings import load_settings
from scripts.bench._text import sentence
from tests.support.server import ApiServer

AGENT = "default"
PER_NOTE = 50
PAGES = {
    "home": "/ui/",
    "facts": "/ui/facts",
    "facts (query)": "/ui/facts?q=garden+coffee",
    "inbox": "/ui/inbox",
    "files": "/ui/files",
    "file view": "/ui/files/view?path=MEMORY.md",
    "file edit": "/ui/files/edit?path=MEMORY.md",
    "history": "/ui/files/history?path=MEMORY.md",
    "dreams": "/ui/dreams",
    "search": "/ui/search?q=coffee+garden",
    "search (CJK)": "/ui/search?q=咖啡花园",
    "timeline": "/ui/timeline",
    "history (split)": "/ui/files/history?path=MEMORY.md&diff=split",
    "learning": "/ui/learning",
    "export / import": "/ui/snapshot",
}


def build(root: Path, sections: int, facts: int) -> Services:
    cfg = root / "bench.yaml"
    cfg.write_text("timezone: Europe/Berlin\nmate:\n  memory:\n    fact:\n      projection-enabled: true\n"
                   "      contradiction-check-enabled: true\n", encoding="utf-8")
    services = Services(load_settings(cfg, root / "ws"))
    services.seed_agents()
    services.build()
    _ = services.file_index, services.contradictions
    rng = random.Random(7)
    now = services.clock.now()
    notes = max(1, sections // PER_NOTE)
    for day in range(notes):
        body = "".join(f"## Note {i}\n\n- {sentence(rng, i)}\n- {sentence(rng, i + 1)}\n\n" for i in range(PER_NOTE))
        when = now - timedelta(days=notes - day + 1)
        path = services.store.path(AGENT, services.store.daily_rel(when))
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(f"# {when:%Y-%m-%d}\n\n{body}", encoding="utf-8")
    claims = "".join(f"- {sentence(rng, i)} (claim {i})\n" for i in range(facts))
    memory = f"# MEMORY.md\n\n## Work\n- timezone: Asia/Shanghai\n{claims}"
    snap = services.store.read(AGENT, "MEMORY.md")
    services.store.write(AGENT, "MEMORY.md", memory, expected_sha=snap.sha, actor="person")
    snap = services.store.read(AGENT, "PROFILE.md")
    services.store.write(AGENT, "PROFILE.md", snap.text + "\n## Basics\n- timezone: Europe/Berlin\n",
                         expected_sha=snap.sha, actor="person")
    for days in (2, 1):
        services.store.append_daily(AGENT, "Work", "- Project Atlas deadline: December 15", actor="extraction",
                                    when=now - timedelta(days=days))
    services.file_index.rebuild()  # the notes were dropped in by hand: index them as the watcher would
    services.dreaming.dream(AGENT)
    return services


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sections", type=int, default=10_000)
    ap.add_argument("--facts", type=int, default=300)
    ap.add_argument("--rounds", type=int, default=20)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        t0 = time.perf_counter()
        services = build(Path(tmp), args.sections, args.facts)
        print(f"workspace: {args.sections} sections, {args.facts} MEMORY.md claims, built in "
              f"{time.perf_counter() - t0:.1f} s")
        try:
            with ApiServer(create_app(services, mcp=False)) as server, \
                    httpx.Client(base_url=server.url, timeout=60) as client:
                script = len(client.get("/ui/static/htmx.min.js").content)
                print(f"{'page':<16}{'p50 ms':>9}{'p95 ms':>9}{'html kB':>9}{'script kB':>11}")
                for name, path in PAGES.items():
                    first = client.get(path)
                    if first.status_code != 200:
                        print(f"{name:<16} HTTP {first.status_code}: {first.text[:120]}")
                        continue
                    times = []
                    for _ in range(args.rounds):
                        t = time.perf_counter()
                        client.get(path)
                        times.append((time.perf_counter() - t) * 1000)
                    times.sort()
                    p95 = times[min(len(times) - 1, int(len(times) * 0.95))]
                    scripts = first.text.count('<script src="/ui/static/htmx.min.js"') * script
                    print(f"{name:<16}{statistics.median(times):>9.1f}{p95:>9.1f}{len(first.content) / 1000:>9.1f}"
                          f"{scripts / 1000:>11.1f}")
        finally:
            services.close()


if __name__ == "__main__":
    from _load import load_average  # scripts/bench/_load.py (this script's folder is on sys.path)
    main()
    print(load_average())
