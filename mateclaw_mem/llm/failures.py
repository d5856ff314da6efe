"""The one way a model step says it failed: `record_failure(client, step, kind, reason, ...)`.

    try:
        plan = client.chat_json(messages, Plan, step="dream")
    except ModelError as exc:
        record_failure(client, "dream", exc.kind, exc.message, agent=agent, owner=owner)

Rows land in `model_step_failures` in log.db (llm/usage.py), through the usage log the shared
client carries, so every step needs nothing but the client it already has. `status` and `/health`
show failures per step over the last 24 h (counts by kind and the last reason).

Kinds: the client's `ModelError.kind` (timeout, server, connection, rate_limit, bad_request,
context_too_large, auth, invalid_output — invalid even after the repair round trip) or `unusable`
(an answer of the right shape that cannot be used: an AML answer without a facts list, a "remember"
request that yields no write, an echo of the prompt).
"""

from __future__ import annotations

import logging
import sqlite3
from typing import Any

log = logging.getLogger(__name__)

# The steps `status` always lists (with 0 when they did not fail), in pipeline order.
STEPS = ("extraction", "summary", "dream", "structured_consolidation", "aml_facts")
UNUSABLE = "unusable"


def record_failure(
    client: Any, step: str, kind: str, reason: str, *, agent: str | None = None, owner: str | None = None,
) -> None:
    """Record that `step` failed. A no-op without a client or usage log (rules mode, a bare test
    client). Never raises: recording a failure must not turn it into another one."""
    usage = getattr(client, "usage", None)
    if usage is None:
        return
    try:
        usage.record_failure(step, kind, reason, agent=agent, owner=owner)
    except (sqlite3.Error, ValueError) as exc:  # a closed or locked log: the step's own log line stays
        log.warning("could not record the %s failure (%s: %s): %s", step, kind, reason, exc)
