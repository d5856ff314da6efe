"""What one dream did, or would do: the record a run returns, logs (runs.py) and reports on (report.py).

Its own module because the run log and the report read it while the service that fills it in
calls both: with it in service.py each side imported the other. `service` still exports it.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any


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
    report: dict[str, Any] = field(default_factory=dict)  # the nightly report (report.py)
    memory_before: str | None = field(default=None, repr=False)  # MEMORY.md as the last attempt read it

    def to_dict(self) -> dict[str, Any]:
        return {k: v for k, v in asdict(self).items() if k != "memory_before"}
