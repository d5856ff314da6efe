"""/docs and /redoc over a real uvicorn server: every script, stylesheet, icon and the spec come from
the daemon itself, and the pages tell the browser to ask no one else."""

from __future__ import annotations

import re
from collections.abc import Iterator
from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import urljoin, urlsplit

import httpx
import pytest

from tests.support.server import serve_api

KEY = "docs-test-key"
# Sources a CSP may allow without reaching another host.
SAME_ORIGIN_SOURCES = {"'self'", "'none'", "'unsafe-inline'", "'unsafe-eval'", "data:", "blob:"}


class _Urls(HTMLParser):
    """Every URL an HTML page makes the browser fetch: src/href of tags, Redoc's spec-url."""

    def __init__(self) -> None:
        super().__init__()
        self.urls: list[tuple[str, str]] = []  # (tag, url)

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        for name, value in attrs:
            if name in ("src", "href", "spec-url") and value:
                self.urls.append((tag, value))


def fetched_urls(html: str) -> list[tuple[str, str]]:
    parser = _Urls()
    parser.feed(html)
    # Swagger UI's spec URL is in its inline start-up script.
    parser.urls += [("script", m) for m in re.findall(r"\burl: '([^']*)'", html)]
    return parser.urls


@pytest.fixture
def client(tmp_path: Path) -> Iterator[httpx.Client]:
    yield from serve_api(tmp_path / "ws", mcp=False)


@pytest.fixture
def keyed(tmp_path: Path) -> Iterator[httpx.Client]:
    yield from serve_api(tmp_path / "ws", api_key=KEY, mcp=False)


@pytest.mark.parametrize("page, script_marker", [("/docs", "SwaggerUIBundle"), ("/redoc", "Redoc")])
def test_docs_pages_load_only_same_origin_assets(client: httpx.Client, page: str, script_marker: str) -> None:
    r = client.get(page)
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/html")
    # No absolute URL at all: nothing on the page can point at a CDN, fonts or a favicon host.
    assert not re.search(r"https?://|//[a-z0-9.-]+\.[a-z]{2,}/", r.text, re.IGNORECASE), r.text
    urls = fetched_urls(r.text)
    kinds = {urlsplit(u).path.rsplit(".", 1)[-1] for _, u in urls}
    assert {"js", "png", "json"} <= kinds, urls  # script, favicon and the spec are all there
    origin = urlsplit(str(client.base_url))
    for tag, url in urls:
        absolute = urlsplit(urljoin(str(client.base_url) + page, url))
        assert (absolute.scheme, absolute.netloc) == (origin.scheme, origin.netloc), (tag, url)
        asset = client.get(url)
        assert asset.status_code == 200, url
        assert len(asset.content) > 1000, url
        expected = {"js": "javascript", "css": "text/css", "png": "image/png", "json": "application/json"}
        assert expected[absolute.path.rsplit(".", 1)[-1]] in asset.headers["content-type"], url
        if absolute.path.endswith(".js"):
            assert script_marker in asset.text, url


def test_docs_pages_forbid_third_party_requests(client: httpx.Client) -> None:
    for page in ("/docs", "/redoc"):
        policy = client.get(page).headers["content-security-policy"]
        directives = {d.split()[0]: d.split()[1:] for d in policy.split(";") if d.strip()}
        assert directives["default-src"] == ["'self'"]
        # Redoc's menu hard-codes a cdn.redoc.ly logo: images and fetches must stay here.
        for name in ("img-src", "connect-src", "font-src", "script-src", "style-src"):
            assert name in directives, (page, name)
        for name, sources in directives.items():
            assert set(sources) <= SAME_ORIGIN_SOURCES, (page, name, sources)
    # Swagger UI would send the spec's URL to validator.swagger.io from a non-loopback host.
    assert '"validatorUrl": null' in client.get("/docs").text


def test_docs_and_assets_need_no_key_even_with_one_configured(keyed: httpx.Client) -> None:
    # A browser cannot add the API key to <script src>, so the pages and their assets are open
    # (as FastAPI's own /docs was); the API itself still asks for the key.
    for page in ("/docs", "/redoc"):
        r = keyed.get(page)
        assert r.status_code == 200
        for _, url in fetched_urls(r.text):
            assert keyed.get(url).status_code == 200, url
    assert keyed.get("/api/v1/agents/default/workspace/memory").status_code == 401


def _chromium() -> str | None:
    import shutil

    return shutil.which("chromium") or shutil.which("chromium-browser") or shutil.which("google-chrome")


@pytest.mark.skipif(_chromium() is None, reason="no chromium here (.ci/run installs Debian's chromium)")
@pytest.mark.parametrize("page, rendered", [
    ("/docs", re.compile(r'opblock-summary-path" data-path="/health"')),
    ("/redoc", re.compile(r'id="operation/[^"]*health')),
])
def test_docs_pages_render_in_a_real_browser_with_every_other_host_unreachable(
    client: httpx.Client, page: str, rendered: re.Pattern[str]
) -> None:
    import subprocess

    # Every host but loopback resolves to nothing: a page that needed a CDN would stay blank.
    cmd = [_chromium(), "--headless", "--no-sandbox", "--disable-gpu", "--virtual-time-budget=10000",
           "--host-resolver-rules=MAP * ~NOTFOUND, EXCLUDE 127.0.0.1", "--dump-dom", f"{client.base_url}{page}"]
    dom = subprocess.run(cmd, capture_output=True, text=True, timeout=120).stdout
    assert rendered.search(dom), dom[-2000:]
