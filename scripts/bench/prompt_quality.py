"""Does the prompt the daemon assembles hold what the assistant needs? Measured end to end.

    .venv/bin/python scripts/bench/prompt_quality.py --data ../shared/bench/locomo/locomo_dev.json
        [--conversations 0,1] [--half a|b] [--budget-chars N] [--json OUT] [--show-promoted]

Each LoCoMo conversation is replayed through a real daemon (`mateclaw-mem serve`, one fresh workspace
per conversation, rules mode, the shipped defaults otherwise) over HTTP, in date order: each session
is one conversation id, its messages posted as turns with their own timestamps (`timestamp`), taken
two at a time as (user, assistant) with the speaker's name in front ("Caroline: …", as the Add/Search
reference gets them); after each chat day a manual extraction of the day's sessions and the night's
dream (`asOf`: that day). Then every question of categories 1-4 is asked with
`POST /api/v1/memory/default/context {"query": question}` and the prompt (without the question) is
scored:

- exact: the normalised answer is a whole-word substring of the normalised prompt;
- loose: every content word of the answer is a word of the prompt;
- evidence: a run of 8 consecutive words of an evidence turn is in the prompt (the whole turn if
  shorter); "all ev.": of every evidence turn (multi-hop needs them all); temporal (category 2)
  "dated": an evidence run and, on the same line, the day it was said;
- text is lower-cased with non-word characters as spaces; tokens are chars / 4.

In the same run, the references: the last 20 turns alone; `/v1/aml/search` (the same messages added to
the same daemon) filled in rank order to the daemon's prompt length for that question; the full history.
`--half a|b` keeps the even / odd questions of each conversation: tune on one half, check the other.
`--via import` gives the daemon the same history as one JSONL `import-chats` instead (then each
day's extraction and dream, in date order): an imported history should score as the replayed one.
Also printed: lines written by extraction and dreaming, diary or archive text found in recall, the
prompt's size and its assembly time.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from datetime import datetime, timedelta
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _daemon import start_daemon

CLI = [sys.executable, "-m", "mateclaw_mem.cli.main"]
CATEGORIES = {1: "multi-hop", 2: "temporal", 3: "open-domain", 4: "single-hop"}
SHINGLE = 8
_STOP = ("a an the of to in on at for and or is was be by with from as it its that this i you he she they we my "
         "your his her their our me him them us")
STOP = frozenset(_STOP.split())
MONTHS = ["january", "february", "march", "april", "may", "june", "july", "august", "september", "october",
          "november", "december"]
CONFIG = """\
timezone: UTC
mate:
  memory:
    cooldown-minutes: 0
"""


def config(recall_chars: int | None) -> str:
    extra = f"    provider-prefetch-max-chars: {recall_chars}\n" if recall_chars is not None else ""
    return CONFIG + extra


def norm(text: str) -> str:
    return " ".join(re.sub(r"[^\w]+", " ", str(text).lower()).split())


def turn_text(t: dict) -> str:
    cap = str(t.get("blip_caption") or "").strip()
    body = t["text"] + (f" [shares image: {cap}]" if cap else "")
    return f"{t['speaker']}: {body}"


def parse_when(s: str) -> datetime:
    """LoCoMo's "1:56 pm on 8 May, 2023"."""
    return datetime.strptime(s.strip(), "%I:%M %p on %d %B, %Y")


def sessions(conv: dict) -> list[tuple[int, datetime, list[dict]]]:
    c = conv["conversation"]
    out = []
    for k, v in c.items():
        m = re.fullmatch(r"session_(\d+)", k)
        if m and isinstance(v, list) and v:
            out.append((int(m.group(1)), parse_when(c[f"{k}_date_time"]), v))
    return sorted(out, key=lambda x: x[1])


def shingle(words: list[str]) -> list[str]:
    if len(words) <= SHINGLE:
        return [" ".join(words)]
    return [" ".join(words[i:i + SHINGLE]) for i in range(len(words) - SHINGLE + 1)]


def date_forms(d: datetime) -> list[str]:
    return [norm(f"{d.day} {MONTHS[d.month - 1]} {d.year}"), norm(d.strftime("%Y-%m-%d"))]


class Scorer:
    def __init__(self, turns: dict[str, dict], said: dict[str, datetime]) -> None:
        self.turns, self.said = turns, said

    def score(self, q: dict, text: str) -> dict[str, bool]:
        p = f" {norm(text)} "
        ans = norm(q["answer"])
        words = set(p.split())
        content = [w for w in ans.split() if w not in STOP] or ans.split()
        found, dated = 0, 0
        lines = [f" {norm(x)} " for x in text.splitlines()]
        for e in q["evidence"]:
            sh = shingle(norm(turn_text(self.turns[e])).split())
            hit_lines = [ln for ln in lines if any(f" {s} " in ln for s in sh)]
            if hit_lines:
                found += 1
                forms = date_forms(self.said[e])
                dated += any(f" {f} " in ln for ln in hit_lines for f in forms)
        return {"exact": bool(ans) and f" {ans} " in p, "loose": bool(content) and all(w in words for w in content),
                "evidence": found > 0, "all_evidence": found == len(q["evidence"]), "dated": dated > 0}


def questions(conv: dict, turns: dict, half: str | None) -> list[dict]:
    out = []
    for i, q in enumerate(conv["qa"]):
        if q.get("category") not in CATEGORIES or "answer" not in q:
            continue
        ev = [e for e in q.get("evidence") or [] if e in turns]
        if not ev:
            continue
        if half and (i % 2 == 0) != (half == "a"):
            continue
        out.append({**q, "evidence": ev})
    return out


def replay(conv: dict, base: str, client: httpx.Client) -> dict:
    """Post every session as timestamped turns; after each chat day, extraction and that night's dream."""
    api = f"{base}/api/v1/memory/default"
    stats = {"turns": 0, "extractions_changed": 0, "dreams_done": 0, "promoted": 0}
    days: dict[str, list[tuple[int, datetime, list[dict]]]] = defaultdict(list)
    for n, when, msgs in sessions(conv):
        days[when.date().isoformat()].append((n, when, msgs))
    for day in sorted(days):
        for n, when, msgs in days[day]:
            cid = f"session-{n}"
            aml = []
            for i in range(0, len(msgs), 2):
                ts = when + timedelta(seconds=30 * i)
                body = {"user": turn_text(msgs[i]), "timestamp": ts.isoformat()}
                if i + 1 < len(msgs):
                    body["assistant"] = turn_text(msgs[i + 1])
                r = client.post(f"{api}/conversations/{cid}/turns", json=body)
                r.raise_for_status()
                stats["turns"] += 1
            for i, t in enumerate(msgs):
                aml.append({"role": "user", "content": turn_text(t),
                            "timestamp": int((when + timedelta(seconds=30 * i)).timestamp() * 1000)})
            r = client.post(f"{base}/v1/aml/add", json={"request_id": f"r-{n}", "user_id": "bench",
                                                        "session_id": cid, "messages": aml})
            r.raise_for_status()
            r = client.post(f"{api}/summarize/{cid}", timeout=120)
            if r.status_code == 200 and (r.json().get("files_changed") or []):
                stats["extractions_changed"] += 1
            elif r.status_code != 200:
                stats.setdefault("extraction_answers", []).append(r.status_code)
        r = client.post(f"{api}/emergence", json={"asOf": day}, timeout=120)
        if r.status_code == 200:
            out = r.json()
            stats["dreams_done"] += out.get("status") == "done"
            stats["promoted"] += len(out.get("promoted") or [])
            stats.setdefault("promoted_lines", []).extend(f"[{day}] {p}" for p in out.get("promoted") or [])
    return stats


def import_jsonl(conv: dict, base: str, client: httpx.Client) -> dict:
    """The same history as `replay`, imported in one go as JSONL (`import-chats`), then each chat
    day's extraction and night, in date order: what a new user with an exported history gets."""
    api = f"{base}/api/v1/memory/default"
    lines, days = [], defaultdict(list)
    for n, when, msgs in sessions(conv):
        days[when.date().isoformat()].append(f"session-{n}")
        for i, t in enumerate(msgs):
            ts = when + timedelta(seconds=30 * i)
            lines.append(json.dumps({"role": "user" if i % 2 == 0 else "assistant", "content": turn_text(t),
                                     "timestamp": ts.isoformat() + "Z", "conversation": f"session-{n}"}))
    r = client.post(f"{api}/import-chats", params={"format": "jsonl"}, content="\n".join(lines).encode(),
                    timeout=300)
    r.raise_for_status()
    stats = {"turns": len(lines), "extractions_changed": 0, "dreams_done": 0, "promoted": 0}
    for day in sorted(days):
        for cid in days[day]:
            r = client.post(f"{api}/summarize/jsonl:{cid}", timeout=120)
            if r.status_code == 200 and (r.json().get("files_changed") or []):
                stats["extractions_changed"] += 1
        r = client.post(f"{api}/emergence", json={"asOf": day}, timeout=120)
        if r.status_code == 200:
            stats["dreams_done"] += r.json().get("status") == "done"
            stats["promoted"] += len(r.json().get("promoted") or [])
            stats.setdefault("promoted_lines", []).extend(f"[{day}] {p}" for p in r.json().get("promoted") or [])
    for n, when, msgs in sessions(conv):  # the Add/Search reference, as in `replay`
        aml = [{"role": "user", "content": turn_text(t),
                "timestamp": int((when + timedelta(seconds=30 * i)).timestamp() * 1000)} for i, t in enumerate(msgs)]
        client.post(f"{base}/v1/aml/add", json={"request_id": f"r-{n}", "user_id": "bench",
                                                "session_id": f"session-{n}", "messages": aml}).raise_for_status()
    return stats


def prompt_text(ctx: dict, question: str) -> str:
    """The prompt without the question: every message but the last (the question itself)."""
    msgs = ctx["messages"]
    parts = [str(m.get("content") or "") for m in msgs[:-1]]
    last = str(msgs[-1].get("content") or "") if msgs else ""
    if last.strip() != question.strip():
        parts.append(last.replace(question, ""))
    return "\n".join(parts)


RECALL_LEAKS = re.compile(r"Reason: no fact recurred|Kept for next time|Looked at: |"
                          r"## \d{4}-\d{2}-\d{2} \d{2}:\d{2} Dream")


def run_conversation(conv: dict, half: str | None, root: Path, recall_chars: int | None,
                     via: str = "turns") -> list[dict]:
    turns: dict[str, dict] = {}
    said: dict[str, datetime] = {}
    for _, when, msgs in sessions(conv):
        for i, t in enumerate(msgs):
            turns[t["dia_id"]] = t
            said[t["dia_id"]] = when + timedelta(seconds=30 * i)
    ws = root / conv["sample_id"]
    ws.mkdir()
    (ws / "mateclaw.yaml").write_text(config(recall_chars), encoding="utf-8")
    env = {**os.environ, "MATECLAW_CONFIG": str(ws / "mateclaw.yaml")}
    proc, url = start_daemon([*CLI, "--workspace", str(ws / "w"), "serve", "--port", "0"], ws / "serve.log",
                             env=env, cwd=ws, until_ready=True)
    if url is None:
        sys.exit(f"the daemon did not start:\n{(ws / 'serve.log').read_text()}")
    rows = []
    try:
        with httpx.Client(timeout=60) as client:
            t0 = time.monotonic()
            stats = replay(conv, url, client) if via == "turns" else import_jsonl(conv, url, client)
            replay_s = time.monotonic() - t0
            order = sorted(turns, key=lambda d: said[d])
            history = [f"[{said[d].day} {said[d]:%B %Y}] {turn_text(turns[d])}" for d in order]
            full = "\n".join(history)
            last20 = "\n".join(history[-20:])
            scorer = Scorer(turns, said)
            for rel in ("PROFILE.md", "MEMORY.md"):
                lines = (ws / "w" / "default" / rel).read_text(encoding="utf-8").splitlines()
                stats[f"{rel[:-3].lower()}_lines"] = sum(x.startswith("- ") for x in lines)
            for q in questions(conv, turns, half):
                t1 = time.perf_counter()
                r = client.post(f"{url}/api/v1/memory/default/context", json={"query": q["question"]})
                ms = (time.perf_counter() - t1) * 1000
                r.raise_for_status()
                ctx = r.json()
                text = prompt_text(ctx, q["question"])
                recalled = next((m for m in (ctx.get("recalled") or {}).get("items", [])), None)
                recall_text = "\n".join(i["text"] for i in (ctx.get("recalled") or {}).get("items", []))
                s = client.post(f"{url}/v1/aml/search", json={"query": q["question"], "user_id": "bench", "top_k": 60})
                s.raise_for_status()
                filled, room = [], len(text)
                for item in s.json()["data"]:
                    if room <= 0:
                        break
                    filled.append(item["content"][:room])
                    room -= len(item["content"]) + 1
                rows.append({
                    "conv": conv["sample_id"], "category": q["category"], "ms": ms, "chars": len(text),
                    "leak": bool(RECALL_LEAKS.search(recall_text)), "has_recall": recalled is not None,
                    "daemon": scorer.score(q, text), "last20": scorer.score(q, last20),
                    "search": scorer.score(q, "\n".join(filled)), "full": scorer.score(q, full),
                    "full_chars": len(full), "stats": stats, "replay_s": replay_s,
                })
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
    return rows


def report(rows: list[dict], show_promoted: bool = False) -> None:
    load = os.getloadavg()
    print(f"load average {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}; {len(rows)} questions")
    refs = [("daemon", "the daemon's prompt"), ("last20", "last 20 turns only"),
            ("search", "/v1/aml/search filled to the prompt's length"), ("full", "the full history")]
    print(f"{'context':48} {'exact':>6} {'loose':>6} {'evid.':>6} {'all ev.':>7} {'dated*':>6}  tokens p50")
    for key, name in refs:
        def mean(m: str, sub: list[dict] = rows, k: str = key) -> float:
            return sum(r[k][m] for r in sub) / max(1, len(sub))
        temporal = [r for r in rows if r["category"] == 2]
        size = {"daemon": statistics.median(r["chars"] for r in rows) / 4,
                "search": statistics.median(r["chars"] for r in rows) / 4,
                "full": statistics.median(r["full_chars"] for r in rows) / 4, "last20": float("nan")}[key]
        print(f"{name:48} {mean('exact'):6.3f} {mean('loose'):6.3f} {mean('evidence'):6.3f} "
              f"{mean('all_evidence'):7.3f} {mean('dated', temporal):6.3f}  {size:,.0f}")
    print("* dated: temporal questions whose evidence and the day it was said share a line")
    print("\nthe daemon's prompt by category (exact / loose / evidence):")
    for cat, name in CATEGORIES.items():
        sub = [r for r in rows if r["category"] == cat]
        if sub:
            e, lo, ev = (sum(r["daemon"][m] for r in sub) / len(sub) for m in ("exact", "loose", "evidence"))
            print(f"  {name:12} n={len(sub):4}  {e:.3f} / {lo:.3f} / {ev:.3f}")
    ms = sorted(r["ms"] for r in rows)
    print(f"\nassembly over HTTP: p50 {statistics.median(ms):.1f} ms, p95 {ms[int(len(ms) * 0.95)]:.1f} ms")
    print(f"diary or archive text in a recalled block: {sum(r['leak'] for r in rows)} of {len(rows)} prompts")
    seen = {}
    for r in rows:
        seen[r["conv"]] = (r["stats"], r["replay_s"])
    for conv, (st, secs) in seen.items():
        print(f"  {conv}: {st['turns']} turns replayed in {secs:.0f} s; extraction runs that wrote: "
              f"{st['extractions_changed']}; PROFILE.md lines {st['profile_lines']}, MEMORY.md lines "
              f"{st['memory_lines']}; dreams done {st['dreams_done']}, lines promoted {st['promoted']}")
        if show_promoted:
            print("".join(f"    {line}\n" for line in st.get("promoted_lines", [])), end="")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", required=True, type=Path, help="a LoCoMo JSON file (a list of conversations)")
    ap.add_argument("--conversations", help="comma-separated indexes (default: all)")
    ap.add_argument("--half", choices=["a", "b"], help="even (a) or odd (b) questions of each conversation")
    ap.add_argument("--json", type=Path, help="write every row here")
    ap.add_argument("--via", choices=["turns", "import"], default="turns",
                    help="turns: replayed turn by turn (default); import: one JSONL import-chats, then each day")
    ap.add_argument("--recall-chars", type=int,
                    help="mate.memory.provider-prefetch-max-chars (default: the shipped one)")
    ap.add_argument("--show-promoted", action="store_true", help="print every line dreaming promoted, by night")
    args = ap.parse_args()
    data = json.loads(args.data.read_text(encoding="utf-8"))
    if args.conversations:
        data = [data[int(i)] for i in args.conversations.split(",")]
    rows: list[dict] = []
    with tempfile.TemporaryDirectory(prefix="prompt-quality-") as tmp:
        for conv in data:
            rows += run_conversation(conv, args.half, Path(tmp), args.recall_chars, args.via)
            print(f"{conv['sample_id']}: {len(rows)} questions so far", file=sys.stderr)
    report(rows, args.show_promoted)
    if args.json:
        args.json.write_text(json.dumps(rows), encoding="utf-8")


if __name__ == "__main__":
    main()
