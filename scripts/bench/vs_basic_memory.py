"""In-process search against basic-memory (FTS-only, SQLite) on one corpus of Markdown daily notes.

For each size (`##` sections) the bench writes one corpus twice (basic-memory rewrites the front
matter of what it syncs, so it gets its own copy): `<ws>/default/memory/YYYY-MM-DD.md` for
mateclaw-mem, a flat project folder of the same files for basic-memory. It builds both indexes,
then, size by size and alternating the two systems, warms each and times the same queries at the
same top-k: ours through the search service in this process, basic-memory's through its own
SearchService in a subprocess with its own venv's python (`_basic_memory_driver.py`). It prints
p50 / p95 per system and their ratio, full-index time and peak RSS, and Hit@1 / Hit@5 / MRR on a
relevance set built from the corpus (planted unique facts, questions using rare content words of a
known section, planted CJK facts). A hit is the right note (basic-memory returns notes, not
sections); ours also shows Hit@1 for the right section. Figures only, no assertions.

    python scripts/bench/vs_basic_memory.py --setup                     # install basic-memory only
    python scripts/bench/vs_basic_memory.py --sizes 1000 10000          # synthetic corpus
    python scripts/bench/vs_basic_memory.py --data /path/to/locomo_dev.json --keep ~/bench-vs \\
        --sizes 1000 10000 50000                                        # LoCoMo-derived, kept
    python scripts/bench/vs_basic_memory.py --data ... --keep ~/bench-vs --sizes 50000 --index-only
    python scripts/bench/vs_basic_memory.py ... --sizes 50000 --profile 25   # cProfile of our queries

basic-memory needs Python >= 3.12: it is installed (PyPI `basic-memory`) into
~/.cache/mateclaw-mem/bench/basic-memory-venv on `--setup` or when missing, with the first
python3.12+/3.13 found (`--python` picks one). `--keep DIR` keeps the corpus and both indexes in
`DIR/<source>-<sections>/` and reuses them (basic-memory needs 15-25 min for 50k sections); a reused
index shows the build figures of the run that built it, marked `*`. A kept corpus is never
regenerated: delete its folder after changing the generator, the seed or --data.
"""

from __future__ import annotations

import argparse
import contextlib
import cProfile
import json
import pstats
import random
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import date, timedelta
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from mateclaw_mem.runtime.services import Services

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
sys.path.insert(0, str(Path(__file__).resolve().parent))
from _figures import record  # scripts/bench/_figures.py

HERE = Path(__file__).resolve().parent
VENV = Path.home() / ".cache" / "mateclaw-mem" / "bench" / "basic-memory-venv"
DRIVER = HERE / "_basic_memory_driver.py"
TOP_K = 10

# -- the corpus ------------------------------------------------------------------------------------

def _wordlist(text: str) -> tuple[str, ...]:
    return tuple(text.split())


START = date(2001, 1, 1)
TURNS_PER_SECTION = 3  # LoCoMo: one `##` section per few turns of a session, one daily note per session
SYNTH_SECTIONS_PER_NOTE = 6
NAMES = _wordlist("Aiden Bella Carlos Dana Elif Farid Greta Hiro Ines Jonas Keiko Luca Mira Nils Omar Priya Quinn "
              "Rosa Sven Tara Umar Vera Wade Xenia Yusuf Zoe Anja Bruno Chloe Dmitri Esme Felix Gwen Hamid Ivy "
              "Jasper Kira Lars Maya Noor")
STOP = set(_wordlist("about after again also been before being could does doing down each from have having here into "
           "just like made make more most much must only other over really same should some such than that "
           "their them then there these they this those through very want well were what when where which while "
           "will with would your yeah thanks thank know think going good great sure things thing always"))
# Planted facts: (sentence added to a section, the question a user would ask). The questions share only
# some words with the fact (and sometimes a different word form), as a person recalling it would.
FACTS = (
    ("The spare key to the boathouse hangs under the blue ceramic frog.", "where is the spare boathouse key"),
    ("Our landlord finally fixed the rattling radiator in the attic bedroom.", "radiator attic fixed"),
    ("The vet said the tortoise needs more calcium and a warmer lamp.", "what did the vet say about the tortoise"),
    ("I signed up for a pottery class that meets on Thursday evenings at the old mill.", "pottery class old mill"),
    ("Grandpa's sourdough starter is named Herbert and lives in the pantry.", "name of the sourdough starter"),
    ("The insurance claim for the hailstorm damage was approved at 2,340 dollars.", "hailstorm insurance claim"),
    ("My passport renewal appointment is at the consulate on Rue Lafayette.", "passport renewal consulate"),
    ("The chess club moved its tournament to the library basement.", "where is the chess tournament"),
    ("We planted three quince trees along the north fence.", "quince trees by the fence"),
    ("The plumber recommended replacing the corroded copper pipes under the sink.", "corroded pipes plumber"),
    ("Her violin teacher suggested practicing scales with a metronome.", "violin metronome practice"),
    ("The ferry to the island leaves at 7:40 from pier nine.", "ferry island pier"),
    ("I returned the faulty espresso grinder and got store credit.", "espresso grinder returned"),
    ("The kayak rental shop gives a discount to students on weekdays.", "kayak rental discount"),
    ("His allergy turned out to be caused by birch pollen.", "what caused his allergy"),
    ("The wedding caterer needs the final headcount by the fifteenth.", "caterer headcount"),
    ("We found a fossilized ammonite while hiking near the quarry.", "ammonite fossil quarry"),
    ("The dentist scheduled the wisdom tooth extraction for next Monday.", "wisdom tooth extraction"),
    ("Mom's recipe for plum dumplings uses farmer cheese and breadcrumbs.", "plum dumplings recipe"),
    ("The telescope's eyepiece cracked during the move to Denver.", "telescope eyepiece cracked"),
)
CJK_FACTS = (
    ("她把旧自行车捐给了社区图书馆。", "自行车 图书馆"), ("我们下个月去成都吃火锅。", "成都火锅"),
    ("他的护照放在书房的抽屉里。", "护照 抽屉"), ("周末在西湖边买了一把蓝色雨伞。", "西湖 雨伞"),
    ("妹妹考上了上海的音乐学院。", "音乐学院"), ("明日は京都で抹茶のケーキを食べます。", "抹茶 ケーキ"),
    ("駅前の本屋で漫画を三冊買った。", "本屋 漫画"), ("奶奶的生日聚会改到星期六晚上。", "生日聚会"),
    ("新しい自転車の鍵をなくしました。", "自転車の鍵"), ("他在北京学习书法已经三年了。", "书法 北京"),
)


def _words(text: str) -> list[str]:
    return [w for w in re.findall(r"[a-z]+", text.lower()) if len(w) >= 4 and w not in STOP]


def _locomo_notes(data: Path, sections: int) -> list[list[list[str]]]:
    """Sessions as daily notes of `##` sections; past one pass the speakers get new names per pass."""
    convs = json.loads(data.read_text(encoding="utf-8"))
    pairs = [(a, b) for a in NAMES for b in NAMES if a != b]
    random.Random(11).shuffle(pairs)
    notes: list[list[list[str]]] = []
    made, pass_no = 0, 0
    while made < sections:
        for c, conv in enumerate(convs):
            talk = conv["conversation"]
            old = (talk["speaker_a"], talk["speaker_b"])
            new = old if pass_no == 0 else pairs[(pass_no * len(convs) + c) % len(pairs)]
            rename = dict(zip(old, new, strict=True))
            pattern = re.compile(r"\b(" + "|".join(map(re.escape, old)) + r")\b")
            keys = sorted((k for k in talk if re.fullmatch(r"session_\d+", k)), key=lambda k: int(k[8:]))
            for key in keys:
                turns = talk[key]
                if not turns or made >= sections:
                    continue
                note = []
                for i in range(0, len(turns), TURNS_PER_SECTION):
                    if made >= sections:
                        break
                    lines = []
                    for t in turns[i : i + TURNS_PER_SECTION]:
                        photo = f" [shares a photo: {t['blip_caption']}]" if t.get("blip_caption") else ""
                        text = pattern.sub(lambda m, r=rename: r[m[1]], t.get("text", "") + photo)
                        lines.append(f"{rename.get(t['speaker'], t['speaker'])}: {text}")
                    body = "\n\n".join(lines)
                    topic = " ".join(lines[0].split(":", 1)[1].split()[:6]).strip(" ,.!?")
                    note.append([f"{9 + len(note) // 4:02d}:{(len(note) * 15) % 60:02d} {topic}", body])
                    made += 1
                notes.append(note)
        pass_no += 1
    return notes


def _synthetic_notes(sections: int, seed: int) -> list[list[list[str]]]:
    from search_scale import Corpus  # Zipf-distributed pseudo-words and CJK, as the scale bench uses

    rng = random.Random(seed + sections)
    corpus = Corpus(rng)
    notes: list[list[list[str]]] = []
    for made in range(sections):
        if made % SYNTH_SECTIONS_PER_NOTE == 0:
            notes.append([])
        note = notes[-1]
        cjk = made % 4 == 3
        body = corpus.cjk_text(rng.randint(40, 200)) if cjk else corpus.latin(rng.randint(80, 600))
        topic = body[:8] if cjk else " ".join(body.split()[:3]).strip(".")
        note.append([f"{9 + len(note):02d}:{(made * 7) % 60:02d} {topic}", body])
    return notes


def _render(note: list[list[str]], day: date) -> str:
    return f"# {day.isoformat()}\n" + "".join(f"\n## {h}\n\n{b}\n" for h, b in note)


def build_corpus(base: Path, sections: int, *, data: Path | None, n_queries: int, seed: int) -> dict:
    """Write both copies of the corpus (or reuse a kept one) and return its judged and latency queries."""
    meta = base / "corpus.json"
    if meta.exists():
        return json.loads(meta.read_text(encoding="utf-8"))
    rng = random.Random(seed * 1000 + sections)
    notes = _locomo_notes(data, sections) if data else _synthetic_notes(sections, seed)
    flat = [(n, s) for n, note in enumerate(notes) for s in range(len(note))]
    names = [f"{(START + timedelta(days=n)).isoformat()}.md" for n in range(len(notes))]
    relevance: list[dict] = []
    planted = FACTS + CJK_FACTS
    spots = [flat[(i * 2 + 1) * len(flat) // (2 * len(planted))] for i in range(len(planted))]
    for (fact, query), (n, s) in zip(planted, spots, strict=True):
        notes[n][s][1] += ("\n\n" if fact.isascii() else "") + fact
        relevance.append({"kind": "fact" if fact.isascii() else "cjk", "query": query, "note": names[n],
                          "title": notes[n][s][0]})
    # Paraphrase-ish: the rarest content words of a section (and a speaker's name), checked so that
    # only the target note holds all of them.
    postings: dict[str, set[int]] = {}
    for n, note in enumerate(notes):
        for word in set(_words(" ".join(h + " " + b for h, b in note))):
            postings.setdefault(word, set()).add(n)
    taken = set(spots)
    for n, s in rng.sample(flat, min(len(flat), 400)):
        if len([r for r in relevance if r["kind"] == "question"]) >= 20:
            break
        heading, body = notes[n][s]
        if (n, s) in taken or not body.isascii():
            continue
        words = sorted(set(_words(body)), key=lambda w: (len(postings[w]), w))[:3]
        speaker = re.match(r"([A-Z][a-z]+): ", body)
        terms = ([speaker[1].lower()] if speaker else []) + words
        if len(words) < 3 or set.intersection(*(postings.get(w, set()) for w in terms)) != {n}:
            continue
        taken.add((n, s))
        who = speaker[1] if speaker else "I"
        query = (f"what did {who} say about {words[0]} and {words[1]} {words[2]}" if len(relevance) % 2
                 else " ".join(([who] if speaker else []) + words))
        relevance.append({"kind": "question", "query": query, "note": names[n], "title": heading})
    latency = []
    for i in range(n_queries):
        n, s = rng.choice(flat)
        body = notes[n][s][1]
        if body.isascii():
            words = _words(body) or body.split()
            q = " ".join(rng.sample(words, min(len(words), rng.randint(2, 4))))
        else:
            clean = re.sub(r"\W", "", body)
            at = rng.randrange(0, max(1, len(clean) - 6))
            q = clean[at : at + rng.randint(2, 4)]
        latency.append(q + (" absentterm" if i % 10 == 0 else ""))
    for folder in (base / "ours" / "ws" / "default" / "memory", base / "bm" / "project"):
        folder.mkdir(parents=True, exist_ok=True)
        for n, note in enumerate(notes):
            (folder / names[n]).write_text(_render(note, START + timedelta(days=n)), encoding="utf-8")
    out = {"notes": len(notes), "relevance": relevance, "latency_queries": latency}
    meta.write_text(json.dumps(out, ensure_ascii=False), encoding="utf-8")
    return out



# -- basic-memory's venv ---------------------------------------------------------------------------

def find_python(explicit: str | None) -> str:
    """A python >= 3.12 for basic-memory's venv: --python, else the first one found."""
    candidates = [explicit] if explicit else []
    for name in ("python3.13", "python3.12"):
        if found := shutil.which(name):
            candidates.append(found)
    pyenv = Path.home() / ".pyenv" / "versions"
    if pyenv.is_dir():
        candidates += [str(p) for p in sorted(pyenv.glob("3.1[2-9]*/bin/python3"), reverse=True)]
    for cand in candidates:
        try:
            out = subprocess.run([cand, "-c", "import sys; print(sys.version_info >= (3, 12))"],
                                 capture_output=True, text=True, timeout=30)
        except OSError:
            continue
        if out.stdout.strip() == "True":
            return cand
    raise SystemExit("basic-memory needs Python >= 3.12 and none was found: pass --python /path/to/python3.12")


def ensure_basic_memory(*, setup: bool, python: str | None) -> str:
    """The venv's python, installing basic-memory into it when asked or missing."""
    bin_py = VENV / "bin" / "python"
    if bin_py.exists():
        probe = subprocess.run([str(bin_py), str(DRIVER), "version"], capture_output=True, text=True)
        if probe.returncode == 0 and not setup:
            return str(bin_py)
        too_old = subprocess.run([str(bin_py), "-c", "import sys; print(sys.version_info < (3, 12))"],
                                 capture_output=True, text=True).stdout.strip() != "False"
        if too_old:  # a venv made with an older python can never hold basic-memory: make it anew
            shutil.rmtree(VENV)
    try:
        if not bin_py.exists():
            base = find_python(python)
            print(f"making {VENV} with {base} ...", file=sys.stderr, flush=True)
            subprocess.run([base, "-m", "venv", str(VENV)], check=True)
        print(f"installing basic-memory into {VENV} ...", file=sys.stderr, flush=True)
        subprocess.run([str(bin_py), "-m", "pip", "install", "-q", "--upgrade", "basic-memory"], check=True)
    except subprocess.CalledProcessError as exc:
        raise SystemExit(f"could not install basic-memory into {VENV}: {exc}") from None
    return str(bin_py)


def driver(py: str, *args: str) -> dict:
    proc = subprocess.run([py, str(DRIVER), *args], capture_output=True, text=True)
    if proc.returncode != 0:
        raise SystemExit(f"basic-memory driver failed ({' '.join(args[:1])}):\n{proc.stderr[-3000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


# -- our side --------------------------------------------------------------------------------------

def our_services(root: Path) -> Services:
    from _services import bench_services

    return bench_services(root)


def our_index(root: Path) -> dict:
    """Full index in a child process, so its peak RSS is the index's own."""
    code = (f"import sys, json, time, resource; sys.path[:0] = [{str(HERE.parents[1])!r}, {str(HERE)!r}]\n"
            "from _services import bench_services\n"
            f"s = bench_services(__import__('pathlib').Path({str(root)!r}))\n"
            "t = time.perf_counter(); s.file_index.rebuild(); t = time.perf_counter() - t\n"
            "c = s.file_index.counts(); s.close()\n"
            "print(json.dumps({'index_s': t, 'chunks': c['chunks'], 'files': c['files'],"
            " 'peak_rss_mb': resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}))\n")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    if proc.returncode != 0:
        raise SystemExit(f"mateclaw-mem index failed:\n{proc.stderr[-3000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def our_search(services: Services, queries: list[str], warm: int, top_k: int) -> dict:
    search = services.search
    for q in queries[:warm]:
        search.search(q, limit=top_k, record=False)
    latencies, results = [], []
    for q in queries:
        t = time.perf_counter()
        hits = search.search(q, limit=top_k, record=False).hits
        latencies.append((time.perf_counter() - t) * 1000)
        results.append([(Path(h.file).name, h.title) for h in hits])
    return {"latencies_ms": latencies, "results": results}


# -- figures ---------------------------------------------------------------------------------------

def pct(values: list[float], p: float) -> float:
    values = sorted(values)
    return values[min(len(values) - 1, round(p / 100 * (len(values) - 1)))]


def relevance(results: list[list[str]], answers: list[str]) -> dict:
    """Hit@1, Hit@5, MRR of the right note among each query's ranked notes (first place a note shows)."""
    h1 = h5 = rr = 0.0
    for ranked, want in zip(results, answers, strict=True):
        notes = list(dict.fromkeys(ranked))
        if want in notes:
            rank = notes.index(want) + 1
            h1 += rank == 1
            h5 += rank <= 5
            rr += 1 / rank
    n = len(answers) or 1
    return {"hit1": h1 / n, "hit5": h5 / n, "mrr": rr / n}


def run_size(sections: int, args: argparse.Namespace, py: str, base: Path) -> dict:
    source = "locomo" if args.data else "synthetic"
    corpus = build_corpus(base, sections, data=args.data, n_queries=args.queries, seed=args.seed)
    ours_root, bm_root = base / "ours", base / "bm"
    figures: dict = {"sections": sections, "source": source, "notes": corpus["notes"]}
    ours_done, bm_done = base / "ours-index.json", base / "bm-index.json"
    # Indexes: ours first (seconds), then basic-memory's (minutes at 50k); kept ones are reused.
    for name, done, build in (("ours", ours_done, lambda: our_index(ours_root)),
                              ("bm", bm_done, lambda: driver(py, "index", "--config-dir", str(bm_root / "config"),
                                                            "--project", str(bm_root / "project")))):
        if done.exists() and not args.rebuild:
            figures[name + "_index"] = json.loads(done.read_text(encoding="utf-8")) | {"reused": True}
            continue
        print(f"  {sections} sections: building the {name} index ...", file=sys.stderr, flush=True)
        result = build()
        done.write_text(json.dumps(result), encoding="utf-8")
        figures[name + "_index"] = result
    if args.index_only:
        return figures
    rel = corpus["relevance"]
    rel_queries = [r["query"] for r in rel]
    queries = rel_queries + corpus["latency_queries"]
    qfile = base / "queries.json"
    qfile.write_text(json.dumps(queries, ensure_ascii=False), encoding="utf-8")
    services = our_services(ours_root)
    try:
        services.search.search(queries[0], limit=args.top_k, record=False)  # first search: freshness check
        ours_runs, bm_runs = [], []
        for _ in range(args.rounds):  # interleaved: ours, theirs, ours, theirs ...
            ours_runs.append(our_search(services, queries, args.warm, args.top_k))
            bm_runs.append(driver(py, "search", "--config-dir", str(bm_root / "config"), "--project",
                                  str(bm_root / "project"), "--queries", str(qfile), "--limit", str(args.top_k),
                                  "--warm", str(args.warm)))
        if args.profile:
            prof = cProfile.Profile()
            prof.enable()
            for q in queries:
                services.search.search(q, limit=args.top_k, record=False)
            prof.disable()
            print(f"\n== cProfile of our {len(queries)} queries at {sections} sections ==", file=sys.stderr)
            pstats.Stats(prof, stream=sys.stderr).sort_stats("cumulative").print_stats(args.profile)
            pstats.Stats(prof, stream=sys.stderr).sort_stats("tottime").print_stats(args.profile)
    finally:
        services.close()
    for name, runs in (("ours", ours_runs), ("bm", bm_runs)):
        figures[name + "_p50"] = statistics.median(statistics.median(r["latencies_ms"]) for r in runs)
        figures[name + "_p95"] = statistics.median(pct(r["latencies_ms"], 95) for r in runs)
    answers = [r["note"] for r in rel]
    ours_notes = [[f for f, _ in hits] for hits in ours_runs[0]["results"][: len(rel)]]
    figures["ours_rel"] = relevance(ours_notes, answers)
    figures["bm_rel"] = relevance(bm_runs[0]["results"][: len(rel)], answers)
    figures["ours_section_hit1"] = sum(
        bool(hits) and hits[0] == (r["note"], r["title"]) for hits, r in zip(ours_runs[0]["results"], rel, strict=False)
    ) / len(rel)
    figures["misses"] = {name: [r["query"] for got, r in zip(res, rel, strict=True) if got[:1] != [r["note"]]]
                         for name, res in (("ours", ours_notes), ("bm", bm_runs[0]["results"][: len(rel)]))}
    figures["bm_errors"] = bm_runs[0].get("errors", 0)
    figures["bm_search_rss_mb"] = max(r["peak_rss_mb"] for r in bm_runs)
    figures["version"] = bm_runs[0]["version"]
    figures["n_queries"], figures["n_rel"], figures["top_k"] = len(queries), len(rel), args.top_k
    kinds: dict[str, list[int]] = {}
    for i, r in enumerate(rel):
        kinds.setdefault(r["kind"], []).append(i)
    figures["by_kind"] = {
        kind: (relevance([ours_notes[i] for i in idx], [answers[i] for i in idx])["hit1"],
               relevance([bm_runs[0]["results"][i] for i in idx], [answers[i] for i in idx])["hit1"], len(idx))
        for kind, idx in kinds.items()
    }
    return figures


def print_table(rows: list[dict]) -> None:
    def idx(r: dict, name: str) -> str:
        f = r[name + "_index"]
        return f"{f['index_s']:.1f}s/{f['peak_rss_mb']:.0f}MB" + ("*" if f.get("reused") else "")

    head = (f"{'sections':>8} {'notes':>6} | {'ours p50':>8} {'bm p50':>8} {'ratio':>6} | {'ours p95':>8}"
            f" {'bm p95':>8} {'ratio':>6} | {'ours H@1/H@5/MRR':>17} {'bm H@1/H@5/MRR':>17} {'ours sec@1':>10}"
            f" | {'ours index':>13} {'bm index':>14}")
    print(head)
    print("-" * len(head))
    for r in rows:
        if "ours_p50" not in r:
            print(f"{r['sections']:>8} {r['notes']:>6} | (index only) ours {idx(r, 'ours')}  bm {idx(r, 'bm')}")
            continue
        o, b = r["ours_rel"], r["bm_rel"]
        print(f"{r['sections']:>8} {r['notes']:>6} | {r['ours_p50']:>6.2f}ms {r['bm_p50']:>6.2f}ms"
              f" {r['ours_p50'] / r['bm_p50']:>5.2f}x | {r['ours_p95']:>6.2f}ms {r['bm_p95']:>6.2f}ms"
              f" {r['ours_p95'] / r['bm_p95']:>5.2f}x | {o['hit1']:.2f}/{o['hit5']:.2f}/{o['mrr']:.2f}"
              f"    {b['hit1']:.2f}/{b['hit5']:.2f}/{b['mrr']:.2f}    {r['ours_section_hit1']:>10.2f}"
              f" | {idx(r, 'ours'):>13} {idx(r, 'bm'):>14}", flush=True)
    for r in rows:
        if "by_kind" in r:
            kinds = "  ".join(f"{k} {o:.2f} vs {b:.2f} (n={n})" for k, (o, b, n) in r["by_kind"].items())
            print(f"{r['sections']:>8}: Hit@1 by query kind, ours vs bm: {kinds}; bm refused {r['bm_errors']};"
                  f" bm search RSS {r['bm_search_rss_mb']:.0f} MB; {r['n_queries']} queries ({r['n_rel']} judged),"
                  f" top-{r['top_k']}, basic-memory {r['version']}")
            for name, missed in r["misses"].items():
                print(f"{r['sections']:>8}: {name} not first for {len(missed)}: {' | '.join(missed)}")
    print("ratio = ours / basic-memory (below 1: ours faster); * = index reused from an earlier run (--keep)")
    for r in rows:
        if "ours_p50" not in r:
            continue
        big = r["sections"] >= 50000
        for q in ("p50", "p95"):
            ratio = r[f"ours_{q}"] / r[f"bm_{q}"]
            record(f"file search in-process {q}, {r['sections']} sections", r[f"ours_{q}"], "ms",
                   ref=r[f"bm_{q}"], ref_name="basic-memory", goal="<= 0.5x basic-memory" if big else "",
                   met=ratio <= 0.5 if big else None)
        for m in ("hit1", "mrr"):
            record(f"file search {m}, {r['sections']} sections", r["ours_rel"][m], "", ref=r["bm_rel"][m],
                   ref_name="basic-memory", goal=">= basic-memory", met=r["ours_rel"][m] >= r["bm_rel"][m])
        if not r["ours_index"].get("reused"):
            record(f"full index, {r['sections']} sections", r["ours_index"]["index_s"], "s",
                   ref=None if r["bm_index"].get("reused") else r["bm_index"]["index_s"], ref_name="basic-memory")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", type=int, nargs="+", default=[1000, 10000, 50000])
    parser.add_argument("--data", type=Path, help="LoCoMo JSON (a list of conversations); synthetic text without it")
    parser.add_argument("--keep", type=Path, help="keep (and reuse) corpora and both indexes under this folder")
    parser.add_argument("--rebuild", action="store_true", help="with --keep: rebuild kept indexes")
    parser.add_argument("--index-only", action="store_true", help="build corpora and indexes, then stop")
    parser.add_argument("--setup", action="store_true", help="(re)install basic-memory into its venv")
    parser.add_argument("--python", help="a python >= 3.12 for basic-memory's venv")
    parser.add_argument("--queries", type=int, default=150, help="latency queries besides the judged ones")
    parser.add_argument("--top-k", type=int, default=TOP_K, help="results asked of both systems per query")
    parser.add_argument("--rounds", type=int, default=3, help="timed rounds per system (median reported)")
    parser.add_argument("--warm", type=int, default=5, help="untimed queries before each timed round")
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--profile", type=int, default=0, metavar="N",
                        help="run our queries once more under cProfile; print the top N to stderr")
    args = parser.parse_args()
    if args.data is not None and not args.data.is_file():
        raise SystemExit(f"--data {args.data}: no such file")
    py = ensure_basic_memory(setup=args.setup, python=args.python)
    if args.setup and args.sizes == parser.get_default("sizes") and not args.keep:
        print(json.dumps(driver(py, "version")))
        return
    rows = []
    source = "locomo" if args.data else "synthetic"
    for n in args.sizes:
        with contextlib.ExitStack() as stack:
            if args.keep:
                base = args.keep.expanduser() / f"{source}-{n}"
            else:
                base = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="vs-bm-")))
            rows.append(run_size(n, args, py, base))
        print(f"  {n} sections done", file=sys.stderr, flush=True)
    sha = subprocess.run(["git", "-C", str(HERE), "rev-parse", "--short", "HEAD"], capture_output=True, text=True)
    dirty = subprocess.run(["git", "-C", str(HERE), "status", "--porcelain", "--", "../../mateclaw_mem"],
                           capture_output=True, text=True).stdout.strip()
    print(f"mateclaw-mem at {sha.stdout.strip() or '?'}{' + uncommitted changes in mateclaw_mem/' if dirty else ''};"
          f" {source} corpus; figures are medians of {args.rounds} interleaved rounds on a shared machine")
    print_table(rows)


if __name__ == "__main__":
    from _load import load_average  # scripts/bench/_load.py (this script's folder is on sys.path)
    main()
    print(load_average())
