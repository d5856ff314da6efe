"""The routes the daemon builds once it listens (api/deferred.py), on a real uvicorn server: a request
for one of them that comes first waits and gets the answer it would have got; the finished app is
route for route, and schema for schema, the app built whole; a failed build answers 503."""

from __future__ import annotations

import json
import socket
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from starlette.routing import BaseRoute

from mateclaw_mem.api.deferred import DeferredRoutes
from mateclaw_mem.runtime.services import Services
from tests.support.server import ApiServer, daemon_services

LATER = "/api/v1/memory/default/dreaming/status"  # built after listening (memory router)


@pytest.fixture(scope="module")
def services(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Services]:
    services = daemon_services(tmp_path_factory.mktemp("deferred") / "ws")
    services.seed_agents()
    services.build()
    try:
        yield services
    finally:
        services.close()


def _get(url: str) -> tuple[int, Any]:
    try:
        with urllib.request.urlopen(url, timeout=30) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


class Call(threading.Thread):
    """One GET on its own thread, so the test can see it still waiting."""

    def __init__(self, url: str) -> None:
        super().__init__(daemon=True)
        self.url = url
        self.answer: tuple[int, Any] | None = None

    def run(self) -> None:
        self.answer = _get(self.url)


def _shape(routes: list[BaseRoute]) -> list[tuple[str, str, tuple[str, ...]]]:
    return [(type(r).__name__, getattr(r, "path", ""), tuple(sorted(getattr(r, "methods", None) or ())))
            for r in routes]


def test_a_request_for_a_later_route_waits_for_the_build_and_gets_the_same_answer(services: Services) -> None:
    from mateclaw_mem.api.app import create_app

    whole = create_app(services, mcp=False)
    app = create_app(services, mcp=False, defer_routes=True)
    assert app.deferred is not None and app.deferred.state == "pending"
    with ApiServer(whole) as reference, ApiServer(app) as server:
        assert _get(f"{server.url}/health")[0] == 200  # built with the app: answers at once
        early = [Call(f"{server.url}{LATER}"), Call(f"{server.url}/api/v1/agents/default/nothing-here")]
        for call in early:
            call.start()
        for call in early:
            call.join(0.3)
            assert call.is_alive() and call.answer is None  # held by the catch-all, not answered 404
        app.deferred.finish()
        for call in early:
            call.join(30)
        expected = _get(f"{reference.url}{LATER}")
        assert expected[0] == 200
        assert early[0].answer == expected
        assert early[1].answer is not None and early[1].answer[0] == 404  # unknown after the build too
        assert _get(f"{server.url}{LATER}") == expected  # and later calls go straight to the route
    assert app.deferred.state == "installed"


def test_the_finished_app_has_the_whole_apps_routes_in_the_same_order_and_schema(services: Services) -> None:
    from mateclaw_mem.api.app import create_app

    whole = create_app(services, mcp=False)
    app = create_app(services, mcp=False, defer_routes=True)
    assert len(app.router.routes) < len(whole.router.routes)
    assert _shape(app.router.routes)[-1] == ("Route", "/{path:path}", ())  # the catch-all, last
    assert app.deferred is not None
    app.deferred.finish()
    assert _shape(app.router.routes) == _shape(whole.router.routes)
    assert app.openapi() == whole.openapi()
    app.deferred.finish()  # a second call changes nothing
    assert _shape(app.router.routes) == _shape(whole.router.routes)


def test_the_schema_asked_for_before_the_build_waits_for_it(services: Services) -> None:
    from mateclaw_mem.api.app import create_app

    whole = create_app(services, mcp=False)
    app = create_app(services, mcp=False, defer_routes=True)
    got: list[dict[str, Any]] = []
    asker = threading.Thread(target=lambda: got.append(app.openapi()), daemon=True)
    asker.start()
    asker.join(0.3)
    assert asker.is_alive() and not got  # not a half-built schema, cached for good
    assert app.deferred is not None
    app.deferred.finish()
    asker.join(30)
    assert got == [whole.openapi()]
    assert "/api/v1/memory/{agentId}/dreaming/status" in got[0]["paths"]


def test_a_failed_build_answers_the_waiting_requests_503_and_raises(services: Services) -> None:
    from mateclaw_mem.api.app import create_app

    app = create_app(services, mcp=False, defer_routes=True)
    failing = DeferredRoutes(app, build=lambda: [][0])  # an IndexError where the routes would come from
    app.router.routes[-1] = failing.placeholder
    with ApiServer(app) as server:
        call = Call(f"{server.url}{LATER}")
        call.start()
        call.join(0.3)
        assert call.is_alive()
        with pytest.raises(IndexError):
            failing.finish()
        call.join(30)
        assert call.answer is not None and call.answer[0] == 503
        assert "failed to build its HTTP routes" in json.dumps(call.answer[1])
        assert _get(f"{server.url}/health")[0] == 200
    assert failing.state == "failed"


class HeldSearch:
    """An AML search whose headers are sent and whose body is not yet: the lane holds it in flight."""

    def __init__(self, url: str) -> None:
        host, port = url.removeprefix("http://").split(":")
        self.body = json.dumps({"user_id": "held-user", "query": "where is the lake house", "top_k": 5}).encode()
        self.sock = socket.create_connection((host, int(port)), timeout=30)
        self.sock.sendall(f"POST /v1/aml/search HTTP/1.1\r\nHost: {host}:{port}\r\nContent-Type: application/json\r\n"
                          f"Content-Length: {len(self.body)}\r\n\r\n".encode())

    def answer(self) -> tuple[int, Any]:
        self.sock.sendall(self.body)
        with self.sock.makefile("rb") as f:
            status = int(f.readline().split()[1])
            length = 0
            while (line := f.readline().strip()):
                name, _, value = line.decode().partition(":")
                if name.lower() == "content-length":
                    length = int(value)
            return status, json.loads(f.read(length))

    def close(self) -> None:
        self.sock.close()


@contextmanager
def _held_search(services: Services, step_wait: float) -> Iterator[tuple[Any, ApiServer, HeldSearch]]:
    """A deferred app served, its build waiting `step_wait` s a step, and one AML search held in flight."""
    from mateclaw_mem.api.app import create_app

    app = create_app(services, mcp=False, defer_routes=True)
    assert app.deferred is not None
    app.deferred.step_wait = step_wait
    with ApiServer(app) as server:
        held = HeldSearch(server.url)
        try:
            for _ in range(1000):  # until the server has read its headers and the lane counts it
                if not app.wait_quiet(0):
                    break
                time.sleep(0.01)
            else:
                raise AssertionError("the held search never reached the lane")
            yield app, server, held
        finally:
            held.close()


def test_the_build_waits_while_an_aml_request_is_in_flight_then_finishes(services: Services) -> None:
    with _held_search(services, 60.0) as (app, server, held):
        builder = threading.Thread(target=app.deferred.finish, daemon=True)
        builder.start()
        builder.join(0.5)
        assert builder.is_alive() and app.deferred.state == "pending"  # the AML request goes first
        status, body = held.answer()
        assert status == 200 and body == {"data": []}
        builder.join(30)
        assert not builder.is_alive() and app.deferred.state == "installed"
        assert _get(f"{server.url}{LATER}")[0] == 200


def test_requests_in_flight_for_ever_still_let_the_build_finish(services: Services) -> None:
    from mateclaw_mem.api.app import create_app

    whole = create_app(services, mcp=False)
    with _held_search(services, 0.01) as (app, _, held):
        app.deferred.finish()  # each step waits 0.01 s at most, then builds all the same
        assert not app.wait_quiet(0)  # the search is still held
        assert app.deferred.state == "installed"
        assert _shape(app.router.routes) == _shape(whole.router.routes)
        assert held.answer()[0] == 200
