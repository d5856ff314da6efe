"""Search at scale: the SQLite FTS5 index against a plain scan of the files (what grep-based tools do).

Generates workspaces of N `##` sections (daily notes of 50 sections each, 80-600 characters per
section, half of them Chinese/Japanese), builds the index, then runs the same queries through the
search service and through a plain scan (read every file, keep lines containing any query term).
Prints build time, p50/p95 query latency and the index size per workspace size. Figures only,
no assertions.

    python scripts/bench/search_scale.py                 # 1k, 10k, 100k sections
    python scripts/bench/search_scale.py --sizes 1000 10000 --queries 100
    python scripts/bench/search_scale.py --sizes 100000 --keep /tmp/bench   # reuse files and index
    python scripts/bench/search_scale.py --sizes 100000 --keep /tmp/bench --rebuild --profile 30

`--keep DIR` writes each workspace to `DIR/ws-<sections>` and reuses it (and its built index) on the
next run, so a profiling loop does not pay generation and build each time; `--rebuild` rebuilds the
kept index anyway (after a schema change). A reused index shows no build time.
"""

from __future__ import annotations

import argparse
import contextlib
import cProfile
import json
import pstats
import random
import statistics
import sys
import tempfile
import time
from datetime import date, datetime, timedelta
from pathlib import Path
from zoneinfo import ZoneInfo

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from mateclaw_mem.clock import ManualClock
from mateclaw_mem.runtime.services import Services
from mateclaw_mem.settings import load_settings

SECTIONS_PER_FILE = 50
TZ = ZoneInfo("Europe/Berlin")


class Corpus:
    """Zipf-distributed pseudo-English words and CJK characters: realistic term-frequency skew."""

    def __init__(self, rng: random.Random) -> None:
        self.rng = rng
        syllables = [c + v for c in "bcdfghjklmnprstvwz" for v in ("a", "e", "i", "o", "u", "ai", "ou")]
        words: set[str] = set()
        while len(words) < 8000:
            words.add("".join(rng.choice(syllables) for _ in range(rng.choice((1, 2, 2, 3, 3, 4)))))
        self.words = sorted(words)
        rng.shuffle(self.words)
        han = [chr(0x4E00 + i) for i in range(0, 20000, 7)][:2500]
        kana = [chr(c) for c in range(0x3042, 0x3094)] + [chr(c) for c in range(0x30A2, 0x30F4)]
        self.cjk = han + kana
        rng.shuffle(self.cjk)
        self._wweights = [1 / (i + 1) for i in range(len(self.words))]
        self._cweights = [1 / (i + 1) ** 0.9 for i in range(len(self.cjk))]

    def latin(self, chars: int) -> str:
        out: list[str] = []
        n = 0
        while n < chars:
            w = self.rng.choices(self.words, self._wweights, k=12)
            sentence = " ".join(w).capitalize() + ". "
            out.append(sentence)
            n += len(sentence)
        return "".join(out)[:chars]

    def cjk_text(self, chars: int) -> str:
        text = "".join(self.rng.choices(self.cjk, self._cweights, k=chars))
        # Sentence breaks every 15-30 characters, as real text has.
        out, i = [], 0
        while i < len(text):
            step = self.rng.randint(15, 30)
            out.append(text[i : i + step] + "。")
            i += step
        return "".join(out)


def generate(root: Path, sections: int, rng: random.Random) -> list[tuple[str, bool]]:
    """Write the workspace; return (section text, is_cjk) samples to draw queries from."""
    corpus = Corpus(rng)
    agent = root / "bench"
    (agent / "memory").mkdir(parents=True)
    samples: list[tuple[str, bool]] = []
    start = date(2020, 1, 1)
    files = (sections + SECTIONS_PER_FILE - 1) // SECTIONS_PER_FILE
    made = 0
    for f in range(files):
        day = start + timedelta(days=f)
        parts = [f"---\nenabled: false\n---\n# {day.isoformat()}\n"]
        for s in range(min(SECTIONS_PER_FILE, sections - made)):
            cjk = (made % 2) == 1
            length = rng.randint(80, 600)
            body = corpus.cjk_text(length) if cjk else corpus.latin(length)
            parts.append(f"\n## {s // 4:02d}:{(s * 7) % 60:02d} note {made}\n\n{body}\n")
            if rng.random() < 0.01:
                samples.append((body, cjk))
            made += 1
        (agent / "memory" / f"{day.isoformat()}.md").write_text("".join(parts), encoding="utf-8")
    return samples


def make_queries(samples: list[tuple[str, bool]], n: int, rng: random.Random) -> list[str]:
    queries = []
    for i in range(n):
        text, cjk = samples[i % len(samples)]
        if cjk:
            clean = text.replace("。", "")
            at = rng.randrange(0, max(1, len(clean) - 6))
            q = clean[at : at + rng.randint(2, 6)]
        else:
            words = text.replace(".", "").split()
            q = " ".join(rng.sample(words, min(len(words), rng.randint(2, 4))))
        if i % 10 == 0:
            q += " absentterm"  # one term matches nothing: the others must still find hits
        queries.append(q)
    return queries


def plain_scan(root: Path, query: str) -> int:
    """What grep-style memory search does: read every file, keep lines holding any query term."""
    terms = [t.lower() for t in query.split() if t]
    hits = 0
    for path in root.rglob("*.md"):
        for line in path.read_text(encoding="utf-8").splitlines():
            low = line.lower()
            if any(t in low for t in terms):
                hits += 1
    return hits


def pct(values: list[float], p: float) -> float:
    values = sorted(values)
    return values[min(len(values) - 1, round(p / 100 * (len(values) - 1)))]


def run(sections: int, n_queries: int, scan_queries: int, seed: int, *, keep: Path | None = None,
        rebuild: bool = False, profile: int = 0) -> dict:
    rng = random.Random(seed + sections)
    with contextlib.ExitStack() as stack:
        base = keep / f"ws-{sections}" if keep else Path(stack.enter_context(tempfile.TemporaryDirectory()))
        root = base / "workspace"
        sample_file = base / "samples.json"
        if keep is not None and sample_file.exists():
            samples = [tuple(x) for x in json.loads(sample_file.read_text(encoding="utf-8"))]
            rng = random.Random(seed + sections + 1)  # queries drawn the same way on every reuse
        else:
            samples = generate(root, sections, rng)
            if keep is not None:
                sample_file.write_text(json.dumps(samples), encoding="utf-8")
                rng = random.Random(seed + sections + 1)
        settings = load_settings(None, root,
                                 overrides={"default_agent": "bench", "timezone": "Europe/Berlin"})
        db = settings.state_dir / "index.db"
        must_build = rebuild or keep is None or not db.exists()
        services = Services(settings, ManualClock(datetime(2026, 1, 1, 12, tzinfo=TZ)))
        try:
            index = services.file_index
            build_s = float("nan")
            if must_build:
                t0 = time.perf_counter()
                index.rebuild()
                build_s = time.perf_counter() - t0
            counts = index.counts()
            search = services.search
            queries = make_queries(samples, n_queries, rng)
            search.search(queries[0], record=False)  # first search: freshness check, caches
            lat, found = [], 0
            for q in queries:
                t = time.perf_counter()
                result = search.search(q, record=False)
                lat.append((time.perf_counter() - t) * 1000)
                found += bool(result.hits)
            if profile:
                prof = cProfile.Profile()
                prof.enable()
                for q in queries:
                    search.search(q, record=False)
                prof.disable()
                pstats.Stats(prof, stream=sys.stderr).sort_stats("cumulative").print_stats(profile)
                pstats.Stats(prof, stream=sys.stderr).sort_stats("tottime").print_stats(profile)
            scan_lat = []
            for q in queries[:scan_queries]:
                t = time.perf_counter()
                plain_scan(root, q)
                scan_lat.append((time.perf_counter() - t) * 1000)
            wal = settings.state_dir / "index.db-wal"
            size = db.stat().st_size + (wal.stat().st_size if wal.exists() else 0)
            text_bytes = sum(p.stat().st_size for p in root.rglob("*.md"))
        finally:
            services.close()
    return {
        "sections": sections, "files": counts["files"], "chunks": counts["chunks"], "text_mb": text_bytes / 1e6,
        "build_s": build_s, "p50": statistics.median(lat), "p95": pct(lat, 95), "found": found / len(queries),
        "db_mb": size / 1e6, "scan_p50": statistics.median(scan_lat) if scan_lat else float("nan"),
        "scan_p95": pct(scan_lat, 95) if scan_lat else float("nan"),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", type=int, nargs="+", default=[1000, 10000, 100000])
    parser.add_argument("--queries", type=int, default=200, help="queries per size through the index")
    parser.add_argument("--scan-queries", type=int, default=20, help="queries per size through the plain scan")
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--keep", type=Path, help="keep (and reuse) workspaces and indexes under this folder")
    parser.add_argument("--rebuild", action="store_true", help="with --keep: rebuild a reused index")
    parser.add_argument("--profile", type=int, default=0, metavar="N",
                        help="run the queries once more under cProfile and print the top N functions to stderr")
    parser.add_argument("--svg", type=Path, metavar="FILE",
                        help="also draw the latencies against the size as an SVG line chart "
                             "(docs/charts/search-scale.svg is the one the docs show)")
    args = parser.parse_args()
    head = (f"{'sections':>9} {'files':>6} {'chunks':>7} {'text MB':>8} {'build s':>8} {'index p50':>10}"
            f" {'index p95':>10} {'found':>6} {'DB MB':>7} {'scan p50':>9} {'scan p95':>9}")
    print(head)
    print("-" * len(head))
    results = []
    for n in args.sizes:
        r = run(n, args.queries, args.scan_queries, args.seed, keep=args.keep, rebuild=args.rebuild,
                profile=args.profile)
        results.append(r)
        print(f"{r['sections']:>9} {r['files']:>6} {r['chunks']:>7} {r['text_mb']:>8.1f} {r['build_s']:>8.1f}"
              f" {r['p50']:>8.2f}ms {r['p95']:>8.2f}ms {r['found']:>6.0%} {r['db_mb']:>7.1f}"
              f" {r['scan_p50']:>7.1f}ms {r['scan_p95']:>7.1f}ms", flush=True)
    if args.svg:
        from _load import load_average  # scripts/bench/_load.py (this script's folder is on sys.path)
        from _svg import line_chart

        curves = {f"{name} {q}": [(r["sections"], r[f"{key}{q}"]) for r in results]
                  for name, key in (("index", ""), ("scan", "scan_")) for q in ("p50", "p95")}
        line_chart(args.svg, "File search: the index against a plain scan of the files", "## sections (log)",
                   "ms per query (log)", curves, log_x=True, log_y=True,
                   note=f"scripts/bench/search_scale.py --sizes {' '.join(map(str, args.sizes))}; {load_average()}")
        print(f"chart: {args.svg}")


if __name__ == "__main__":
    from _load import load_average  # scripts/bench/_load.py (this script's folder is on sys.path)
    main()
    print(load_average())
