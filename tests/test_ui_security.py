"""The Memory Browser's guards over a real uvicorn: the key-for-cookie login, CSRF on every form,
the page's Content-Security-Policy and assets, redaction of what is rendered, and owner isolation
(no page shows another owner's memory)."""

from __future__ import annotations

import re
import subprocess
import sys
from collections.abc import Iterator
from contextlib import closing
from typing import Any

import httpx
import pytest

from tests.support.server import ApiServer, daemon_services

KEY = "ui-test-key"
AGENT = "default"
SECRET = "sk-" + "A1b2C3d4E5f6G7h8I9j0K1l2M3n4"


def _write(services: Any, rel: str, text: str, owner: str | None = None) -> None:
    snap = services.store.read(AGENT, rel, owner=owner)
    services.store.write(AGENT, rel, text, expected_sha=snap.sha, actor="person", owner=owner)


@pytest.fixture(scope="module")
def daemon(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Any]]:
    from mateclaw_mem.api.app import create_app

    services = daemon_services(tmp_path_factory.mktemp("uisec") / "ws", api_key=KEY, owner_isolation=True,
                               mate={"memory": {"fact": {"projection_enabled": True}}})
    services.seed_agents()
    services.build()
    _ = services.file_index
    _write(services, "MEMORY.md", "# MEMORY.md\n\n## Prefs\n- Alice loves oolong tea\n", owner="alice")
    _write(services, "MEMORY.md", "# MEMORY.md\n\n## Prefs\n- Bob collects vinyl records\n", owner="bob")
    # A secret that reached a file by hand (the writers redact theirs): the page must not show it.
    services.store.path(AGENT, "notes/leak.md").parent.mkdir(parents=True, exist_ok=True)
    services.store.path(AGENT, "notes/leak.md").write_text(f"# Leak\n\n- key is {SECRET}\n<script>x()</script>\n",
                                                          encoding="utf-8")
    try:
        with ApiServer(create_app(services, mcp=False)) as server:
            yield server.url, services
    finally:
        services.close()


def login(url: str) -> httpx.Client:
    client = httpx.Client(base_url=url, timeout=30)
    r = client.post("/ui/login", data={"key": KEY, "next": "/ui/facts"})
    assert r.status_code == 303 and r.headers["location"] == "/ui/facts"
    return client


def csrf_of(html: str) -> str:
    m = re.search(r'name="csrf" value="([^"]+)"', html)
    assert m, html[:500]
    return m.group(1)


def test_pages_ask_for_the_key_and_trade_it_for_a_strict_cookie(daemon: tuple[str, Any]) -> None:
    url = daemon[0]
    with httpx.Client(base_url=url, timeout=30) as anon:
        r = anon.get("/ui/facts")
        assert r.status_code == 303 and r.headers["location"].startswith("/ui/login?next=")
        assert anon.get("/ui/login").status_code == 200
        wrong = anon.post("/ui/login", data={"key": "nope", "next": "/ui/"})
        assert wrong.status_code == 403 and "not this daemon" in wrong.text and "mateclaw_ui" not in wrong.headers.get(
            "set-cookie", "")
        # `next` never leaves /ui/ (no open redirect).
        assert anon.post("/ui/login", data={"key": KEY, "next": "https://evil.example/"}).headers["location"] == "/ui/"
    r = httpx.post(f"{url}/ui/login", data={"key": KEY, "next": "/ui/"})
    cookie = r.headers["set-cookie"].lower()
    assert "httponly" in cookie and "samesite=strict" in cookie and KEY not in cookie
    with closing(login(url)) as client:
        assert client.get("/ui/facts?owner=alice").status_code == 200


def test_every_form_needs_the_sessions_csrf_token(daemon: tuple[str, Any]) -> None:
    url, services = daemon
    with closing(login(url)) as client:
        page = client.get("/ui/facts?owner=alice")
        token = csrf_of(page.text)
        fid = re.search(r'action="/ui/facts/([A-Za-z0-9_-]+)/act', page.text).group(1)
        before = services.facts.get(AGENT, "alice", fid).trust
        refused = client.post(f"/ui/facts/{fid}/act?agent={AGENT}&owner=alice", data={"csrf": "forged", "do": "confirm"})
        assert refused.status_code == 403 and "security token" in refused.text
        assert services.facts.get(AGENT, "alice", fid).trust == before
        done = client.post(f"/ui/facts/{fid}/act?agent={AGENT}&owner=alice", data={"csrf": token, "do": "confirm"})
        assert done.status_code == 303  # plain form + redirect: works without JavaScript
        assert services.facts.get(AGENT, "alice", fid).trust > before
        unknown = client.post(f"/ui/facts/{fid}/act?agent={AGENT}&owner=alice", data={"csrf": token, "do": "zap"})
        assert unknown.status_code == 400 and "unknown fact action &#39;zap&#39;" in unknown.text


def test_pages_carry_a_strict_policy_and_serve_their_own_assets(daemon: tuple[str, Any]) -> None:
    with closing(login(daemon[0])) as client:
        r = client.get("/ui/")
        policy = r.headers["content-security-policy"]
        assert "script-src 'self'" in policy and "unsafe-inline" not in policy and "default-src 'none'" in policy
        assert not re.search(r"<script(?![^>]*\bsrc=)", r.text), "inline script"
        assert not re.search(r"\sstyle=", r.text), "inline style"
        assert not re.search(r"(src|href)=\"(https?:)?//", r.text), "a URL off this daemon"
        js = client.get("/ui/static/htmx.min.js")
        assert js.status_code == 200 and "javascript" in js.headers["content-type"] and len(js.content) < 100_000
        assert client.get("/ui/static/htmx.LICENSE.txt").status_code == 200


def test_rendered_files_are_escaped_and_redacted(daemon: tuple[str, Any]) -> None:
    with closing(login(daemon[0])) as client:
        for path in ("/ui/files/view?path=notes/leak.md&scope=team", "/ui/files/edit?path=notes/leak.md&scope=team",
                     "/ui/search?q=leak"):
            r = client.get(path)
            assert r.status_code == 200, path
            assert SECRET not in r.text, path
            assert "<script>x()" not in r.text, path
        assert "[REDACTED:" in client.get("/ui/files/view?path=notes/leak.md&scope=team").text


def test_no_page_shows_another_owners_memory(daemon: tuple[str, Any]) -> None:
    with closing(login(daemon[0])) as client:
        pages = ["/ui/?owner=alice", "/ui/facts?owner=alice", "/ui/files?owner=alice",
                 "/ui/files/view?path=MEMORY.md&owner=alice", "/ui/search?q=vinyl&owner=alice",
                 "/ui/facts?owner=alice&q=vinyl", "/ui/inbox?owner=alice", "/ui/dreams?owner=alice",
                 "/ui/timeline?owner=alice"]
        for path in pages:
            r = client.get(path)
            assert r.status_code == 200, path
            assert "vinyl" not in r.text.replace("q=vinyl", "").replace("“vinyl”", "").replace(
                'value="vinyl"', ""), path
        assert "oolong" in client.get("/ui/files/view?path=MEMORY.md&owner=alice").text
        assert "oolong" not in client.get("/ui/facts?owner=bob").text
        # The shared scope cannot walk into owners/ either.
        for path in ("/ui/files/view?path=owners/bob/MEMORY.md&scope=team", "/ui/files/view?path=owners/bob/MEMORY.md"):
            r = client.get(path)
            assert r.status_code == 404 and "vinyl" not in r.text, path


def test_unknown_things_are_pages_that_name_them(daemon: tuple[str, Any]) -> None:
    with closing(login(daemon[0])) as client:
        r = client.get("/ui/files/view?path=nope.md&scope=team")
        assert r.status_code == 404 and "nope.md does not exist" in r.text and "Traceback" not in r.text
        r = client.get("/ui/facts?agent=ghost")
        assert r.status_code == 404 and "ghost" in r.text


def test_the_new_forms_need_the_token_too(daemon: tuple[str, Any]) -> None:
    url, services = daemon
    with closing(login(url)) as client:
        before = services.store.read(AGENT, "MEMORY.md", owner="alice").text
        pin = client.post(f"/ui/files/pin?agent={AGENT}&owner=alice&path=MEMORY.md",
                          data={"csrf": "forged", "section": "Prefs", "sha": ""})
        assert pin.status_code == 403 and "security token" in pin.text
        assert services.store.read(AGENT, "MEMORY.md", owner="alice").text == before
        for path in ("/ui/snapshot/preview", "/ui/snapshot/apply"):
            r = client.post(f"{path}?agent={AGENT}", data={"csrf": "forged", "strategy": "skip"})
            assert r.status_code == 403 and "security token" in r.text, path


def test_a_snapshot_holds_only_the_picked_owners_memory(daemon: tuple[str, Any]) -> None:
    import io
    import zipfile

    with closing(login(daemon[0])) as client:
        for owner, mine, theirs in (("alice", "oolong", "vinyl"), ("bob", "vinyl", "oolong")):
            r = client.get(f"/ui/snapshot/export?agent={AGENT}&owner={owner}")
            assert r.status_code == 200 and r.headers["content-type"] == "application/zip", r.text[:300]
            with zipfile.ZipFile(io.BytesIO(r.content)) as z:
                text = "".join(z.read(n).decode("utf-8", "replace") for n in z.namelist())
            assert mine in text and theirs not in text, owner
        shared = client.get(f"/ui/snapshot/export?agent={AGENT}")
        with zipfile.ZipFile(io.BytesIO(shared.content)) as z:
            text = "".join(z.read(n).decode("utf-8", "replace") for n in z.namelist())
        assert "oolong" not in text and "vinyl" not in text
        for path in ("/ui/snapshot?owner=alice", "/ui/learning?owner=alice"):
            page = client.get(path)
            assert page.status_code == 200 and not re.search(r"\sstyle=", page.text), path
            assert "vinyl" not in page.text, path


def test_a_snapshot_upload_larger_than_the_general_body_limit_reaches_the_preview(daemon: tuple[str, Any]) -> None:
    import io
    import zipfile

    url, services = daemon
    general = services.settings.server.max_body_bytes
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_STORED) as zf:  # stored, so the upload really is this big
        for day in range(1, general // 900_000 + 2):  # each under the 1 MB per-file guard, together over 2 MB
            zf.writestr(f"memory/2026-11-{day:02d}.md", f"# 2026-11-{day:02d}\n\n" + "- a line of memory\n" * 50_000)
    assert len(buf.getvalue()) > general
    with closing(login(url)) as client:
        token = csrf_of(client.get(f"/ui/snapshot?agent={AGENT}").text)
        r = client.post(f"/ui/snapshot/preview?agent={AGENT}", data={"csrf": token, "strategy": "skip"},
                        files={"file": ("big.zip", buf.getvalue(), "application/zip")})
    assert r.status_code != 413, r.text[r.text.find("<main"):][:600]  # the snapshot limit (16 MB) applies, not the 2 MB one
    assert r.status_code == 200 and "memory/2026-11-01.md" in r.text


def test_the_browser_is_not_loaded_until_a_page_is_asked_for() -> None:
    # ~60 ms of every daemon start (api/ui_mount.py): composing the app must not import it.
    code = ("import sys; from mateclaw_mem.api.app import create_app; "
            "print(sorted(m for m in sys.modules if m == 'jinja2' or m.startswith('mateclaw_mem.api.ui.')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]", out.stdout
