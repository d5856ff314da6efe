"""Post-chat extraction: gates, per-bucket lock and cooldown, coalescing, trailing runs, watermarks.

Public API (what the CLI / HTTP / MCP faces call)::

    svc = ExtractionService(settings, store, log, clock=clock)        # model client built from settings
    svc.record_turn(agent, conversation_id, user, assistant, *, owner="", trigger_source="chat",
                    finish_reason=None, memoryless=False) -> TriggerResult
        # logs the turn, applies the gates, schedules extraction off the caller's thread
    svc.trigger(agent, conversation_id, *, owner="", trigger_source="chat", memoryless=False,
                last_user_message=None) -> TriggerResult          # for turns already in the log
    svc.extract_now(agent, conversation_id, owner="") -> RunOutcome  # manual, synchronous, no gates
    svc.status() -> dict                                              # for `mateclaw-mem status`
    svc.run_due() -> list[tuple[str, str]]                            # start trailing runs whose time came
    svc.wait_idle(timeout=30.0) -> bool                               # tests/benches: wait for the pool
    svc.shutdown(wait=True)                                           # finish running work, persist the rest

Behaviour:

- Gates (in order): `auto-summarize-enabled`; never for memoryless conversations; never for turns
  from consolidation/dreaming, nor from cron when `skip-cron-conversations`; at least
  `min-messages-for-summarize` messages; last user message at least `min-user-message-length`
  characters. An explicit "remember …" / "记住…" bypasses the count, length and cooldown gates.
- One run at a time per (agent, owner) bucket. A trigger during a run is coalesced into ONE
  follow-up run. A completed analysis (updated or not) starts the bucket's cooldown; a failed run
  or a gate skip does not. Turns that arrive during the cooldown are examined when it ends (a
  trailing run, started by a timer or `run_due()`).
- Each conversation has a watermark (last message id examined): a run sends only what is new, plus
  a little already-seen context in model mode, at most `max-transcript-messages` messages, the
  person's cut at 2000 characters, the assistant's at 600 (context, not a source of facts), seen
  context at 300. A backlog larger than that is worked off in later runs, oldest first.
- Triage (model mode, `triage=True`): when the new messages hold no first-person statement, no
  request and no decision ("How do I…?", "thanks"), the watermark advances without a model call; the
  run is recorded as skipped and starts no cooldown.
- Cooldowns, watermarks and pending runs live in `workspace/.mateclaw/state.db`; a new service
  resumes them (due runs start at once, later ones get a timer). Every run's outcome is kept in
  `workspace/.mateclaw/log.db` (`extraction_runs`).
- Input: PROFILE.md and MEMORY.md bodies, the tail of today's daily note, the transcript — all
  redacted. Output (model or rules, same schema) is validated, redacted again, then written through
  the store: PROFILE/MEMORY replaced only when non-empty and different, by compare-and-swap on the
  hash read before the model was called. If a person edited the file meanwhile, the run starts
  over against the new content (at most 2 retries). The daily entry is appended last, once.
- A configured model that fails is recorded as an error; the pending work stays and is retried at
  the next trigger. There is no fallback to rules.
"""

from __future__ import annotations

import logging
import threading
import uuid
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from mateclaw_mem.clock import Clock
from mateclaw_mem.conversations.log import ConversationLog, NewMessage, StoredMessage
from mateclaw_mem.db import connect
from mateclaw_mem.errors import BusyError, ConfigError, ConflictError, MateclawError, ModelError
from mateclaw_mem.llm import rules
from mateclaw_mem.llm.client import ModelClient
from mateclaw_mem.llm.prompts.extraction import ExtractionResult, TranscriptMessage, build_messages
from mateclaw_mem.llm.usage import UsageLog
from mateclaw_mem.markdown import frontmatter
from mateclaw_mem.memory.redaction import find_secrets, redact
from mateclaw_mem.settings import Settings
from mateclaw_mem.workspace.store import WorkspaceStore

log = logging.getLogger(__name__)

ACTOR = "extraction"
MESSAGE_CHARS = 2000
ASSISTANT_CHARS = 600  # facts come from the person; the assistant's answer is context
SEEN_CHARS = 300  # already-examined context messages
DAILY_TAIL_CHARS = 1500
CONTEXT_MESSAGES = 2  # already-seen messages sent before the new ones (model mode)
CONFLICT_RETRIES = 2
SHRINK_GUARD_MIN_CHARS = 400  # below this a file may be rewritten freely
NEVER_EXTRACT_SOURCES = frozenset({"consolidation", "dreaming", "dream", "extraction"})

Bucket = tuple[str, str]  # (agent, owner)

_STATE_SCHEMA = """
CREATE TABLE IF NOT EXISTS extraction_buckets (
    agent TEXT NOT NULL,
    owner TEXT NOT NULL,
    cooldown_until_ms INTEGER NOT NULL DEFAULT 0,
    due_ms INTEGER,
    explicit INTEGER NOT NULL DEFAULT 0,
    PRIMARY KEY (agent, owner)
);
CREATE TABLE IF NOT EXISTS extraction_pending (
    agent TEXT NOT NULL,
    owner TEXT NOT NULL,
    conversation_id TEXT NOT NULL,
    seq INTEGER NOT NULL,
    requested_ms INTEGER NOT NULL,
    PRIMARY KEY (agent, owner, conversation_id)
);
CREATE TABLE IF NOT EXISTS extraction_watermarks (
    agent TEXT NOT NULL,
    owner TEXT NOT NULL,
    conversation_id TEXT NOT NULL,
    last_id INTEGER NOT NULL,
    updated_ms INTEGER NOT NULL,
    PRIMARY KEY (agent, owner, conversation_id)
);
"""

_RUNS_SCHEMA = """
CREATE TABLE IF NOT EXISTS extraction_runs (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    run_id TEXT NOT NULL,
    agent TEXT NOT NULL,
    owner TEXT NOT NULL,
    trigger TEXT NOT NULL,
    mode TEXT NOT NULL,
    started_ms INTEGER NOT NULL,
    finished_ms INTEGER NOT NULL,
    outcome TEXT NOT NULL,
    reason TEXT NOT NULL DEFAULT '',
    conversations TEXT NOT NULL DEFAULT '',
    new_messages INTEGER NOT NULL DEFAULT 0,
    files_changed TEXT NOT NULL DEFAULT '',
    attempts INTEGER NOT NULL DEFAULT 1,
    redactions INTEGER NOT NULL DEFAULT 0,
    error_kind TEXT,
    error TEXT
);
CREATE INDEX IF NOT EXISTS extraction_runs_bucket ON extraction_runs (agent, owner, id);
"""


@dataclass(frozen=True)
class TriggerResult:
    """What happened to a trigger: `scheduled` is False when a gate said no (`reason` says which)."""

    scheduled: bool
    reason: str
    explicit: bool = False
    when: str = ""  # "now", "coalesced", "after cooldown" (scheduled ones)


@dataclass
class RunOutcome:
    """One run. outcome: updated | no_change | skipped | error."""

    run_id: str
    agent: str
    owner: str
    trigger: str
    mode: str
    outcome: str
    reason: str = ""
    conversations: list[str] = field(default_factory=list)
    new_messages: int = 0
    files_changed: list[str] = field(default_factory=list)
    attempts: int = 1
    redactions: int = 0
    error_kind: str | None = None
    error: str | None = None
    started_ms: int = 0
    finished_ms: int = 0
    backlog: list[str] = field(default_factory=list)  # conversations left with unexamined messages

    @property
    def ok(self) -> bool:
        return self.outcome != "error"

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class _Batch:
    """The messages one run examines."""

    transcript: list[TranscriptMessage]
    new_user_texts: list[str]
    watermarks: dict[str, int]  # conversation -> new watermark
    backlog: set[str]  # conversations with more new messages than this run took
    skipped_convs: set[str]  # memoryless: dropped from pending without a run
    explicit: bool
    new_count: int


class ExtractionService:
    def __init__(
        self,
        settings: Settings,
        store: WorkspaceStore,
        log_: ConversationLog,
        *,
        clock: Clock,
        model: ModelClient | None = None,
        usage: UsageLog | None = None,
        state_db: Path | None = None,
        runs_db: Path | None = None,
        workers: int = 2,
        timers: bool = True,
        resume: bool = True,
        triage: bool = True,
        remember: Callable[..., Any] | None = None,
    ) -> None:
        self.settings = settings
        # Structured entries (user/feedback/project/reference) go through the structured-memory
        # service when the composition root provides it; extraction does not own that format.
        self._remember = remember
        self.store = store
        self.log = log_
        self.clock = clock
        self.mem = settings.mate.memory
        state_dir = settings.state_dir
        if settings.model.configured:
            if model is None:
                usage = usage or UsageLog(runs_db or state_dir / "log.db")
                model = ModelClient.from_settings(settings, usage=usage)
            self.mode = "model"
        elif model is not None:
            raise ConfigError("a model client was given but model.base-url / model.model are not configured")
        else:
            self.mode = "rules"
        self.model = model
        self.triage = triage
        self.usage = usage or (model.usage if model is not None else None)
        self._state = connect(state_db or state_dir / "state.db")
        self._state.executescript(_STATE_SCHEMA)
        self._runs = connect(runs_db or state_dir / "log.db")
        self._runs.executescript(_RUNS_SCHEMA)
        self._db_lock = threading.RLock()
        self._cv = threading.Condition(threading.RLock())
        self._running: set[Bucket] = set()
        self._futures: set[Future[Any]] = set()
        self._pool = ThreadPoolExecutor(max_workers=max(1, workers), thread_name_prefix="extraction")
        self._timers_enabled = timers
        self._timer: threading.Timer | None = None
        self._timer_due: int | None = None
        self._closed = False
        self._last_skip: dict[str, Any] | None = None
        row = self._q1("SELECT COALESCE(MAX(seq), 0) AS s FROM extraction_pending")
        self._seq = int(row["s"]) if row else 0
        if resume:
            self.run_due()

    @classmethod
    def from_services(cls, services: Any, **kwargs: Any) -> ExtractionService:
        """Build from a `runtime.services.Services` (settings, store, log, clock)."""
        return cls(services.settings, services.store, services.log, clock=services.clock, **kwargs)

    # -- time ------------------------------------------------------------------------------------

    def _now_ms(self) -> int:
        return int(self.clock.now().timestamp() * 1000)

    def _fmt(self, ms: int | None) -> str | None:
        if not ms:
            return None
        return datetime.fromtimestamp(ms / 1000, tz=self.clock.tz).isoformat(timespec="seconds")

    # -- SQL helpers -----------------------------------------------------------------------------

    def _q(self, sql: str, args: tuple[Any, ...] = ()) -> list[Any]:
        with self._db_lock:
            return self._state.execute(sql, args).fetchall()

    def _q1(self, sql: str, args: tuple[Any, ...] = ()) -> Any:
        with self._db_lock:
            return self._state.execute(sql, args).fetchone()

    def _x(self, sql: str, args: tuple[Any, ...] = ()) -> None:
        with self._db_lock:
            self._state.execute(sql, args)

    def _bucket_row(self, bucket: Bucket) -> dict[str, Any]:
        row = self._q1("SELECT * FROM extraction_buckets WHERE agent=? AND owner=?", bucket)
        if row is None:
            return {"cooldown_until_ms": 0, "due_ms": None, "explicit": 0}
        return dict(row)

    def _set_bucket(self, bucket: Bucket, **values: Any) -> None:
        cur = self._bucket_row(bucket)
        cur.update(values)
        self._x(
            "INSERT INTO extraction_buckets(agent, owner, cooldown_until_ms, due_ms, explicit) VALUES (?,?,?,?,?)"
            " ON CONFLICT(agent, owner) DO UPDATE SET cooldown_until_ms=excluded.cooldown_until_ms,"
            " due_ms=excluded.due_ms, explicit=excluded.explicit",
            (*bucket, cur["cooldown_until_ms"], cur["due_ms"], cur["explicit"]),
        )

    def _watermark(self, bucket: Bucket, conv: str) -> int:
        row = self._q1(
            "SELECT last_id FROM extraction_watermarks WHERE agent=? AND owner=? AND conversation_id=?", (*bucket, conv)
        )
        return int(row["last_id"]) if row else 0

    # -- triggers --------------------------------------------------------------------------------

    def record_turn(
        self,
        agent: str,
        conversation_id: str,
        user: str,
        assistant: str,
        *,
        owner: str = "",
        trigger_source: str = "chat",
        finish_reason: str | None = None,
        memoryless: bool = False,
    ) -> TriggerResult:
        """Log one user/assistant turn and schedule extraction for it (gates permitting)."""
        msgs = [NewMessage("user", user)]
        if assistant:
            msgs.append(NewMessage("assistant", assistant))
        self.log.append(
            agent, conversation_id, msgs, owner=owner, trigger_source=trigger_source,
            finish_reason=finish_reason, memoryless=memoryless, now_ms=self._now_ms(),
        )
        return self.trigger(
            agent, conversation_id, owner=owner, trigger_source=trigger_source, memoryless=memoryless,
            last_user_message=user,
        )

    def trigger(
        self,
        agent: str,
        conversation_id: str,
        *,
        owner: str = "",
        trigger_source: str = "chat",
        memoryless: bool = False,
        last_user_message: str | None = None,
    ) -> TriggerResult:
        """Gate and schedule extraction for a conversation whose turns are already in the log."""
        decision = self._gate(agent, conversation_id, owner, trigger_source, memoryless, last_user_message)
        if not decision.scheduled:
            self._last_skip = {
                "agent": agent, "owner": owner, "conversation_id": conversation_id, "reason": decision.reason,
                "at": self._fmt(self._now_ms()),
            }
            return decision
        when = self._schedule((agent, owner), conversation_id, explicit=decision.explicit)
        return TriggerResult(True, decision.reason, decision.explicit, when)

    def _gate(
        self, agent: str, conv: str, owner: str, source: str, memoryless: bool, last_user: str | None
    ) -> TriggerResult:
        mem = self.mem
        if not mem.auto_summarize_enabled:
            return TriggerResult(False, "auto-summarize is disabled (mate.memory.auto-summarize-enabled)")
        flags = self.log.conversation_flags(agent, conv, owner)
        if memoryless or flags.get("memoryless"):
            return TriggerResult(False, "memoryless conversation: never extracted")
        if source in NEVER_EXTRACT_SOURCES:
            return TriggerResult(False, f"turn from {source}: its own output never re-triggers extraction")
        if source == "cron" and mem.skip_cron_conversations:
            return TriggerResult(False, "turn from cron (mate.memory.skip-cron-conversations)")
        if last_user is None:
            users = [m for m in self.log.messages(agent, conv, owner=owner) if m.role == "user"]
            last_user = users[-1].content if users else ""
        if rules.is_explicit_remember(last_user):
            return TriggerResult(True, "explicit remember request (bypasses count, length and cooldown)", True)
        count = int(flags.get("message_count", 0))
        if count < mem.min_messages_for_summarize:
            return TriggerResult(
                False,
                f"only {count} messages (mate.memory.min-messages-for-summarize={mem.min_messages_for_summarize})",
            )
        if len(last_user.strip()) < mem.min_user_message_length:
            return TriggerResult(
                False,
                f"last user message has {len(last_user.strip())} characters "
                f"(mate.memory.min-user-message-length={mem.min_user_message_length})",
            )
        return TriggerResult(True, "gates passed")

    def _schedule(self, bucket: Bucket, conv: str, *, explicit: bool) -> str:
        with self._cv:
            now = self._now_ms()
            self._seq += 1
            self._x(
                "INSERT INTO extraction_pending(agent, owner, conversation_id, seq, requested_ms) VALUES (?,?,?,?,?)"
                " ON CONFLICT(agent, owner, conversation_id) DO UPDATE SET seq=excluded.seq",
                (*bucket, conv, self._seq, now),
            )
            row = self._bucket_row(bucket)
            due = now if explicit or row["cooldown_until_ms"] <= now else row["cooldown_until_ms"]
            if row["due_ms"] is not None:
                due = min(due, row["due_ms"])
            self._set_bucket(bucket, due_ms=due, explicit=1 if explicit or row["explicit"] else 0)
            if bucket in self._running:
                return "coalesced"
            if due <= now:
                self._submit(bucket, "explicit" if explicit else "auto")
                return "now"
            self._arm_timer()
            return "after cooldown"

    def _submit(self, bucket: Bucket, trigger: str) -> None:
        if self._closed:
            return  # pending state is in SQLite; the next start picks it up
        fut = self._pool.submit(self._run_scheduled, bucket, trigger)
        with self._cv:
            self._futures.add(fut)
        fut.add_done_callback(self._forget_future)

    def _forget_future(self, fut: Future[Any]) -> None:
        with self._cv:
            self._futures.discard(fut)
            self._cv.notify_all()

    def run_due(self) -> list[Bucket]:
        """Start every bucket whose due time has come (trailing runs, work resumed after a restart)."""
        started: list[Bucket] = []
        with self._cv:
            now = self._now_ms()
            rows = self._q("SELECT agent, owner, due_ms FROM extraction_buckets WHERE due_ms IS NOT NULL")
            for row in rows:
                bucket = (row["agent"], row["owner"])
                if row["due_ms"] <= now and bucket not in self._running:
                    self._submit(bucket, "trailing")
                    started.append(bucket)
            self._arm_timer()
        return started

    def _arm_timer(self) -> None:
        if not self._timers_enabled or self._closed:
            return
        with self._cv:
            now = self._now_ms()
            row = self._q1("SELECT MIN(due_ms) AS d FROM extraction_buckets WHERE due_ms IS NOT NULL AND due_ms > ?",
                           (now,))
            due = row["d"] if row else None
            if due is None or (self._timer is not None and self._timer_due is not None and self._timer_due <= due):
                return
            if self._timer is not None:
                self._timer.cancel()
            timer = threading.Timer(max(0.0, (due - now) / 1000.0) + 0.05, self._on_timer)
            timer.daemon = True
            self._timer, self._timer_due = timer, due
            timer.start()

    def _on_timer(self) -> None:
        with self._cv:
            self._timer, self._timer_due = None, None
        if not self._closed:
            self.run_due()

    # -- runs ------------------------------------------------------------------------------------

    def _run_scheduled(self, bucket: Bucket, trigger: str) -> RunOutcome | None:
        with self._cv:
            if bucket in self._running or self._closed:
                return None  # the running one sees our pending rows and follows up
            self._running.add(bucket)
        return self._run(bucket, trigger)

    def extract_now(self, agent: str, conversation_id: str, owner: str = "", *, timeout: float = 600.0) -> RunOutcome:
        """Run extraction for one conversation now, on the caller's thread: no count, length or
        cooldown gate (a memoryless conversation is still never extracted). Waits for a run of the
        same bucket to finish first; raises BusyError if that takes longer than `timeout`."""
        bucket = (agent, owner)
        flags = self.log.conversation_flags(agent, conversation_id, owner)
        if flags.get("memoryless"):
            return self._record(RunOutcome(
                _run_id(), agent, owner, "manual", self.mode, "skipped", "memoryless conversation: never extracted",
                [conversation_id], started_ms=self._now_ms(), finished_ms=self._now_ms(),
            ))
        with self._cv:
            if not self._cv.wait_for(lambda: bucket not in self._running, timeout=timeout):
                raise BusyError(f"extraction for {agent}/{owner or '-'} is still running; try again later")
            self._running.add(bucket)
            self._seq += 1
            self._x(
                "INSERT INTO extraction_pending(agent, owner, conversation_id, seq, requested_ms) VALUES (?,?,?,?,?)"
                " ON CONFLICT(agent, owner, conversation_id) DO UPDATE SET seq=excluded.seq",
                (*bucket, conversation_id, self._seq, self._now_ms()),
            )
        return self._run(bucket, "manual", only=conversation_id)

    def _run(self, bucket: Bucket, trigger: str, *, only: str | None = None) -> RunOutcome:
        """Runs with `bucket` already marked running; always unmarks it and schedules any follow-up."""
        outcome: RunOutcome | None = None
        with self._cv:
            snapshot_seq = self._seq
            self._set_bucket(bucket, explicit=0)
        try:
            outcome = self._execute(bucket, trigger, only=only)
        except Exception as exc:  # never kill the worker; say what happened
            log.exception("extraction run for %s failed", bucket)
            outcome = RunOutcome(
                _run_id(), bucket[0], bucket[1], trigger, self.mode, "error", "internal error",
                error_kind="internal", error=f"{type(exc).__name__}: {exc}",
            )
        finally:
            self._finish(bucket, outcome, snapshot_seq, only)
        assert outcome is not None
        return self._record(outcome)

    def _finish(self, bucket: Bucket, outcome: RunOutcome | None, snapshot_seq: int, only: str | None) -> None:
        with self._cv:
            now = self._now_ms()
            completed = outcome is not None and outcome.outcome in ("updated", "no_change")
            ok = outcome is not None and outcome.ok
            if ok:
                done = self._q(
                    "SELECT conversation_id, seq FROM extraction_pending WHERE agent=? AND owner=?", bucket
                )
                backlog = set(outcome.backlog) if outcome is not None else set()
                for row in done:
                    conv = row["conversation_id"]
                    if only is not None and conv != only:
                        continue
                    if row["seq"] <= snapshot_seq and conv not in backlog:
                        self._x(
                            "DELETE FROM extraction_pending WHERE agent=? AND owner=? AND conversation_id=?",
                            (*bucket, conv),
                        )
            if completed:
                cooldown_ms = int(self.mem.cooldown_minutes * 60_000)
                self._set_bucket(bucket, cooldown_until_ms=now + cooldown_ms)
            row = self._bucket_row(bucket)
            if ok:
                follow = self._q1(
                    "SELECT COUNT(*) AS n FROM extraction_pending WHERE agent=? AND owner=?", bucket
                )["n"] > 0
            else:  # failed: only triggers that arrived during the run count; the rest waits for the next one
                follow = self._q1(
                    "SELECT COUNT(*) AS n FROM extraction_pending WHERE agent=? AND owner=? AND seq > ?",
                    (*bucket, snapshot_seq),
                )["n"] > 0
            if follow:
                due = now if row["explicit"] or row["cooldown_until_ms"] <= now else row["cooldown_until_ms"]
                self._set_bucket(bucket, due_ms=due)
            else:
                self._set_bucket(bucket, due_ms=None)
            self._running.discard(bucket)
            self._cv.notify_all()
            if follow and not self._closed:
                if due <= now:
                    self._submit(bucket, "follow-up")
                else:
                    self._arm_timer()

    # -- one run ---------------------------------------------------------------------------------

    def _execute(self, bucket: Bucket, trigger: str, *, only: str | None) -> RunOutcome:
        agent, owner = bucket
        run_id = _run_id()
        started = self._now_ms()
        out = RunOutcome(run_id, agent, owner, trigger, self.mode, "skipped", started_ms=started)
        pending = [
            r["conversation_id"]
            for r in self._q(
                "SELECT conversation_id FROM extraction_pending WHERE agent=? AND owner=? ORDER BY requested_ms, seq",
                bucket,
            )
        ]
        if only is not None:
            pending = [only]
        out.conversations = pending
        batch = self._collect(bucket, pending)
        for conv in batch.skipped_convs:
            self._x("DELETE FROM extraction_pending WHERE agent=? AND owner=? AND conversation_id=?", (*bucket, conv))
        out.new_messages = batch.new_count
        out.backlog = sorted(batch.backlog)
        if batch.new_count == 0:
            out.reason = "nothing new since the last run"
            out.finished_ms = self._now_ms()
            return out
        if (
            self.model is not None
            and self.triage
            and not batch.explicit
            and not any(rules.worth_extracting(t) for t in batch.new_user_texts)
        ):
            # Nothing the model could keep: advance the watermark without a call (no cooldown either).
            out.reason = f"triage: no statement, request or decision in {batch.new_count} new messages"
            self._advance(bucket, batch)
            out.finished_ms = self._now_ms()
            return out
        store_owner = owner or None
        retry_note = ""
        for attempt in range(1, CONFLICT_RETRIES + 2):
            out.attempts = attempt
            profile = self.store.read(agent, "PROFILE.md", owner=store_owner)
            memory = self.store.read(agent, "MEMORY.md", owner=store_owner)
            daily = self.store.read(agent, self.store.daily_rel(), owner=store_owner)
            try:
                result = self._analyse(agent, profile.body, memory.body, daily.body, batch, retry_note)
            except ModelError as exc:
                out.outcome, out.error_kind, out.error = "error", exc.kind, exc.message
                out.reason = f"model failed ({exc.kind}); will retry at the next trigger"
                break
            result, redactions = _sanitise(result)
            out.redactions = redactions
            try:
                changed = self._apply(agent, store_owner, run_id, result, profile, memory)
            except ConflictError:
                retry_note = (
                    "Note: a person edited the memory files while you were working; the versions above are the "
                    "current ones. Keep their edits."
                )
                if attempt <= CONFLICT_RETRIES:
                    continue
                out.outcome, out.error_kind = "error", "conflict"
                out.error = "the files kept changing while extraction ran; will retry at the next trigger"
                out.reason = "conflict with concurrent edits"
                break
            except _Rejected as exc:
                out.outcome, out.error_kind, out.error = "error", "invalid_output", str(exc)
                out.reason = "model answer rejected; nothing written"
                break
            except BusyError as exc:
                out.outcome, out.error_kind, out.error = "error", "busy", exc.message
                out.reason = "memory files locked; will retry at the next trigger"
                break
            except MateclawError as exc:
                out.outcome, out.error_kind, out.error = "error", exc.code, exc.message
                out.reason = "write failed"
                break
            out.files_changed = changed
            out.outcome = "updated" if changed else "no_change"
            out.reason = result.reason or ("updated" if changed else "nothing worth remembering")
            break
        if out.ok:
            self._advance(bucket, batch)
        out.finished_ms = self._now_ms()
        return out

    def _advance(self, bucket: Bucket, batch: _Batch) -> None:
        for conv, last_id in batch.watermarks.items():
            self._x(
                "INSERT INTO extraction_watermarks(agent, owner, conversation_id, last_id, updated_ms)"
                " VALUES (?,?,?,?,?) ON CONFLICT(agent, owner, conversation_id) DO UPDATE SET"
                " last_id=MAX(last_id, excluded.last_id), updated_ms=excluded.updated_ms",
                (*bucket, conv, last_id, self._now_ms()),
            )

    def _collect(self, bucket: Bucket, convs: list[str]) -> _Batch:
        agent, owner = bucket
        cap = self.mem.max_transcript_messages
        batch = _Batch([], [], {}, set(), set(), False, 0)
        remaining = cap
        for conv in convs:
            flags = self.log.conversation_flags(agent, conv, owner)
            if flags.get("memoryless"):
                batch.skipped_convs.add(conv)
                continue
            wm = self._watermark(bucket, conv)
            msgs = self.log.messages(agent, conv, owner=owner)
            new = [m for m in msgs if m.id > wm]
            if not new:
                continue
            if remaining <= 0:
                batch.backlog.add(conv)
                continue
            take = new[:remaining]
            if len(take) < len(new):
                batch.backlog.add(conv)
            remaining -= len(take)
            seen = [m for m in msgs if m.id <= wm][-CONTEXT_MESSAGES:] if self.mode == "model" else []
            for m in seen:
                batch.transcript.append(self._tmsg(m, new=False))
            for m in take:
                batch.transcript.append(self._tmsg(m, new=True))
                if m.role == "user":
                    text = redact(m.content[:MESSAGE_CHARS])
                    batch.new_user_texts.append(text)
                    batch.explicit = batch.explicit or rules.is_explicit_remember(text)
            batch.watermarks[conv] = take[-1].id
            batch.new_count += len(take)
        return batch

    def _tmsg(self, m: StoredMessage, *, new: bool) -> TranscriptMessage:
        when = datetime.fromtimestamp(m.ts_ms / 1000, tz=self.clock.tz).strftime("%H:%M")
        limit = MESSAGE_CHARS if m.role == "user" else ASSISTANT_CHARS
        if not new:
            limit = min(limit, SEEN_CHARS)
        content = m.content if len(m.content) <= limit else m.content[:limit] + " …[cut]"
        return TranscriptMessage(m.id, m.conversation_id, m.role, redact(content), when, new)

    def _analyse(
        self, agent: str, profile: str, memory: str, daily: str, batch: _Batch, retry_note: str
    ) -> ExtractionResult:
        today = self.clock.now().strftime("%Y-%m-%d")
        if self.model is None:
            return rules.extract(profile=profile, memory=memory, messages=batch.new_user_texts, today=today)
        daily_tail = daily.strip()
        if len(daily_tail) > DAILY_TAIL_CHARS:
            daily_tail = "…" + daily_tail[-DAILY_TAIL_CHARS:]
        transcript = batch.transcript
        for shrink in (False, True):
            messages = build_messages(
                agent=agent,
                now=self.clock.now().strftime("%Y-%m-%d %H:%M %Z"),
                profile=redact(profile),
                memory=redact(memory),
                daily=redact(daily_tail),
                transcript=transcript,
                explicit=batch.explicit,
                retry_note=retry_note,
            )
            try:
                return self.model.chat_json(
                    messages, ExtractionResult, step="extraction", max_tokens=self.mem.summary_max_tokens * 4,
                    check=_check_result,
                )
            except ModelError as exc:
                if exc.kind != "context_too_large" or shrink:
                    raise
                # Second and last try: no already-seen context, no daily note, shorter messages.
                daily_tail = ""
                transcript = [
                    TranscriptMessage(t.id, t.conversation_id, t.role, t.content[:500], t.time, t.new)
                    for t in batch.transcript
                    if t.new
                ]
        raise AssertionError("unreachable")

    def _apply(
        self, agent: str, owner: str | None, run_id: str, result: ExtractionResult, profile: Any, memory: Any
    ) -> list[str]:
        if not result.should_update:
            return []
        planned: list[tuple[str, Any, str]] = []
        for rel, snap, update in (("PROFILE.md", profile, result.profile_update),
                                  ("MEMORY.md", memory, result.memory_update)):
            new_body = frontmatter.body(update) if update.lstrip().startswith("---") else update
            if not new_body.strip() or new_body.strip() == snap.body.strip():
                continue
            old_len = len(snap.body.strip())
            if old_len > SHRINK_GUARD_MIN_CHARS and len(new_body.strip()) < old_len // 2:
                raise _Rejected(
                    f"{rel}: the answer would shrink it from {old_len} to {len(new_body.strip())} characters; "
                    "post-chat extraction only adds and corrects"
                )
            if not new_body.endswith("\n"):
                new_body += "\n"
            planned.append((rel, snap, new_body))
        changed: list[str] = []
        reason = f"extraction: {result.reason}"[:200]
        for rel, snap, new_body in planned:
            text = frontmatter.with_body(snap.text, new_body) if snap.exists else new_body
            res = self.store.write(agent, rel, text, expected_sha=snap.sha, actor=ACTOR, owner=owner, reason=reason,
                                   batch=run_id)
            if res.changed:
                changed.append(rel)
        for item in result.structured if self._remember is not None else []:
            try:
                out = self._remember(agent, item.type, item.key, item.text, actor=ACTOR,
                                     source=f"conversation {run_id}", owner=owner)
            except MateclawError as exc:  # a pinned or hand-edited entry wins; say so, keep the rest
                log.info("structured entry %s/%s not written: %s", item.type, item.key, exc.message)
                continue
            rel = f"structured/{item.type}.md"
            if getattr(out, "changed", True) and rel not in changed:
                changed.append(rel)
        if result.daily_entry is not None and (result.daily_entry.body.strip() or changed):
            res = self.store.append_daily(agent, result.daily_entry.title, result.daily_entry.body or result.reason,
                                          actor=ACTOR, owner=owner, batch=run_id)
            changed.append(res.rel)
        return changed

    # -- records and status ----------------------------------------------------------------------

    def _record(self, out: RunOutcome) -> RunOutcome:
        with self._db_lock:
            self._runs.execute(
                "INSERT INTO extraction_runs(run_id, agent, owner, trigger, mode, started_ms, finished_ms, outcome,"
                " reason, conversations, new_messages, files_changed, attempts, redactions, error_kind, error)"
                " VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)",
                (
                    out.run_id, out.agent, out.owner, out.trigger, out.mode, out.started_ms or self._now_ms(),
                    out.finished_ms or self._now_ms(), out.outcome, out.reason[:500], ",".join(out.conversations),
                    out.new_messages, ",".join(out.files_changed), out.attempts, out.redactions, out.error_kind,
                    (out.error or "")[:1000] or None,
                ),
            )
        if out.outcome == "error":
            log.warning("extraction %s/%s failed (%s): %s", out.agent, out.owner or "-", out.error_kind, out.error)
        return out

    def runs(self, *, agent: str | None = None, owner: str | None = None, limit: int = 20) -> list[dict[str, Any]]:
        """Recent run outcomes, newest first."""
        where, args = [], []
        if agent is not None:
            where.append("agent = ?")
            args.append(agent)
        if owner is not None:
            where.append("owner = ?")
            args.append(owner)
        sql = "SELECT * FROM extraction_runs" + (" WHERE " + " AND ".join(where) if where else "")
        sql += " ORDER BY id DESC LIMIT ?"
        with self._db_lock:
            rows = self._runs.execute(sql, (*args, limit)).fetchall()
        out = []
        for r in rows:
            d = dict(r)
            d["started"] = self._fmt(d.pop("started_ms"))
            d["finished"] = self._fmt(d.pop("finished_ms"))
            d["conversations"] = [c for c in d["conversations"].split(",") if c]
            d["files_changed"] = [c for c in d["files_changed"].split(",") if c]
            out.append(d)
        return out

    def status(self) -> dict[str, Any]:
        """Mode, buckets (cooldown, pending, next run), last run, recent errors, model usage."""
        now = self._now_ms()
        with self._cv:
            running = set(self._running)
        buckets = []
        for row in self._q("SELECT * FROM extraction_buckets ORDER BY agent, owner"):
            bucket = (row["agent"], row["owner"])
            pending = [
                r["conversation_id"]
                for r in self._q(
                    "SELECT conversation_id FROM extraction_pending WHERE agent=? AND owner=? ORDER BY seq", bucket
                )
            ]
            buckets.append({
                "agent": bucket[0],
                "owner": bucket[1],
                "running": bucket in running,
                "cooling_down": row["cooldown_until_ms"] > now,
                "cooldown_until": self._fmt(row["cooldown_until_ms"]),
                "next_run": self._fmt(row["due_ms"]),
                "pending_conversations": pending,
            })
        recent = self.runs(limit=10)
        errors = [r for r in recent if r["outcome"] == "error"]
        return {
            "mode": self.mode,
            "enabled": self.mem.auto_summarize_enabled,
            "cooldown_minutes": self.mem.cooldown_minutes,
            "buckets": buckets,
            "last_run": recent[0] if recent else None,
            "recent_errors": errors[:5],
            "last_gate_skip": self._last_skip,
            "usage": self.usage.summary() if self.usage is not None else None,
        }

    # -- lifecycle -------------------------------------------------------------------------------

    def wait_idle(self, timeout: float = 30.0) -> bool:
        """Block until no run is queued or running (tests and benches). False on timeout."""
        with self._cv:
            return self._cv.wait_for(lambda: not self._futures and not self._running, timeout=timeout)

    def shutdown(self, wait: bool = True) -> None:
        """Stop timers, let running work finish (wait=True), drop queued work: it stays pending in
        state.db and the next service resumes it."""
        with self._cv:
            if self._closed:
                return
            self._closed = True
            if self._timer is not None:
                self._timer.cancel()
                self._timer = None
        self._pool.shutdown(wait=wait, cancel_futures=True)
        if wait:
            with self._db_lock:
                self._state.close()
                self._runs.close()

    close = shutdown


class _Rejected(Exception):
    """A model answer that validated but would do damage; nothing is written."""


def _check_result(result: ExtractionResult) -> None:
    """Extra validation for the repair round trip (raised as ValueError -> told to the model)."""
    if result.should_update and not (
        result.memory_update.strip() or result.profile_update.strip() or result.daily_entry or result.structured
    ):
        raise ValueError("should_update is true but daily_entry, memory_update and profile_update are all empty")


def _sanitise(result: ExtractionResult) -> tuple[ExtractionResult, int]:
    """Redact secrets the model may have echoed; returns the clean result and how many were found."""
    found = 0
    texts: dict[str, Any] = {}
    for name in ("reason", "memory_update", "profile_update"):
        value = getattr(result, name)
        n = len(find_secrets(value))
        found += n
        texts[name] = redact(value) if n else value
    daily = result.daily_entry
    if daily is not None:
        n = len(find_secrets(daily.title)) + len(find_secrets(daily.body))
        found += n
        if n:
            daily = daily.model_copy(update={"title": redact(daily.title), "body": redact(daily.body)})
    structured = []
    for item in result.structured:
        n = len(find_secrets(item.text))
        found += n
        structured.append(item.model_copy(update={"text": redact(item.text)}) if n else item)
    return result.model_copy(update={**texts, "daily_entry": daily, "structured": structured}), found


def _run_id() -> str:
    return "ext-" + uuid.uuid4().hex[:12]
