"""The Memory Browser in a real headless Chromium (Debian's, driven by Playwright — no downloaded
browser) against the real daemon on loopback. One server and one browser for the module.

MATECLAW_SCREENSHOTS=1 also writes each page to docs/screenshots/ (off in CI: no rewritten files).
"""

from __future__ import annotations

import os
import re
import shutil
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any
from urllib.parse import unquote

import pytest

from tests.support.server import ApiServer, daemon_services

playwright_api = pytest.importorskip("playwright.sync_api", reason="playwright is a dev dependency")
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
pytestmark = pytest.mark.skipif(CHROMIUM is None, reason="no chromium here (.ci/run installs Debian's chromium)")

AGENT = "default"
FACT = "Project Atlas deadline: December 15"
PROFILE = "# PROFILE.md\n\n## Basics\n- name: Dana\n- timezone: Europe/Berlin\n"
MEMORY = "# MEMORY.md\n\n## Work\n- timezone: Asia/Shanghai\n- Works on Project Atlas\n"
SHOTS = Path(__file__).resolve().parents[1] / "docs" / "screenshots"
# Read at import: conftest scrubs MATECLAW_* from the environment before each test.
TAKE_SHOTS = os.environ.get("MATECLAW_SCREENSHOTS") == "1"


def _write(services: Any, rel: str, text: str, owner: str | None = None) -> None:
    snap = services.store.read(AGENT, rel, owner=owner)
    services.store.write(AGENT, rel, text, expected_sha=snap.sha, actor="person", owner=owner)


@pytest.fixture(scope="module")
def daemon(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Any]]:
    from mateclaw_mem.api.app import create_app

    services = daemon_services(tmp_path_factory.mktemp("ui") / "ws", owner_isolation=True,
                               mate={"memory": {"fact": {"projection_enabled": True, "contradiction_check_enabled": True}}})
    services.seed_agents()
    services.build()
    _ = services.file_index, services.contradictions  # writes are projected and checked, as in the daemon
    _write(services, "PROFILE.md", PROFILE)
    _write(services, "MEMORY.md", MEMORY)
    _write(services, "notes/中文.md", "# 笔记\n\n## 项目\n- 我们的项目代号是北极星，截止日期在十二月。\n")
    now = services.clock.now()
    for days in (2, 1):
        services.store.append_daily(AGENT, "Work", f"- {FACT}\n- one-off {days}", actor="extraction",
                                    owner="alice", when=now - timedelta(days=days))
    assert services.dreaming.dream(AGENT, owner="alice").status == "done"
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


@pytest.fixture
def tab(browser: Any, daemon: tuple[str, Any]) -> Iterator[Any]:
    context = browser.new_context(base_url=daemon[0], viewport={"width": 1200, "height": 900})
    page = context.new_page()
    page.csp_errors = []  # type: ignore[attr-defined]
    page.on("console", lambda m: m.type == "error" and page.csp_errors.append(m.text))  # type: ignore[attr-defined]
    yield page
    context.close()


def shot(page: Any, name: str) -> None:
    if TAKE_SHOTS:
        SHOTS.mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(SHOTS / f"{name}.png"), full_page=True)


@pytest.mark.parametrize("name, path, marker", [
    ("home", "/ui/?owner=alice", "Promoted"),
    ("facts", "/ui/facts?owner=alice", FACT),
    ("inbox", "/ui/inbox", "Asia/Shanghai"),
    ("files", "/ui/files?owner=alice", "MEMORY.md"),
    ("file-view", "/ui/files/view?path=MEMORY.md&scope=team", "Works on Project Atlas"),
    ("history", "/ui/files/history?path=MEMORY.md&scope=team", "Version"),
    ("dreams", "/ui/dreams?owner=alice", "Dreaming"),
    ("search", "/ui/search?q=Atlas&owner=alice", "Atlas"),
    ("timeline-all", "/ui/timeline?owner=alice", "MEMORY.md"),
    ("health", "/ui/health?owner=alice", "WAL checkpoints"),
])
def test_every_page_opens_with_its_assets_and_no_csp_violation(tab: Any, name: str, path: str, marker: str) -> None:
    response = tab.goto(path)
    assert response.status == 200
    assert "script-src 'self'" in response.headers["content-security-policy"]
    assert marker in tab.inner_text("main")
    # htmx loaded from the daemon and took over the links (hx-boost): the page is "better with JS".
    assert tab.evaluate("typeof window.htmx") == "object"
    assert not [e for e in tab.csp_errors if "Content Security Policy" in e], tab.csp_errors
    shot(tab, name)


def test_root_redirects_to_the_browser(tab: Any) -> None:
    tab.goto("/")
    assert tab.url.split("?")[0].endswith("/ui/")


def test_confirming_a_fact_raises_its_trust(tab: Any) -> None:
    tab.goto("/ui/facts?owner=alice")
    row = tab.locator("tr", has_text=FACT)
    before = float(row.locator(".trust-value").inner_text())
    row.get_by_role("button", name="Confirm", exact=True).click()
    tab.wait_for_selector(".flash")
    after = float(tab.locator("tr", has_text=FACT).locator(".trust-value").inner_text())
    assert after > before
    assert "Confirmed" in tab.inner_text(".flash")


def test_resolving_a_contradiction_changes_the_file_and_shows_the_diff(tab: Any, daemon: tuple[str, Any]) -> None:
    services = daemon[1]
    tab.goto("/ui/inbox")
    pair = tab.locator("section.pair", has_text="Asia/Shanghai").first
    # Which side holds the Shanghai claim decides which button keeps Berlin.
    side_a = pair.locator(".side").nth(0).inner_text()
    keep = "Keep B" if "Asia/Shanghai" in side_a else "Keep A"
    pair.get_by_role("button", name=keep).click()
    tab.wait_for_selector(".flash pre.diff")
    removed = tab.locator(".flash pre.diff .d-del").all_inner_texts()
    assert any("timezone: Asia/Shanghai" in line for line in removed), removed
    assert "Asia/Shanghai" not in services.store.read(AGENT, "MEMORY.md").text
    assert "Europe/Berlin" in services.store.read(AGENT, "PROFILE.md").text


def test_a_save_over_a_hand_edit_is_a_conflict_that_overwrites_nothing(tab: Any, daemon: tuple[str, Any]) -> None:
    services = daemon[1]
    rel = "notes/conflict.md"
    _write(services, rel, "# Conflict\n\n- first version\n")
    tab.goto(f"/ui/files/edit?path={rel}&scope=team")
    # The person edits the file in their own editor while the page is open.
    services.store.path(AGENT, rel).write_text("# Conflict\n\n- edited on disk\n", encoding="utf-8")
    tab.fill("#editor", "# Conflict\n\n- edited in the browser\n")
    tab.get_by_role("button", name="Save").click()
    tab.wait_for_selector("#conflict")
    assert "edited on disk" in tab.inner_text("#disk-version")
    assert "edited in the browser" in tab.inner_text("#your-version")
    assert services.store.read(AGENT, rel).text == "# Conflict\n\n- edited on disk\n"
    shot(tab, "conflict")
    # Saving again from the conflict page is a choice made against the version now on disk.
    tab.get_by_role("button", name="Save").click()
    tab.wait_for_selector("#rendered")
    assert "edited in the browser" in services.store.read(AGENT, rel).text


def test_preview_a_dream_shows_the_diff_and_writes_nothing(tab: Any, daemon: tuple[str, Any]) -> None:
    services = daemon[1]
    now = services.clock.now()
    for days in (4, 3):
        services.store.append_daily(AGENT, "Home", "- Waters the ficus on Sundays", actor="extraction",
                                    owner="bob", when=now - timedelta(days=days))
    before = services.store.read(AGENT, "MEMORY.md", owner="bob").text
    tab.goto("/ui/dreams?owner=bob")
    tab.get_by_role("button", name="Preview a dream").click()
    tab.wait_for_selector("#preview")
    assert "Waters the ficus" in tab.inner_text("#preview pre.diff")
    assert services.store.read(AGENT, "MEMORY.md", owner="bob").text == before
    shot(tab, "dream-preview")


def test_search_in_chinese_highlights_and_links_to_the_line(tab: Any) -> None:
    tab.goto("/ui/search")
    tab.fill("#q", "北极星")
    tab.get_by_role("button", name="Search").click()
    tab.wait_for_selector("#hits mark")
    assert "北极星" in tab.inner_text("#hits mark")
    shot(tab, "search")
    link = tab.locator("#hits a").first
    href = unquote(link.get_attribute("href"))
    assert "path=notes/中文.md" in href and re.search(r"#L\d+$", href), href
    link.click()
    tab.wait_for_selector("#rendered")
    assert "北极星" in tab.inner_text(":target")


AXE = Path(__file__).resolve().parent / "support" / "axe" / "axe.min.js"  # axe-core 4.14.1 (MPL-2.0), vendored


@pytest.mark.parametrize("path", ["/ui/?owner=alice", "/ui/facts?owner=alice", "/ui/inbox", "/ui/files?owner=alice",
                                  "/ui/files/edit?path=MEMORY.md&scope=team", "/ui/files/history?path=MEMORY.md&scope=team",
                                  "/ui/dreams?owner=alice", "/ui/search?q=Atlas&owner=alice",
                                  "/ui/timeline?owner=alice", "/ui/health", "/ui/no-such-page"])
def test_pages_pass_an_accessibility_check(browser: Any, daemon: tuple[str, Any], path: str) -> None:
    # Only this context may inject axe: the pages' own policy would (rightly) refuse the script.
    context = browser.new_context(base_url=daemon[0], bypass_csp=True)
    try:
        tab = context.new_page()
        tab.goto(path)
        tab.add_script_tag(path=str(AXE))
        result = tab.evaluate("async () => (await axe.run(document, {resultTypes: ['violations']})).violations"
                              ".map(v => ({id: v.id, impact: v.impact, nodes: v.nodes.map(n => n.target.join(' '))}))")
        serious = [v for v in result if v["impact"] in ("serious", "critical")]
        assert not serious, serious
    finally:
        context.close()


def test_dream_now_promotes_and_the_timeline_shows_the_run(tab: Any, daemon: tuple[str, Any]) -> None:
    services = daemon[1]
    now = services.clock.now()
    for days in (6, 5):
        services.store.append_daily(AGENT, "Garden", "- Tomatoes go in the south bed", actor="extraction",
                                    owner="carol", when=now - timedelta(days=days))
    tab.goto("/ui/dreams?owner=carol")
    tab.get_by_role("button", name="Dream now").click()
    tab.wait_for_selector(".flash")
    assert "Dream done: 1 promoted" in tab.inner_text(".flash")
    assert "Tomatoes go in the south bed" in services.store.read(AGENT, "MEMORY.md", owner="carol").text
    tab.goto("/ui/timeline?owner=carol&kind=dream")
    assert "MEMORY.md" in tab.inner_text("main") and "dream" in tab.inner_text("table.timeline")
    shot(tab, "timeline")


def test_dream_now_shows_its_progress_until_the_run_is_done(tab: Any, daemon: tuple[str, Any]) -> None:
    services = daemon[1]
    now = services.clock.now()
    for days in (6, 5):
        services.store.append_daily(AGENT, "Bikes", "- The blue bike needs new brakes", actor="extraction",
                                    owner="dave", when=now - timedelta(days=days))
    # Hold MEMORY.md's writer lock: the dream (in the background) waits at its write meanwhile.
    with services.store.lock(services.store.path(AGENT, "MEMORY.md", owner="dave")):
        tab.goto("/ui/dreams?owner=dave")
        tab.get_by_role("button", name="Dream now").click()
        tab.wait_for_selector("#progress")
        assert "Dreaming…" in tab.inner_text("#progress")
        assert "The blue bike" not in services.store.read(AGENT, "MEMORY.md", owner="dave").text
    tab.wait_for_selector(".flash", timeout=30_000)  # the page polls until the outcome replaces it
    assert "Dream done: 1 promoted" in tab.inner_text(".flash")
    assert tab.query_selector("#progress") is None
    assert "The blue bike needs new brakes" in services.store.read(AGENT, "MEMORY.md", owner="dave").text


def test_restoring_a_version_from_history_undoes_the_change(tab: Any, daemon: tuple[str, Any]) -> None:
    services = daemon[1]
    rel = "notes/undo.md"
    _write(services, rel, "# Undo\n\n- the original line\n")
    _write(services, rel, "# Undo\n\n- a regretted change\n")
    tab.goto(f"/ui/files/history?path={rel}&scope=team")
    newest = tab.locator("section.version").first
    assert "a regretted change" in newest.locator("pre.diff").inner_text()
    newest.get_by_role("button", name=re.compile("^Restore version")).click()
    tab.wait_for_selector(".flash")
    assert services.store.read(AGENT, rel).text == "# Undo\n\n- the original line\n"
    assert "Restored" in tab.inner_text(".flash")
