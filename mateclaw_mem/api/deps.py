"""Shared FastAPI dependencies: the composition root and the services a router needs from it."""

from __future__ import annotations

from fastapi import Request

from mateclaw_mem.runtime.services import Services

# The store's agent-name rule (workspace/paths.py) as a schema pattern: a bad name is a documented 422.
AGENT_PATTERN = r"^[A-Za-z0-9](?:[A-Za-z0-9_.-]{0,62}[A-Za-z0-9_-])?$"


async def get_services(request: Request) -> Services:
    # async: FastAPI runs a plain-def dependency in its thread pool, a hop per request for a lookup.
    return request.app.state.services


def owner_key(owner: str | None) -> str:
    """Services take "" for "no owner" (the single-user default)."""
    return owner or ""
