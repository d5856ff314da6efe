"""Which failed runs use up a remember request's attempts (memory/extraction/remember.py)."""

from __future__ import annotations

from pathlib import Path

from mateclaw_mem.memory.extraction.remember import failed_in_a_row
from mateclaw_mem.memory.extraction.runs import ExtractionRunLog, RunOutcome


def _run(runs: ExtractionRunLog, k: int, outcome: str, kind: str | None = None) -> None:
    runs.record(RunOutcome(run_id=f"r{k}", agent="default", owner=None, trigger="turns", mode="model",
                           outcome=outcome, error_kind=kind), now_ms=k)


def test_runs_a_stop_cancelled_do_not_count_as_failures_and_do_not_reset_them(tmp_path: Path) -> None:
    runs = ExtractionRunLog(tmp_path / "state.db")
    try:
        _run(runs, 1, "updated")
        _run(runs, 2, "error", "timeout")
        _run(runs, 3, "error", "cancelled")  # a daemon stopped during the model call
        _run(runs, 4, "skipped")
        _run(runs, 5, "error", "cancelled")
        _run(runs, 6, "error", "invalid_output")
        assert failed_in_a_row(runs, "default", None) == 2  # the timeout and the invalid answer
        _run(runs, 7, "no_change")
        assert failed_in_a_row(runs, "default", None) == 0
    finally:
        runs.close()
