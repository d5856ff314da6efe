"""The HTTP face of `serve --aml-only` (runtime/aml_only.py): the AML contract's routes and fast lane,
`/health`, `/api/v1/status` (keyed) and the OpenAPI document with its offline pages - nothing else.

The same request models, routes, fast lane, body limits, read deadline and Host/Origin guard as the
full daemon's app (api/app.py), so an Add/Search client cannot tell the two apart; `/health` reports
the store instead of the workspace: backend, pool, migrations (`AmlNode.store_health`), and answers
503 while the store cannot be reached, so a load balancer sends requests to another daemon meanwhile.
"""

from __future__ import annotations

import os
from typing import Any

from fastapi import APIRouter, Depends, Request
from fastapi.responses import JSONResponse

from mateclaw_mem import __version__
from mateclaw_mem.api import aml
from mateclaw_mem.api.aml_fast import LaneApp
from mateclaw_mem.api.auth import require_api_key
from mateclaw_mem.api.docs import install_docs
from mateclaw_mem.api.errors import ERROR_RESPONSES, install_error_handlers
from mateclaw_mem.api.mounting import document_errors, mount
from mateclaw_mem.api.wall import build_wall
from mateclaw_mem.runtime.aml_only import AmlNode
from mateclaw_mem.runtime.daemon_status import STATUS_PATH

router = APIRouter(tags=["health"])


def _node(request: Request) -> AmlNode:
    node: AmlNode = request.app.state.services
    return node


def node_health(node: AmlNode) -> dict[str, Any]:
    store = node.store_health()
    return {
        "status": "ok" if store["state"] == "ok" else "unavailable",
        "version": __version__,
        "role": "aml-only",
        "mode": node.mode,
        "auth": bool(node.api_key),
        "pid": os.getpid(),
        "store": store,
        # As the full daemon's /health has it (`status` prints it): each part and its state.
        "background": {label: "running" for label in node.running_parts()},
    }


@router.get("/health", summary="liveness and the store's state: backend, pool, migrations (no auth); 503 while "
            "the store cannot be reached")
def health(request: Request) -> JSONResponse:
    body = node_health(_node(request))
    # No secrets: pg_health names host, port and database at most, never the DSN's password.
    return JSONResponse(body, status_code=200 if body["status"] == "ok" else 503,
                        headers=None if body["status"] == "ok" else {"Retry-After": "1"})


@router.get(STATUS_PATH, dependencies=[Depends(require_api_key)],
            summary="the daemon's report (settings of the store and Add/Search; needs the key)")
def status(request: Request) -> dict[str, Any]:
    node = _node(request)
    settings = node.settings
    return {**node_health(node), "aml": {
        "agent": settings.aml_agent, "store": settings.aml.store, "dsn_env": settings.aml.postgres_dsn_env,
        "neighbours": settings.aml.neighbours, "images": settings.aml.images,
        "rerank": settings.aml.rerank.url or "off", "retention_days": settings.aml.retention_days,
    }}


def create_aml_only_app(node: AmlNode, *, host: str | None = None, aml_fast_lane: bool = True) -> LaneApp:
    """`host`: the bind address, one of the names the Host guard accepts (default `server.host`)."""
    settings = node.settings
    app = LaneApp(title="mateclaw-mem (Add/Search only)", version=__version__, responses=ERROR_RESPONSES,
                  docs_url=None, redoc_url=None)
    app.state.services = node  # what the AML routes read: .aml, .aml_users
    app.state.api_key = node.api_key
    install_error_handlers(app)
    document_errors(app)
    install_docs(app)
    mount(app, router, aml.router)
    build_wall(app, settings, node.api_key, host=host, lane=node.aml if aml_fast_lane else None)
    return app
