"""Routers put into the app by their routes, so that each route is built once.

FastAPI builds a route's parameter and response fields (pydantic validators, ~2-3 ms a route here)
when its decorator runs. `app.include_router` builds them again: older versions copy every route
when it is called, newer ones (0.12x+) keep the router by reference and build an "effective" copy
of each of its routes on the first request that is routed past it. Here that was ~200 ms added to
the first API call after every start (and to every test's first call), under FastAPI's lock.

`mount(app, router)` appends the routes the decorators built. What an inclusion would have added
is put in the router when it is made instead: `api_router` gives it the app's error responses (the
OpenAPI document is the same); prefix, tags and dependencies are the router's own already.
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, FastAPI
from fastapi.routing import APIRoute
from starlette.routing import Mount, Route

from mateclaw_mem.api.errors import ERROR_RESPONSES


def api_router(**kwargs: Any) -> APIRouter:
    """An APIRouter whose routes document the app's error responses (their own ones win)."""
    responses = {**ERROR_RESPONSES, **(kwargs.pop("responses", None) or {})}
    return APIRouter(responses=responses, **kwargs)


def mount(app: FastAPI, *routers: APIRouter) -> None:
    for router in routers:
        for route in router.routes:
            if not isinstance(route, APIRoute | Route | Mount):
                # A router included into this one is kept by reference (and built again per request
                # path) by newer FastAPI: add its routes to a router of their own instead.
                raise TypeError(f"{type(route).__name__} in a mounted router: mount its routes directly")
            app.router.routes.append(route)
