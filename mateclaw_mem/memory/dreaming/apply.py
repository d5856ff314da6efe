"""A dream's writes as one journaled operation (workspace/journal.py): the entries a rewrite drops
archived, MEMORY.md rewritten, then - once the run is over - its DREAMS.md entry and its run record.
A kill -9 anywhere in between is finished at the next start: never a MEMORY.md rewritten with no
diary entry or run record saying so, nor dropped entries archived while MEMORY.md still holds them.

    result = apply.write(store, out, snap, new_text, dropped, now)  # journal opened, files written
    ... the service's records (DREAMS.md, dream_runs) ...
    apply.end(store, out.run_id)                                    # journal closed

Before the first change the journal holds the archive's and MEMORY.md's new bytes (as planned: the
store's pins and ceilings apply again when a replay writes them, so a replay lands what the run
would have), MEMORY.md as it was (for the report), and the run as far as it is known (`finish`).
At the next start the replay writes what is missing under compare-and-swap (a file edited by hand
since the crash is left alone and reported), then `finish_interrupted` writes the diary entry and the
run record, each only if the run did not get to it.

Crash points for tests (MATECLAW_MEM_CRASH_AT): `dream:begin`, `dream:write:<n>` (before the n-th
file), `dream:written` (MEMORY.md written, nothing recorded), `dream:end` (all done, journal still there).
"""

from __future__ import annotations

import dataclasses
from datetime import datetime
from typing import TYPE_CHECKING, Any

from mateclaw_mem.markdown import frontmatter
from mateclaw_mem.memory.dreaming import gates
from mateclaw_mem.memory.dreaming.diary import DIARY_REL, DiaryEntry
from mateclaw_mem.memory.dreaming.gates import ACTOR, MEMORY_REL
from mateclaw_mem.memory.dreaming.outcome import DreamOutcome
from mateclaw_mem.memory.dreaming.report import build_report
from mateclaw_mem.memory.dreaming.runs import short_reason
from mateclaw_mem.workspace.journal import crash_point
from mateclaw_mem.workspace.records import Snapshot, Step, WriteResult, sha256

if TYPE_CHECKING:
    from mateclaw_mem.memory.dreaming.diary import Diary
    from mateclaw_mem.memory.dreaming.runs import DreamRunLog
    from mateclaw_mem.workspace.store import WorkspaceStore

OP = "dream"
BEFORE = "memory-before"  # the staged MEMORY.md as the run read it
# What the finisher needs of the run to record it as `_finish` would have (no text of a file).
_KEPT = ("run_id", "agent", "owner", "topic", "mode", "trigger", "started_at", "reason", "looked_at", "sections",
         "candidates", "promoted", "kept", "archived", "dropped", "lines_added", "lines_removed")
HAND_EDITED = ("MEMORY.md was saved by hand after the run was killed mid-way; left as the person saved it, the "
               "dream will try again next time")
FINISHED_NOTE = " (finished at start: the run was killed after it began writing)"


def write(store: WorkspaceStore, out: DreamOutcome, snap: Snapshot, new_text: str,
          dropped: list[tuple[str, str]], now: datetime, final: str) -> WriteResult:
    """Archive the dropped entries and rewrite MEMORY.md (compare-and-swap on `snap`), journaled;
    the journal stays open until `end`. `final`: what the store will make of `new_text` (the
    preview), for the record a replay would write. ConflictError (a person saved meanwhile) closes
    the journal and goes up: the caller plans again."""
    agent, owner, run_id = out.agent, out.owner, out.run_id
    steps = []
    archive_rel, add = gates.archive_plan(dropped, now, run_id) if dropped else ("", None)
    if add is not None:
        current = store.read(agent, archive_rel, owner=owner)
        archived = add(current.text)
        if archived is not None:
            steps.append(Step(agent, owner, archive_rel, current.sha, archived.encode("utf-8"), ACTOR,
                              f"archive for {run_id}"))
    reason = f"dream: {short_reason(out.reason)}"
    steps.append(Step(agent, owner, MEMORY_REL, snap.sha, new_text.encode("utf-8"), ACTOR, reason))
    planned = dataclasses.replace(out, status="done")
    if archive_rel and archive_rel not in planned.archived:
        planned.archived = [*planned.archived, archive_rel]
    _, planned.lines_added, planned.lines_removed = gates.diff(snap.text, final)
    finish = {k: getattr(planned, k) for k in _KEPT}
    finish["memory_after"] = sorted({sha256(final), sha256(new_text)})  # what the rewrite lands as
    store.journal.begin(OP, run_id, steps, finish=finish, staged={BEFORE: snap.text.encode("utf-8")})
    try:
        if dropped:
            out.archived.append(gates.archive_dropped(store, agent, owner, dropped, now, run_id))
        result = store.write(agent, MEMORY_REL, new_text, expected_sha=snap.sha, actor=ACTOR, owner=owner,
                             reason=reason, batch=run_id)
    except Exception:
        # Handled by the caller (a conflict plans again, a refusal fails the run with MEMORY.md as the
        # person left it): nothing to finish. An archive already written holds its text twice, never zero.
        store.journal.end(run_id)
        raise
    crash_point(OP, "written")
    return result


def end(store: WorkspaceStore, run_id: str) -> None:
    """After the run's records: the operation is whole (no-op when `write` never ran)."""
    if store.journal.is_open(run_id):
        crash_point(OP, "end")
        store.journal.end(run_id)


def entry_of(out: DreamOutcome, memory_chars: int) -> DiaryEntry:
    """The DREAMS.md entry of a run (the service's and the finisher's)."""
    return DiaryEntry(
        when=datetime.fromisoformat(out.started_at), outcome=out.status, reason=out.reason, run_id=out.run_id,
        mode=out.mode, trigger=out.trigger, topic=out.topic, owner=out.owner, looked_at=out.looked_at,
        sections=out.sections, memory_chars=memory_chars, candidates=out.candidates, promoted=out.promoted,
        kept=out.kept, added=out.lines_added, removed=out.lines_removed, archived=out.archived, report=out.report,
    )


def finish_interrupted(store: WorkspaceStore, diary: Diary, runs: DreamRunLog, finish: dict[str, Any],
                       now: datetime) -> str:
    """Recovery's finisher (runtime/recovery.py), after the replay put the files in place: the run's
    DREAMS.md entry and run record, each unless the run wrote it before it died."""
    out = DreamOutcome(status="done", **{k: finish[k] for k in _KEPT if k in finish})
    memory = store.read(out.agent, MEMORY_REL, owner=out.owner)
    if not _landed(store, out, memory.sha, finish):
        # The replay left MEMORY.md alone (the person saved it after the crash): the run is recorded
        # as what it is for them - a rewrite that did not happen.
        out.status, out.error_code = "failed", "conflict"
        out.reason = HAND_EDITED
        out.promoted, out.kept, out.lines_added, out.lines_removed = [], [], 0, 0
    done = []
    if f"`{out.run_id}`" not in store.read(out.agent, DIARY_REL, owner=out.owner).text:
        before = _staged(finish)
        out.reason += FINISHED_NOTE
        out.finished_at = now.isoformat(timespec="seconds")
        out.report = build_report(out, memory.text if before is None else before, memory.text)
        diary.append(out.agent, entry_of(out, len(frontmatter.body(memory.text))), owner=out.owner)
        done.append("its DREAMS.md entry written")
    if not runs.has(out.run_id):
        out.finished_at = out.finished_at or now.isoformat(timespec="seconds")
        runs.record(out)
        done.append("its run recorded")
    return f"dream {out.run_id}: " + ", ".join(done) if done else ""


def _landed(store: WorkspaceStore, out: DreamOutcome, sha: str, finish: dict[str, Any]) -> bool:
    """Whether MEMORY.md holds the run's rewrite: its planned hashes, or a version the store kept
    under the run's batch (the replay included) replaced by what is there now."""
    if sha in (finish.get("memory_after") or []):
        return True
    key = store.agent_key(out.agent, out.owner)
    return any(v.key == key and v.rel == MEMORY_REL and v.replaced_by == sha
               for v in store.history_store.batch(out.run_id))


def _staged(finish: dict[str, Any]) -> str | None:
    path = (finish.get("staged") or {}).get(BEFORE)
    try:
        return open(path, encoding="utf-8").read() if path else None
    except OSError:
        return None
