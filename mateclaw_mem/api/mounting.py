"""Routers put into the app by their routes, so that each route is built once, and the error
responses every operation shares written into the OpenAPI document once.

FastAPI builds a route's parameter and response fields (pydantic validators, ~2-3 ms a route here)
when its decorator runs. `app.include_router` builds them again: older versions copy every route
when it is called, newer ones (0.12x+) keep the router by reference and build an "effective" copy
of each of its routes on the first request routed past it. Here that was ~200 ms added to the
first API call after every start (and to every test's first call), under FastAPI's lock.

`mount(app, router)` appends the routes the decorators built; prefix, tags and dependencies are
the router's own already. What an inclusion also added is the app's `responses` (ERROR_RESPONSES):
given to each route instead, FastAPI would build a response field per status per route (~700,
~150 ms of start-up) to print the same nine entries. `document_errors` adds them to the document
when it is generated: where an operation documents a status itself, its own entry stays.
"""

from __future__ import annotations

import json
from typing import Any

from fastapi import APIRouter, FastAPI
from fastapi.routing import APIRoute
from starlette.routing import BaseRoute, Mount, Route

from mateclaw_mem.api.errors import ERROR_RESPONSES, ErrorBody

_SCHEMAS = "#/components/schemas/"
# FastAPI documents a 422 of its own for every operation with parameters; ours is an ErrorBody
# (api/errors.py renders validation errors), so its two schemas describe nothing that is sent.
_FASTAPI_422 = ("HTTPValidationError", "ValidationError")


def mount(app: FastAPI, *routers: APIRouter) -> None:
    app.router.routes.extend(routes_of(*routers))


def routes_of(*routers: APIRouter) -> list[BaseRoute]:
    """The routes the routers' decorators built, in order, as `mount` adds them."""
    routes: list[BaseRoute] = []
    for router in routers:
        for route in router.routes:
            if not isinstance(route, APIRoute | Route | Mount):
                # A router included into this one is kept by reference (and built again per request
                # path) by newer FastAPI: add its routes to a router of their own instead.
                raise TypeError(f"{type(route).__name__} in a mounted router: mount its routes directly")
            routes.append(route)
    return routes


def document_errors(app: FastAPI) -> None:
    """`app.openapi()` from now on lists ERROR_RESPONSES on every operation (once, then cached)."""
    generate = app.openapi

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            _add_error_responses(generate())
        return app.openapi_schema  # type: ignore[return-value]  # set by `generate`

    app.openapi = openapi  # type: ignore[method-assign]  # FastAPI's documented way to extend it


def _add_error_responses(doc: dict[str, Any]) -> None:
    ref = {"$ref": _SCHEMAS + ErrorBody.__name__}
    for item in doc.get("paths", {}).values():
        for op in item.values():
            responses = op.setdefault("responses", {})
            ours = responses.get("422", {}).get("content", {}).get("application/json", {}).get("schema", {})
            if ours.get("$ref") == _SCHEMAS + _FASTAPI_422[0]:
                del responses["422"]
            for status, spec in ERROR_RESPONSES.items():
                responses.setdefault(str(status), {"content": {"application/json": {"schema": dict(ref)}},
                                                   "description": spec["description"]})
    schemas = doc.setdefault("components", {}).setdefault("schemas", {})
    own = ErrorBody.model_json_schema(ref_template=_SCHEMAS + "{model}", mode="serialization")
    for name, schema in own.pop("$defs", {}).items():
        schemas.setdefault(name, schema)
    schemas.setdefault(ErrorBody.__name__, own)
    for name in _FASTAPI_422:  # the first refers to the second: dropped in that order, if unused
        if f'"{_SCHEMAS}{name}"' not in json.dumps(doc):
            schemas.pop(name, None)
