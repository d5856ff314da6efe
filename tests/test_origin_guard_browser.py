"""No web page reaches the daemon, with a real headless Chromium doing the attacking.

A page served from another origin (a second small HTTP server on another port, reached as
`localhost` — another site — and as `127.0.0.1` — the same site, another page) tries what any page
may do without asking: `fetch(..., {mode: 'no-cors'})` POSTs with `text/plain` and `FormData`
bodies, and forms that submit themselves (multipart with a real snapshot file, and text/plain). The
browser sends its own Origin and Sec-Fetch-* headers. Afterwards the memory files hold the same
bytes, no dream ran, and every request did reach the daemon and was answered 403 (so it was the
daemon that refused, not the browser that never sent). The same upload from the daemon's own page
goes through, which shows the upload would have changed the file; a link from another site to
the Memory Browser still opens it.
"""

from __future__ import annotations

import base64
import json
import shutil
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import httpx
import pytest

from tests.support.server import ApiServer, daemon_services, free_port
from tests.test_origin_guard import AGENT, ATTACK, DREAM, PROFILE, WS, files, last_dream

playwright_api = pytest.importorskip("playwright.sync_api", reason="playwright is a dev dependency")
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
pytestmark = pytest.mark.skipif(CHROMIUM is None, reason="no chromium here (.ci/run installs Debian's chromium)")

FETCHES = """
const zip = Uint8Array.from(atob(SNAPSHOT), c => c.charCodeAt(0));
const form = new FormData();
form.append('strategy', 'overwrite');
form.append('file', new Blob([zip], {type: 'application/zip'}), 'snapshot.zip');
(async () => {
  await fetch(DAEMON + IMPORT, {method: 'POST', mode: 'no-cors', body: form});
  await fetch(DAEMON + DREAM, {method: 'POST', mode: 'no-cors', body: '{}', headers: {'Content-Type': 'text/plain'}});
  await fetch(DAEMON + FILE, {method: 'POST', mode: 'no-cors', body: 'path=PROFILE.md'});
  await fetch(DAEMON + READ, {mode: 'no-cors'});
  document.title = 'done';
})().catch(e => { document.title = 'failed: ' + e; });
"""
FORM_IMPORT = """
<form id="f" method="POST" enctype="multipart/form-data" action="">
  <input type="hidden" name="strategy" value="overwrite"><input type="file" name="file" id="file">
</form>
<script>
const zip = Uint8Array.from(atob(SNAPSHOT), c => c.charCodeAt(0));
const picked = new DataTransfer();
picked.items.add(new File([zip], 'snapshot.zip', {type: 'application/zip'}));
document.getElementById('file').files = picked.files;
const f = document.getElementById('f'); f.action = DAEMON + IMPORT; f.submit();
</script>
"""
FORM_DREAM = """
<form id="f" method="POST" enctype="text/plain" action=""><input type="hidden" name='{"topic": "' value='x"}'></form>
<script>const f = document.getElementById('f'); f.action = DAEMON + DREAM; f.submit();</script>
"""


class AttackerSite:
    """Another origin's pages, each with the daemon's address and the snapshot written in."""

    def __init__(self, daemon_url: str, snapshot: bytes) -> None:
        constants = {"DAEMON": daemon_url, "SNAPSHOT": base64.b64encode(snapshot).decode(), "IMPORT": f"{WS}/import",
                     "DREAM": DREAM, "FILE": f"{WS}/file/enable", "READ": f"{WS}/file?path=PROFILE.md"}
        head = "<script>" + "".join(f"const {k} = {json.dumps(v)};" for k, v in constants.items()) + "</script>"
        pages = {"/fetch.html": f"{head}<script>{FETCHES}</script>", "/form-import.html": head + FORM_IMPORT,
                 "/form-dream.html": head + FORM_DREAM, "/link.html": f'<a href="{daemon_url}/ui/">my memory</a>'}

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                body = pages.get(self.path, "").encode()
                self.send_response(200 if body else 404)
                self.send_header("Content-Type", "text/html; charset=utf-8")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: Any) -> None:
                pass

        self.port = free_port()
        self._server = ThreadingHTTPServer(("127.0.0.1", self.port), Handler)
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()


@pytest.fixture(scope="module")
def daemon(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Any, bytes]]:
    from mateclaw_mem.api.app import create_app

    services = daemon_services(tmp_path_factory.mktemp("guard-ui") / "ws")
    services.seed_agents()
    services.build()
    snap = services.store.read(AGENT, "PROFILE.md")
    services.store.write(AGENT, "PROFILE.md", PROFILE, expected_sha=snap.sha, actor="person")
    services.store.ensure_agent("donor")
    services.store.write("donor", "PROFILE.md", ATTACK, expected_sha=None, actor="person")
    try:
        with ApiServer(create_app(services, mcp=False)) as server:
            snapshot = httpx.get(server.url + "/api/v1/agents/donor/workspace/memory/export", timeout=30).content
            yield server.url, services, snapshot
    finally:
        services.close()


@pytest.fixture(scope="module")
def site(daemon: tuple[str, Any, bytes]) -> Iterator[AttackerSite]:
    s = AttackerSite(daemon[0], daemon[2])
    yield s
    s.close()


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    with playwright_api.sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox", "--disable-gpu"])
        yield b
        b.close()


@pytest.fixture
def tab(browser: Any, daemon: tuple[str, Any, bytes]) -> Iterator[Any]:
    context = browser.new_context()
    page = context.new_page()
    page.answers = []  # type: ignore[attr-defined]  # (method, path, status) of every answer from the daemon
    page.on("response", lambda r: r.url.startswith(daemon[0]) and page.answers.append(  # type: ignore[attr-defined]
        (r.request.method, r.url[len(daemon[0]):].split("?")[0], r.status)))
    yield page
    context.close()


@pytest.mark.parametrize("name", ["localhost", "127.0.0.1"])  # another site; the same site on another port
def test_a_page_from_another_origin_changes_nothing(tab: Any, daemon: tuple[str, Any, bytes], site: AttackerSite,
                                                    name: str) -> None:
    url, services, _ = daemon
    before, dreamt = files(services), last_dream(services)
    attacker = f"http://{name}:{site.port}"

    tab.goto(f"{attacker}/fetch.html")
    tab.wait_for_function("document.title !== ''")
    assert tab.title() == "done"
    for form, target in (("form-import", f"{WS}/import"), ("form-dream", DREAM)):
        tab.goto(f"{attacker}/{form}.html")
        tab.wait_for_url(f"{url}{target}")  # the form took the browser to the daemon ...
        assert "web page" in tab.inner_text("body")  # ... which refused it

    assert sorted(tab.answers) == sorted([  # every request reached the daemon, and was refused
        ("POST", f"{WS}/import", 403), ("POST", DREAM, 403), ("POST", f"{WS}/file/enable", 403),
        ("GET", f"{WS}/file", 403), ("POST", f"{WS}/import", 403), ("POST", DREAM, 403),
    ])
    assert files(services) == before and last_dream(services) == dreamt


def test_the_same_upload_from_the_daemons_own_page_goes_through(tab: Any, daemon: tuple[str, Any, bytes]) -> None:
    url, services, snapshot = daemon
    tab.goto(f"{url}/ui/files")
    status = tab.evaluate("""async ([path, b64]) => {
        const zip = Uint8Array.from(atob(b64), c => c.charCodeAt(0));
        const form = new FormData();
        form.append('strategy', 'overwrite');
        form.append('file', new Blob([zip], {type: 'application/zip'}), 'snapshot.zip');
        return (await fetch(path, {method: 'POST', body: form})).status;
    }""", [f"{WS}/import", base64.b64encode(snapshot).decode()])
    assert status == 200
    assert services.store.path(AGENT, "PROFILE.md").read_text(encoding="utf-8") == ATTACK


def test_a_link_from_another_site_still_opens_the_memory_browser(tab: Any, daemon: tuple[str, Any, bytes],
                                                                 site: AttackerSite) -> None:
    tab.goto(f"http://localhost:{site.port}/link.html")
    with tab.expect_navigation(url=f"{daemon[0]}/ui/"):
        tab.click("text=my memory")
    assert ("GET", "/ui/", 200) in tab.answers and tab.locator("main").count() == 1
