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
from pathlib import Path
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
    app.deferred = failing  # (the one LaneApp holds requests on)
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


class Post(threading.Thread):
    """One JSON POST on its own thread."""

    def __init__(self, url: str, body: dict[str, Any]) -> None:
        super().__init__(daemon=True)
        self.url, self.body = url, body
        self.answer: tuple[int, Any] | None = None

    def run(self) -> None:
        request = urllib.request.Request(self.url, json.dumps(self.body).encode(),
                                         {"Content-Type": "application/json"}, method="POST")
        try:
            with urllib.request.urlopen(request, timeout=30) as r:
                self.answer = r.status, json.loads(r.read())
        except urllib.error.HTTPError as e:
            self.answer = e.code, json.loads(e.read())


def test_before_the_rest_is_built_searches_and_health_answer_and_everything_else_waits(tmp_path: Path) -> None:
    """The daemon's start (runtime/daemon.py): what AML searches read is built before it listens, the
    rest just after; meanwhile an Add (it may write memory files whose listeners are not built yet)
    and every other route wait, then get their answers."""
    from mateclaw_mem.api.app import create_app
    from mateclaw_mem.runtime.daemon import BEFORE_LISTENING

    services = daemon_services(tmp_path / "ws")
    try:
        services.seed_agents()
        services.build(BEFORE_LISTENING)
        app = create_app(services, mcp=False, defer_routes=True)
        assert app.deferred is not None
        with ApiServer(app) as server:
            search = {"user_id": "early", "query": "lake house", "top_k": 5}
            found = Post(f"{server.url}/v1/aml/search", search)
            found.run()
            assert found.answer == (200, {"data": []})
            assert _get(f"{server.url}/health")[0] == 200
            add = Post(f"{server.url}/v1/aml/add", {"request_id": "r1", "user_id": "early", "session_id": "s1",
                                                     "messages": [{"role": "user", "content": "Caroline: the lake house",
                                                                   "timestamp": 1_700_000_000_000}]})
            later = Call(f"{server.url}{LATER}")
            add.start()
            later.start()
            for call in (add, later):
                call.join(0.5)
                assert call.is_alive() and call.answer is None  # held, not answered
            assert not services.built("dreaming") and not services.built("file_index")
            app.deferred.finish(first=lambda pause: services.build(pause=pause))
            for call in (add, later):
                call.join(30)
            assert add.answer is not None and add.answer[0] == 200
            assert later.answer is not None and later.answer[0] == 200
            assert all(services.built(name) for name in ("dreaming", "file_index", "watcher"))
            found.run()
            assert found.answer is not None and [h["id"] for h in found.answer[1]["data"]] == ["m1"]
            assert found.answer[1]["data"][0]["content"].endswith("Caroline: the lake house")
    finally:
        services.close()


def test_another_thread_asking_for_a_part_between_the_two_builds_waits_for_the_whole(tmp_path: Path) -> None:
    from mateclaw_mem.runtime.daemon import BEFORE_LISTENING

    services = daemon_services(tmp_path / "ws")
    try:
        services.build(BEFORE_LISTENING)
        got: list[Any] = []
        asker = threading.Thread(target=lambda: got.append(services.dreaming), daemon=True)
        asker.start()
        asker.join(0.5)
        assert asker.is_alive() and not services.built("dreaming")  # waiting, not building it itself
        services.build()
        asker.join(30)
        assert got == [services.dreaming]  # the one the builder built
    finally:
        services.close()
