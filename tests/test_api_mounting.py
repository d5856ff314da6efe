"""Routers are mounted by their routes (api/mounting.py): each route is built once, and the document
still lists the shared error responses on every operation."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from fastapi import APIRouter, FastAPI
from fastapi.routing import APIRoute
from starlette.routing import Mount, Route

from mateclaw_mem.api.errors import ERROR_RESPONSES
from mateclaw_mem.api.mounting import document_errors, mount
from tests.support.server import daemon_services


@pytest.fixture(scope="module")
def app(tmp_path_factory: pytest.TempPathFactory) -> Iterator[FastAPI]:
    from mateclaw_mem.api.app import create_app

    services = daemon_services(tmp_path_factory.mktemp("mounting") / "ws")
    services.build()
    try:
        yield create_app(services, mcp=False)
    finally:
        services.close()


def test_the_app_holds_only_routes_it_built_no_router_kept_by_reference(app: FastAPI) -> None:
    # An included router would be a wrapper whose routes FastAPI builds again on the first request.
    kinds = {type(r).__name__ for r in app.router.routes if not isinstance(r, APIRoute | Route | Mount)}
    assert kinds == set()
    paths = {r.path for r in app.router.routes if isinstance(r, APIRoute)}
    assert {"/health", "/v1/aml/add", "/agents/me", "/api/v1/agents/me", "/api/v1/memory/{agentId}/facts"} <= paths


def test_every_documented_operation_lists_the_apps_error_responses(app: FastAPI) -> None:
    doc = app.openapi()
    operations = [(path, method, op) for path, item in doc["paths"].items() for method, op in item.items()]
    assert len(operations) > 50
    for path, method, op in operations:
        missing = {str(s) for s in ERROR_RESPONSES} - set(op["responses"])
        assert not missing, f"{method.upper()} {path} does not document {sorted(missing)}"


def test_the_seed_paths_are_served_twice_and_documented_once(app: FastAPI) -> None:
    doc = app.openapi()["paths"]
    assert "/agents/me" in doc and "/api/v1/agents/me" not in doc
    hidden = [r for r in app.router.routes if isinstance(r, APIRoute) and r.path == "/api/v1/agents/me"]
    assert len(hidden) == 1 and hidden[0].include_in_schema is False
    assert hidden[0].tags == ["clawdiators"] and hidden[0].summary


def test_an_operations_own_response_wins_and_fastapis_422_is_replaced_by_ours() -> None:
    router = APIRouter()

    @router.get("/thing/{n}", responses={404: {"description": "no such thing"}})
    def thing(n: int) -> dict[str, str]:
        return {}

    app = FastAPI()
    mount(app, router)
    plain = FastAPI()
    mount(plain, router)
    assert "HTTPValidationError" in plain.openapi()["components"]["schemas"]  # what FastAPI alone says
    document_errors(app)
    doc = app.openapi()
    responses = doc["paths"]["/thing/{n}"]["get"]["responses"]
    assert responses["404"] == {"description": "no such thing"}
    assert responses["422"]["description"] == ERROR_RESPONSES[422]["description"]
    assert responses["422"]["content"]["application/json"]["schema"] == {"$ref": "#/components/schemas/ErrorBody"}
    schemas = doc["components"]["schemas"]
    assert {"ErrorBody", "ErrorDetail"} <= schemas.keys() and not {"HTTPValidationError", "ValidationError"} & schemas.keys()
    assert app.openapi() is doc  # generated once


def test_a_router_that_includes_another_is_refused_when_fastapi_keeps_it_by_reference() -> None:
    inner, outer = APIRouter(), APIRouter()

    @inner.get("/x")
    def x() -> dict[str, str]:
        return {}

    outer.include_router(inner)
    app = FastAPI()
    if all(isinstance(r, APIRoute) for r in outer.routes):  # older FastAPI copies the routes: nothing to refuse
        mount(app, outer)
        assert [r.path for r in app.router.routes if isinstance(r, APIRoute)][-1] == "/x"
    else:
        with pytest.raises(TypeError, match="mount its routes directly"):
            mount(app, outer)
