"""Per-call model usage (tokens, latency, step, outcome) in `workspace/.mateclaw/log.db`, beside
per-step failures and start-up probes of the model.

- `llm_usage`: one row per HTTP request to the model, failed ones included, so `status` can show
  what the model costs and how often a call fails.
- `model_step_failures`: one row per model *step* that failed (extraction, summary, dream,
  structured consolidation, AML facts), with its kind and reason. A call can succeed while its step
  fails — an answer invalid even after the repair round trip is two successful calls — so the call
  log alone said "0 errors" while every run failed. Steps record through `record_failure`
  (llm/failures.py); `status` and `/health` read `failures()`.
- `model_probes`: whether the model answered a tiny request, how fast, or why not (runtime/model_probe.py).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from mateclaw_mem.db import SharedConnection
from mateclaw_mem.redaction import redact

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
CREATE TABLE IF NOT EXISTS model_step_failures (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    ts_ms INTEGER NOT NULL,
    step TEXT NOT NULL,
    kind TEXT NOT NULL,
    reason TEXT NOT NULL,
    agent TEXT,
    owner TEXT
);
CREATE INDEX IF NOT EXISTS model_step_failures_ts ON model_step_failures(ts_ms);
CREATE TABLE IF NOT EXISTS model_probes (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    ts_ms INTEGER NOT NULL,
    model TEXT NOT NULL,
    ok INTEGER NOT NULL,
    latency_ms INTEGER NOT NULL,
    error_kind TEXT,
    error TEXT
);
"""

DAY_MS = 24 * 3600 * 1000
REASON_MAX = 500


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
                    ts_ms if ts_ms is not None else _now_ms(),
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

    # -- step failures -----------------------------------------------------------------------------

    def record_failure(
        self, step: str, kind: str, reason: str, *, agent: str | None = None, owner: str | None = None,
        ts_ms: int | None = None,
    ) -> None:
        """One failed model step. The reason is redacted: it may quote the server or the model."""
        with self._write() as conn:
            conn.execute(
                "INSERT INTO model_step_failures(ts_ms, step, kind, reason, agent, owner) VALUES (?,?,?,?,?,?)",
                (ts_ms if ts_ms is not None else _now_ms(), step, kind or "error",
                 redact(reason or "(no reason given)")[:REASON_MAX], agent, owner),
            )

    def failures(self, *, since_ms: int | None = None) -> dict[str, dict[str, Any]]:
        """Failures per step since `since_ms` (default: the last 24 h): count, counts by kind, and
        the latest one's kind, reason and time (ISO, UTC)."""
        since = since_ms if since_ms is not None else _now_ms() - DAY_MS
        with self._lock:
            rows = self._conn.execute(
                "SELECT step, kind, COUNT(*) AS n FROM model_step_failures WHERE ts_ms >= ?"
                " GROUP BY step, kind ORDER BY step, kind", (since,),
            ).fetchall()
            last = self._conn.execute(
                "SELECT f.step, f.kind, f.reason, f.ts_ms FROM model_step_failures f JOIN"
                " (SELECT step, MAX(id) AS id FROM model_step_failures WHERE ts_ms >= ? GROUP BY step) m"
                " ON f.id = m.id", (since,),
            ).fetchall()
        out: dict[str, dict[str, Any]] = {}
        for r in rows:
            step = out.setdefault(r["step"], {"failures": 0, "by_kind": {}})
            step["failures"] += r["n"]
            step["by_kind"][r["kind"]] = r["n"]
        for r in last:
            out[r["step"]].update(last_kind=r["kind"], last_reason=r["reason"], last_at=_iso(r["ts_ms"]))
        return out

    # -- probes ------------------------------------------------------------------------------------

    def record_probe(
        self, model: str, ok: bool, latency_ms: int, *, error_kind: str | None = None, error: str | None = None,
        ts_ms: int | None = None,
    ) -> None:
        with self._write() as conn:
            conn.execute(
                "INSERT INTO model_probes(ts_ms, model, ok, latency_ms, error_kind, error) VALUES (?,?,?,?,?,?)",
                (ts_ms if ts_ms is not None else _now_ms(), model, 1 if ok else 0, latency_ms, error_kind,
                 redact(error)[:REASON_MAX] if error else None),
            )

    def last_probe(self) -> dict[str, Any] | None:
        """The latest probe: {at, model, answering, latency_ms, error_kind, error}; None if never probed."""
        with self._lock:
            row = self._conn.execute("SELECT * FROM model_probes ORDER BY id DESC LIMIT 1").fetchone()
        if row is None:
            return None
        return {"at": _iso(row["ts_ms"]), "model": row["model"], "answering": bool(row["ok"]),
                "latency_ms": row["latency_ms"], "error_kind": row["error_kind"], "error": row["error"]}


def _now_ms() -> int:
    # Wall time, like `llm_usage`: these are logs of real calls, read against the real last 24 h.
    return int(time.time() * 1000)


def _iso(ts_ms: int) -> str:
    return datetime.fromtimestamp(ts_ms / 1000, UTC).isoformat(timespec="seconds")
