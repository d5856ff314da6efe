"""Per-call model usage (tokens, latency, step, outcome) in `workspace/.mateclaw/log.db`.

One row per HTTP request to the model, failed ones included, so `status` can show what the model
costs and how often it fails.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mateclaw_mem.db import SharedConnection

_SCHEMA = """
CREATE TABLE IF NOT EXISTS llm_usage (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    ts_ms INTEGER NOT NULL,
    step TEXT NOT NULL,
    model TEXT NOT NULL,
    prompt_tokens INTEGER NOT NULL DEFAULT 0,
    completion_tokens INTEGER NOT NULL DEFAULT 0,
    latency_ms INTEGER NOT NULL DEFAULT 0,
    ok INTEGER NOT NULL,
    error_kind TEXT,
    error TEXT
);
CREATE INDEX IF NOT EXISTS llm_usage_ts ON llm_usage(ts_ms);
"""


@dataclass(frozen=True)
class UsageRecord:
    step: str
    model: str
    prompt_tokens: int
    completion_tokens: int
    latency_ms: int
    ok: bool
    error_kind: str | None = None
    error: str | None = None


class UsageLog(SharedConnection):
    """Thread-safe writer/reader of the `llm_usage` table."""

    def __init__(self, db_path: Path) -> None:
        super().__init__(Path(db_path), _SCHEMA)

    def record(self, rec: UsageRecord, *, ts_ms: int | None = None) -> None:
        with self._write() as conn:
            conn.execute(
                "INSERT INTO llm_usage(ts_ms, step, model, prompt_tokens, completion_tokens, latency_ms, ok,"
                " error_kind, error) VALUES (?,?,?,?,?,?,?,?,?)",
                (
                    ts_ms if ts_ms is not None else int(time.time() * 1000),
                    rec.step,
                    rec.model,
                    rec.prompt_tokens,
                    rec.completion_tokens,
                    rec.latency_ms,
                    1 if rec.ok else 0,
                    rec.error_kind,
                    (rec.error or "")[:500] or None,
                ),
            )

    def summary(self, *, since_ms: int | None = None) -> dict[str, Any]:
        """Totals overall and per step, plus the latest error — the `status` view."""
        where, args = ("WHERE ts_ms >= ?", (since_ms,)) if since_ms is not None else ("", ())
        with self._lock:
            rows = self._conn.execute(
                f"SELECT step, COUNT(*) AS calls, SUM(ok) AS ok, SUM(prompt_tokens) AS pt,"
                f" SUM(completion_tokens) AS ct, AVG(latency_ms) AS lat FROM llm_usage {where} GROUP BY step"
                f" ORDER BY step",
                args,
            ).fetchall()
            last_err = self._conn.execute(
                f"SELECT ts_ms, step, error_kind, error FROM llm_usage {where}"
                f" {'AND' if where else 'WHERE'} ok = 0 ORDER BY id DESC LIMIT 1",
                args,
            ).fetchone()
        by_step = {
            r["step"]: {
                "calls": r["calls"],
                "ok": r["ok"] or 0,
                "errors": r["calls"] - (r["ok"] or 0),
                "prompt_tokens": r["pt"] or 0,
                "completion_tokens": r["ct"] or 0,
                "avg_latency_ms": round(r["lat"] or 0),
            }
            for r in rows
        }
        total = {
            key: sum(s[key] for s in by_step.values())
            for key in ("calls", "ok", "errors", "prompt_tokens", "completion_tokens")
        }
        return {
            **total,
            "by_step": by_step,
            "last_error": dict(last_err) if last_err else None,
        }
