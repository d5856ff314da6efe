"""The multi-file operations a kill -9 must never leave half done, each as a scenario: a workspace
made ready in-process, the operation as a real `mateclaw-mem` command (a subprocess the caller kills),
and a look at the disk that says "before", "after" or "half" (with what is half).

Used by tests/test_half_operations.py (a crash at a chosen point, MATECLAW_MEM_CRASH_AT) and by
scripts/bench/half_operations.py (kill -9 at a random moment). "Half" is what must never survive a
restart: some but not all of an operation's files changed, or a record saying done while work is
missing (a forget's tombstone "done" with the claim still in a file, a proposal "applied" that
SOUL.md does not hold, a contradiction "resolved" whose files are not as decided).
"""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from datetime import date, timedelta
from pathlib import Path

from mateclaw_mem.runtime.services import Services
from mateclaw_mem.settings import load_settings

AGENT = "default"
CLAIM = "I take my tea without sugar at the office"
CONFIG = """timezone: UTC
mate:
  memory:
    snapshot-vault-import: true
    fact:
      forget-enabled: true
      projection-enabled: true
      contradiction-check-enabled: true
"""


CLI = "mateclaw_mem.cli.main"
ROOT = Path(__file__).resolve().parents[2]


@dataclass(frozen=True)
class Scenario:
    name: str  # the journal's operation name (MATECLAW_MEM_CRASH_AT=<name>:<point>)
    prepare: Callable[[Path, int], list[str]]  # (folder, n) -> the command's arguments
    state: Callable[[Path, int], tuple[str, str]]  # -> ("before" | "after" | "half", detail)
    module: str = CLI  # what runs it: `mateclaw-mem`, or tests/support/file_op.py (the MCP tool's commands)


def env(folder: Path, crash_at: str | None = None) -> dict[str, str]:
    out = {k: v for k, v in os.environ.items() if not k.startswith("MATECLAW")}
    out.update({"MATECLAW_CONFIG": str(folder / "mateclaw.yaml"), "MATECLAW_WORKSPACE": str(folder / "workspace")})
    if crash_at:
        out["MATECLAW_MEM_CRASH_AT"] = crash_at
    return out


def cli(folder: Path, *args: str, crash_at: str | None = None, timeout: float = 300,
        module: str = CLI) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", module, *args], env=env(folder, crash_at), cwd=ROOT,
                          capture_output=True, text=True, timeout=timeout)


def popen(folder: Path, args: list[str], module: str = CLI) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, "-m", module, *args], env=env(folder), cwd=ROOT,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, text=True)


def services(folder: Path) -> Services:
    (folder / "mateclaw.yaml").write_text(CONFIG, encoding="utf-8")
    svc = Services(load_settings(folder / "mateclaw.yaml", folder / "workspace"))
    svc.store.ensure_agent(AGENT)
    return svc


def services_as_configured(folder: Path) -> Services:
    """The folder's services with its config file as it is now (a test may have added to it)."""
    return Services(load_settings(folder / "mateclaw.yaml", folder / "workspace"))


def _ws(folder: Path) -> Path:
    return folder / "workspace" / AGENT


def _classify(done: int, n: int, what: str) -> tuple[str, str]:
    if done == 0:
        return "before", f"0 of {n} {what}"
    if done == n:
        return "after", f"{n} of {n} {what}"
    return "half", f"{done} of {n} {what}"


def journal_left(folder: Path) -> list[str]:
    jdir = folder / "workspace" / ".mateclaw" / "journal"
    # Hidden folders are a journal being written (no change made yet) or being removed.
    return sorted(p.name for p in jdir.iterdir() if p.is_dir() and not p.name.startswith(".")) \
        if jdir.is_dir() else []


# -- snapshot import ----------------------------------------------------------------------------------


def _note(i: int) -> str:
    return f"# Note {i}\n\n- line {i} of an imported vault, kept word for word\n"


def prepare_import(folder: Path, n: int) -> list[str]:
    services(folder).close()
    src = folder / "vault" / "notes"
    src.mkdir(parents=True)
    for i in range(n):
        (src / f"n{i:04d}.md").write_text(_note(i), encoding="utf-8")
    return ["import", str(folder / "vault"), "--strategy", "overwrite"]


def state_import(folder: Path, n: int) -> tuple[str, str]:
    done = sum((_ws(folder) / "notes" / f"n{i:04d}.md").is_file() for i in range(n))
    wrong = [i for i in range(n) if (p := _ws(folder) / "notes" / f"n{i:04d}.md").is_file()
             and p.read_text(encoding="utf-8") != _note(i)]
    if wrong:
        return "half", f"{len(wrong)} imported file(s) differ from the source"
    return _classify(done, n, "files imported")


# -- undo of a run ---------------------------------------------------------------------------------------


def prepare_undo(folder: Path, n: int) -> list[str]:
    args = prepare_import(folder, n)
    svc = services(folder)
    try:
        report = svc.transfer.import_(Path(args[1]), agent=AGENT, strategy="overwrite")
    finally:
        svc.close()
    return ["undo", AGENT, "--run", str(report.batch)]


def state_undo(folder: Path, n: int) -> tuple[str, str]:
    kind, detail = state_import(folder, n)
    return {"before": "after", "after": "before"}.get(kind, kind), detail.replace("imported", "still there")


# -- forget ---------------------------------------------------------------------------------------------


def _hand_written(folder: Path, files: dict[str, str]) -> None:
    svc = services(folder)
    try:
        for rel, text in files.items():
            svc.store.write(AGENT, rel, text, expected_sha="", actor="person")
    finally:
        svc.close()


def prepare_forget(folder: Path, n: int) -> list[str]:
    _hand_written(folder, {f"notes/f{i:04d}.md": f"# F{i}\n\n- {CLAIM}\n- a line of its own, number {i}\n"
                           for i in range(n)})
    return ["forget", AGENT, CLAIM]


def state_forget(folder: Path, n: int) -> tuple[str, str]:
    holding = sum(CLAIM in (_ws(folder) / "notes" / f"f{i:04d}.md").read_text(encoding="utf-8") for i in range(n))
    status = None
    db = folder / "workspace" / ".mateclaw" / "forget.db"
    if db.exists():
        with sqlite3.connect(db) as conn:
            row = conn.execute("SELECT status FROM tombstones").fetchone()
            status = row[0] if row else None
    if status == "done" and holding:
        return "half", f"the forget's record says done while {holding} of {n} notes still hold the claim"
    if holding == n:
        return ("before" if status is None else "half"), f"{n} of {n} notes hold the claim (record: {status})"
    if holding == 0 and status == "done":
        return "after", f"0 of {n} notes hold the claim, record done"
    return "half", f"{holding} of {n} notes hold the claim (record: {status})"


# -- month-archive roll ------------------------------------------------------------------------------------


def _day(i: int) -> date:
    return date(2025, 1, 1) + timedelta(days=i)


def prepare_roll(folder: Path, n: int) -> list[str]:
    _hand_written(folder, {f"memory/{_day(i)}.md": f"# {_day(i)}\n\n## 09:00 note\n- what happened on day {i}\n"
                           for i in range(n)})
    return ["archive", AGENT, "roll"]


def _archived(folder: Path) -> set[str]:
    from mateclaw_mem.workspace.month_archive import unpack

    out: set[str] = set()
    for gz in (_ws(folder) / "memory" / "archive").glob("*.md.gz"):
        rel = f"memory/archive/{gz.name}"
        out.update(unpack(rel, gz.read_bytes()))
    return out


def state_roll(folder: Path, n: int) -> tuple[str, str]:
    on_disk = {f"memory/{_day(i)}.md" for i in range(n) if (_ws(folder) / "memory" / f"{_day(i)}.md").is_file()}
    archived = _archived(folder) & {f"memory/{_day(i)}.md" for i in range(n)}
    both = on_disk & archived
    if len(on_disk) == n and not archived:
        return "before", f"{n} of {n} notes on disk, none archived"
    if not on_disk and len(archived) == n:
        return "after", f"{n} of {n} notes archived, none left on disk"
    return "half", f"{len(on_disk)} of {n} notes on disk, {len(archived)} archived ({len(both)} in both)"


# -- SOUL.md proposal ----------------------------------------------------------------------------------------


SOUL_PROPOSED = "# SOUL.md\n\n## Voice\n- Warm, brief, and plain-spoken\n\n## Values\n- Says so when unsure\n"


def prepare_soul(folder: Path, n: int) -> list[str]:
    svc = services(folder)
    try:
        snap = svc.store.read(AGENT, "SOUL.md")
        svc.soul.db.add(AGENT, None, "2026-12-01T00:00:00", "rules", snap.sha, SOUL_PROPOSED, "", "a test proposal")
    finally:
        svc.close()
    return ["soul", AGENT, "apply"]


def state_soul(folder: Path, n: int) -> tuple[str, str]:
    text = (_ws(folder) / "SOUL.md").read_text(encoding="utf-8")
    applied = "Warm, brief, and plain-spoken" in text
    with sqlite3.connect(folder / "workspace" / ".mateclaw" / "state.db") as conn:
        status = conn.execute("SELECT status FROM soul_proposals").fetchone()[0]
    if applied and status == "applied":
        return "after", "SOUL.md holds the proposal, recorded applied"
    if not applied and status == "pending":
        return "before", "SOUL.md as it was, proposal pending"
    return "half", f"SOUL.md {'holds' if applied else 'lacks'} the proposal, recorded {status}"


# -- contradiction resolve -------------------------------------------------------------------------------------


def prepare_contradiction(folder: Path, n: int) -> list[str]:
    svc = services(folder)
    try:
        _ = svc.file_index  # writes are ingested, so projected and the pair detected
        _ = svc.contradictions
        for rel, body in (("PROFILE.md", "## Basics\n- name: Dana\n- timezone: Europe/Berlin\n"),
                          ("MEMORY.md", "# MEMORY.md\n\n## Work\n- timezone: Asia/Shanghai\n- Works on Atlas\n")):
            snap = svc.store.read(AGENT, rel)
            svc.store.write(AGENT, rel, body, expected_sha=snap.sha, actor="person")
        pairs = svc.contradictions.list(AGENT, None)
        assert pairs, "no contradiction detected"
        pid = pairs[0].id
    finally:
        svc.close()
    return ["contradictions", AGENT, "resolve", pid, "MERGE", "--text", "timezone: Europe/Lisbon"]


def state_contradiction(folder: Path, n: int) -> tuple[str, str]:
    profile = (_ws(folder) / "PROFILE.md").read_text(encoding="utf-8")
    memory = (_ws(folder) / "MEMORY.md").read_text(encoding="utf-8")
    with sqlite3.connect(folder / "workspace" / ".mateclaw" / "facts.db") as conn:
        status = conn.execute("SELECT status FROM contradictions WHERE text_a LIKE '%Berlin%' OR text_b LIKE "
                              "'%Berlin%'").fetchone()[0]  # the pair decided (a merge may briefly pair anew)
    a_done, b_done = "Europe/Lisbon" in profile, "Asia/Shanghai" not in memory
    if a_done and b_done and status == "resolved":
        return "after", "both files as decided, pair resolved"
    if not a_done and not b_done and status == "open":
        return "before", "both files as they were, pair open"
    return "half", f"PROFILE.md {'merged' if a_done else 'unchanged'}, MEMORY.md " \
                   f"{'cut' if b_done else 'unchanged'}, pair {status}"


# -- chat import ------------------------------------------------------------------------------------------------


def prepare_chats(folder: Path, n: int) -> list[str]:
    services(folder).close()
    path = folder / "chats.jsonl"
    lines = [json.dumps({"role": "user" if i % 2 == 0 else "assistant", "content": f"message {i} about the allotment",
                         "timestamp": 1700000000 + i, "conversation": f"c{i // 400}"}) for i in range(n * 400)]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return ["import-chats", str(path)]


def state_chats(folder: Path, n: int) -> tuple[str, str]:
    db = folder / "workspace" / ".mateclaw" / "log.db"
    if not db.exists():
        return "before", "no log yet"
    with sqlite3.connect(db) as conn:
        try:
            count = conn.execute("SELECT conversation_id, COUNT(*) FROM messages GROUP BY conversation_id").fetchall()
        except sqlite3.OperationalError:
            return "before", "no messages table yet"
    torn = [c for c, k in count if k != 400]
    if torn:
        return "half", f"{len(torn)} conversation(s) torn"
    return _classify(len(count), n, "conversations in the log")


# -- rename and delete of a folder (the MCP memory tool's commands) -----------------------------------------------


def _moved(i: int) -> str:
    return f"# Moved {i}\n\n- a note of the folder, number {i}, kept word for word\n"


def prepare_rename(folder: Path, n: int) -> list[str]:
    _hand_written(folder, {f"notes/m{i:04d}.md": _moved(i) for i in range(n)})
    return ["rename", AGENT, "/memories/notes", "/memories/moved"]


def state_rename(folder: Path, n: int) -> tuple[str, str]:
    old = sum((_ws(folder) / "notes" / f"m{i:04d}.md").is_file() for i in range(n))
    new = [p for i in range(n) if (p := _ws(folder) / "moved" / f"m{i:04d}.md").is_file()]
    wrong = [p.name for p in new if p.read_text(encoding="utf-8") != _moved(int(p.stem[1:]))]
    if wrong:
        return "half", f"{len(wrong)} renamed file(s) differ from the original"
    if old == n and not new:
        return "before", f"{n} of {n} files under the old name"
    if old == 0 and len(new) == n:
        return "after", f"{n} of {n} files under the new name"
    return "half", f"{old} of {n} under the old name, {len(new)} under the new one"


def prepare_delete(folder: Path, n: int) -> list[str]:
    _hand_written(folder, {f"trash/d{i:04d}.md": _moved(i) for i in range(n)})
    return ["delete", AGENT, "/memories/trash"]


def state_delete(folder: Path, n: int) -> tuple[str, str]:
    left = sum((_ws(folder) / "trash" / f"d{i:04d}.md").is_file() for i in range(n))
    return _classify(n - left, n, "files of the folder deleted")


# -- a dream run (rules mode): MEMORY.md rewritten, then its DREAMS.md entry and its run record ------------------

DREAM_DAY = date(2026, 11, 30)
# Things said on two different days, each in words of its own: rules mode promotes each into MEMORY.md.
_SAID = ["The allotment gate code is 4417", "Dana's cello lesson moved to Thursdays", "The boiler service is due in March",
         "Grandma Ilse turns ninety in June", "The spare bike key hangs behind the fridge",
         "Book club reads Middlemarch next", "The landlord prefers email over calls", "Parking permit renewal costs 80 euros"]


def prepare_dream(folder: Path, n: int) -> list[str]:
    from datetime import datetime

    svc = services(folder)
    try:
        for day in (DREAM_DAY - timedelta(days=2), DREAM_DAY - timedelta(days=1)):
            when = datetime(day.year, day.month, day.day, 9, 0, tzinfo=svc.clock.tz)
            svc.store.append_daily(AGENT, "Notes", "\n".join(f"- {line}" for line in _SAID[:n]), actor="extraction",
                                   when=when)
    finally:
        svc.close()
    return ["dream", AGENT, "--as-of", DREAM_DAY.isoformat()]


def state_dream(folder: Path, n: int) -> tuple[str, str]:
    memory = (_ws(folder) / "MEMORY.md").read_text(encoding="utf-8")
    diary = (_ws(folder) / "DREAMS.md")
    diary_text = diary.read_text(encoding="utf-8") if diary.is_file() else ""
    promoted = sum(line in memory for line in _SAID[:n])
    run = None
    db = folder / "workspace" / ".mateclaw" / "log.db"
    if db.exists():
        with sqlite3.connect(db) as conn:
            try:
                run = conn.execute("SELECT run_id, status FROM dream_runs").fetchone()
            except sqlite3.OperationalError:
                run = None
    entry = "Dreaming" in diary_text and "- Outcome:" in diary_text
    if promoted == 0 and run is None and not entry:
        return "before", "MEMORY.md as it was, no diary entry, no run recorded"
    if promoted == n and run is not None and run[1] == "done" and f"`{run[0]}`" in diary_text:
        return "after", f"{n} of {n} lines promoted, diary entry and run record {run[0]}"
    return "half", f"{promoted} of {n} lines promoted; diary entry {'there' if entry else 'missing'}; " \
                   f"run record {run[1] if run else 'missing'}"


# -- the diary held to its cap: old DREAMS.md entries into their months' files, then out of DREAMS.md ------------

CAP_CONFIG = CONFIG.replace("    snapshot-vault-import: true\n", "    snapshot-vault-import: true\n    dream:\n"
                            "      archive-enabled: false\n") + "dreaming:\n  diary-max-chars: 1200\n"


def _entry(i: int) -> str:
    day = date(2026, 9, 1) + timedelta(days=10 * i)  # 8 entries: three months
    return (f"## {day} 03:00 Dreaming\n\n- Outcome: **nothing new**\n- Run: `dream-default-e{i:03d}` (rules mode, "
            f"scheduled)\n- Looked at the notes of the day before, number {i}, and kept them as they were\n")


def prepare_cap(folder: Path, n: int) -> list[str]:
    from mateclaw_mem.memory.dreaming.diary import DIARY_HEAD

    svc = services(folder)
    (folder / "mateclaw.yaml").write_text(CAP_CONFIG, encoding="utf-8")
    try:
        snap = svc.store.read(AGENT, "DREAMS.md")
        text = DIARY_HEAD.rstrip("\n") + "\n\n" + "\n".join(_entry(i) for i in range(n))
        svc.store.write(AGENT, "DREAMS.md", text, expected_sha=snap.sha, actor="dreaming")
    finally:
        svc.close()
    return ["archive", AGENT, "roll"]


def state_cap(folder: Path, n: int) -> tuple[str, str]:
    diary = (_ws(folder) / "DREAMS.md").read_text(encoding="utf-8")
    months = "".join(p.read_text(encoding="utf-8") for p in (_ws(folder) / "memory" / "dreams").glob("*.md"))
    ids = [f"`dream-default-e{i:03d}`" for i in range(n)]
    both = sum(i in diary and i in months for i in ids)
    lost = sum(i not in diary and i not in months for i in ids)
    archived = sum(i in months for i in ids)
    if both or lost:
        return "half", f"{both} of {n} entries both in DREAMS.md and a month's file, {lost} in neither"
    if not archived:
        return "before", f"{n} of {n} entries in DREAMS.md"
    return "after", f"{archived} of {n} entries moved to their months' files, the rest in DREAMS.md"


# -- an extraction's answer (rules mode): PROFILE.md, MEMORY.md, the daily note, then the conversation read ------

SAID = ("My name is Dana and I live in Lisbon. I prefer green tea. We decided to move the standup to 9:30. "
        "Remember that my bike lock code is 4417.")


def prepare_extraction(folder: Path, n: int) -> list[str]:
    svc = services(folder)
    try:
        svc.extraction.record_turn(AGENT, "c1", SAID, "Noted.")
    finally:
        svc.close()
    return ["extract", AGENT, "c1"]


def state_extraction(folder: Path, n: int) -> tuple[str, str]:
    profile = "- name: Dana" in (_ws(folder) / "PROFILE.md").read_text(encoding="utf-8")
    memory = "bike lock code is 4417" in (_ws(folder) / "MEMORY.md").read_text(encoding="utf-8")
    entries = sum(p.read_text(encoding="utf-8").count("bike lock code is 4417")
                  for p in (_ws(folder) / "memory").glob("*.md"))
    with sqlite3.connect(folder / "workspace" / ".mateclaw" / "state.db") as conn:
        try:
            read = conn.execute("SELECT last_id FROM extraction_watermarks WHERE conversation_id='c1'").fetchone()
        except sqlite3.OperationalError:
            read = None
    seen = f"PROFILE.md {'written' if profile else 'as it was'}, MEMORY.md {'written' if memory else 'as it was'}, " \
           f"{entries} daily entr{'y' if entries == 1 else 'ies'}, conversation {'read' if read else 'unread'}"
    if not profile and not memory and not entries and not read:
        return "before", seen
    if profile and memory and entries == 1 and read:
        return "after", seen
    return "half", seen


# -- an Add/Search user deleted: messages.db, index.db, log.db, then each file scrubbed ---------------------------

AML_DELETE = "tests.support.aml_delete"
AML_VICTIM, AML_OTHER = "victim", "other"
AML_WORDS = "Zorbleflax quintessential marmalade harbour"  # the victim's; the other user's: AML_CONTROL
AML_CONTROL = "Grumwhistle saffron teapot lighthouse"


def aml_said(i: int, words: str = AML_WORDS) -> str:
    return f"Caroline: note {i}, the {words} again"


def prepare_aml_delete(folder: Path, n: int) -> list[str]:
    from mateclaw_mem.conversations.aml import AmlMessage

    svc = services(folder)
    try:
        for i in range(n):
            svc.aml.add(f"r{i}", AML_VICTIM, f"s{i % 2}", [AmlMessage("user", aml_said(i), 1683554160000 + i)])
        svc.aml.add("r0", AML_OTHER, "s0", [AmlMessage("user", aml_said(0, AML_CONTROL), 1683554160000)])
        # An Add is indexed after its answer, by a thread `close` stops wherever it is: caught up
        # here, as a search would, so every round starts from the same whole "before" (else the
        # copy holds the messages in log.db only, and a round the kill spares reads as half).
        svc.aml.index.catch_up(svc.aml.log)
    finally:
        svc.close()
    return ["delete", AML_VICTIM]


def aml_bytes(folder: Path) -> dict[str, int]:
    """Where on disk the victim's words (and, as the control, the other user's) are: hits per search."""
    from mateclaw_mem.memory.forget.scan import patterns, walk

    hits = walk(folder / "workspace", {"victim": patterns(AML_WORDS), "victim_word": patterns("zorbleflax"),
                                       "other": patterns(AML_CONTROL)}).hits
    return {k: len(v) for k, v in hits.items()}


def _rows(db: Path, sql: str, owner: str) -> int:
    # Read-only: a writable connection closing last would checkpoint the WAL and change what the scan sees.
    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:
        return int(conn.execute(sql, (owner,)).fetchone()[0])
    finally:
        conn.close()


def state_aml_delete(folder: Path, n: int) -> tuple[str, str]:
    found = aml_bytes(folder)  # first: the row counts below open the databases
    meta = folder / "workspace" / ".mateclaw"
    logged = _rows(meta / "log.db", "SELECT count(*) FROM messages WHERE owner = ?", AML_VICTIM)
    indexed = _rows(meta / "messages.db", "SELECT count(*) FROM docs WHERE owner = ?", AML_VICTIM)
    seen = (f"{logged} of {n} messages in log.db, {indexed} in messages.db, the words in "
            f"{found['victim'] + found['victim_word']} places on disk")
    if logged == n and indexed == n:
        return "before", seen
    if logged == indexed == found["victim"] == found["victim_word"] == 0:
        return "after", seen
    return "half", seen


FILE_OP = "tests.support.file_op"

SCENARIOS = {s.name: s for s in (
    Scenario("import", prepare_import, state_import),
    Scenario("undo", prepare_undo, state_undo),
    Scenario("forget", prepare_forget, state_forget),
    Scenario("month-roll", prepare_roll, state_roll),
    Scenario("soul-apply", prepare_soul, state_soul),
    Scenario("contradiction", prepare_contradiction, state_contradiction),
    Scenario("import-chats", prepare_chats, state_chats),
    Scenario("rename", prepare_rename, state_rename, FILE_OP),
    Scenario("delete", prepare_delete, state_delete, FILE_OP),
    Scenario("dream", prepare_dream, state_dream),
    Scenario("diary-cap", prepare_cap, state_cap),
    Scenario("extraction", prepare_extraction, state_extraction),
    Scenario("aml-delete", prepare_aml_delete, state_aml_delete, AML_DELETE),
)}


def restart(folder: Path) -> subprocess.CompletedProcess[str]:
    """The next start, as a person without the daemon has it: any command that opens a database."""
    return cli(folder, "doctor", "--json")
