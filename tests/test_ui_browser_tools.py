"""The Memory Browser's tools in a real headless Chromium against a daemon with an API key: the
login, export / import with its preview and undo, the learning page, the side-by-side diff and
pinning a section. One keyed server and one browser for the module; every tab logs in first.

MATECLAW_SCREENSHOTS=1 also writes each page to docs/screenshots/ (off in CI: no rewritten files).
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from mateclaw_mem.markdown.sections import PIN_MARK
from tests.support.server import ApiServer, daemon_services

playwright_api = pytest.importorskip("playwright.sync_api", reason="playwright is a dev dependency")
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
pytestmark = pytest.mark.skipif(CHROMIUM is None, reason="no chromium here (.ci/run installs Debian's chromium)")

AGENT = "default"
KEY = "browser-tools-key"
SHOTS = Path(__file__).resolve().parents[1] / "docs" / "screenshots"
TAKE_SHOTS = os.environ.get("MATECLAW_SCREENSHOTS") == "1"  # read at import: conftest scrubs MATECLAW_*
AXE = Path(__file__).resolve().parent / "support" / "axe" / "axe.min.js"


def _write(services: Any, rel: str, text: str) -> None:
    snap = services.store.read(AGENT, rel)
    services.store.write(AGENT, rel, text, expected_sha=snap.sha, actor="person")


@pytest.fixture(scope="module")
def daemon(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Any]]:
    from mateclaw_mem.api.app import create_app

    services = daemon_services(tmp_path_factory.mktemp("uitools") / "ws", api_key=KEY)
    services.seed_agents()
    services.build()
    _write(services, "MEMORY.md", "# MEMORY.md\n\n## Travel\n- prefers window seats\n")
    _write(services, "notes/trip.md", "# Trip\n\n## Plan\n- fly to Lisbon on May 3\n- hotel near Alfama\n")
    learning = services.learning
    for score in (40, 72):
        learning.record_result(AGENT, "write-report", score, actor="test")
    learning.add_strategy(AGENT, "Outline before drafting", task="write-report", actor="test")
    learning.reflect(AGENT, "write-report", "Short sections scored higher", actor="test")
    try:
        with ApiServer(create_app(services, mcp=False)) as server:
            yield server.url, services
    finally:
        services.close()


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    with playwright_api.sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox", "--disable-gpu"])
        yield b
        b.close()


def _login(page: Any, key: str) -> Any:
    page.fill("#key", key)
    with page.expect_navigation():
        page.get_by_role("button", name="Log in").click()
    return page


@pytest.fixture
def tab(browser: Any, daemon: tuple[str, Any]) -> Iterator[Any]:
    context = browser.new_context(base_url=daemon[0], viewport={"width": 1200, "height": 900}, accept_downloads=True)
    page = context.new_page()
    page.csp_errors = []  # type: ignore[attr-defined]
    page.on("console", lambda m: m.type == "error" and page.csp_errors.append(m.text))  # type: ignore[attr-defined]
    page.goto("/ui/login")
    _login(page, KEY)
    yield page
    # With screenshots on, Playwright's own screenshot styles are refused by the policy (rightly), so
    # only shot() checks, before it takes one; the normal run checks the whole test.
    assert TAKE_SHOTS or not [e for e in page.csp_errors if "Content Security Policy" in e], page.csp_errors  # type: ignore[attr-defined]
    context.close()


def shot(page: Any, name: str) -> None:
    if TAKE_SHOTS:
        errors = getattr(page, "csp_errors", [])
        assert not [e for e in errors if "Content Security Policy" in e], errors
        SHOTS.mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(SHOTS / f"{name}.png"), full_page=True)


def test_login_refuses_a_wrong_key_and_the_right_one_sets_an_httponly_cookie(browser: Any,
                                                                            daemon: tuple[str, Any]) -> None:
    context = browser.new_context(base_url=daemon[0])
    try:
        page = context.new_page()
        page.goto("/ui/files")
        assert "/ui/login" in page.url and page.locator("#key").is_visible()
        shot(page, "login")
        _login(page, "not-the-key")
        assert "not this daemon's API key" in page.inner_text("[role=alert]")
        assert not [c for c in context.cookies() if c["name"] == "mateclaw_ui"]
        _login(page, KEY)
        assert page.url.split("?")[0].endswith("/ui/files")
        assert page.locator("h1").inner_text() == "Files"
        cookie = next(c for c in context.cookies() if c["name"] == "mateclaw_ui")
        assert cookie["httpOnly"] and cookie["sameSite"] == "Strict"
        assert KEY not in cookie["value"]
    finally:
        context.close()


def test_export_then_import_previews_the_update_applies_it_and_undoes_it(tab: Any, daemon: tuple[str, Any],
                                                                       tmp_path: Path) -> None:
    services = daemon[1]
    rel = "MEMORY.md"  # an export holds the agent's context files
    original = services.store.read(AGENT, rel).text
    tab.goto("/ui/snapshot")
    with tab.expect_download() as info:
        tab.click("#export")
    archive = tmp_path / "snapshot.zip"
    info.value.save_as(archive)
    # The person changes the file on disk after the export; re-importing the export brings it back.
    modified = original + "- a line typed on disk after the export\n"
    services.store.path(AGENT, rel).write_text(modified, encoding="utf-8")
    tab.set_input_files("#file", str(archive))
    tab.select_option("#strategy", "overwrite")
    tab.get_by_role("button", name="Preview the import").click()
    tab.wait_for_selector("#plan")
    row = tab.locator("#plan tr", has_text=rel)
    assert "update" in row.inner_text()
    assert row.locator(".size-old").inner_text() == f"{len(modified.encode())} bytes"
    assert row.locator(".size-new").inner_text() == f"{len(original.encode())} bytes"
    assert services.store.read(AGENT, rel).text == modified  # a preview writes nothing
    shot(tab, "import-preview")
    tab.get_by_role("button", name="Apply this import").click()
    tab.wait_for_selector("#imported")
    assert services.store.read(AGENT, rel).text == original
    assert "Imported as run" in tab.inner_text(".flash")
    tab.get_by_role("button", name="Undo this import").click()
    tab.wait_for_selector(".flash:has-text('Undid run')")
    assert "Undid run" in tab.inner_text(".flash")
    assert services.store.read(AGENT, rel).text == modified


def test_apply_without_an_upload_is_a_clear_error(tab: Any, daemon: tuple[str, Any]) -> None:
    tab.goto("/ui/snapshot")
    csrf = tab.locator("input[name=csrf]").first.get_attribute("value")
    response = tab.request.post("/ui/snapshot/apply", form={"csrf": csrf, "strategy": "skip"})
    assert response.status == 404 and "upload it again" in response.text()


def test_learning_shows_attempts_best_score_sparkline_and_reflections(tab: Any) -> None:
    tab.goto("/ui/learning")
    row = tab.locator("table.tasks tr", has_text="write-report")
    assert row.locator(".attempts").inner_text() == "2"
    assert row.locator(".best").inner_text() == "72"
    assert row.locator("svg.spark polyline").count() == 1
    assert "Outline before drafting" in row.inner_text()
    assert "Short sections scored higher" in tab.inner_text(".reflections")
    shot(tab, "learning")


def test_history_side_by_side_shows_the_old_and_new_line_in_two_columns(tab: Any, daemon: tuple[str, Any]) -> None:
    services = daemon[1]
    rel = "notes/sides.md"
    _write(services, rel, "# Sides\n\n- the old line\n")
    _write(services, rel, "# Sides\n\n- the new line\n")
    tab.goto(f"/ui/files/history?path={rel}")
    assert tab.locator("table.sbs").count() == 0
    tab.click("#diff-split")
    tab.wait_for_selector("table.sbs")
    changed = tab.locator("section.version").first.locator("table.sbs tr.s-change").first
    assert changed.locator("td.old").inner_text() == "- the old line"
    assert changed.locator("td.new").inner_text() == "- the new line"
    shot(tab, "history-side-by-side")
    tab.click("#diff-unified")
    tab.wait_for_selector("pre.diff")


def test_pinning_a_section_writes_the_mark_under_its_heading(tab: Any, daemon: tuple[str, Any]) -> None:
    services = daemon[1]
    rel = "notes/pins.md"
    _write(services, rel, "# Pins\n\n## Keep forever\n- the wifi password is in the drawer\n\n## Scratch\n- x\n")
    tab.goto(f"/ui/files/view?path={rel}")
    tab.get_by_role("button", name="Pin section Keep forever").click()
    tab.wait_for_selector(".flash")
    text = services.store.path(AGENT, rel).read_text(encoding="utf-8")
    assert f"## Keep forever\n{PIN_MARK}\n- the wifi" in text
    assert text.count(PIN_MARK) == 1
    assert tab.locator(".sections .pinned").count() == 1


def test_pinning_a_file_changed_since_the_page_opened_is_a_conflict(tab: Any, daemon: tuple[str, Any]) -> None:
    services = daemon[1]
    rel = "notes/pins-race.md"
    _write(services, rel, "# Race\n\n## Alpha\n- a\n")
    tab.goto(f"/ui/files/view?path={rel}")
    services.store.path(AGENT, rel).write_text("# Race\n\n## Alpha\n- edited on disk\n", encoding="utf-8")
    tab.get_by_role("button", name="Pin section Alpha").click()
    tab.wait_for_selector("main h1:has-text('Conflict')")
    assert PIN_MARK not in services.store.path(AGENT, rel).read_text(encoding="utf-8")
    assert "changed" in tab.inner_text("main").lower()


@pytest.mark.parametrize("path", ["/ui/snapshot", "/ui/learning", "/ui/files/history?path=notes/trip.md&diff=split",
                                  "/ui/files/view?path=notes/trip.md"])
def test_new_pages_pass_an_accessibility_check(browser: Any, daemon: tuple[str, Any], path: str) -> None:
    context = browser.new_context(base_url=daemon[0], bypass_csp=True)
    try:
        tab = context.new_page()
        tab.goto("/ui/login")
        _login(tab, KEY)
        tab.goto(path)
        tab.add_script_tag(path=str(AXE))
        result = tab.evaluate("async () => (await axe.run(document, {resultTypes: ['violations']})).violations"
                              ".map(v => ({id: v.id, impact: v.impact, nodes: v.nodes.map(n => n.target.join(' '))}))")
        serious = [v for v in result if v["impact"] in ("serious", "critical")]
        assert not serious, serious
    finally:
        context.close()
