"""Post-chat extraction: gates, per-bucket lock and cooldown, coalescing, trailing runs, watermarks.

Public API (what the CLI / HTTP / MCP faces call)::

    svc = ExtractionService(settings, store, log, clock=clock, model=lambda: client)  # the shared one
    svc.start()                                                       # workers on: resume pending work
    svc.record_turn(agent, conversation_id, user, assistant, *, owner=None, trigger_source="chat",
                    finish_reason=None, memoryless=False) -> TriggerResult
        # logs the turn, applies the gates, schedules extraction off the caller's thread
    svc.trigger(agent, conversation_id, *, owner=None, trigger_source="chat", memoryless=False,
                last_user_message=None) -> TriggerResult          # for turns already in the log
    svc.extract_now(agent, conversation_id, owner=None) -> RunOutcome  # manual, synchronous, no gates
    svc.status() -> dict                                              # for `mateclaw-mem status`
    svc.run_due() -> list[tuple[str, str]]                            # start trailing runs whose time came
    svc.wait_idle(timeout=30.0) -> bool                               # tests/benches: wait for the pool
    svc.shutdown(wait=True) / svc.stop()                              # finish running work, persist the rest

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
  a little context in model mode, at most `max-transcript-messages` messages, each cut at
  `transcript-message-max-chars` (2000, both roles, as the seed), seen context at 300; answer budget
  `summary-max-tokens`. A backlog larger than that is worked off in later runs, oldest first.
- Triage (model mode, `triage=True`): when the new messages hold no first-person statement, no
  request and no decision ("How do I…?", "thanks"), the watermark advances without a model call; the
  run is recorded as skipped and starts no cooldown. Manual runs (`extract`, `summarize`) skip triage.
- Cooldowns, watermarks and pending runs live in `workspace/.mateclaw/state.db`; `start()`
  resumes them (due runs start at once, later ones get a timer). Building the service starts no
  thread: until `start()` (a CLI command never calls it) scheduled work only waits in state.db for
  the daemon, and `extract_now` runs on the caller's thread. Every run's outcome is kept in
  `workspace/.mateclaw/log.db` (`extraction_runs`).
- Input: PROFILE.md and MEMORY.md bodies, the tail of today's daily note, the transcript — all
  redacted. Output (model or rules, same schema) is validated, redacted again, then written through
  the store: PROFILE/MEMORY replaced only when non-empty and different, by compare-and-swap on the
  hash read before the model was called. If a person edited the file meanwhile, the run starts
  over against the new content (at most 2 retries, workspace/cas.py). The daily entry is appended
  last, once.
- A configured model that fails is recorded as an error; the pending work stays and is retried at
  the next trigger. There is no fallback to rules.

Modules: this one is the service (gates and the run); `queue` decides when runs happen (due times,
coalescing, trailing runs, timers), `state` holds the state.db bookkeeping, `input` builds what a
run examines (bounds, triage), `output` checks an answer before it is written, `runs` logs each run.
An owner is None when there is none; "" is only how the SQL columns spell it.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from mateclaw_mem.clock import Clock
from mateclaw_mem.conversations.log import ConversationLog, NewMessage
from mateclaw_mem.errors import (
    BusyError,
    ConfigError,
    ConflictError,
    MateclawError,
    ModelError,
    NotFoundError,
    RejectedError,
)
from mateclaw_mem.llm.failures import record_failure
from mateclaw_mem.llm.prompts.extraction import ExtractionResult
from mateclaw_mem.memory.extraction import journaled, remember
from mateclaw_mem.memory.extraction.analyse import analyse
from mateclaw_mem.memory.extraction.gates import TriggerResult, gate
from mateclaw_mem.memory.extraction.input import (
    Batch,
    collect,
    said_at,
    worth_a_model_call,
)
from mateclaw_mem.memory.extraction.output import (
    Rejected,
    sanitise,
    write_answer,
)
from mateclaw_mem.memory.extraction.queue import ExtractionQueue
from mateclaw_mem.memory.extraction.runs import ExtractionRunLog, RunOutcome, new_run_id
from mateclaw_mem.memory.extraction.state import Bucket, ExtractionState
from mateclaw_mem.redaction import redact
from mateclaw_mem.settings import Settings
from mateclaw_mem.workspace.cas import retry_on_conflict
from mateclaw_mem.workspace.store import WorkspaceStore
from mateclaw_mem.workspace.walk import normalise_owner

if TYPE_CHECKING:
    from mateclaw_mem.llm.client import ModelClient

log = logging.getLogger(__name__)
MAX_DAYS_PER_EXTRACT = 10_000  # a manual run's bound on the days of one conversation it reads

ACTOR = "extraction"
# Rules mode edits single lines, so it writes as a targeted writer: "Samuel, not Sam" may fix a person's line.
RULES_ACTOR = "extraction-rules"
CONFLICT_RETRIES = 2
RETRY_NOTE = ("Note: a person edited the memory files while you were working; the versions above are the current "
              "ones. Keep their edits.")


class ExtractionService:
    def __init__(
        self,
        settings: Settings,
        store: WorkspaceStore,
        log_: ConversationLog,
        *,
        clock: Clock,
        model: Callable[[], ModelClient | None] = lambda: None,
        state_db: Path | None = None,
        runs_db: Path | None = None,
        workers: int = 2,
        timers: bool = True,
        triage: bool = True,
        remember: Callable[..., Any] | None = None,
        forget: Any = None,
        sources: Callable[..., Any] | None = None,
        on_turn: Callable[[str, str | None, list[tuple[str, str]]], None] | None = None,
    ) -> None:
        self.settings = settings
        self._on_turn = on_turn  # memory providers that keep their own store (Mem0); must not block
        self._forget = forget  # memory/forget/: runs "forget that …" requests, tombstones guard writes
        # Structured entries (user/feedback/project/reference) go through the structured-memory
        # service when the composition root provides it; extraction does not own that format.
        self._remember = remember
        self._sources = sources  # facts learn which messages an edit rests on (FactService.record_sources)
        self.store = store
        self.log = log_
        self.clock = clock
        self.mem = settings.mate.memory
        # The one model client is built by the composition root (runtime/services.py) and shared; asked
        # for now, as extraction's mode is fixed when it is built.
        client = model()
        if settings.model.configured and client is None:
            raise ConfigError("model.base-url / model.model are configured but no model client was given "
                              "(Services.model builds the shared one)")
        if client is not None and not settings.model.configured:
            raise ConfigError("a model client was given but model.base-url / model.model are not configured")
        self.mode = "model" if client is not None else "rules"
        self.model = client
        self.triage = triage
        self.usage = client.usage if client is not None else None
        self._state = ExtractionState(state_db or settings.state_db)
        self._runs = ExtractionRunLog(runs_db or settings.log_db)
        self._queue = ExtractionQueue(
            self._state, self._now_ms, self._attempt_run, self._record,
            cooldown_ms=lambda: int(self.mem.cooldown_minutes * 60_000), workers=workers, timers=timers,
        )
        self._last_skip: dict[str, Any] | None = None

    # -- time ------------------------------------------------------------------------------------

    def _now_ms(self) -> int:
        return int(self.clock.now().timestamp() * 1000)

    def _fmt(self, ms: int | None) -> str | None:
        if not ms:
            return None
        return datetime.fromtimestamp(ms / 1000, tz=self.clock.tz).isoformat(timespec="seconds")

    # -- triggers --------------------------------------------------------------------------------

    def record_turn(
        self,
        agent: str,
        conversation_id: str,
        user: str,
        assistant: str,
        *,
        owner: str | None = None,
        trigger_source: str = "chat",
        finish_reason: str | None = None,
        memoryless: bool = False,
        timestamp: int | str | None = None,
    ) -> TriggerResult:
        """Log one user/assistant turn and schedule extraction for it (gates permitting).
        `timestamp` (unix ms or ISO-8601; default now) is when it was said: the log keeps it, recall
        dates it by it and extraction files what it writes under that day."""
        owner = normalise_owner(owner)
        msgs = [NewMessage("user", user)]
        if assistant:
            msgs.append(NewMessage("assistant", assistant))
        if timestamp is None:
            at_ms = self._now_ms()
        else:
            from mateclaw_mem.conversations.aml import timestamp_ms  # the Add/Search contract's parsing

            at_ms = timestamp_ms(timestamp, self.clock.tz)
        self.log.append(
            agent, conversation_id, msgs, owner=owner, trigger_source=trigger_source,
            finish_reason=finish_reason, memoryless=memoryless, now_ms=at_ms,
        )
        if self._on_turn is not None and not memoryless:  # a memoryless turn leaves no memory anywhere
            self._on_turn(agent, owner, [(m.role, redact(m.content)) for m in msgs])  # as the log keeps it
        return self.trigger(
            agent, conversation_id, owner=owner, trigger_source=trigger_source, memoryless=memoryless,
            last_user_message=user,
        )

    def trigger(
        self,
        agent: str,
        conversation_id: str,
        *,
        owner: str | None = None,
        trigger_source: str = "chat",
        memoryless: bool = False,
        last_user_message: str | None = None,
    ) -> TriggerResult:
        """Gate and schedule extraction for a conversation whose turns are already in the log."""
        owner = normalise_owner(owner)
        decision = self._gate(agent, conversation_id, owner, trigger_source, memoryless, last_user_message)
        if not decision.scheduled:
            self._last_skip = {
                "agent": agent, "owner": owner, "conversation_id": conversation_id, "reason": decision.reason,
                "at": self._fmt(self._now_ms()),
            }
            return decision
        when = self._queue.schedule((agent, owner), conversation_id, explicit=decision.explicit)
        return TriggerResult(True, decision.reason, decision.explicit, when)

    def _gate(
        self, agent: str, conv: str, owner: str | None, source: str, memoryless: bool, last_user: str | None
    ) -> TriggerResult:
        return gate(self.mem, self.log, agent, conv, owner, source, memoryless, last_user)

    def run_due(self) -> list[Bucket]:
        """Start every bucket whose due time has come (trailing runs, work resumed after a restart)."""
        return self._queue.run_due()

    # -- runs ------------------------------------------------------------------------------------

    def extract_now(
        self, agent: str, conversation_id: str, owner: str | None = None, *, timeout: float = 600.0
    ) -> RunOutcome:
        """Run extraction for one conversation now, on the caller's thread: no count, length or
        cooldown gate (a memoryless conversation is still never extracted). Waits for a run of the
        same bucket to finish first; raises BusyError if that takes longer than `timeout`."""
        owner = normalise_owner(owner)
        if not self.log.messages(agent, conversation_id, owner=owner, limit=1):
            who = f" (owner {owner})" if owner else ""
            raise NotFoundError(f"no logged messages for conversation {conversation_id!r} of agent {agent!r}{who}")
        flags = self.log.conversation_flags(agent, conversation_id, owner)
        if flags.get("memoryless"):
            return self._record(RunOutcome(
                new_run_id(), agent, owner, "manual", self.mode, "skipped", "memoryless conversation: never extracted",
                [conversation_id], started_ms=self._now_ms(), finished_ms=self._now_ms(),
            ))
        # A run reads one day (input.collect): a conversation that spans days takes a run each, all now.
        out = self._queue.run_now((agent, owner), conversation_id, timeout=timeout)
        changed, read = list(out.files_changed), out.new_messages
        for _ in range(MAX_DAYS_PER_EXTRACT):
            if not (out.ok and out.later_days and conversation_id in out.backlog):
                break  # done, or stopped by max-transcript-messages (that cap holds for a manual run too)
            out = self._queue.run_now((agent, owner), conversation_id, timeout=timeout)
            changed += [f for f in out.files_changed if f not in changed]
            read += out.new_messages
        out.files_changed, out.new_messages = changed, read
        return out

    def _attempt_run(self, bucket: Bucket, trigger: str, only: str | None) -> RunOutcome:
        """One run for the queue; a bug becomes an "internal" error outcome, never a dead worker."""
        t0 = time.monotonic()
        try:
            out = self._execute(bucket, trigger, only=only)
        except Exception as exc:  # never kill the worker; say what happened
            log.exception("extraction run for %s failed", bucket)
            out = RunOutcome(
                new_run_id(), bucket[0], bucket[1], trigger, self.mode, "error", "internal error",
                error_kind="internal", error=f"{type(exc).__name__}: {exc}",
            )
        log.info("%s", out.log_line((time.monotonic() - t0) * 1000))
        return out

    # -- one run ---------------------------------------------------------------------------------

    def _execute(self, bucket: Bucket, trigger: str, *, only: str | None) -> RunOutcome:
        agent, owner = bucket
        run_id = new_run_id()
        started = self._now_ms()
        out = RunOutcome(run_id, agent, owner, trigger, self.mode, "skipped", started_ms=started)
        pending = self._state.pending_for_run(bucket)
        if only is not None:
            pending = [only]
        out.conversations = pending
        def read() -> Batch:
            return collect(self.log, self._state, bucket, pending, cap=self.mem.max_transcript_messages,
                           with_context=self.mode == "model", tz=self.clock.tz,
                           message_chars=self.mem.transcript_message_max_chars)

        batch = read()
        # "forget that …" is done by our code in both modes, then the run reads what the log kept.
        if self._forget is not None and self._forget.handle_requests(agent, owner, batch.new_user_texts):
            batch = read()
        guard = self._forget.guard(agent, owner) if self._forget is not None else None
        for conv in batch.skipped_convs:
            self._state.drop_pending(bucket, conv)
        out.new_messages = batch.new_count
        out.backlog = sorted(batch.backlog)
        out.said_ms, out.later_days = batch.said_ms, batch.later_days
        if batch.new_count == 0:
            out.reason = "nothing new since the last run"
            out.finished_ms = self._now_ms()
            return out
        # A manual run is a person asking for this conversation to be read: no heuristic second-guesses it.
        if self.model is not None and self.triage and trigger != "manual" and not worth_a_model_call(batch):
            # Nothing the model could keep: advance the watermark without a call (no cooldown either).
            out.reason = f"triage: no statement, request or decision in {batch.new_count} new messages"
            self._advance(bucket, batch)
            out.finished_ms = self._now_ms()
            return out

        def attempt(n: int) -> tuple[list[str], ExtractionResult]:
            # Read again on every attempt: a retry plans on what the person saved meanwhile.
            out.attempts = n + 1
            profile = self.store.read(agent, "PROFILE.md", owner=owner)
            memory = self.store.read(agent, "MEMORY.md", owner=owner)
            when = said_at(batch, self.clock.now())
            daily = self.store.read(agent, self.store.daily_rel(when), owner=owner)
            result = analyse(self.model, self.clock, agent, profile.body, memory.body, daily.body, batch,
                             RETRY_NOTE if n else "", max_tokens=self.mem.summary_max_tokens)
            result, out.redactions = sanitise(result)
            changed = write_answer(self.store, agent, owner, run_id, result, profile, memory,
                                   actor=ACTOR if self.model is not None else RULES_ACTOR, remember=self._remember,
                                   guard=guard, when=when, watermarks=batch.watermarks)
            return changed, result

        try:
            changed, result = retry_on_conflict(attempt, retries=CONFLICT_RETRIES)
        except ModelError as exc:
            out.outcome, out.error_kind, out.error = "error", exc.kind, exc.message
            out.reason = f"model failed ({exc.kind}); will retry at the next trigger"
        except ConflictError:
            out.outcome, out.error_kind = "error", "conflict"
            out.error = "the files kept changing while extraction ran; will retry at the next trigger"
            out.reason = "conflict with concurrent edits"
        except Rejected as exc:
            out.outcome, out.error_kind, out.error = "error", "invalid_output", str(exc)
            out.reason = "model answer rejected; nothing written"
        except RejectedError as exc:  # the store's cumulative erosion guard
            out.outcome, out.error_kind, out.error = "error", "invalid_output", exc.message
            out.reason = "model answer rejected by the erosion guard; nothing more written"
        except BusyError as exc:
            out.outcome, out.error_kind, out.error = "error", "busy", exc.message
            out.reason = "memory files locked; will retry at the next trigger"
        except MateclawError as exc:
            out.outcome, out.error_kind, out.error = "error", exc.code, exc.message
            out.reason = "write failed"
        else:
            out.files_changed = changed
            out.outcome = "updated" if changed else "no_change"
            out.reason = result.reason or ("updated" if changed else "nothing worth remembering")
            if self._sources is not None and changed and result.edits:
                self._sources(agent, owner, [(e.file, e.text, e.evidence) for e in result.edits if e.text], pending)
        requests = [r for r in remember.requests_in(batch.new_user_texts) if not (guard and guard.blocks(r))]
        if (requests and out.outcome == "no_change" and self.model is not None
                and remember.unrecorded(self.store, agent, owner, requests)):
            # The answer check asked for a write; a guard or a skipped edit can still leave none.
            out.outcome, out.error_kind = "error", "invalid_output"
            out.error = "the person asked to remember something and the answer wrote nothing"
        if requests and not out.ok:
            remember.handle_failure(self.store, self._runs, out, requests, actor=ACTOR)
        if out.ok:
            self._advance(bucket, batch)
        journaled.end(self.store, run_id)  # the answer and its watermarks are whole
        out.finished_ms = self._now_ms()
        return out

    def _advance(self, bucket: Bucket, batch: Batch) -> None:
        self._state.advance(bucket, batch.watermarks, self._now_ms())

    def finish_interrupted(self, finish: dict[str, Any]) -> str:
        """runtime/recovery.py: the rest of a run a kill interrupted (memory/extraction/journaled.py)."""
        return journaled.finish_interrupted(self.store, self._remember, self._state, self._now_ms(), finish)

    # -- records and status ----------------------------------------------------------------------

    def _record(self, out: RunOutcome) -> RunOutcome:
        self._runs.record(out, self._now_ms())
        if self.model is not None and out.error_kind and out.error_kind not in ("conflict", "busy", "internal"):
            record_failure(self.model, "extraction", out.error_kind, out.error or out.reason, agent=out.agent,
                           owner=out.owner)
        if out.outcome == "error":
            log.warning("extraction %s/%s failed (%s): %s", out.agent, out.owner or "-", out.error_kind, out.error)
        return out

    def runs(self, *, agent: str | None = None, owner: str | None = None, limit: int = 20) -> list[dict[str, Any]]:
        """Recent run outcomes, newest first."""
        return self._runs.recent(self._fmt, agent=agent, owner=owner, limit=limit)

    def status(self) -> dict[str, Any]:
        """Mode, buckets (cooldown, pending, next run), last run, recent errors, model usage."""
        now = self._now_ms()
        running = self._queue.running()
        buckets = []
        for bucket, row in self._state.buckets():
            pending = self._state.pending(bucket)
            buckets.append({
                "agent": bucket[0],
                "owner": row["owner"],  # as stored ("" = none), as `status` always showed it
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

    def start(self) -> None:
        """Start the workers: resume persisted work (due runs now, later ones on their timer). The
        daemon calls this once every service it writes through exists (`Services.start`)."""
        self._queue.start()

    def stop(self) -> None:
        """Running extractions finish; queued ones stay pending in state.db for the next start."""
        self.shutdown(wait=True)

    def wait_idle(self, timeout: float = 30.0) -> bool:
        """Block until no run is queued or running (tests and benches). False on timeout."""
        return self._queue.wait_idle(timeout)

    def shutdown(self, wait: bool = True) -> None:
        """Stop timers, let running work finish (wait=True), drop queued work: it stays pending in
        state.db and the next service resumes it."""
        if self._queue.shutdown(wait) and wait:
            self._state.close()
            self._runs.close()

    close = shutdown
