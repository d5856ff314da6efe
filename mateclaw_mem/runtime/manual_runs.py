"""Manual extraction over HTTP (`POST …/summarize/{conversationId}`) that may outlast the request.

A slow local model took 472 s inside one request. The run goes to a small pool of its own threads
under an id chosen before it starts (`runs.reserved_run_id`); the request waits a short time, then
answers with the finished run or with the id, and the run goes on. `status(run_id)` reads the
running job, or the run's record in log.db (`extraction_runs`) once this process no longer holds it.

Why a pool here rather than the extraction queue's: `extract_now` is the manual run (no gates, only
this conversation, waiting for a run of the same bucket) and runs on its caller's thread, holding
the bucket exactly as it does for the CLI; the queue's own workers run gated, scheduled work.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from concurrent.futures import Future, ThreadPoolExecutor
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from mateclaw_mem.memory.extraction.runs import ExtractionRunLog, RunOutcome, new_run_id, reserved_run_id

if TYPE_CHECKING:
    from mateclaw_mem.clock import Clock
    from mateclaw_mem.memory.extraction.service import ExtractionService

RUNNING = "running"


class ManualRuns:
    def __init__(self, extraction: ExtractionService, runs_db: Path, clock: Clock, *, workers: int = 2,
                 keep: int = 200) -> None:
        self._extraction = extraction
        self._log = ExtractionRunLog(runs_db)
        self._clock = clock
        self._keep = keep  # finished jobs remembered in memory; older ones are read from log.db
        self._jobs: OrderedDict[str, tuple[str, Future[RunOutcome]]] = OrderedDict()  # run id -> (agent, job)
        self._lock = threading.Lock()
        self._pool = ThreadPoolExecutor(max_workers=max(1, workers), thread_name_prefix="manual-extraction")

    def submit(
        self, agent: str, conversation_id: str, owner: str | None, *, wait: float
    ) -> tuple[str, RunOutcome | None]:
        """(run id, the outcome if the run finished within `wait` seconds, else None). An error the
        run raises before it starts (no such conversation, bucket busy) is raised here if it comes in time."""
        run_id = new_run_id()
        job = self._pool.submit(self._run, run_id, agent, conversation_id, owner)
        with self._lock:
            self._jobs[run_id] = (agent, job)
            while len(self._jobs) > self._keep:
                oldest, (_, old) = next(iter(self._jobs.items()))
                if not old.done():
                    break
                del self._jobs[oldest]
        try:
            return run_id, job.result(timeout=wait)
        except TimeoutError:
            return run_id, None

    def status(self, agent: str, run_id: str) -> RunOutcome | dict[str, Any] | str | None:
        """RUNNING, the finished run (re-raising what a failed job raised), or None for an unknown id."""
        with self._lock:
            held = self._jobs.get(run_id)
        if held is not None and held[0] == agent:
            return held[1].result() if held[1].done() else RUNNING
        row = self._log.get(run_id, self._fmt)
        return row if row is not None and row.get("agent") == agent else None

    def shutdown(self) -> None:
        """Running runs finish (they hold a bucket and write files); queued ones are dropped."""
        self._pool.shutdown(wait=True, cancel_futures=True)
        self._log.close()

    def _run(self, run_id: str, agent: str, conversation_id: str, owner: str | None) -> RunOutcome:
        with reserved_run_id(run_id):
            return self._extraction.extract_now(agent, conversation_id, owner)

    def _fmt(self, ms: int | None) -> str | None:
        if not ms:
            return None
        return datetime.fromtimestamp(ms / 1000, tz=self._clock.tz).isoformat(timespec="seconds")
