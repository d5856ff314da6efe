"""Shared FastAPI dependencies: the composition root and the services a router needs from it."""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends, Path, Query, Request
from fastapi.exceptions import RequestValidationError
from fastapi.routing import APIRoute
from pydantic import AfterValidator, Field

from mateclaw_mem.errors import InvalidInputError
from mateclaw_mem.runtime.services import Services
from mateclaw_mem.workspace.owners import owner_key, wire_owner

# The store's agent-name rule (workspace/paths.py) as a schema pattern: a bad name is a documented 422.
AGENT_PATTERN = r"^[A-Za-z0-9](?:[A-Za-z0-9_.-]{0,62}[A-Za-z0-9_-])?$"



def end_user_owner(value: str | int | None) -> str | None:
    """The seed's API end user: `endUserId` 42 is the owner `api:42` (a web user 42 is `user:42`).
    An integer id is kept exact (JSON integers are parsed as Python ints, never floats)."""
    if value is None or value == "":
        return None
    try:
        return owner_key("api", value).key
    except InvalidInputError as exc:
        raise ValueError(str(exc)) from None


# An owner key on the wire, in a query or a body (`user:<id>`, `<channel>:<sender>`, `api:<endUserId>`,
# a legacy bare key; "" and "system" = shared = None): checked and converted here, while parsing, and
# nowhere else in the HTTP face (`workspace.owners.wire_owner`).
OwnerField = Annotated[str | None, Field(max_length=200), AfterValidator(wire_owner)]
OwnerQuery = Annotated[
    str | None,
    Query(max_length=200, description="owner key: user:<id> (web), <channel>:<sender> (IM), api:<endUserId>, "
                                      "or system (shared); personal memory when owner isolation is on"),
    AfterValidator(wire_owner),
]
EndUserField = Annotated[str | int | None, AfterValidator(end_user_owner)]
# An integer a route hands to SQLite (a row id, a version): past a signed 64-bit INTEGER the driver
# raises OverflowError, a 500; bounded here it is the caller's documented 422.
SQLITE_MAX_INT = 2**63 - 1
RowId = Annotated[int, Field(ge=1, le=SQLITE_MAX_INT)]


async def get_services(request: Request) -> Services:
    # async: FastAPI runs a plain-def dependency in its thread pool, a hop per request for a lookup.
    return request.app.state.services


async def known_agent(
    agent: str = Path(alias="agentId", pattern=AGENT_PATTERN), services: Services = Depends(get_services)
) -> str:
    """Router dependency: an agent that was never created is a 404 naming it and how to create it,
    before any route records, dreams or writes anything for it (a bad name stays the route's 422)."""
    return services.store.require_agent(agent)


async def declared_query_only(request: Request) -> None:
    """Router dependency: on a route that takes a JSON body, a query parameter the route does not
    declare is a 422 naming what it takes. Such a route reads its arguments (the owner, an id) from
    the body; `?owner=alice` beside a body without one used to be dropped without a word, and the
    call then ran for the shared owner. Routes without a body keep their own `_query_names` checks."""
    if not request.query_params:
        return
    route = request.scope.get("route")
    if not isinstance(route, APIRoute) or route.body_field is None:
        return
    declared: set[str] = set()
    stack = [route.dependant]
    while stack:  # the route's own query parameters and those of every dependency it has
        dependant = stack.pop()
        declared.update(p.alias for p in dependant.query_params)
        stack.extend(dependant.dependencies)
    unknown = [key for key in request.query_params if key not in declared]
    if unknown:
        takes = f"this route takes {', '.join(sorted(declared))}" if declared else "this route takes none"
        raise RequestValidationError([{
            "loc": ("query", key), "type": "extra_forbidden",
            "msg": f"unknown query parameter ({takes}; send the request's arguments in its JSON body)"}
            for key in unknown])
