"""`/health` says whether the index has caught up with the disk: the daemon answers before its
start-up reconcile is done (issue 22, point 4), so a client can tell "not yet" from "not there"."""

from __future__ import annotations

import time

import httpx

from mateclaw_mem.api.app import create_app
from mateclaw_mem.runtime.services import Services
from tests.support.server import ApiServer

TIMEOUT = 15.0  # we wait for an outcome, never assert how long it took


def _index_health(server: ApiServer) -> dict:
    return httpx.get(server.url + "/health").json()["index"]


def test_health_says_catching_up_until_the_start_up_reconcile_is_done(services: Services) -> None:
    memory = services.settings.workspace / "default" / "memory"
    memory.mkdir()
    services.build()  # as the daemon does: the index exists, the watcher is built but not started
    # Written while no watcher ran: only the start-up reconcile can find it.
    (memory / "2026-11-30.md").write_text("# n\n\n## n\n\nwombat\n", "utf-8")
    with ApiServer(create_app(services, mcp=False)) as server:
        assert _index_health(server)["state"] == "catching up"
        services.watcher.start()
        try:
            deadline = time.monotonic() + TIMEOUT
            while _index_health(server)["state"] != "ready" and time.monotonic() < deadline:
                time.sleep(0.05)
            assert _index_health(server)["state"] == "ready"
            hits = services.search.search("wombat", record=False).hits
            assert [h.file for h in hits] == ["memory/2026-11-30.md"]
        finally:
            services.watcher.stop()


def test_health_without_a_watcher_says_so(services: Services) -> None:
    services.search.search("warm up", record=False)  # opens the index in a process with no watcher
    with ApiServer(create_app(services, mcp=False)) as server:
        assert _index_health(server)["state"] == "not watching"
