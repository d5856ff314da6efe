"""Hand edits against every machine writer: does a person's save ever lose a word? (prints figures)

    python scripts/bench/hand_edits.py [--trials 1200] [--seed 13] [--writers extraction,http,...] [--keep]

Each trial gets a fresh agent folder (a copy of a prepared template, no history) in one temp
workspace with real services: rules mode, real files, real SQLite, a real uvicorn server on loopback
for the HTTP face, the real MCP server behind the SDK's in-memory client, and the real CLI as a
subprocess. One machine writer runs on it while a person saves one of the files that writer
touches, taking no lock, at a random moment:

- save styles: `plain` (`open(path, "w").write(text)`), `plain-slow` (the same, but the write comes
  0-2 ms after the truncating open, as with a shell's `cmd > file`), `rename` (an editor's temp file,
  optional fsync, `os.rename` over the file);
- the person's new text adds one unique marker line, inside an existing `##` section (after its
  heading or at its end) or in a new section; half the time it is based on the file as it was before
  the machine started (an editor that loaded it earlier), otherwise as read just before saving;
- the save moment is drawn from 0 to 1.3x the writer's running median duration (typically 0-20 ms
  in-process; 0.4x-1.2x for the CLI, whose write comes after start-up), so a good share of the saves
  land inside the machine's write; the `during` column counts those.

Writers (and the files the person saves): `extraction` (a logged conversation, `extract_now`:
PROFILE.md, MEMORY.md, today's note), `dream` (a week of recurring notes: MEMORY.md, DREAMS.md),
`remember` (structured entries: the person adds a line under an entry, or a new entry), `http-write`
and `http-edit` (PUT /file with or without expected_sha, POST /file/edit), `mcp-str_replace` and
`mcp-insert`, `cli-write` (with or without --expect) and `cli-edit`, `ceiling` (MEMORY.md a few
characters under its 8,000-char ceiling; extraction or the write_memory tool pushes it over).

Outcome of a trial, for the file the person saved:
- preserved (in file): the marker line is in the final file (or in the archive a ceiling cut it to);
- preserved (history only): not in the file, but the person's exact saved bytes are a kept version;
- lost: neither;
- torn (counted apart, a torn trial is also preserved or lost): the final file is not a whole version:
  unreadable, empty, frontmatter or title line gone, or a partial marker line.
`machine wrote` counts trials in which the store wrote the person's file at all; `refused` counts
machine operations that ended in an error (a conflict, a 409): refusing is a correct answer.
Exit code 0 always.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import logging
import os
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter, defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from _services import bench_services  # noqa: E402  (this script's folder is on sys.path)

from mateclaw_mem.clock import ManualClock  # noqa: E402
from mateclaw_mem.markdown import frontmatter  # noqa: E402
from tests.support.server import ApiServer  # noqa: E402

TZ = ZoneInfo("Europe/Berlin")
NOW = datetime(2026, 12, 1, 9, 0, tzinfo=TZ)
TODAY = f"memory/{NOW:%Y-%m-%d}.md"
# The CLI as `python -m` with this checkout first on PYTHONPATH: the same code as the in-process writers
# (the `mateclaw-mem` entry point would import whatever checkout the venv was installed from).
CLI = [sys.executable, "-m", "mateclaw_mem.cli.main"]
STYLES = ("plain", "plain-slow", "rename")

# -- templates -------------------------------------------------------------------------------------

PROFILE = """---
enabled: true
sort_order: 2
---
# PROFILE.md — about the person

Stable facts about the person I work with, one `- key: value` per line.

## Profile

- name: Dana Whitfield
- employer: Northwind Labs
- likes: tea, trains

## Notes

- Prefers to be called Dana
"""

MEMORY = """---
enabled: true
sort_order: 3
---
# MEMORY.md — long-term memory

## Work

- Works on Project Atlas with the platform team
- Standup is at 10:00 every weekday
- Uses Python 3.12 and uv

## Preferences

- Prefers short answers
- Likes concrete code examples
- 喜欢喝绿茶
"""

DAILY = f"""---
enabled: false
---
# {NOW:%Y-%m-%d}

## 08:10 Morning

- Reviewed the Atlas deadline with Priya
- Moved the retro to Thursday
"""

# A week of notes in which four facts recur on several days (as in tests/test_dreaming.py), so a
# rules-mode dream promotes them into MEMORY.md and writes its DREAMS.md entry.
WEEK: list[tuple[datetime, str, str]] = [
    (datetime(2026, 11, 25, 9, 30, tzinfo=TZ), "Planning",
     "- Project Atlas deadline: December 15\n- User prefers dark mode in the editor"),
    (datetime(2026, 11, 26, 8, 10, tzinfo=TZ), "周末计划",
     "- 用户每周日早上去公园跑步\n- User asked about the weather in Lisbon"),
    (datetime(2026, 11, 27, 10, 0, tzinfo=TZ), "Standup", "- Project Atlas deadline: December 15\n- 用户对花生过敏"),
    (datetime(2026, 11, 28, 14, 2, tzinfo=TZ), "Tools", "- The user prefers dark mode in editors"),
    (datetime(2026, 11, 29, 9, 0, tzinfo=TZ), "跑步", "- 用户周日早上在公园跑步"),
    (datetime(2026, 11, 30, 21, 0, tzinfo=TZ), "Work",
     "- Project Atlas deadline: December 15\n- 提醒：用户对花生过敏"),
]

ENTRIES = [("editor", "Uses Neovim with a dark theme."), ("coffee", "Drinks a flat white before standup."),
           ("city", "Lives in Rotterdam, cycles to work.")]

# One line per file that machine edits (HTTP, MCP, CLI) find and change; a person's save never alters it.
ANCHORS = {"MEMORY.md": "- Standup is at 10:00 every weekday", "PROFILE.md": "- employer: Northwind Labs",
           TODAY: "- Reviewed the Atlas deadline with Priya"}


def near_ceiling_memory(cap: int) -> str:
    """MEMORY.md of machine sections whose body is 50 characters under `cap`."""
    head = "---\nenabled: true\nsort_order: 3\n---\n"
    body = "# MEMORY.md — long-term memory\n"
    k = 0
    while True:
        k += 1
        section = f"\n## Topic {k}\n\n" + "".join(
            f"- Fact {k}.{j}: the platform team keeps notes about service {k * 7 + j}\n" for j in range(4))
        if len(body) + len(section) > cap - 200:
            break
        body += section
    padding = "\n## Padding\n\n- "
    body += padding + "x" * (cap - 50 - len(body) - len(padding) - 1) + "\n"
    return head + body


# -- the person -----------------------------------------------------------------------------------


@dataclass
class Edit:
    """Where the person puts the marker: in section `section` (after its heading or at its end), or
    a new section (at the end, or before section `section`)."""

    mode: str  # "in-section" | "new-section"
    section: int
    at_end: bool


def add_marker(text: str, edit: Edit, marker: str, token: str) -> str:
    lines = text.split("\n")
    block, _ = frontmatter.split(text)
    first_body = block.count("\n")
    heads = [i for i in range(first_body, len(lines)) if lines[i].startswith("## ")]
    if edit.mode == "in-section" and heads:
        h = heads[edit.section % len(heads)]
        if edit.at_end:
            nxt = next((i for i in heads if i > h), len(lines))
            at = nxt
            while at - 1 > h and lines[at - 1].strip() == "":
                at -= 1
            lines[at:at] = [marker]
        else:
            lines[h + 1:h + 1] = [marker]
        return "\n".join(lines)
    section = [f"## Hand note {token}", "", marker, ""]
    if heads and not edit.at_end:
        h = heads[edit.section % len(heads)]
        lines[h:h] = section
        return "\n".join(lines)
    return text.rstrip("\n") + "\n\n" + "\n".join(section)


@dataclass
class Save:
    data: bytes = b""
    at: float = 0.0  # perf_counter when the new content became visible (rename / write)
    error: str = ""


def person(path: Path, style: str, edit: Edit, marker: str, token: str, *, early: bool, start: threading.Event,
           t0: list[float], delay: float, rng: random.Random, out: Save) -> None:
    try:
        loaded = path.read_text(encoding="utf-8") if early else None
        start.wait()
        wait = t0[0] + delay - time.perf_counter()
        if wait > 0:
            time.sleep(wait)
        if loaded is None:
            loaded = path.read_text(encoding="utf-8")
        text = add_marker(loaded, edit, marker, token)
        data = text.encode("utf-8")
        out.data = data
        if style == "rename":
            tmp = path.with_name(f".{path.name}.{token}.swp")
            with open(tmp, "wb") as fh:
                fh.write(data)
                if rng.random() < 0.5:
                    fh.flush()
                    os.fsync(fh.fileno())
            os.rename(tmp, path)
            out.at = time.perf_counter()
        else:
            with open(path, "wb") as fh:  # truncates: no lock, no temp file, exactly like a plain editor save
                if style == "plain-slow":
                    time.sleep(rng.uniform(0, 0.002))
                fh.write(data)
                out.at = time.perf_counter()
    except Exception as exc:  # a person's save failing is a finding, not a crash of the bench
        out.error = f"{type(exc).__name__}: {exc}"


# -- the bench ------------------------------------------------------------------------------------


@dataclass
class Trial:
    index: int
    writer: str
    style: str
    rel: str
    edit: Edit
    early: bool
    frac: float  # the save moment as a fraction of the writer's median duration
    variant: str = ""
    rng_seed: int = 0


@dataclass
class Result:
    trial: Trial
    outcome: str = ""  # file | history | lost
    torn: bool = False
    torn_why: str = ""
    during: bool = False
    machine_wrote: bool = False
    refused: str = ""
    duration: float = 0.0
    save_at: float = 0.0  # save moment, seconds after the machine started
    person_error: str = ""


@dataclass
class Writer:
    name: str
    template: str
    files: tuple[str, ...]
    weight: float
    run: Callable[[Bench, str, Trial, random.Random], Callable[[], str]]  # prepare -> op returning an error or ""
    subprocess: bool = False
    durations: list[float] = field(default_factory=list)

    def median(self) -> float:
        if not self.durations:
            return 0.6 if self.subprocess else 0.015
        return statistics.median(self.durations[-40:])


class Bench:
    def __init__(self, root: Path) -> None:
        self.root = root
        self.clock = ManualClock(NOW)
        # The lifecycle's writers too: facts (a person's edit of a fact) and forget.
        self.services = bench_services(root, self.clock, config="mate:\n  memory:\n    fact:\n"
                                       "      projection-enabled: true\n      forget-enabled: true\n")
        self.store = self.services.store
        self.ws = self.store.root
        if self.services.mode != "rules":
            raise SystemExit("a model is configured in the environment; this bench measures rules mode")
        from mateclaw_mem.api.app import create_app

        self.api = ApiServer(create_app(self.services, mcp=False)).start()
        import httpx

        self.http = httpx.Client(base_url=self.api.url, timeout=30)
        log_module = importlib.import_module(type(self.services.log).__module__)
        self.NewMessage = log_module.NewMessage
        self.env = {k: v for k, v in os.environ.items() if not k.startswith("MATECLAW_")}
        self.env["PYTHONPATH"] = os.pathsep.join([str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])])
        self._templates()

    def close(self) -> None:
        self.http.close()
        self.api.stop()
        self.services.close()

    # templates: written once through the store, copied per trial
    def _templates(self) -> None:
        s = self.store
        for name, memory in (("tpl-ext", MEMORY), ("tpl-ceil", near_ceiling_memory(s.ceiling_for("MEMORY.md")))):
            s.ensure_agent(name)
            s.write(name, "PROFILE.md", PROFILE, expected_sha=None, actor="person")
            s.write(name, "MEMORY.md", memory, expected_sha=None, actor="person")
            s.write(name, TODAY, DAILY, expected_sha=None, actor="person")
        s.ensure_agent("tpl-dream")
        s.write("tpl-dream", "MEMORY.md", MEMORY, expected_sha=None, actor="person")
        for when, title, body in WEEK:
            s.append_daily("tpl-dream", title, body, actor="extraction", when=when)
        # A DREAMS.md with one entry (from a dream on a copy), under a MEMORY.md the next dream still changes.
        self.copy("tpl-dream", "tpl-dream-warm")
        first = self.services.dreaming.dream("tpl-dream-warm")
        if first.status != "done":
            raise SystemExit(f"the template dream did not change MEMORY.md ({first.status}: {first.reason})")
        shutil.copy(self.ws / "tpl-dream-warm" / "DREAMS.md", self.ws / "tpl-dream" / "DREAMS.md")
        s.ensure_agent("tpl-struct")
        for key, text in ENTRIES:
            self.services.structured.remember("tpl-struct", "user", key, text, actor="extraction", source="chat")
        self.services.structured.remember("tpl-struct", "project", "atlas", "Deadline December 15.",
                                          actor="extraction", source="chat")

    def copy(self, template: str, agent: str) -> None:
        shutil.copytree(self.ws / template, self.ws / agent)

    def log_turn(self, agent: str, conv: str, user: str) -> None:
        msgs = [self.NewMessage("user", user), self.NewMessage("assistant", "Noted, I will keep that in mind.")]
        self.services.log.append(agent, conv, msgs, now_ms=int(self.clock.now().timestamp() * 1000))

    def cli(self, *args: str) -> str:
        proc = subprocess.run([*CLI, *args, "--workspace", str(self.ws)], cwd=self.root, env=self.env,
                              capture_output=True, text=True, timeout=120)
        if proc.returncode != 0:
            return f"exit {proc.returncode}: {(proc.stderr or proc.stdout).strip().splitlines()[-1:]}"
        return ""

    def mcp_call(self, agent: str, tool: str, args: dict[str, Any]) -> Callable[[], str]:
        import anyio
        from mcp import Client

        from mateclaw_mem.mcp.server import build_server

        server = build_server(self.services, agent)

        def op() -> str:
            async def main() -> str:
                async with Client(server, read_timeout_seconds=60) as client:
                    result = await client.call_tool(tool, args)
                    bad = getattr(result, "is_error", None) or getattr(result, "isError", False)
                    text = " ".join(getattr(c, "text", "") for c in result.content)
                    return f"tool error: {text[:200]}" if bad else ""

            return anyio.run(main)

        return op


def _err(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {getattr(exc, 'message', None) or exc}"[:200]


# -- the machine writers ----------------------------------------------------------------------------


def w_extraction(b: Bench, agent: str, t: Trial, rng: random.Random) -> Callable[[], str]:
    conv = f"c{t.index}"
    b.log_turn(agent, conv, f"My name is Dana Whitfield-{t.index}. I live in Porto. "
                            f"Remember that the staging cluster is called kiwi-{t.index}.")

    def op() -> str:
        out = b.services.extraction.extract_now(agent, conv)
        return f"{out.error_kind}: {out.error}" if out.outcome == "error" else ""

    return op


def w_dream(b: Bench, agent: str, t: Trial, rng: random.Random) -> Callable[[], str]:
    def op() -> str:
        out = b.services.dreaming.dream(agent)
        return "" if out.status in ("done", "nothing_to_do") else f"{out.status}: {out.reason}"[:200]

    return op


def w_remember(b: Bench, agent: str, t: Trial, rng: random.Random) -> Callable[[], str]:
    # The same entry the person adds a line under, another entry, or a new one.
    keys = [k for k, _ in ENTRIES] if t.rel == "structured/user.md" else ["atlas"]
    pick = rng.random()
    if pick < 0.5 and t.edit.mode == "in-section":
        key = keys[t.edit.section % len(keys)]
    elif pick < 0.75:
        key = rng.choice(keys)
    else:
        key = f"new-{t.index}"
    type_ = "user" if t.rel == "structured/user.md" else "project"
    actor = rng.choice(["extraction", "tool", "mcp"])
    t.variant = "same entry" if pick < 0.5 and t.edit.mode == "in-section" else ("an entry" if pick < 0.75 else "new")

    def op() -> str:
        b.services.structured.remember(agent, type_, key, f"Updated by a machine in trial {t.index}.", actor=actor,
                                       source="chat")
        return ""

    return op


def w_http_write(b: Bench, agent: str, t: Trial, rng: random.Random) -> Callable[[], str]:
    cas = rng.random() < 0.5
    t.variant = "expected_sha" if cas else "no expected_sha"
    base = f"/api/v1/agents/{agent}/workspace/memory"

    def op() -> str:
        got = b.http.get(base + "/file", params={"path": t.rel})
        if got.status_code != 200:
            return f"GET {got.status_code}"
        cur = got.json()
        body: dict[str, Any] = {"path": t.rel, "content": cur["content"].rstrip("\n") + f"\n- machine {t.index}\n"}
        if cas:
            body["expected_sha"] = cur["sha"]
        r = b.http.put(base + "/file", json=body)
        return "" if r.status_code == 200 else f"PUT {r.status_code}: {r.text[:120]}"

    return op


def w_http_edit(b: Bench, agent: str, t: Trial, rng: random.Random) -> Callable[[], str]:
    base = f"/api/v1/agents/{agent}/workspace/memory"
    old = ANCHORS[t.rel]

    def op() -> str:
        r = b.http.post(base + "/file/edit", json={"path": t.rel, "old": old, "new": old + f" (machine {t.index})"})
        return "" if r.status_code == 200 else f"POST {r.status_code}: {r.text[:120]}"

    return op


def w_mcp_replace(b: Bench, agent: str, t: Trial, rng: random.Random) -> Callable[[], str]:
    old = ANCHORS[t.rel]
    return b.mcp_call(agent, "str_replace", {"path": f"/memories/{t.rel}", "old_str": old,
                                             "new_str": old + f" (machine {t.index})"})


def w_mcp_insert(b: Bench, agent: str, t: Trial, rng: random.Random) -> Callable[[], str]:
    text = b.store.read(agent, t.rel).text
    head_lines = frontmatter.split(text)[0].count("\n")
    body_lines = frontmatter.body(text).count("\n")
    # After the frontmatter and within the body's length: valid whether `insert` numbers the file's
    # lines or the body's.
    line = rng.randint(head_lines + 1, max(head_lines + 1, body_lines))
    return b.mcp_call(agent, "insert", {"path": f"/memories/{t.rel}", "insert_line": line,
                                        "insert_text": f"- machine {t.index}"})


def w_cli_write(b: Bench, agent: str, t: Trial, rng: random.Random) -> Callable[[], str]:
    cas = rng.random() < 0.5
    t.variant = "--expect" if cas else "no --expect"

    def op() -> str:
        # The CLI user read the file a moment ago (as `cat --json` would give it) and writes it back.
        snap = b.store.read(agent, t.rel)
        args = ["write", agent, t.rel, "--text", snap.text.rstrip("\n") + f"\n- machine {t.index}\n"]
        if cas:
            args += ["--expect", snap.sha]
        return b.cli(*args)

    return op


def w_cli_edit(b: Bench, agent: str, t: Trial, rng: random.Random) -> Callable[[], str]:
    old = ANCHORS[t.rel]
    return lambda: b.cli("edit", agent, t.rel, "--old", old, "--new", old + f" (machine {t.index})")


def w_ceiling(b: Bench, agent: str, t: Trial, rng: random.Random) -> Callable[[], str]:
    if rng.random() < 0.5:
        t.variant = "extraction"
        return w_extraction(b, agent, t, rng)
    t.variant = "write_memory tool"
    note = f"## Tool note {t.index}\n\n- The agent noted that build {t.index} needs the staging cluster\n"

    def op() -> str:
        b.services.tools.write_memory(agent, "MEMORY.md", note, strategy="append", actor="tool")
        return ""

    return op


def _claims(b: Bench, agent: str, rel: str) -> list[str]:
    body = frontmatter.body(b.store.path(agent, rel).read_text(encoding="utf-8"))
    return [ln[2:].strip() for ln in body.splitlines() if ln.startswith("- ") and len(ln.split()) >= 4]


def w_forget(b: Bench, agent: str, t: Trial, rng: random.Random) -> Callable[[], str]:
    # "forget that …": one of the file's lines goes, from this file and every other place.
    claim = rng.choice(_claims(b, agent, t.rel))
    now = rng.random() < 0.5
    t.variant = "forget --now" if now else "forget"

    def op() -> str:
        b.services.forget.forget(agent, None, claim, actor="bench", now=now)
        return ""

    return op


def w_fact_edit(b: Bench, agent: str, t: Trial, rng: random.Random) -> Callable[[], str]:
    # The Memory Browser's / card's "Edit" of a fact: one line rewritten through the writer (CAS).
    b.services.facts.refresh(agent, None, t.rel)  # the copied template was never ingested
    facts = b.services.facts.list(agent, None, file=t.rel)
    fact = rng.choice(facts)
    t.variant = "fact edit"

    def op() -> str:
        try:
            b.services.facts.edit(agent, None, fact.id, f"{fact.text} (checked in trial {t.index})", actor="api")
        except Exception as exc:  # a conflict with the person's save is a refusal, which is allowed
            return _err(exc)
        return ""

    return op


EXT_FILES = ("PROFILE.md", "MEMORY.md", TODAY)


def writers() -> list[Writer]:
    return [
        Writer("extraction", "tpl-ext", EXT_FILES, 12, w_extraction),
        Writer("dream", "tpl-dream", ("MEMORY.md", "DREAMS.md"), 11, w_dream),
        Writer("remember", "tpl-struct", ("structured/user.md", "structured/project.md"), 10, w_remember),
        Writer("http-write", "tpl-ext", EXT_FILES, 8, w_http_write),
        Writer("http-edit", "tpl-ext", EXT_FILES, 8, w_http_edit),
        Writer("mcp-str_replace", "tpl-ext", EXT_FILES, 8, w_mcp_replace),
        Writer("mcp-insert", "tpl-ext", EXT_FILES, 8, w_mcp_insert),
        Writer("cli-write", "tpl-ext", EXT_FILES, 2.5, w_cli_write, subprocess=True),
        Writer("cli-edit", "tpl-ext", EXT_FILES, 2.5, w_cli_edit, subprocess=True),
        Writer("ceiling", "tpl-ceil", ("MEMORY.md",), 12, w_ceiling),
        Writer("forget", "tpl-ext", EXT_FILES, 8, w_forget),
        Writer("fact-edit", "tpl-ext", ("PROFILE.md", "MEMORY.md"), 8, w_fact_edit),
    ]


def plan(trials: int, chosen: list[Writer], seed: int) -> list[Trial]:
    rng = random.Random(seed)
    total = sum(w.weight for w in chosen)
    counts = [max(1, round(trials * w.weight / total)) for w in chosen]
    counts[-1] = max(1, counts[-1] + trials - sum(counts))
    names = [w.name for w, n in zip(chosen, counts, strict=True) for _ in range(n)]
    rng.shuffle(names)
    by_name = {w.name: w for w in chosen}
    out = []
    for i, name in enumerate(names[:trials]):
        w = by_name[name]
        rel = rng.choice(w.files)
        if rel.startswith("structured/"):
            edit = Edit("in-section" if rng.random() < 0.8 else "new-section", rng.randrange(8), True)
        else:
            edit = Edit(rng.choice(["in-section", "in-section", "new-section"]), rng.randrange(8), rng.random() < 0.5)
        lo, hi = (0.4, 1.2) if w.subprocess else (0.0, 1.3)
        out.append(Trial(i, name, rng.choice(STYLES), rel, edit, rng.random() < 0.5, rng.uniform(lo, hi),
                         rng_seed=rng.randrange(1 << 30)))
    return out


# -- one trial ------------------------------------------------------------------------------------


def run_trial(b: Bench, w: Writer, t: Trial) -> Result:
    rng = random.Random(t.rng_seed)
    agent = f"t{t.index:05d}"
    b.copy(w.template, agent)
    path = b.store.path(agent, t.rel)
    before = path.read_text(encoding="utf-8")
    op = w.run(b, agent, t, rng)
    token = f"HAND-{t.index:05d}-{rng.randrange(16**6):06x}"
    marker = f"- {token} the person typed this by hand"
    delay = t.frac * w.median()
    start, t0, save = threading.Event(), [0.0], Save()
    th = threading.Thread(target=person, args=(path, t.style, t.edit, marker, token), daemon=True,
                          kwargs={"early": t.early, "start": start, "t0": t0, "delay": delay,
                                  "rng": random.Random(rng.random()), "out": save})
    th.start()
    res = Result(t)
    t0[0] = time.perf_counter()
    start.set()
    try:
        res.refused = op()
    except Exception as exc:  # a machine operation refusing (conflict, busy) is a correct answer
        res.refused = _err(exc)
    end = time.perf_counter()
    th.join(30)
    res.duration = end - t0[0]
    w.durations.append(res.duration)
    res.save_at = save.at - t0[0] if save.at else -1.0
    res.during = bool(save.at) and t0[0] <= save.at <= end
    res.person_error = save.error
    classify(b, agent, t, res, path, before, save.data, marker, token)
    return res


def classify(b: Bench, agent: str, t: Trial, res: Result, path: Path, before: str, saved: bytes, marker: str,
             token: str) -> None:
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        data = None
    text = ""
    if data is None:
        res.torn, res.torn_why = True, "file missing"
    else:
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError:
            res.torn, res.torn_why = True, "not UTF-8"
    if not res.torn:
        title = next((ln for ln in frontmatter.body(before).splitlines() if ln.startswith("# ")), None)
        had_block = bool(frontmatter.split(before)[0])
        if not text.strip():
            res.torn, res.torn_why = True, "empty"
        elif had_block and (not frontmatter.split(text)[0] or frontmatter.parse(text).error):
            res.torn, res.torn_why = True, "frontmatter lost or broken"
        elif title and title not in text.splitlines():
            res.torn, res.torn_why = True, "title line gone"
        elif token in text and marker not in text.splitlines():
            res.torn, res.torn_why = True, "partial marker line"
    key = b.store.agent_key(agent)
    try:
        versions = b.store.history(agent, t.rel)
    except Exception:
        versions = []
    res.machine_wrote = bool(versions)
    in_file = marker in text.splitlines()
    if not in_file:
        archive = b.store.agent_dir(agent) / "memory" / "archive"
        if archive.is_dir():
            in_file = any(marker in p.read_text(encoding="utf-8", errors="replace").splitlines()
                          for p in archive.glob("*.md"))
    in_history = False
    if not in_file and saved:
        for v in versions:
            with contextlib.suppress(Exception):
                if b.store.history_store.content(key, t.rel, v.version) == saved:
                    in_history = True
                    break
    res.outcome = "file" if in_file else ("history" if in_history else "lost")


# -- report ---------------------------------------------------------------------------------------


def table(title: str, rows: dict[str, list[Result]], order: list[str]) -> None:
    cols = ("trials", "during", "machine wrote", "in file", "history only", "lost", "torn", "refused")
    width = max(len(title), *(len(k) for k in order), 5)
    print(f"\n{title:<{width}}  " + "  ".join(f"{c:>13}" for c in cols))
    for key in [*order, "total"]:
        rs = rows.get(key, [])
        if not rs:
            continue
        n = Counter(r.outcome for r in rs)
        vals = (len(rs), sum(r.during for r in rs), sum(r.machine_wrote for r in rs), n["file"], n["history"],
                n["lost"], sum(r.torn for r in rs), sum(bool(r.refused) for r in rs))
        print(f"{key:<{width}}  " + "  ".join(f"{v:>13}" for v in vals))


def report(results: list[Result], chosen: list[Writer], elapsed: float, commit: str) -> None:
    by_writer: dict[str, list[Result]] = defaultdict(list)
    by_style: dict[str, list[Result]] = defaultdict(list)
    by_file: dict[str, list[Result]] = defaultdict(list)
    by_ws: dict[str, list[Result]] = defaultdict(list)
    for r in results:
        t = r.trial
        for d, k in ((by_writer, t.writer), (by_style, t.style), (by_ws, f"{t.writer}/{t.style}"),
                     (by_file, t.rel if t.rel != TODAY else "memory/<today>.md")):
            d[k].append(r)
            d["total"].append(r)
    names = [w.name for w in chosen]
    import mateclaw_mem

    print(f"\nhand edits vs machine writers: {len(results)} trials, code at {Path(mateclaw_mem.__file__).parent} "
          f"({commit}), {elapsed:.0f} s")
    table("writer", by_writer, names)
    table("save style", by_style, list(STYLES))
    table("file", by_file, sorted(k for k in by_file if k != "total"))
    table("writer/style", by_ws, [f"{n}/{s}" for n in names for s in STYLES])
    print("\nmedian machine operation: " + ", ".join(
        f"{w.name} {statistics.median(w.durations) * 1000:.0f} ms" for w in chosen if w.durations))
    lost = [r for r in results if r.outcome == "lost"]
    torn = [r for r in results if r.torn]
    if torn:
        print("\ntorn: " + ", ".join(f"{why} {n}" for why, n in Counter(r.torn_why for r in torn).most_common()))
    if lost or torn:
        print("\nexamples, torn first (save moment and machine duration in ms):")
        for r in ([r for r in torn][:6] + [r for r in lost if not r.torn][:10]):
            show(r)
    kept = [r for r in results if r.outcome == "history"]
    if kept:
        print("\npreserved in history only, by writer: " + ", ".join(
            f"{k} {n}" for k, n in Counter(r.trial.writer for r in kept).most_common()))
        for r in kept[:6]:
            show(r)
    refusals = Counter(f"{r.trial.writer}: {r.refused[:110]}" for r in results if r.refused)
    if refusals:
        print("\nmachine operations that ended in an error (refusing is allowed):")
        for msg, n in refusals.most_common(8):
            print(f"  {n:>5}  {msg}")
    errors = Counter(r.person_error for r in results if r.person_error)
    for msg, n in errors.most_common(5):
        print(f"  person save failed {n}x: {msg}")


def show(r: Result) -> None:
    t = r.trial
    print(f"  t{t.index:05d} {t.writer}{f' ({t.variant})' if t.variant else ''} {t.style} {t.rel} "
          f"{t.edit.mode}{'' if t.edit.at_end else ' (top)'} early={t.early} "
          f"save@{r.save_at * 1000:.1f} of {r.duration * 1000:.1f}: {r.outcome}"
          f"{f', torn ({r.torn_why})' if r.torn else ''}{f', machine: {r.refused}' if r.refused else ''}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    ap.add_argument("--trials", type=int, default=1200)
    ap.add_argument("--seed", type=int, default=13)
    ap.add_argument("--writers", default="", help="comma-separated writer names or prefixes (http, mcp, cli, ...)")
    ap.add_argument("--keep", action="store_true", help="keep the temp workspace and print its path")
    a = ap.parse_args()
    all_writers = writers()
    wanted = [p.strip() for p in a.writers.split(",") if p.strip()]
    chosen = [w for w in all_writers if not wanted or any(w.name == p or w.name.startswith(p) for p in wanted)]
    if not chosen:
        raise SystemExit(f"no writer matches {a.writers!r}; choose from {', '.join(w.name for w in all_writers)}")
    # The MCP SDK installs a log handler; request lines and the product's own conflict warnings would
    # bury the tables (the figures report every refusal).
    for name, level in (("httpx", logging.WARNING), ("httpcore", logging.WARNING), ("mcp", logging.WARNING),
                        ("mateclaw_mem", logging.ERROR)):
        logging.getLogger(name).setLevel(level)
    sys.setswitchinterval(0.001)  # let the person's thread wake on time while the machine holds the GIL
    for key in [k for k in os.environ if k.startswith("MATECLAW_")]:
        os.environ.pop(key)
    commit = subprocess.run(["git", "-C", str(ROOT), "describe", "--always", "--dirty"], capture_output=True,
                            text=True).stdout.strip() or "not a git checkout"
    tmp = Path(tempfile.mkdtemp(prefix="hand-edits-"))
    by_name = {w.name: w for w in chosen}
    results: list[Result] = []
    started = time.monotonic()
    try:
        bench = Bench(tmp)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    try:
        trials = plan(a.trials, chosen, a.seed)
        for n, t in enumerate(trials, 1):
            results.append(run_trial(bench, by_name[t.writer], t))
            if n % 200 == 0:
                lost = sum(r.outcome == "lost" for r in results)
                print(f"  {n}/{len(trials)} trials, {lost} lost, {time.monotonic() - started:.0f} s", flush=True)
    finally:
        bench.close()
        if a.keep:
            print(f"workspace kept at {tmp / 'ws'}")
        else:
            shutil.rmtree(tmp, ignore_errors=True)
    report(results, chosen, time.monotonic() - started, commit)


if __name__ == "__main__":
    from _load import load_average  # scripts/bench/_load.py (this script's folder is on sys.path)
    try:
        main()
    except SystemExit as exc:
        if exc.code not in (None, 0):
            print(exc.code, file=sys.stderr)
    print(load_average())
    sys.exit(0)
