"""Structured consolidation: merge near-duplicate structured entries, nightly and on demand.

    svc.run(agent=None) -> ConsolidationReport   # {ownersConsolidated, updated, entriesBefore, entriesAfter}

A bucket is (agent, owner, type): one `structured/<type>.md`. Buckets with at least
`structured-consolidation-min-entries` entries are candidates; a bucket whose content hash equals
the hash recorded at its last consolidation is not sent again. At most
`structured-consolidation-max-owners-per-run` owners are handled per run, rotating fairly: a cursor
in `state.db` remembers the last owner handled, and the next run starts after it.

Safety, whatever the model answers (the same gate checks rules mode):
- no new keys, so the count can only decrease;
- every input key is accounted for exactly once: kept, merged into another, or dropped with a reason;
- locked entries — pinned, or edited by a person since the last machine write (from the file's
  history) — are kept verbatim under their own key;
- the write is compare-and-swap against the version read (workspace/cas.py, no retry: a bucket a
  person changed meanwhile has a new hash, so the next run takes it up again), and the previous
  version is kept in history under the run's batch id (`mateclaw-mem undo AGENT --run ID` undoes a
  whole run).

Rules mode merges exact and near-exact duplicates (same normalised text, or token Jaccard ≥ 0.8):
the newest entry of a group absorbs the others; a locked member absorbs them instead.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from filelock import FileLock, Timeout

from mateclaw_mem.db import SharedConnection, owner_column
from mateclaw_mem.errors import BusyError, ConflictError, ModelError
from mateclaw_mem.index.tokenizer import tokenize
from mateclaw_mem.llm.failures import record_failure
from mateclaw_mem.llm.prompts import structured_consolidation as prompt
from mateclaw_mem.llm.prompts.structured_consolidation import ConsolidationPlan, InputEntry, KeptEntry
from mateclaw_mem.markdown import frontmatter
from mateclaw_mem.markdown import structured as fmt
from mateclaw_mem.markdown.structured import Entry
from mateclaw_mem.memory.structured.entries import PERSON, TYPES
from mateclaw_mem.redaction import redact
from mateclaw_mem.workspace.cas import retry_on_conflict
from mateclaw_mem.workspace.walk import GLOBAL, global_folder

if TYPE_CHECKING:
    from mateclaw_mem.clock import Clock
    from mateclaw_mem.llm.client import ModelClient
    from mateclaw_mem.workspace.store import WorkspaceStore

log = logging.getLogger(__name__)

ACTOR = "consolidation"
CONFLICT_RETRIES = 0  # a conflicting bucket waits for the next run (its hash changed, so it is due)
JACCARD_MERGE = 0.8
SOURCE_MAX = 200

_SCHEMA = """
CREATE TABLE IF NOT EXISTS structured_consolidation_buckets (
    agent TEXT NOT NULL,
    owner TEXT NOT NULL,
    type TEXT NOT NULL,
    sha TEXT NOT NULL,
    at TEXT NOT NULL,
    PRIMARY KEY (agent, owner, type)
);
CREATE TABLE IF NOT EXISTS structured_consolidation_cursor (
    scope TEXT PRIMARY KEY,
    last_owner TEXT NOT NULL
);
"""


@dataclass
class BucketResult:
    agent: str
    owner: str | None
    type: str
    before: int
    after: int
    status: str  # updated | unchanged | conflict | error | skipped
    detail: str = ""
    error_kind: str | None = None  # set when the model failed (ModelError.kind): the CLI's exit 7

    def as_dict(self) -> dict[str, Any]:
        return {"agent": self.agent, "owner": self.owner, "type": self.type, "before": self.before,
                "after": self.after, "status": self.status, "detail": self.detail, "error_kind": self.error_kind}


@dataclass
class ConsolidationReport:
    run_id: str
    mode: str
    owners_consolidated: int = 0
    updated: int = 0
    entries_before: int = 0
    entries_after: int = 0
    buckets: list[BucketResult] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        """The seed's response shape, plus what happened per bucket."""
        return {"ownersConsolidated": self.owners_consolidated, "updated": self.updated,
                "entriesBefore": self.entries_before, "entriesAfter": self.entries_after,
                "runId": self.run_id, "mode": self.mode, "failed": len(self.failed),
                "modelFailed": len(self.model_failed), "buckets": [b.as_dict() for b in self.buckets]}

    @property
    def failed(self) -> list[BucketResult]:
        return [b for b in self.buckets if b.status == "error"]

    @property
    def model_failed(self) -> list[BucketResult]:
        return [b for b in self.buckets if b.error_kind is not None]

    def log_line(self, agent: str | None, ms: float) -> str:
        """`structured consolidation default: updated default/structured/user.md (9 → 6 entries) in 4 ms (rules)`."""
        files = [f"{b.agent}/structured/{b.type}.md" + (f" (owner {b.owner})" if b.owner else "")
                 for b in self.buckets if b.status == "updated"]
        errors = sum(b.status in ("error", "conflict") for b in self.buckets)
        outcome = "updated" if files else "error" if errors else "no_change"
        what = f"{', '.join(files)} ({self.entries_before} → {self.entries_after} entries)" if files else (
            f"({len(self.buckets)} bucket(s) looked at)")
        return (f"structured consolidation {agent or 'all agents'}: {outcome} {what}"
                f"{f', {errors} bucket(s) failed' if errors and files else ''} in {ms:.0f} ms ({self.mode})")


class StructuredConsolidation:
    def __init__(
        self,
        store: WorkspaceStore,
        clock: Clock,
        *,
        state_db: Path,
        min_entries: int = 8,
        max_owners_per_run: int = 50,
        model: Callable[[], ModelClient | None] = lambda: None,
    ) -> None:
        self.store = store
        self.clock = clock
        self.min_entries = min_entries
        self.max_owners_per_run = max_owners_per_run
        self.client = model()  # the shared client (runtime/build/types.ModelProvider); it fixes the mode
        self._db = _Bookkeeping(state_db)
        self._run_lock = FileLock(str(state_db.parent / "structured-consolidation.lock"))

    @property
    def mode(self) -> str:
        return "model" if self.client is not None else "rules"

    def close(self) -> None:
        self._db.close()

    # -- the run -----------------------------------------------------------------------------------

    def run(self, agent: str | None = None) -> ConsolidationReport:
        """Consolidate the next owners in rotation (of one agent, or of all). One run at a time."""
        try:
            self._run_lock.acquire(timeout=0)
        except Timeout:
            raise BusyError("a structured consolidation is already running; try again later") from None
        t0 = time.monotonic()
        try:
            report = self._run(agent)
        finally:
            self._run_lock.release()
        log.info("%s", report.log_line(agent, (time.monotonic() - t0) * 1000))
        return report

    def _run(self, agent: str | None) -> ConsolidationReport:
        now = self.clock.now()
        report = ConsolidationReport(f"sc-{now:%Y%m%d-%H%M%S}-{uuid.uuid4().hex[:6]}", self.mode)
        scope = f"agent:{agent}" if agent else "all"
        due: list[tuple[str, str | None, list[str]]] = []
        # GLOBAL entries are written like any agent's and grow like them: consolidated with "all" too.
        for a in [agent] if agent else [*self.store.agents(), *global_folder(self.store.root)]:
            for owner in self._owners(a):
                types = [t for t in TYPES if self._due(a, owner, t)]
                if types:
                    due.append((a, owner, types))
        if not due:
            return report
        # Fair rotation: start after the owner handled last, wrap around.
        cursor = self._cursor(scope)
        due.sort(key=lambda d: _owner_key(d[0], d[1]))
        start = next((i for i, d in enumerate(due) if _owner_key(d[0], d[1]) > cursor), 0)
        rotated = due[start:] + due[:start]
        chosen = rotated[: self.max_owners_per_run] if self.max_owners_per_run > 0 else rotated  # 0 = all
        for a, owner, types in chosen:
            for t in types:
                result = self._bucket(a, owner, t, report.run_id)
                report.buckets.append(result)
                report.entries_before += result.before
                report.entries_after += result.after
                report.updated += result.status == "updated"
            report.owners_consolidated += 1
            self._set_cursor(scope, _owner_key(a, owner))
        return report

    def _owners(self, agent: str) -> list[str | None]:
        """The agent-level bucket (None) first, then each owner's personal memory."""
        return [None] if agent == GLOBAL else [None, *self.store.owners(agent)]  # GLOBAL has no owners

    def _due(self, agent: str, owner: str | None, type_: str) -> bool:
        snap = self.store.read(agent, f"structured/{type_}.md", owner=owner)
        if not snap.exists:
            return False
        if len(fmt.parse(snap.body).entries) < self.min_entries:
            return False
        return self._db.sha(agent, owner, type_) != snap.sha

    # -- one bucket --------------------------------------------------------------------------------

    def _bucket(self, agent: str, owner: str | None, type_: str, run_id: str) -> BucketResult:
        try:
            return retry_on_conflict(lambda _n: self._attempt(agent, owner, type_, run_id),
                                     retries=CONFLICT_RETRIES)
        except _Conflict as exc:
            return exc.result

    def _attempt(self, agent: str, owner: str | None, type_: str, run_id: str) -> BucketResult:
        rel = f"structured/{type_}.md"
        snap = self.store.read(agent, rel, owner=owner)
        block, body = frontmatter.split(snap.text)
        doc = fmt.parse(body)
        n = len(doc.entries)
        keys = [e.norm for e in doc.entries]
        if len(set(keys)) != n:
            dup = next(e.key for i, e in enumerate(doc.entries) if e.norm in keys[:i])
            return BucketResult(agent, owner, type_, n, n, "skipped",
                                f"{rel} has the key {dup!r} twice; merge them by hand")
        locked = self._locked(agent, owner, rel, doc.entries, snap.sha)
        inputs = [InputEntry(e.key, e.text, e.updated, e.pinned or e.norm in locked) for e in doc.entries]
        try:
            if self.client is None:
                plan = rules_plan(inputs)
            else:
                plan = self.client.chat_json(
                    prompt.build_messages(type_, inputs), ConsolidationPlan, step="structured_consolidation",
                    check=lambda p: prompt.check_plan(p, inputs),
                )
            prompt.check_plan(plan, inputs)  # rules mode passes the same gate
        except ModelError as exc:
            record_failure(self.client, "structured_consolidation", exc.kind, f"{type_} entries: {exc.message}",
                           agent=agent, owner=owner)
            return BucketResult(agent, owner, type_, n, n, "error", exc.message, exc.kind)
        except ValueError as exc:  # rules mode's own plan failed the gate: a bug of ours, not the model
            return BucketResult(agent, owner, type_, n, n, "error", str(exc))
        new_entries = apply_plan(doc.entries, plan, inputs)
        if [e.raw for e in new_entries] == [e.raw for e in doc.entries] and all(e.raw for e in new_entries):
            self._record(agent, owner, type_, snap.sha)
            return BucketResult(agent, owner, type_, n, n, "unchanged")
        new_text = block + fmt.render(fmt.Document(doc.preamble, new_entries))
        try:
            result = self.store.write(agent, rel, new_text, expected_sha=snap.sha, actor=ACTOR, owner=owner,
                                      reason=f"structured consolidation: {n} -> {len(new_entries)} entries",
                                      batch=run_id)
        except ConflictError as exc:
            raise _Conflict(exc.message, BucketResult(agent, owner, type_, n, n, "conflict", exc.message)) from None
        self._record(agent, owner, type_, result.sha)
        dropped = redact("; ".join(f"{d.key}: {d.reason}" for d in plan.dropped))
        return BucketResult(agent, owner, type_, n, len(new_entries), "updated",
                            f"dropped {dropped}" if dropped else "")

    def _locked(self, agent: str, owner: str | None, rel: str, entries: list[Entry], sha: str) -> set[str]:
        """Keys a person changed since the last machine write of this file (all keys when no machine
        write is on record: then every entry is the person's own)."""
        versions = self.store.history(agent, rel, owner=owner)
        machine = next((v for v in reversed(versions) if v.actor != PERSON), None)
        everything = {e.norm for e in entries}
        if machine is None:
            return everything
        if machine.replaced_by == sha:
            return set()
        later = next((v for v in versions if v.version > machine.version and v.sha == machine.replaced_by), None)
        if later is None:
            return everything  # that version is no longer kept: assume the person's edits
        key = self.store.agent_key(agent, owner)
        text = self.store.history_store.content(key, rel, later.version).decode("utf-8")
        by_machine = {e.norm: fmt.one_line(e.text) for e in fmt.parse(frontmatter.body(text)).entries}
        return {e.norm for e in entries if by_machine.get(e.norm) != fmt.one_line(e.text)}

    # -- bookkeeping -------------------------------------------------------------------------------

    def _record(self, agent: str, owner: str | None, type_: str, sha: str) -> None:
        self._db.record(agent, owner, type_, sha, self.clock.now().isoformat(timespec="seconds"))

    def _cursor(self, scope: str) -> str:
        return self._db.cursor(scope)

    def _set_cursor(self, scope: str, key: str) -> None:
        self._db.set_cursor(scope, key)

    def status(self) -> dict[str, Any]:
        return {"mode": self.mode, **self._db.totals()}


class _Conflict(ConflictError):
    """A bucket's conflict, carrying what to report once no retry is left."""

    def __init__(self, message: str, result: BucketResult) -> None:
        super().__init__(message)
        self.result = result


class _Bookkeeping(SharedConnection):
    """state.db: each bucket's hash at its last consolidation, and the rotation cursor per scope."""

    def __init__(self, path: Path) -> None:
        super().__init__(path, _SCHEMA)

    def sha(self, agent: str, owner: str | None, type_: str) -> str | None:
        with self._lock:
            row = self._conn.execute(
                "SELECT sha FROM structured_consolidation_buckets WHERE agent=? AND owner=? AND type=?",
                (agent, owner_column(owner), type_),
            ).fetchone()
        return row["sha"] if row else None

    def record(self, agent: str, owner: str | None, type_: str, sha: str, at: str) -> None:
        with self._write() as conn:
            conn.execute(
                "INSERT INTO structured_consolidation_buckets (agent, owner, type, sha, at) VALUES (?, ?, ?, ?, ?)"
                " ON CONFLICT(agent, owner, type) DO UPDATE SET sha=excluded.sha, at=excluded.at",
                (agent, owner_column(owner), type_, sha, at),
            )

    def cursor(self, scope: str) -> str:
        with self._lock:
            row = self._conn.execute("SELECT last_owner FROM structured_consolidation_cursor WHERE scope=?",
                                     (scope,)).fetchone()
        return row["last_owner"] if row else ""

    def set_cursor(self, scope: str, key: str) -> None:
        with self._write() as conn:
            conn.execute(
                "INSERT INTO structured_consolidation_cursor (scope, last_owner) VALUES (?, ?)"
                " ON CONFLICT(scope) DO UPDATE SET last_owner=excluded.last_owner",
                (scope, key),
            )

    def totals(self) -> dict[str, Any]:
        with self._lock:
            row = self._conn.execute(
                "SELECT COUNT(*) AS n, MAX(at) AS last FROM structured_consolidation_buckets").fetchone()
        return {"buckets_consolidated": row["n"], "last": row["last"]}


def _owner_key(agent: str, owner: str | None) -> str:
    # "\x01" sorts the agent-level bucket (owner None) before every owner of the same agent.
    return f"{agent}\x00{'' if owner is None else chr(1) + owner}"


# -- applying a plan -------------------------------------------------------------------------------


def apply_plan(entries: list[Entry], plan: ConsolidationPlan, inputs: list[InputEntry]) -> list[Entry]:
    """The new entry list, in file order. Locked and untouched entries keep their exact text."""
    by_key = {e.norm: (i, e) for i, e in enumerate(entries)}
    locked = {fmt.normalise_key(x.key) for x in inputs if x.locked}
    out: list[tuple[int, Entry]] = []
    for kept in plan.entries:
        i, original = by_key[fmt.normalise_key(kept.key)]
        merged = [by_key[fmt.normalise_key(k)][1] for k in kept.merged_from
                  if fmt.normalise_key(k) != original.norm]
        if original.norm in locked or not merged:
            # Only a merge may change text: a singleton is never rewritten, whatever the answer says.
            out.append((i, original))
            continue
        group = [original, *merged]
        sources: list[str] = []
        for e in group:
            for s in (e.source or "").split(";"):
                if s.strip() and s.strip() not in sources:
                    sources.append(s.strip())
        source = "; ".join(sources)
        if len(source) > SOURCE_MAX:
            source = source[: SOURCE_MAX - 1].rstrip() + "…"
        updated = max((e.updated for e in group), default="")
        # A merged text is the model's (rules mode: one of the entries'): redacted before the file.
        out.append((i, original.changed(text=redact(kept.text.strip()), source=source or ACTOR, updated=updated)))
    out.sort(key=lambda x: x[0])
    return [e for _, e in out]


def _text_norm(text: str) -> str:
    return " ".join(text.casefold().split()).rstrip(".。!！")


def rules_plan(inputs: list[InputEntry]) -> ConsolidationPlan:
    """Deterministic merge of exact and near-exact duplicates (see the module doc)."""
    n = len(inputs)
    norms = [_text_norm(x.text) for x in inputs]
    toks = [frozenset(tokenize(x.text)) for x in inputs]
    parent = list(range(n))

    def root(i: int) -> int:
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i

    for i in range(n):
        for j in range(i + 1, n):
            same = norms[i] == norms[j]
            if not same and len(toks[i]) >= 3 and len(toks[j]) >= 3:
                same = len(toks[i] & toks[j]) / len(toks[i] | toks[j]) >= JACCARD_MERGE
            if same:
                parent[root(j)] = root(i)
    groups: dict[int, list[int]] = {}
    for i in range(n):
        groups.setdefault(root(i), []).append(i)
    kept: list[KeptEntry] = []
    for members in groups.values():
        locked = [i for i in members if inputs[i].locked]
        # Newest absorbs the rest; ties go to the later entry in the file (the later-added one).
        keeper = locked[0] if locked else max(members, key=lambda i: (inputs[i].updated, i))
        for i in locked:
            if i != keeper:
                kept.append(KeptEntry(key=inputs[i].key, text=inputs[i].text))
        absorbed = [inputs[i].key for i in members if i != keeper and i not in locked]
        kept.append(KeptEntry(key=inputs[keeper].key, text=inputs[keeper].text, merged_from=absorbed))
    return ConsolidationPlan(entries=kept, dropped=[])
