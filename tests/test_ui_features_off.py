"""A lifecycle feature switched off, in the Memory Browser (issue 38.6), in a real headless Chromium:
its page is not in the navigation, and its URL is a page with the navigation that says in one
sentence which key turns it on -- never the bare "Conflict" page it was. With the features on, the
links are there (the pages themselves: tests/test_ui_browser.py)."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from typing import Any

import pytest

from tests.support.server import ApiServer, daemon_services

playwright_api = pytest.importorskip("playwright.sync_api", reason="playwright is a dev dependency")
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
pytestmark = pytest.mark.skipif(CHROMIUM is None, reason="no chromium here (.ci/run installs Debian's chromium)")


def _daemon(tmp: Any, **fact: bool) -> Iterator[str]:
    from mateclaw_mem.api.app import create_app

    services = daemon_services(tmp / "ws", mate={"memory": {"fact": fact}})
    services.seed_agents()
    services.build()
    try:
        with ApiServer(create_app(services, mcp=False)) as server:
            yield server.url
    finally:
        services.close()


@pytest.fixture(scope="module")
def off(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    yield from _daemon(tmp_path_factory.mktemp("ui-off"), projection_enabled=False,
                       contradiction_check_enabled=False)


@pytest.fixture(scope="module")
def facts_only(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    yield from _daemon(tmp_path_factory.mktemp("ui-facts"), projection_enabled=True,
                       contradiction_check_enabled=False)


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    with playwright_api.sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox", "--disable-gpu"])
        yield b
        b.close()


def _nav(tab: Any) -> list[str]:
    return [t.strip() for t in tab.locator("nav[aria-label=Pages] a").all_inner_texts()]


def test_facts_and_inbox_off_are_left_out_and_say_how_to_turn_them_on(browser: Any, off: str) -> None:
    tab = browser.new_page(base_url=off)
    tab.goto("/ui/")
    nav = _nav(tab)
    assert "Home" in nav and "Files" in nav and "Facts" not in nav and "Inbox" not in nav
    tab.goto("/ui/facts")
    assert tab.title().startswith("Facts are off") and "Conflict" not in tab.content()
    said = tab.locator("#feature-off").inner_text()
    assert "mate.memory.fact.projection-enabled: true" in said and "restart" in said
    assert "Files" in _nav(tab)  # the navigation is there: the person can go on
    tab.goto("/ui/inbox")
    said = tab.locator("#feature-off").inner_text()
    assert tab.title().startswith("The inbox is off") and "contradiction-check-enabled: true" in said
    tab.close()


def test_the_inbox_needs_its_own_key_beside_projection(browser: Any, facts_only: str) -> None:
    tab = browser.new_page(base_url=facts_only)
    tab.goto("/ui/")
    nav = _nav(tab)
    assert "Facts" in nav and "Inbox" not in nav
    tab.goto("/ui/facts")
    assert tab.locator("#feature-off").count() == 0 and tab.title().startswith("Facts")
    tab.goto("/ui/inbox")
    said = tab.locator("#feature-off").inner_text()
    assert "mate.memory.fact.contradiction-check-enabled: true" in said
    tab.close()
