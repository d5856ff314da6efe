"""Extraction's run queue: due times, coalescing, trailing runs and the timer, per (agent, owner) bucket.

    queue = ExtractionQueue(state, now_ms, execute, record, cooldown_ms=..., workers=2, timers=True)
    queue.schedule(bucket, conversation_id, explicit=False) -> "now" | "coalesced" | "after cooldown"
    queue.run_now(bucket, conversation_id, timeout=600.0) -> RunOutcome   # manual, on the caller's thread
    queue.run_due() -> list[Bucket]                                     # start runs whose time came
    queue.start() / queue.shutdown(wait=True) / queue.wait_idle(timeout) / queue.running()

The rules (the service's module doc says why):

- One run at a time per bucket. A trigger during a run is coalesced into ONE follow-up run.
- When a bucket's next run is due is decided in one place, `due_at`: now for an explicit
  "remember" or when the cooldown is over, else when the cooldown ends. A new trigger never
  postpones a run that is already due sooner.
- A completed analysis (updated or no_change) starts the cooldown; a failed run or a skip does not.
  After a successful run every pending conversation it saw is dropped (except those with a backlog);
  after a failed one, only triggers that arrived during the run start a follow-up.
- Everything is kept in state.db (`ExtractionState`), so a restart resumes it: until `start()` no
  worker runs and no timer is armed, and work scheduled meanwhile waits there.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

from mateclaw_mem.errors import BusyError
from mateclaw_mem.memory.extraction.runs import RunOutcome
from mateclaw_mem.memory.extraction.state import Bucket, ExtractionState

# (bucket, trigger, only) -> the run's outcome; never raises (the service turns a bug into an outcome).
Execute = Callable[[Bucket, str, str | None], RunOutcome]
TIMER_SLACK_SECONDS = 0.05  # fire a little after the due time, never a little before it


def due_at(now_ms: int, cooldown_until_ms: int, *, explicit: bool) -> int:
    """The one due-time rule: an explicit request, or a bucket out of its cooldown, runs now;
    anything else waits for the cooldown to end."""
    return now_ms if explicit or cooldown_until_ms <= now_ms else cooldown_until_ms


class ExtractionQueue:
    def __init__(
        self,
        state: ExtractionState,
        now_ms: Callable[[], int],
        execute: Execute,
        record: Callable[[RunOutcome], RunOutcome],
        *,
        cooldown_ms: Callable[[], int],
        workers: int = 2,
        timers: bool = True,
    ) -> None:
        self._state = state
        self._now_ms = now_ms
        self._execute = execute
        self._record = record
        self._cooldown_ms = cooldown_ms  # read at each run's end: settings may change while we run
        self._cv = threading.Condition(threading.RLock())
        self._running: set[Bucket] = set()
        self._futures: set[Future[Any]] = set()
        self._pool = ThreadPoolExecutor(max_workers=max(1, workers), thread_name_prefix="extraction")
        self._timers_enabled = timers
        self._timer: threading.Timer | None = None
        self._timer_due: int | None = None
        self._started = False  # no worker runs and no timer is armed before start()
        self._closed = False
        self._seq = state.max_seq()

    def running(self) -> set[Bucket]:
        with self._cv:
            return set(self._running)

    # -- scheduling ------------------------------------------------------------------------------

    def schedule(self, bucket: Bucket, conv: str, *, explicit: bool) -> str:
        """Record that `conv` wants a run and start it, coalesce it, or leave it for the timer."""
        with self._cv:
            now = self._now_ms()
            self._seq += 1
            self._state.add_pending(bucket, conv, self._seq, now)
            row = self._state.bucket(bucket)
            due = due_at(now, row["cooldown_until_ms"], explicit=explicit)
            if row["due_ms"] is not None:
                due = min(due, row["due_ms"])
            self._state.set_bucket(bucket, due_ms=due, explicit=1 if explicit or row["explicit"] else 0)
            if bucket in self._running:
                return "coalesced"
            if due <= now:
                self._submit(bucket, "explicit" if explicit else "auto")
                return "now"
            self._arm_timer()
            return "after cooldown"

    def run_due(self) -> list[Bucket]:
        """Start every bucket whose due time has come (trailing runs, work resumed after a restart)."""
        started: list[Bucket] = []
        with self._cv:
            if not self._started or self._closed:
                return started
            now = self._now_ms()
            for bucket, due_ms in self._state.due_buckets():
                if due_ms <= now and bucket not in self._running:
                    self._submit(bucket, "trailing")
                    started.append(bucket)
            self._arm_timer()
        return started

    def run_now(self, bucket: Bucket, conv: str, *, timeout: float) -> RunOutcome:
        """Run `conv` on the caller's thread once no run of the bucket is in progress (BusyError
        after `timeout` seconds)."""
        with self._cv:
            if not self._cv.wait_for(lambda: bucket not in self._running, timeout=timeout):
                raise BusyError(f"extraction for {bucket[0]}/{bucket[1] or '-'} is still running; try again later")
            self._running.add(bucket)
            self._seq += 1
            self._state.add_pending(bucket, conv, self._seq, self._now_ms())
        return self._run(bucket, "manual", only=conv)

    def _submit(self, bucket: Bucket, trigger: str) -> None:
        if self._closed or not self._started:
            return  # pending state is in SQLite; the next start picks it up
        fut = self._pool.submit(self._run_scheduled, bucket, trigger)
        with self._cv:
            self._futures.add(fut)
        fut.add_done_callback(self._forget_future)

    def _forget_future(self, fut: Future[Any]) -> None:
        with self._cv:
            self._futures.discard(fut)
            self._cv.notify_all()

    def _arm_timer(self) -> None:
        if not self._timers_enabled or self._closed or not self._started:
            return
        with self._cv:
            now = self._now_ms()
            due = self._state.next_due_after(now)
            if due is None or (self._timer is not None and self._timer_due is not None and self._timer_due <= due):
                return
            if self._timer is not None:
                self._timer.cancel()
            timer = threading.Timer(max(0.0, (due - now) / 1000.0) + TIMER_SLACK_SECONDS, self._on_timer)
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

    def _run(self, bucket: Bucket, trigger: str, *, only: str | None = None) -> RunOutcome:
        """Runs with `bucket` already marked running; always unmarks it and schedules any follow-up."""
        outcome: RunOutcome | None = None
        with self._cv:
            snapshot_seq = self._seq
            self._state.set_bucket(bucket, explicit=0)
        try:
            outcome = self._execute(bucket, trigger, only)
        finally:
            self._finish(bucket, outcome, snapshot_seq, only)
        return self._record(outcome)

    def _finish(self, bucket: Bucket, outcome: RunOutcome | None, snapshot_seq: int, only: str | None) -> None:
        with self._cv:
            now = self._now_ms()
            completed = outcome is not None and outcome.outcome in ("updated", "no_change")
            ok = outcome is not None and outcome.ok
            if ok:
                backlog = set(outcome.backlog) if outcome is not None else set()
                for conv, seq in self._state.pending_seqs(bucket):
                    if only is not None and conv != only:
                        continue
                    if seq <= snapshot_seq and conv not in backlog:
                        self._state.drop_pending(bucket, conv)
            if completed:
                # The cooldown runs in turn time: it spaces runs over a live chat, and a history posted
                # with its own (older) dates is not a live chat - its next day runs at once.
                said = outcome.said_ms if outcome is not None and outcome.said_ms else now
                self._state.set_bucket(bucket, cooldown_until_ms=min(now, said) + self._cooldown_ms())
            row = self._state.bucket(bucket)
            if ok:
                follow = self._state.count_pending(bucket) > 0
            else:  # failed: only triggers that arrived during the run count; the rest waits for the next one
                follow = self._state.count_pending(bucket, after_seq=snapshot_seq) > 0
            due = due_at(now, row["cooldown_until_ms"], explicit=bool(row["explicit"])) if follow else None
            retry = outcome.retry_in_ms if outcome is not None and not ok else None
            if retry is not None:  # a failure that must not wait for a new trigger (a remember request)
                due = now + retry if due is None else min(due, now + retry)
            self._state.set_bucket(bucket, due_ms=due)
            self._running.discard(bucket)
            self._cv.notify_all()
            if due is not None and not self._closed:
                if due <= now:
                    self._submit(bucket, "follow-up")
                else:
                    self._arm_timer()

    # -- lifecycle -------------------------------------------------------------------------------

    def start(self) -> None:
        """Workers and timers on; persisted work resumes (due runs now, later ones on their timer)."""
        with self._cv:
            if self._started or self._closed:
                return
            self._started = True
        self.run_due()

    def wait_idle(self, timeout: float = 30.0) -> bool:
        """Block until no run is queued or running. False on timeout."""
        with self._cv:
            return self._cv.wait_for(lambda: not self._futures and not self._running, timeout=timeout)

    def shutdown(self, wait: bool = True) -> bool:
        """Stop timers, let running work finish (wait=True), drop queued work: it stays pending in
        state.db for the next start. False when it was shut down already."""
        with self._cv:
            if self._closed:
                return False
            self._closed = True
            if self._timer is not None:
                self._timer.cancel()
                self._timer = None
        self._pool.shutdown(wait=wait, cancel_futures=True)
        return True
