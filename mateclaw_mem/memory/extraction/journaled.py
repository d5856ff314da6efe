"""An extraction's answer as one journaled operation (workspace/journal.py): PROFILE.md and MEMORY.md,
the structured entries, the daily note's entry, then the conversation's watermark moved past what was
read. Killed anywhere in between, the next start finishes it - never an answer written in part, nor
one written whole and read again (a second daily entry) because the watermark stayed behind.

Before the first change the journal holds PROFILE.md's and MEMORY.md's new bytes (replayed under
compare-and-swap: a file saved by hand since the crash is left alone and reported) and, in `finish`,
the structured entries, the daily entry and the watermarks; `finish_interrupted` writes each entry
the run did not get to (a structured entry is written as `remember` writes it, which changes nothing
when it is there; a daily entry whose heading and text the note already holds is not appended again)
and moves the watermarks. The journal is opened by `output.write_answer` and closed by the service
once the watermarks moved (`end`); a conflict or a refusal inside the writes closes it (the run
plans again, or fails as it did before).

Crash points for tests (MATECLAW_MEM_CRASH_AT): `extraction:begin`, `extraction:write:<n>`,
`extraction:written` (every file written, the watermark not moved), `extraction:end`.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from typing import TYPE_CHECKING, Any

from mateclaw_mem.errors import MateclawError
from mateclaw_mem.workspace.journal import crash_point

if TYPE_CHECKING:
    from mateclaw_mem.memory.extraction.state import ExtractionState
    from mateclaw_mem.workspace.store import WorkspaceStore

OP = "extraction"


def end(store: WorkspaceStore, run_id: str) -> None:
    """The run's watermarks moved (or the run ended without): nothing left to finish."""
    if store.journal.is_open(run_id):
        crash_point(OP, "end")
        store.journal.end(run_id)


def daily_due(store: WorkspaceStore, agent: str, owner: str | None, daily: dict[str, Any]) -> bool:
    """Whether the day's note lacks this entry (its heading's title and its text)."""
    when = datetime.fromisoformat(daily["when"])
    text = store.read(agent, store.daily_rel(when), owner=owner).text
    return not (f" {daily['title']}\n" in text and daily["body"].strip() in text)


def finish_interrupted(store: WorkspaceStore, remember: Callable[..., Any] | None, state: ExtractionState,
                       now_ms: int, finish: dict[str, Any]) -> str:
    """Recovery's finisher (runtime/recovery.py), after PROFILE.md and MEMORY.md were replayed."""
    agent, owner, run_id, actor = finish["agent"], finish["owner"], finish["run_id"], finish["actor"]
    notes = []
    written = 0
    for item in finish.get("structured") or []:
        if remember is None:
            break
        try:
            out = remember(agent, item["type"], item["key"], item["text"], actor=actor,
                           source=f"conversation {run_id}", owner=owner)
        except MateclawError:  # a pinned or hand-edited entry wins, as in the run itself
            continue
        written += bool(getattr(out, "changed", True))
    if written:
        notes.append(f"{written} structured entr{'y' if written == 1 else 'ies'} written")
    daily = finish.get("daily")
    if daily and daily_due(store, agent, owner, daily):
        store.append_daily(agent, daily["title"], daily["body"], actor=actor, owner=owner,
                           when=datetime.fromisoformat(daily["when"]), batch=run_id)
        notes.append("its daily-note entry written")
    marks = {str(k): int(v) for k, v in (finish.get("watermarks") or {}).items()
             if state.watermark((agent, owner), str(k)) < int(v)}
    if marks:
        state.advance((agent, owner), marks, now_ms)
        notes.append(f"{len(marks)} conversation(s) marked read")
    return f"extraction {run_id}: " + ", ".join(notes) if notes else ""
