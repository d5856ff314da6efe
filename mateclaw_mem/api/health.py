"""`GET /health`: open (no key), cheap, secret-free. Any 2xx means the daemon is up."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Depends

from mateclaw_mem import __version__
from mateclaw_mem.api.deps import get_services
from mateclaw_mem.runtime.services import Services

router = APIRouter(tags=["health"])


@router.get("/health", summary="liveness, mode, version and index freshness (no auth)")
def health(services: Services = Depends(get_services)) -> dict[str, Any]:
    # Says whether auth is on, never what the key is; no paths, no owners.
    return {
        "status": "ok",
        "version": __version__,
        "mode": services.mode,
        "auth": bool(services.api_key),
        "index": services.index_freshness() if hasattr(services, "index_freshness") else None,
    }
