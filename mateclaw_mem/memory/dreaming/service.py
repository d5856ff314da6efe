"""Dreaming: consolidate the recent daily notes into MEMORY.md, nightly or on demand.

Public API (what the CLI / HTTP / MCP faces and the scheduler call)::

    svc = DreamingService(settings, store, clock=clock, model=lambda: services.model)  # shared client, on first use
    svc.dream(agent, *, topic=None, preview=False, owner=None, trigger="manual") -> DreamOutcome
        # POST /api/v1/memory/{agentId}/emergence; raises BusyError when a run holds the agent's lock
    svc.status(agent, *, owner=None) -> dict                  # GET /api/v1/memory/{agentId}/dreaming/status
    svc.report() -> dict                                      # for `mateclaw-mem status`
    svc.rotate(agent, *, owner=None) -> dict                  # archive rotation (scheduler)
    with svc.lock(agent): ...                                 # the per-agent run lock (busy -> BusyError)

A run: candidates (daily-note sections of the last `emergence-day-range` days, newest first, at most
`dream.max-candidates-per-dream`) scored on evidence (memory/dreaming/candidates.py) → model
(`{should_update, reason, memory_content}`) or rules (promote facts that recur on 2+ distinct days
into a `## Recurring` section, each with a `Source:`) → guarded rewrite of MEMORY.md → one
DREAMS.md entry for every outcome (a night with nothing to look at: at most one a week, diary.py).

Safety gates on the rewrite:
- every write of a run carries the batch id `dream-<agent>-<YYYYmmddTHHMMSS>`: `store.undo_batch(id)`
  (CLI `mateclaw-mem undo AGENT --run ID`) restores the previous MEMORY.md byte for byte;
- a rewrite that drops more than 25% of the existing entries (`##` sections and list items) is rejected;
  smaller drops are moved to `memory/archive/MEMORY-YYYY-MM-DD.md` before the rewrite;
- pinned sections (the store restores them) and hand-edited sections (changed by actor "person" since
  the last machine write, from the file's history) stay verbatim; an edit the history cannot explain
  (made outside the store) protects every existing section;
- ceilings apply (the store cuts and archives);
- compare-and-swap on the hash read at the start (workspace/cas.py): a concurrent human edit → re-read
  and plan again once, else the run fails and MEMORY.md stays as the person left it;
- a failed model leaves MEMORY.md untouched; the diary records the failure.

The model's turns are recorded in the usage log under the step "consolidation"; they never enter the
conversation log, so they can never trigger extraction.

This module runs the lock, the run and its records; the parts live next to it in memory/dreaming/:
candidates.py (candidates, evidence; shingles.py compares them), rules.py (rules-mode promotion), gates.py
(loss gate, protected sections, diff), runs.py (run log), diary.py (DREAMS.md), rotation.py (archives).
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from datetime import date, datetime, timedelta
from datetime import time as dtime
from pathlib import Path
from typing import Any

from filelock import FileLock, Timeout

from mateclaw_mem.clock import Clock
from mateclaw_mem.errors import (
    BusyError,
    ConfigError,
    ConflictError,
    InvalidInputError,
    MateclawError,
    ModelError,
    RejectedError,
)
from mateclaw_mem.llm.failures import record_failure
from mateclaw_mem.markdown import frontmatter
from mateclaw_mem.memory.dreaming import apply, gates, topics
from mateclaw_mem.memory.dreaming import candidates as cand
from mateclaw_mem.memory.dreaming.diary import Diary
from mateclaw_mem.memory.dreaming.gates import ACTOR, LOSS_LIMIT, MEMORY_REL
from mateclaw_mem.memory.dreaming.model_plan import plan_model
from mateclaw_mem.memory.dreaming.outcome import DreamOutcome
from mateclaw_mem.memory.dreaming.report import ContradictionsHook, build_report
from mateclaw_mem.memory.dreaming.rules import DreamPlan, plan_rules
from mateclaw_mem.memory.dreaming.runs import DreamRunLog, log_line, run_summary
from mateclaw_mem.redaction import redact
from mateclaw_mem.settings import Settings
from mateclaw_mem.workspace import oversized
from mateclaw_mem.workspace.cas import retry_on_conflict
from mateclaw_mem.workspace.paths import check_agent, owner_dirname
from mateclaw_mem.workspace.store import WorkspaceStore, sha256
from mateclaw_mem.workspace.walk import normalise_owner

log = logging.getLogger(__name__)
_PROBE_GRACE = 0.2  # seconds a run waits for the dream file lock: a `running()` probe holds it for microseconds

CONFLICT_RETRIES = 1
RETRY_NOTE = ("MEMORY.md was edited by the person while you were working; the version above is the new one. "
              "Keep their edits.")

HitsProvider = Callable[[str, str | None, datetime], Sequence[Any]]


class DreamingService:
    def __init__(
        self,
        settings: Settings,
        store: WorkspaceStore,
        *,
        clock: Clock,
        model: Callable[[], Any] = lambda: None,
        retrieval_hits: HitsProvider | None = None,
        next_run: Callable[[], datetime | None] | None = None,
        runs_db: Path | None = None,
        forget: Any = None,
        contradictions: ContradictionsHook | None = None,
    ) -> None:
        self.settings = settings
        self._forget = forget  # memory/forget/: a tombstoned claim is never promoted
        self.store = store
        self.clock = clock
        self.mem = settings.mate.memory
        self.diary = Diary(store, max_chars=settings.dreaming.diary_max_chars)
        # The shared client (runtime/services.py), asked for on first use: a `status` never imports openai.
        self._model = model
        self._client: Any = None
        self._retrieval_hits = retrieval_hits
        self._next_run = next_run
        self.runs = DreamRunLog(runs_db or settings.log_db)
        self.contradictions = contradictions  # the inbox's open pairs, for the report (when that inbox exists)
        self._guard = threading.Lock()
        self._thread_locks: dict[str, threading.Lock] = {}
        self._file_locks: dict[str, FileLock] = {}
        self._probe = threading.Lock()  # `running()` probes, one at a time

    @property
    def mode(self) -> str:
        return "model" if self.settings.model.configured else "rules"

    # -- the per-agent run lock ------------------------------------------------------------------

    def _locks(self, agent: str, owner: str | None) -> tuple[threading.Lock, FileLock]:
        key = check_agent(agent) + (f"--{owner_dirname(owner)}" if owner else "")
        with self._guard:
            tlock = self._thread_locks.setdefault(key, threading.Lock())
            if key not in self._file_locks:
                lock_dir = self.settings.state_dir / "locks"
                lock_dir.mkdir(parents=True, exist_ok=True)
                self._file_locks[key] = FileLock(str(lock_dir / f"dream-{sha256(key)[:24]}.lock"))
            return tlock, self._file_locks[key]

    @contextlib.contextmanager
    def lock(self, agent: str, *, owner: str | None = None) -> Iterator[None]:
        """One dream at a time per (agent, owner), across threads and processes. Never waits for a
        run; only for a `running()` probe's hold of the file lock (microseconds)."""
        tlock, flock = self._locks(agent, owner)
        busy = f"a dream run for agent {agent!r}{f' (owner {owner})' if owner else ''} is already in progress"
        if not tlock.acquire(blocking=False):
            raise BusyError(busy)
        try:
            try:
                flock.acquire(timeout=_PROBE_GRACE)
            except Timeout:
                raise BusyError(busy + " in another process") from None
            try:
                yield
            finally:
                flock.release()
        finally:
            tlock.release()

    def running(self, agent: str, *, owner: str | None = None) -> bool:
        """Whether a dream of (agent, owner) runs now, here or elsewhere. Never via `lock()`: a probe
        holding it was a "run" to a concurrent status and turned a dream away. Runs alone take the
        thread lock; the file lock is probed on its own descriptor, one probe at a time."""
        tlock, flock = self._locks(agent, owner)
        if tlock.locked():
            return True
        with self._probe:
            probe = FileLock(flock.lock_file)
            try:
                probe.acquire(timeout=0)
            except Timeout:
                return True
            probe.release()
            return False

    # -- a run -----------------------------------------------------------------------------------

    def dream(
        self,
        agent: str,
        *,
        topic: str | None = None,
        preview: bool = False,
        owner: str | None = None,
        trigger: str = "manual",
        as_of: date | None = None,
    ) -> DreamOutcome:
        """One dream now, or (`as_of`) the night of that date: how an imported history is consolidated."""
        check_agent(agent)
        owner = normalise_owner(owner)
        topic = " ".join(topic.split()) if topic else None
        if topic and not self.mem.dream.focused_enabled:
            raise InvalidInputError(
                "focused dreaming is off (mate.memory.dream.focused-enabled: false); run without --topic"
            )
        now, t0 = self.clock.now(), time.monotonic()
        if as_of is not None:
            if as_of > now.astimezone(self.clock.tz).date():
                raise InvalidInputError(f"as-of {as_of.isoformat()} is in the future (today is {now:%Y-%m-%d})")
            now = min(now, datetime.combine(as_of, dtime(23, 59), tzinfo=self.clock.tz))
        out = DreamOutcome(
            run_id=self.runs.run_id(agent, owner, now, unique=not preview), agent=agent, owner=owner, topic=topic,
            status="skipped", reason="", mode=self.mode, trigger=trigger,
            started_at=now.isoformat(timespec="seconds"), preview=preview,
        )
        if preview:
            # A preview takes no lock and writes nothing, not even a diary entry.
            self._run(out, now)
            out.finished_at = self.clock.now().isoformat(timespec="seconds")
            return out
        if not self.mem.emergence_enabled:
            out.reason = "dreaming is off (mate.memory.emergence-enabled: false)"
            return self._finish(out, t0)
        try:
            with self.lock(agent, owner=owner):
                try:
                    self._run(out, now)
                except ModelError as exc:
                    out.status, out.reason, out.error_kind, out.error_code = "failed", exc.message, exc.kind, exc.code
                except MateclawError as exc:
                    out.status, out.reason, out.error_code = "failed", exc.message, exc.code
                except Exception as exc:  # a bug must still leave a diary entry and a clean lock
                    log.exception("dream run %s failed", out.run_id)
                    out.status, out.reason, out.error_code = "failed", f"{type(exc).__name__}: {exc}", "error"
                return self._finish(out, t0)
        except BusyError as exc:
            out.status, out.reason = "skipped", exc.message
            self._finish(out, t0)
            raise

    def _run(self, out: DreamOutcome, now: datetime) -> None:
        agent, owner = out.agent, out.owner
        today = now.astimezone(self.clock.tz).date()
        day_range = self.mem.emergence_day_range
        found, out.looked_at = cand.collect(
            self.store, agent, owner=owner, today=today, day_range=day_range,
            limit=self.mem.dream.max_candidates_per_dream,
        )
        out.sections = len(found)
        if not found:
            out.status = "nothing_to_do"
            out.reason = f"no daily-note sections in the last {day_range} day(s)"
            return
        since = datetime.combine(today - timedelta(days=day_range - 1), datetime.min.time(), tzinfo=self.clock.tz)
        hits = self._hits(agent, owner, since)
        try:
            retry_on_conflict(lambda n: self._attempt(out, now, today, found, hits, n), retries=CONFLICT_RETRIES)
        except ConflictError:
            out.status = "failed"
            out.error_code = "conflict"
            out.reason = ("MEMORY.md kept changing while the dream ran (edited by hand); "
                          "left as the person wrote it, the dream will try again next time")

    def _attempt(self, out: DreamOutcome, now: datetime, today: date, found: list[cand.Candidate],
                 hits: Sequence[Any], n: int) -> None:
        """Plan on the current MEMORY.md and write it by compare-and-swap (ConflictError when a
        person saved since it was read: the caller plans again on their version)."""
        agent, owner, topic = out.agent, out.owner, out.topic
        snap = self.store.read(agent, MEMORY_REL, owner=owner)
        try:  # before any planning (a model prompt would carry all of it): the write would be refused
            oversized.refuse_machine_write(MEMORY_REL, snap.text, self.store.file_max_bytes)
        except RejectedError as exc:
            out.status, out.reason = "rejected", exc.message
            return
        out.memory_before = snap.text
        # Rules mode threads topics the person came back to weeks apart: it reads the notes before the window.
        older = (topics.history(self.store, agent, owner=owner, today=today, day_range=self.mem.emergence_day_range)
                 if self.mode == "rules" else [])
        scored = cand.score(found, today=today, hits=hits, topic=topic, memory_body=snap.body, older=older)
        out.candidates = [s.as_dict() for s in scored.candidates]
        plan = self._plan(out, snap, scored, now, RETRY_NOTE if n else "")
        guard = self._forget.guard(agent, owner) if self._forget is not None else None
        if guard and plan.new_text is not None:  # rules or model: what the plan adds is checked
            body = guard.body(snap.body, frontmatter.body(plan.new_text))
            plan.new_text = frontmatter.with_body(plan.new_text, body) if body.strip() != snap.body.strip() else None
            plan.promoted = [p for p in plan.promoted if not guard.blocks(p)]
        out.promoted, out.kept = plan.promoted, plan.kept
        out.reason = plan.reason
        if plan.new_text is None:
            out.status = "nothing_to_do"
            return
        # What the store will really write (pins, a person's lines, the ceiling), so the loss
        # gate and the preview judge what would land on disk.
        final = self.store.preview(agent, MEMORY_REL, snap.text, plan.new_text, actor=ACTOR, owner=owner,
                                   erosion=False)
        dropped = gates.dropped_entries(snap.body, frontmatter.body(final))
        old_count = gates.count_entries(snap.body)
        out.dropped = [d for d, _ in dropped]
        if old_count and len(dropped) / old_count > LOSS_LIMIT:
            out.status = "rejected"
            out.reason = (
                f"the rewrite would drop {len(dropped)} of {old_count} entries of MEMORY.md "
                f"(more than {LOSS_LIMIT:.0%}); MEMORY.md left unchanged. Model's reason: {plan.reason or '-'}"
            )
            out.diff, out.lines_added, out.lines_removed = gates.diff(snap.text, final)
            return
        try:  # the cumulative guard: small drops night after night count up
            self.store.preview(agent, MEMORY_REL, snap.text, plan.new_text, actor=ACTOR, owner=owner)
        except RejectedError as exc:
            out.status, out.reason = "rejected", f"{exc.message}. Model's reason: {plan.reason or '-'}"
            out.diff, out.lines_added, out.lines_removed = gates.diff(snap.text, final)
            return
        if final == snap.text:
            out.status = "nothing_to_do"
            out.reason = plan.reason or "MEMORY.md already holds everything worth keeping"
            return
        if out.preview:
            out.status = "preview"
            out.would_change = True
            out.diff, out.lines_added, out.lines_removed = gates.diff(snap.text, final)
            return
        # Journaled with the run's records (apply.py): a kill from here on is finished at the next start.
        result = apply.write(self.store, out, snap, plan.new_text, dropped, now, final)
        for rel in result.archived:
            if rel not in out.archived:
                out.archived.append(rel)
        after = self.store.read(agent, MEMORY_REL, owner=owner).text
        out.diff, out.lines_added, out.lines_removed = gates.diff(snap.text, after)
        out.status = "done" if result.changed else "nothing_to_do"

    def _plan(self, out: DreamOutcome, snap: Any, scored: cand.Scored, now: datetime, retry_note: str) -> DreamPlan:
        protected = gates.protected_sections(self.store, out.agent, out.owner, snap)
        if self.mode == "rules":
            return plan_rules(snap, scored, now, out.topic, protected)
        return plan_model(self._model_client(), out.agent, out.topic, snap, scored, now, protected, retry_note)

    def _model_client(self) -> Any:
        if self._client is None:
            self._client = self._model()
        if self._client is None:
            raise ConfigError("no model client: model mode needs the shared one (Services.model), and in rules "
                              "mode (model.base-url and model.model empty) there is none")
        return self._client

    def _hits(self, agent: str, owner: str | None, since: datetime) -> Sequence[Any]:
        if self._retrieval_hits is None:
            return ()
        try:
            return list(self._retrieval_hits(agent, owner, since))
        except Exception:  # evidence is a bonus; a broken search index must not stop the night
            log.exception("retrieval hits unavailable for %s; scoring without them", agent)
            return ()

    # -- records ---------------------------------------------------------------------------------

    def _finish(self, out: DreamOutcome, t0: float) -> DreamOutcome:
        out.finished_at = self.clock.now().isoformat(timespec="seconds")
        out.reason = redact(out.reason)  # into the run log and DREAMS.md; a model error may quote its answer
        if out.error_kind:
            record_failure(self._client, "dream", out.error_kind, out.reason, agent=out.agent, owner=out.owner)
        memory = self.store.read(out.agent, MEMORY_REL, owner=out.owner)
        before = memory.text if out.memory_before is None else out.memory_before
        out.report = build_report(out, before, memory.text, self.contradictions)
        entry = apply.entry_of(out, len(memory.body))
        files = [MEMORY_REL] * (out.status == "done") + out.archived
        try:
            written = self.diary.append(out.agent, entry, owner=out.owner)  # None: a quiet night left out
            files += [written.rel] if written is not None else []
        except MateclawError as exc:  # the run itself is done; say the diary failed instead of hiding it
            log.error("could not write the DREAMS.md entry for %s: %s", out.run_id, exc.message)
            out.reason += f" (diary entry not written: {exc.message})"
        self.runs.record(out)
        apply.end(self.store, out.run_id)  # the rewrite, its diary entry and its record are whole
        log.info("%s", log_line(out, (time.monotonic() - t0) * 1000, files))
        return out

    def last_run(self, agent: str, *, owner: str | None = None) -> dict[str, Any] | None:
        return self.runs.last_run(agent, owner=owner)

    def status(self, agent: str, *, owner: str | None = None) -> dict[str, Any]:
        """Last run (time, outcome, reason), next scheduled run, latest DREAMS.md entry."""
        check_agent(agent)
        last = self.last_run(agent, owner=owner)
        running = self.running(agent, owner=owner)
        nxt = self._next_run() if self._next_run else None
        return {
            "agent": agent,
            "owner": owner,
            "enabled": self.mem.emergence_enabled,
            "mode": self.mode,
            "cron": self.settings.dreaming.cron,
            "running": running,
            "last_run": None if last is None else run_summary(last),
            "next_run": nxt.isoformat(timespec="seconds") if nxt else None,
            "latest_entry": self.diary.latest(agent, owner=owner),
        }

    def report(self) -> dict[str, Any]:
        """Short per-agent summary for `mateclaw-mem status`."""
        out: dict[str, Any] = {}
        for agent in self.store.agents():
            last = self.last_run(agent)
            out[agent] = {
                "last_run": last["started_at"] if last else None,
                "outcome": last["status"] if last else None,
                "reason": last["reason"] if last else None,
            }
        nxt = self._next_run() if self._next_run else None
        return {"enabled": self.mem.emergence_enabled, "cron": self.settings.dreaming.cron,
                "next_run": nxt.isoformat(timespec="seconds") if nxt else None, "agents": out}

    def rotate(self, agent: str, *, owner: str | None = None) -> dict[str, Any]:
        """Archive rotation: daily notes past `dream.archive-keep-days` move to monthly archives, and
        the diary is held to its cap. Nothing is deleted without being archived first."""
        from mateclaw_mem.memory.dreaming.rotation import rotate_daily_notes

        moved: list[str] = []
        dream = self.mem.dream
        if dream.archive_enabled and dream.archive_keep_days > 0:
            keep = max(dream.archive_keep_days, self.mem.emergence_day_range)
            moved = rotate_daily_notes(self.store, agent, owner=owner, today=self.clock.now().date(), keep_days=keep,
                                       actor="rotation")
        diary = self.diary.enforce_cap(agent, owner=owner)
        return {"agent": agent, "daily_notes_archived": moved, "diary_archives": diary}

    def close(self) -> None:
        self.runs.close()  # the model client is shared: its owner (Services) closes it



