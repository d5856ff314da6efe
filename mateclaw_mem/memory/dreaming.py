"""Dreaming: consolidate the recent daily notes into MEMORY.md, nightly or on demand.

Public API (what the CLI / HTTP / MCP faces and the scheduler call)::

    svc = DreamingService(settings, store, clock=clock)      # model client built from settings
    svc.dream(agent, *, topic=None, preview=False, owner=None, trigger="manual") -> DreamOutcome
        # POST /api/v1/memory/{agentId}/emergence; raises BusyError when a run holds the agent's lock
    svc.status(agent, *, owner=None) -> dict                  # GET /api/v1/memory/{agentId}/dreaming/status
    svc.report() -> dict                                      # for `mateclaw-mem status`
    svc.rotate(agent, *, owner=None) -> dict                  # archive rotation (scheduler)
    with svc.lock(agent): ...                                 # the per-agent run lock (busy -> BusyError)

A run: candidates (daily-note sections of the last `emergence-day-range` days, newest first, at most
`dream.max-candidates-per-dream`) scored on evidence (memory/candidates.py) → model
(`{should_update, reason, memory_content}`) or rules (promote facts that recur on 2+ distinct days
into a `## Recurring` section, each with a `Source:`) → guarded rewrite of MEMORY.md → one
DREAMS.md entry for every outcome.

Safety gates on the rewrite:
- every write of a run carries the batch id `dream-<agent>-<YYYYmmddTHHMMSS>`: `store.undo_batch(id)`
  (CLI `mateclaw-mem undo AGENT --run ID`) restores the previous MEMORY.md byte for byte;
- a rewrite that drops more than 25% of the existing entries (`##` sections and list items) is rejected;
  smaller drops are moved to `memory/archive/MEMORY-YYYY-MM-DD.md` before the rewrite;
- pinned sections (the store restores them) and hand-edited sections (changed by actor "person" since
  the last machine write, from the file's history) stay verbatim; an edit the history cannot explain
  (made outside the store) protects every existing section;
- ceilings apply (the store cuts and archives);
- compare-and-swap on the hash read at the start: a concurrent human edit → re-read and plan again once,
  else the run fails and MEMORY.md stays as the person left it;
- a failed model leaves MEMORY.md untouched; the diary records the failure.

The model's turns are recorded in the usage log under the step "consolidation"; they never enter the
conversation log, so they can never trigger extraction.
"""

from __future__ import annotations

import contextlib
import difflib
import logging
import re
import threading
from collections.abc import Callable, Iterator, Sequence
from dataclasses import asdict, dataclass, field
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

from filelock import FileLock, Timeout

from mateclaw_mem.clock import Clock
from mateclaw_mem.db import connect
from mateclaw_mem.errors import BusyError, ConflictError, InvalidInputError, MateclawError, ModelError
from mateclaw_mem.llm.prompts.dream import DreamResult, PromptCandidate, build_messages, check_result
from mateclaw_mem.markdown import frontmatter
from mateclaw_mem.markdown.ceilings import apply_ceiling
from mateclaw_mem.markdown.sections import Section, find, join, normalise_title, preserve_pinned, split_sections
from mateclaw_mem.memory import candidates as cand
from mateclaw_mem.memory.diary import Diary, DiaryEntry
from mateclaw_mem.settings import Settings
from mateclaw_mem.workspace.paths import check_agent, owner_dirname
from mateclaw_mem.workspace.store import PERSON, WorkspaceStore, sha256

log = logging.getLogger(__name__)

ACTOR = "dreaming"
MEMORY_REL = "MEMORY.md"
MODEL_STEP = "consolidation"
LOSS_LIMIT = 0.25  # share of existing entries a rewrite may drop (they are archived); more is rejected
KEPT_CONTAINMENT = 0.7  # an old list item whose shingles are this much inside a new line survived
CONFLICT_RETRIES = 1
RECURRING_TITLES = ("Recurring", "反复出现")
PREAMBLE_KEY = "\x00preamble"  # protected-set key for the text before the first `##`

HitsProvider = Callable[[str, str | None, datetime], Sequence[Any]]

_RUNS_SCHEMA = """
CREATE TABLE IF NOT EXISTS dream_runs (
    run_id TEXT PRIMARY KEY,
    agent TEXT NOT NULL,
    owner TEXT NOT NULL DEFAULT '',
    topic TEXT,
    trigger TEXT NOT NULL,
    mode TEXT NOT NULL,
    started_at TEXT NOT NULL,
    finished_at TEXT,
    status TEXT NOT NULL,
    reason TEXT NOT NULL DEFAULT '',
    promoted INTEGER NOT NULL DEFAULT 0,
    lines_added INTEGER NOT NULL DEFAULT 0,
    lines_removed INTEGER NOT NULL DEFAULT 0
);
CREATE INDEX IF NOT EXISTS dream_runs_agent ON dream_runs(agent, owner, started_at);
"""


@dataclass
class DreamOutcome:
    run_id: str
    agent: str
    status: str  # done | nothing_to_do | skipped | failed | rejected | preview
    reason: str
    mode: str
    trigger: str
    started_at: str
    finished_at: str = ""
    owner: str | None = None
    topic: str | None = None
    preview: bool = False
    would_change: bool = False  # preview: the run would rewrite MEMORY.md
    looked_at: list[str] = field(default_factory=list)
    sections: int = 0  # daily-note sections looked at
    candidates: list[dict[str, Any]] = field(default_factory=list)
    promoted: list[str] = field(default_factory=list)
    kept: list[str] = field(default_factory=list)
    diff: str = ""
    lines_added: int = 0
    lines_removed: int = 0
    archived: list[str] = field(default_factory=list)
    dropped: list[str] = field(default_factory=list)  # entries the rewrite removed (archived) or would have
    error_kind: str | None = None  # set only when the configured model failed (timeout, rate_limit, server, ...)
    error_code: str | None = None  # failed runs: "model", "conflict", "busy", ... (MateclawError.code)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class _Plan:
    new_text: str | None  # full MEMORY.md text to write; None = nothing to do
    reason: str
    promoted: list[str]
    kept: list[str]


class DreamingService:
    def __init__(
        self,
        settings: Settings,
        store: WorkspaceStore,
        *,
        clock: Clock,
        model: Any | None = None,
        model_factory: Callable[[], Any] | None = None,
        retrieval_hits: HitsProvider | None = None,
        next_run: Callable[[], datetime | None] | None = None,
        runs_db: Path | None = None,
    ) -> None:
        self.settings = settings
        self.store = store
        self.clock = clock
        self.mem = settings.mate.memory
        self.diary = Diary(store, max_chars=settings.dreaming.diary_max_chars)
        self._model = model
        self._model_factory = model_factory
        self._owns_model = False
        self._retrieval_hits = retrieval_hits
        self._next_run = next_run
        self._runs_db_path = runs_db or settings.state_dir / "log.db"
        self._db = None
        self._db_lock = threading.Lock()
        self._guard = threading.Lock()
        self._thread_locks: dict[str, threading.Lock] = {}
        self._file_locks: dict[str, FileLock] = {}

    @property
    def mode(self) -> str:
        return "model" if (self.settings.model.configured or self._model is not None) else "rules"

    # -- the per-agent run lock ------------------------------------------------------------------

    @contextlib.contextmanager
    def lock(self, agent: str, *, owner: str | None = None) -> Iterator[None]:
        """One dream at a time per (agent, owner), across threads and processes. Never waits."""
        key = check_agent(agent) + (f"--{owner_dirname(owner)}" if owner else "")
        with self._guard:
            tlock = self._thread_locks.setdefault(key, threading.Lock())
            if key not in self._file_locks:
                lock_dir = self.settings.state_dir / "locks"
                lock_dir.mkdir(parents=True, exist_ok=True)
                self._file_locks[key] = FileLock(str(lock_dir / f"dream-{sha256(key)[:24]}.lock"))
            flock = self._file_locks[key]
        busy = f"a dream run for agent {agent!r}{f' (owner {owner})' if owner else ''} is already in progress"
        if not tlock.acquire(blocking=False):
            raise BusyError(busy)
        try:
            try:
                flock.acquire(timeout=0)
            except Timeout:
                raise BusyError(busy + " in another process") from None
            try:
                yield
            finally:
                flock.release()
        finally:
            tlock.release()

    # -- a run -----------------------------------------------------------------------------------

    def dream(
        self,
        agent: str,
        *,
        topic: str | None = None,
        preview: bool = False,
        owner: str | None = None,
        trigger: str = "manual",
    ) -> DreamOutcome:
        check_agent(agent)
        topic = " ".join(topic.split()) if topic else None
        if topic and not self.mem.dream.focused_enabled:
            raise InvalidInputError(
                "focused dreaming is off (mate.memory.dream.focused-enabled: false); run without --topic"
            )
        now = self.clock.now()
        out = DreamOutcome(
            run_id=self._run_id(agent, owner, now, unique=not preview), agent=agent, owner=owner, topic=topic,
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
            return self._finish(out)
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
                return self._finish(out)
        except BusyError as exc:
            out.status, out.reason = "skipped", exc.message
            self._finish(out)
            raise

    def _run(self, out: DreamOutcome, now: datetime) -> None:
        agent, owner, topic = out.agent, out.owner, out.topic
        today = now.astimezone(self.clock.tz).date()
        day_range = self.mem.emergence_day_range
        found, out.looked_at = cand.collect(
            self.store, agent, owner=owner, today=today, day_range=day_range,
            limit=self.mem.dream.max_candidates_per_dream,
        )
        snap = self.store.read(agent, MEMORY_REL, owner=owner)
        out.sections = len(found)
        if not found:
            out.status = "nothing_to_do"
            out.reason = f"no daily-note sections in the last {day_range} day(s)"
            return
        since = datetime.combine(today - timedelta(days=day_range - 1), datetime.min.time(), tzinfo=self.clock.tz)
        hits = self._hits(agent, owner, since)
        for attempt in range(CONFLICT_RETRIES + 1):
            scored = cand.score(found, today=today, hits=hits, topic=topic, memory_body=snap.body)
            out.candidates = [s.as_dict() for s in scored.candidates]
            retry_note = "" if attempt == 0 else (
                "MEMORY.md was edited by the person while you were working; the version above is the new one. "
                "Keep their edits."
            )
            plan = self._plan(out, snap, scored, now, retry_note)
            out.promoted, out.kept = plan.promoted, plan.kept
            out.reason = plan.reason
            if plan.new_text is None:
                out.status = "nothing_to_do"
                return
            final = _simulate_guard(snap.text, plan.new_text, self.store.ceiling_for(MEMORY_REL),
                                    f"memory/archive/MEMORY-{now:%Y-%m-%d}.md")
            dropped = _dropped_entries(snap.body, frontmatter.body(final))
            old_count = _count_entries(snap.body)
            out.dropped = [d for d, _ in dropped]
            if old_count and len(dropped) / old_count > LOSS_LIMIT:
                out.status = "rejected"
                out.reason = (
                    f"the rewrite would drop {len(dropped)} of {old_count} entries of MEMORY.md "
                    f"(more than {LOSS_LIMIT:.0%}); MEMORY.md left unchanged. Model's reason: {plan.reason or '-'}"
                )
                out.diff, out.lines_added, out.lines_removed = _diff(snap.text, final)
                return
            if final == snap.text:
                out.status = "nothing_to_do"
                out.reason = plan.reason or "MEMORY.md already holds everything worth keeping"
                return
            if out.preview:
                out.status = "preview"
                out.would_change = True
                out.diff, out.lines_added, out.lines_removed = _diff(snap.text, final)
                return
            try:
                if dropped:
                    out.archived.append(self._archive_dropped(agent, owner, dropped, now, out.run_id))
                result = self.store.write(
                    agent, MEMORY_REL, plan.new_text, expected_sha=snap.sha, actor=ACTOR, owner=owner,
                    reason=f"dream: {_short(plan.reason)}", batch=out.run_id,
                )
            except ConflictError:
                if attempt >= CONFLICT_RETRIES:
                    out.status = "failed"
                    out.error_code = "conflict"
                    out.reason = ("MEMORY.md kept changing while the dream ran (edited by hand); "
                                  "left as the person wrote it, the dream will try again next time")
                    return
                snap = self.store.read(agent, MEMORY_REL, owner=owner)
                continue
            for rel in result.archived:
                if rel not in out.archived:
                    out.archived.append(rel)
            after = self.store.read(agent, MEMORY_REL, owner=owner).text
            out.diff, out.lines_added, out.lines_removed = _diff(snap.text, after)
            out.status = "done" if result.changed else "nothing_to_do"
            return

    def _plan(self, out: DreamOutcome, snap: Any, scored: cand.Scored, now: datetime, retry_note: str) -> _Plan:
        protected = self._protected(out.agent, out.owner, snap)
        if self.mode == "rules":
            return self._plan_rules(snap, scored, now, out.topic, protected)
        return self._plan_model(out, snap, scored, now, protected, retry_note)

    def _plan_rules(self, snap: Any, scored: cand.Scored, now: datetime, topic: str | None,
                    protected: set[str]) -> _Plan:
        promote = cand.promotable(scored, topic=topic)
        kept = _kept(scored, promote)
        if not promote:
            recurring = [k for k in scored.clusters if k.recurring]
            if recurring and all(k.present for k in recurring):
                reason = "every fact that recurred is already in MEMORY.md"
            elif topic and recurring:
                reason = f"no recurring fact about {topic!r}"
            else:
                reason = "no fact recurred on 2 or more days; one-offs stay in the daily notes"
            return _Plan(None, reason, [], kept)
        block, body = frontmatter.split(snap.text)
        new_body, lines = _add_recurring(body, promote, now, protected)
        lines = [line.removeprefix("- ") for line in lines]
        reason = (f"promoted {len(promote)} fact{'s' if len(promote) != 1 else ''} that recurred on 2 or more "
                  f"days" + (f" about {topic!r}" if topic else ""))
        return _Plan(block + new_body, reason, lines, kept)

    def _plan_model(self, out: DreamOutcome, snap: Any, scored: cand.Scored, now: datetime,
                    protected: set[str], retry_note: str) -> _Plan:
        model = self._model_client()
        prompt_candidates = [
            PromptCandidate(source=s.candidate.source, score=s.score, days=s.days, sessions=s.sessions, hits=s.hits,
                            explicit=s.explicit, text=s.candidate.text)
            for s in scored.candidates
        ]
        messages = build_messages(agent=out.agent, now=now.isoformat(timespec="minutes"), memory=snap.body,
                                  candidates=prompt_candidates, topic=out.topic, retry_note=retry_note)
        try:
            result: DreamResult = model.chat_json(messages, DreamResult, step=MODEL_STEP, check=check_result)
        except ModelError as exc:
            raise ModelError(f"the model failed during the dream ({exc.kind}): {exc.message}; MEMORY.md left "
                             "unchanged", kind=exc.kind, retryable=exc.retryable) from None
        kept_all = _kept(scored, [])
        if not result.should_update:
            return _Plan(None, result.reason or "the model found nothing to change", [], kept_all)
        block, old_body = frontmatter.split(snap.text)
        new_body = result.memory_content if result.memory_content.endswith("\n") else result.memory_content + "\n"
        new_body = _preserve_sections(old_body, new_body, protected)
        new_lines = [cand.shingles(line) for line in new_body.splitlines()]
        chosen = [k for k in scored.clusters if not k.present and any(
            cand.containment(k.shingles, line) >= cand.PRESENT_CONTAINMENT for line in new_lines)]
        return _Plan(block + new_body, result.reason, [k.text for k in chosen], _kept(scored, chosen))

    def _model_client(self) -> Any:
        if self._model is None:
            if self._model_factory is not None:
                self._model = self._model_factory()
            else:
                from mateclaw_mem.llm.client import ModelClient
                from mateclaw_mem.llm.usage import UsageLog

                self._model = ModelClient.from_settings(self.settings, usage=UsageLog(self._runs_db_path))
                self._owns_model = True
            if self._model is None:
                from mateclaw_mem.errors import ConfigError

                raise ConfigError("no model configured (model.base-url and model.model are empty): rules mode")
        return self._model

    def _hits(self, agent: str, owner: str | None, since: datetime) -> Sequence[Any]:
        if self._retrieval_hits is None:
            return ()
        try:
            return list(self._retrieval_hits(agent, owner, since))
        except Exception:  # evidence is a bonus; a broken search index must not stop the night
            log.exception("retrieval hits unavailable for %s; scoring without them", agent)
            return ()

    def _protected(self, agent: str, owner: str | None, snap: Any) -> set[str]:
        """Section keys a machine may not change: pinned, and hand-edited since the last machine write."""
        _, sections = split_sections(snap.body)
        keys = {s.key for s in sections if s.pinned}
        if not snap.exists:
            return keys
        versions = self.store.history(agent, MEMORY_REL, owner=owner)
        if not versions or versions[-1].replaced_by != snap.sha:
            # Changed outside the store (or created by hand): we cannot tell which sections the
            # person touched, so every one of them is theirs.
            return keys | {s.key for s in sections} | {PREAMBLE_KEY}
        key = self.store.agent_key(agent, owner)
        after = snap.text
        for v in reversed(versions):
            if v.actor != PERSON:
                break
            before = self.store.history_store.content(key, MEMORY_REL, v.version).decode("utf-8") if v.existed else ""
            keys |= _changed_sections(before, after)
            after = before
        return keys

    def _archive_dropped(self, agent: str, owner: str | None, dropped: list[tuple[str, str]], now: datetime,
                         run_id: str) -> str:
        rel = f"memory/archive/MEMORY-{now:%Y-%m-%d}.md"
        text = "\n".join(t.rstrip("\n") for _, t in dropped if t) + "\n"

        def add(current: str) -> str | None:
            if text.strip() in current:
                return None  # a retry after a conflict: already archived
            if not current:
                current = f"---\nenabled: false\n---\n# Archive of MEMORY.md — {now:%Y-%m-%d}\n\n"
            note = f"<!-- dropped from MEMORY.md at {now:%H:%M} by dream run {run_id} -->\n"
            return current.rstrip("\n") + "\n\n" + note + text

        # Archive first: a crash before the rewrite leaves the text twice, never zero times.
        self.store.update(agent, rel, add, actor=ACTOR, owner=owner, reason=f"archive for {run_id}", batch=run_id)
        return rel

    # -- records ---------------------------------------------------------------------------------

    def _finish(self, out: DreamOutcome) -> DreamOutcome:
        out.finished_at = self.clock.now().isoformat(timespec="seconds")
        entry = DiaryEntry(
            when=datetime.fromisoformat(out.started_at), outcome=out.status, reason=out.reason, run_id=out.run_id,
            mode=out.mode, trigger=out.trigger, topic=out.topic, owner=out.owner, looked_at=out.looked_at,
            sections=out.sections,
            memory_chars=len(self.store.read(out.agent, MEMORY_REL, owner=out.owner).body),
            candidates=out.candidates, promoted=out.promoted, kept=out.kept,
            added=out.lines_added, removed=out.lines_removed, archived=out.archived,
        )
        try:
            self.diary.append(out.agent, entry, owner=out.owner)
        except MateclawError as exc:  # the run itself is done; say the diary failed instead of hiding it
            log.error("could not write the DREAMS.md entry for %s: %s", out.run_id, exc.message)
            out.reason += f" (diary entry not written: {exc.message})"
        self._record(out)
        return out

    def _conn(self) -> Any:
        if self._db is None:
            self._db = connect(self._runs_db_path)
            self._db.executescript(_RUNS_SCHEMA)
        return self._db

    def _record(self, out: DreamOutcome) -> None:
        with self._db_lock:
            self._conn().execute(
                "INSERT OR REPLACE INTO dream_runs(run_id, agent, owner, topic, trigger, mode, started_at, finished_at,"
                " status, reason, promoted, lines_added, lines_removed) VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?)",
                (out.run_id, out.agent, out.owner or "", out.topic, out.trigger, out.mode, out.started_at,
                 out.finished_at, out.status, out.reason, len(out.promoted), out.lines_added, out.lines_removed),
            )

    def _run_id(self, agent: str, owner: str | None, now: datetime, *, unique: bool = True) -> str:
        base = f"dream-{agent}-{now:%Y%m%dT%H%M%S}"
        if owner:
            base = f"dream-{agent}-{re.sub(r'[^A-Za-z0-9_.-]', '_', owner)[:32]}-{now:%Y%m%dT%H%M%S}"
        if not unique:
            return base  # a preview writes nothing, not even to the run log
        with self._db_lock:
            taken = {r[0] for r in self._conn().execute(
                "SELECT run_id FROM dream_runs WHERE run_id = ? OR run_id LIKE ?", (base, base + "-%"))}
        if base not in taken:
            return base
        n = 2
        while f"{base}-{n}" in taken:
            n += 1
        return f"{base}-{n}"

    def last_run(self, agent: str, *, owner: str | None = None) -> dict[str, Any] | None:
        with self._db_lock:
            row = self._conn().execute(
                "SELECT * FROM dream_runs WHERE agent=? AND owner=? ORDER BY started_at DESC, rowid DESC LIMIT 1",
                (agent, owner or ""),
            ).fetchone()
        return dict(row) if row else None

    def status(self, agent: str, *, owner: str | None = None) -> dict[str, Any]:
        """Last run (time, outcome, reason), next scheduled run, latest DREAMS.md entry."""
        check_agent(agent)
        last = self.last_run(agent, owner=owner)
        running = False
        try:
            with self.lock(agent, owner=owner):
                pass
        except BusyError:
            running = True
        nxt = self._next_run() if self._next_run else None
        return {
            "agent": agent,
            "owner": owner,
            "enabled": self.mem.emergence_enabled,
            "mode": self.mode,
            "cron": self.settings.dreaming.cron,
            "running": running,
            "last_run": None if last is None else {
                "run_id": last["run_id"], "at": last["started_at"], "finished_at": last["finished_at"],
                "outcome": last["status"], "reason": last["reason"], "trigger": last["trigger"],
                "topic": last["topic"], "promoted": last["promoted"],
                "lines_added": last["lines_added"], "lines_removed": last["lines_removed"],
            },
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
        from mateclaw_mem.memory.rotation import rotate_daily_notes

        moved: list[str] = []
        dream = self.mem.dream
        if dream.archive_enabled and dream.archive_keep_days > 0:
            keep = max(dream.archive_keep_days, self.mem.emergence_day_range)
            moved = rotate_daily_notes(self.store, agent, owner=owner, today=self.clock.now().date(), keep_days=keep,
                                       actor="rotation")
        diary = self.diary.enforce_cap(agent, owner=owner)
        return {"agent": agent, "daily_notes_archived": moved, "diary_archives": diary}

    def close(self) -> None:
        if self._db is not None:
            self._db.close()
            self._db = None
        if self._owns_model:  # a shared client (from the factory) is closed by its owner
            closer = getattr(self._model, "close", None)
            if callable(closer):
                closer()


# -- pure text helpers ---------------------------------------------------------------------------------


def _kept(scored: cand.Scored, promoted: list[cand.FactCluster]) -> list[str]:
    """Facts left in the daily notes for a later night (not promoted, not already in MEMORY.md)."""
    out = []
    for k in scored.clusters:
        if k in promoted or k.present:
            continue
        days = len(k.days)
        where = f"{k.sources[0].rel} {k.sources[0].time}".rstrip()
        out.append(f"{k.text} ({where}, {days} day{'s' if days != 1 else ''})")
    return out


def _short(text: str, limit: int = 120) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _diff(before: str, after: str) -> tuple[str, int, int]:
    lines = list(difflib.unified_diff(before.splitlines(keepends=True), after.splitlines(keepends=True),
                                      fromfile="MEMORY.md (before)", tofile="MEMORY.md (after)"))
    added = sum(1 for ln in lines if ln.startswith("+") and not ln.startswith("+++"))
    removed = sum(1 for ln in lines if ln.startswith("-") and not ln.startswith("---"))
    text = "".join(ln if ln.endswith("\n") else ln + "\n" for ln in lines)
    return text, added, removed


def _simulate_guard(old_text: str, new_text: str, cap: int, archive_rel: str) -> str:
    """What the store will make of a machine write (frontmatter kept, pins restored, ceiling applied),
    so the loss gate and the preview judge what would really land on disk."""
    old_block, old_body = frontmatter.split(old_text)
    new_block, new_body = frontmatter.split(new_text)
    if old_block and not new_block:
        new_block = old_block
    new_body = preserve_pinned(old_body, new_body)
    if cap:
        new_body = apply_ceiling(new_body, cap, archive_rel).body
    return new_block + new_body


def _list_items(text: str) -> list[str]:
    out = []
    for raw in text.splitlines():
        m = re.match(r"^\s*(?:[-*+]|\d+[.)])\s+(.*\S)\s*$", raw)
        if m:
            out.append(raw.rstrip())
    return out


def _count_entries(body: str) -> int:
    """Entries of MEMORY.md for the loss gate: `##` sections and list items, pinned ones excluded
    (the store restores those whatever a rewrite does)."""
    preamble, sections = split_sections(body)
    count = len(_list_items(preamble))
    for s in sections:
        if not s.pinned:
            count += 1 + len(_list_items(s.text))
    return count


def _dropped_entries(old_body: str, new_body: str) -> list[tuple[str, str]]:
    """(label, text to archive) for each old entry the new body no longer carries. A list item
    survives when it is present verbatim or mostly contained in some new line (a merge or rewording)."""
    _, new_sections = split_sections(new_body)
    new_keys = {s.key for s in new_sections}
    new_plain = {" ".join(line.split()) for line in new_body.splitlines()}
    new_shingles = [cand.shingles(line) for line in new_body.splitlines() if line.strip()]

    def survives(item: str) -> bool:
        text = " ".join(item.split())
        if text in new_plain or text.lstrip("-*+ ") in new_body:
            return True
        sh = cand.shingles(text)
        return len(sh) >= 2 and any(cand.containment(sh, line) >= KEPT_CONTAINMENT for line in new_shingles)

    preamble, sections = split_sections(old_body)
    dropped: list[tuple[str, str]] = []
    for item in _list_items(preamble):
        if not survives(item):
            dropped.append((item.strip(), item))
    for s in sections:
        if s.pinned:
            continue
        if s.key not in new_keys:
            dropped.append((f"## {s.title}", s.text))
            dropped.extend((i.strip(), "") for i in _list_items(s.text))  # archived with their section
            continue
        for item in _list_items(s.text):
            if not survives(item):
                dropped.append((item.strip(), f"{item}  <!-- from ## {s.title} -->"))
    return dropped


def _changed_sections(before: str, after: str) -> set[str]:
    b_pre, b_secs = split_sections(frontmatter.body(before))
    a_pre, a_secs = split_sections(frontmatter.body(after))
    old = {s.key: s.text.rstrip() for s in b_secs}
    keys = {s.key for s in a_secs if old.get(s.key) != s.text.rstrip()}
    if b_pre.rstrip() != a_pre.rstrip():
        keys.add(PREAMBLE_KEY)
    return keys


def _preserve_sections(old_body: str, new_body: str, keys: set[str]) -> str:
    """Put the protected sections of `old_body` back verbatim (changed → restored in place, dropped →
    re-inserted after the section that preceded it), and the old preamble if it is protected."""
    if not keys:
        return new_body
    old_pre, old_secs = split_sections(old_body)
    pre, secs = split_sections(new_body)
    if PREAMBLE_KEY in keys:
        pre = old_pre
    for i, s in enumerate(old_secs):
        if s.key not in keys:
            continue
        at = find(secs, s.title)
        if at is not None:
            secs[at] = s
            continue
        insert_at = 0
        for prev in reversed(old_secs[:i]):
            found = find(secs, prev.title)
            if found is not None:
                insert_at = found + 1
                break
        else:
            insert_at = 0 if i == 0 else len(secs)
        secs.insert(insert_at, s if s.text.endswith("\n") else Section(s.title, s.text + "\n"))
    # A restored section that ended without a blank line must not glue onto the next heading.
    fixed = [Section(s.title, s.text if s.text.endswith("\n") else s.text + "\n") for s in secs]
    return join(pre, fixed)


def _is_zh(text: str) -> bool:
    cjk = len(re.findall(r"[\u3400-\u4dbf\u4e00-\u9fff]", text))
    return cjk > 0 and cjk * 2 >= len(re.findall(r"[A-Za-z]", text))


def _format_source(cluster: cand.FactCluster, now: datetime) -> str:
    shown = [f"{c.rel} {c.time}".strip() for c in cluster.sources[:3]]
    more = len(cluster.sources) - len(shown)
    refs = "; ".join(shown) + (f"; +{more} more" if more > 0 else "")
    return f"(Source: {refs} · dreamed {now:%Y-%m-%d})"


def _add_recurring(body: str, promote: list[cand.FactCluster], now: datetime,
                   protected: set[str]) -> tuple[str, list[str]]:
    """Rules-mode consolidation: append the promoted facts to the `## Recurring` section (created in the
    person's language when missing; a dated new section when the existing one is protected)."""
    lines = [f"- {k.text.rstrip()} {_format_source(k, now)}" for k in promote]
    preamble, sections = split_sections(body)
    at = next((i for i, s in enumerate(sections) if s.key in {normalise_title(t) for t in RECURRING_TITLES}), None)
    if at is not None and sections[at].key not in protected and not sections[at].pinned:
        s = sections[at]
        text = s.text.rstrip("\n") + "\n" + "\n".join(lines) + "\n\n"
        sections[at] = Section(s.title, text)
    else:
        zh = sum(_is_zh(k.text) for k in promote) * 2 > len(promote)
        title = RECURRING_TITLES[1] if zh else RECURRING_TITLES[0]
        if at is not None:
            title = f"{title} ({'梦中整理于' if zh else 'dreamed'} {now:%Y-%m-%d})"
        if sections and not sections[-1].text.endswith("\n\n"):
            sections[-1] = Section(sections[-1].title, sections[-1].text.rstrip("\n") + "\n\n")
        elif not sections and preamble and not preamble.endswith("\n\n"):
            preamble = preamble.rstrip("\n") + "\n\n"
        sections.append(Section(title, f"## {title}\n\n" + "\n".join(lines) + "\n"))
    return join(preamble, sections), lines
