"""Issue 38.8, "The Memory Browser opens on what matters", in a real headless Chromium (Debian's,
driven by Playwright) against the real daemon on loopback, on a hand-set clock in Europe/Berlin:
Home opens on the morning card and the inbox, greeted and dated in the daemon's own time zone; the
daemon's internals live on /ui/health; fact links land on their line; an unknown /ui/ path is a
page; the search box has the focus; a Keep leaves no empty heading; an import preview shows diffs.
"""

from __future__ import annotations

import io
import os
import shutil
import zipfile
from collections.abc import Iterator
from datetime import datetime, timedelta
from typing import Any
from zoneinfo import ZoneInfo

import httpx
import pytest

from mateclaw_mem.clock import ManualClock
from mateclaw_mem.runtime.services import Services
from mateclaw_mem.settings import load_settings
from tests.support.server import ApiServer

playwright_api = pytest.importorskip("playwright.sync_api", reason="playwright is a dev dependency")
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")

AGENT = "default"
BERLIN = ZoneInfo("Europe/Berlin")
# Friday 8 May 2026, 23:49 in Berlin (21:49 UTC): a dream run by hand late in the evening.
LATE = datetime(2026, 5, 8, 23, 49, tzinfo=BERLIN)
FRONTMATTER = "---\nenabled: true\nsort_order: 3\n---\n"
MEMORY = FRONTMATTER + "# MEMORY.md\n\n## Work\n- Works on Project Atlas\n- Reviews the Atlas budget on Fridays\n"


def _write(services: Services, rel: str, text: str) -> None:
    snap = services.store.read(AGENT, rel)
    services.store.write(AGENT, rel, text, expected_sha=snap.sha, actor="person")


def _dream(services: Services, clock: ManualClock, line: str, trigger: str) -> None:
    now = clock.now()
    for days in (2, 1):
        services.store.append_daily(AGENT, "Notes", f"- {line}", actor="extraction", when=now - timedelta(days=days))
    assert services.dreaming.dream(AGENT, trigger=trigger).status == "done"


@pytest.fixture(scope="module")
def daemon(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Services, ManualClock]]:
    from mateclaw_mem.api.app import create_app

    clock = ManualClock(LATE)
    # No key: the variable named is never set (as tests/support/server.daemon_services does).
    settings = load_settings(workspace=tmp_path_factory.mktemp("home") / "ws", overrides={
        "timezone": "Europe/Berlin", "server": {"api_key_env": f"MATECLAW_TEST_NO_KEY_{os.getpid()}"},
        "mate": {"memory": {"fact": {"projection_enabled": True, "contradiction_check_enabled": True}}}})
    services = Services(settings, clock=clock)
    services.seed_agents()
    services.build()
    _ = services.file_index, services.contradictions
    _write(services, "MEMORY.md", MEMORY)
    try:
        with ApiServer(create_app(services, mcp=False)) as server:
            yield server.url, services, clock
    finally:
        services.close()


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    if CHROMIUM is None:
        pytest.skip("no chromium here (.ci/run installs Debian's chromium)")
    with playwright_api.sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox", "--disable-gpu"])
        yield b
        b.close()


@pytest.fixture
def tab(browser: Any, daemon: tuple[str, Services, ManualClock]) -> Iterator[Any]:
    context = browser.new_context(base_url=daemon[0], viewport={"width": 1200, "height": 900})
    yield context.new_page()
    context.close()


def test_home_opens_on_the_card_and_the_inbox_in_local_time_and_plain_words(
        tab: Any, daemon: tuple[str, Services, ManualClock]) -> None:
    _, services, clock = daemon
    clock.set(LATE)
    _dream(services, clock, "Waters the ficus on Sundays", "manual")
    tab.goto("/ui/")
    assert tab.inner_text("h1") == "Good evening"
    # The card, then the inbox: the first two sections of the page, the card's top in the first screen.
    ids = tab.eval_on_selector_all("main > section", "els => els.map(e => e.id)")
    assert ids[:2] == ["card", "inbox"], ids
    assert tab.locator("#card").bounding_box()["y"] < 200
    # Run by hand at 23:49 Berlin time: said so, in Berlin time (it is 21:49 UTC), not "Last night".
    assert tab.inner_text("#card-h") == "Today at 23:49"
    assert "2026-05-08 23:49" in tab.inner_text("#card time")
    main = tab.inner_text("main")
    assert "Last night" not in main and "21:49" not in main
    # The daemon's internals are not on Home; the nav leads to them.
    assert "WAL checkpoints" not in main and "AML views" not in main
    tab.get_by_role("navigation", name="Pages").get_by_role("link", name="Health").click()
    tab.wait_for_selector("#health")
    assert "WAL checkpoints" in tab.inner_text("#health") and "Europe/Berlin" in tab.inner_text("#health")

    clock.set(datetime(2026, 5, 11, 14, 5, tzinfo=BERLIN))  # the next Monday afternoon
    tab.goto("/ui/")
    assert tab.inner_text("h1") == "Good afternoon"
    assert tab.inner_text("#card-h") == "On Fri 8 May at 23:49"

    clock.set(datetime(2026, 5, 12, 3, 0, tzinfo=BERLIN))  # the scheduler's nightly run
    _dream(services, clock, "Takes the train on Tuesdays", "schedule")
    clock.set(datetime(2026, 5, 12, 8, 30, tzinfo=BERLIN))
    tab.goto("/ui/")
    assert tab.inner_text("h1") == "Good morning"
    assert tab.inner_text("#card-h") == "Last night"


def test_a_fact_link_lands_on_its_line_below_the_frontmatter(tab: Any, daemon: tuple[str, Services, ManualClock]) -> None:
    services = daemon[1]
    text = services.store.read(AGENT, "MEMORY.md").text
    assert text.startswith(FRONTMATTER)
    line = text.splitlines().index("- Reviews the Atlas budget on Fridays") + 1  # of the whole file
    tab.goto("/ui/facts?q=budget")
    link = tab.locator("tr", has_text="Reviews the Atlas budget").locator("a").first
    assert link.get_attribute("href").endswith(f"#L{line}"), (line, link.get_attribute("href"))
    link.click()
    tab.wait_for_selector("#rendered")
    assert tab.inner_text(":target") == "Reviews the Atlas budget on Fridays"


def test_an_unknown_browser_path_is_a_404_page_with_the_nav_bar(daemon: tuple[str, Services, ManualClock]) -> None:
    # HTTP is enough: what matters is the status, the type and that the page carries the nav.
    r = httpx.get(f"{daemon[0]}/ui/no/such/page", timeout=30)
    assert r.status_code == 404
    assert r.headers["content-type"].startswith("text/html")
    assert "Page not found" in r.text and '<nav aria-label="Pages">' in r.text and "/ui/facts?" in r.text
    assert "default-src 'none'" in r.headers["content-security-policy"]


def test_the_search_page_puts_the_focus_in_its_box(tab: Any) -> None:
    tab.goto("/ui/search")
    assert tab.evaluate("document.activeElement.id") == "q"
    tab.keyboard.type("Atlas")  # typed straight away, no click first
    assert tab.input_value("#q") == "Atlas"


def test_keep_leaves_no_empty_heading_behind(tab: Any, daemon: tuple[str, Services, ManualClock]) -> None:
    services = daemon[1]
    _write(services, "PROFILE.md", FRONTMATTER + "# PROFILE.md\n\n## Basics\n- name: Dana\n- timezone: Europe/Berlin\n")
    text = services.store.read(AGENT, "MEMORY.md").text
    _write(services, "MEMORY.md", text + "\n## Travel\n- timezone: Asia/Shanghai\n")
    tab.goto("/ui/inbox")
    pair = tab.locator("section.pair", has_text="Asia/Shanghai").first
    keep = "Keep B" if "Asia/Shanghai" in pair.locator(".side").nth(0).inner_text() else "Keep A"
    pair.get_by_role("button", name=keep).click()
    tab.wait_for_selector(".flash pre.diff")
    memory = services.store.read(AGENT, "MEMORY.md").text
    assert "Asia/Shanghai" not in memory
    assert "## Travel" not in memory, memory  # its one line is gone, so is its heading
    assert memory.startswith(text.rstrip("\n"))  # nothing else of the file changed
    assert "## Travel" in "".join(tab.locator(".flash pre.diff .d-del").all_inner_texts())


def test_the_import_preview_shows_each_changed_file_as_an_escaped_diff(
        tab: Any, daemon: tuple[str, Services, ManualClock]) -> None:
    services = daemon[1]
    before = services.store.read(AGENT, "MEMORY.md").text
    incoming = before.replace("- Works on Project Atlas\n", "- Works on Project Borealis <b>now</b>\n")
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as z:
        z.writestr("MEMORY.md", incoming)
        z.writestr("memory/2026-04-01.md", "# 2026-04-01\n\n- <script>document.title='pwned'</script>\n")
    tab.goto("/ui/snapshot")
    tab.set_input_files("#file", files=[{"name": "s.zip", "mimeType": "application/zip", "buffer": buf.getvalue()}])
    tab.select_option("#strategy", "overwrite")
    tab.get_by_role("button", name="Preview the import").click()
    tab.wait_for_selector("#plan")
    memory = tab.get_by_role("region", name="Changes to MEMORY.md")
    assert "-- Works on Project Atlas" in memory.locator(".d-del").all_inner_texts()
    assert "+- Works on Project Borealis <b>now</b>" in memory.locator(".d-add").all_inner_texts()
    created = tab.get_by_role("region", name="Changes to memory/2026-04-01.md")
    assert "+- <script>document.title='pwned'</script>" in created.locator(".d-add").all_inner_texts()
    assert tab.locator("#plan pre.diff b, #plan pre.diff script").count() == 0  # shown as text, never markup
    assert services.store.read(AGENT, "MEMORY.md").text == before  # a preview writes nothing
