"""`mateclaw-mem aml check URL`: every rule passes against a real daemon, and the rules a deliberately
broken server breaks are named as failures (exit 1)."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from mateclaw_mem.cli.main import main
from tests.support.server import ApiServer, free_port, serve_api

KEY = "check-key"
VAR = f"MATECLAW_CHECK_TEST_KEY_{os.getpid()}"


@pytest.fixture
def daemon(tmp_path: Path) -> Iterator[httpx.Client]:
    yield from serve_api(tmp_path / "ws", api_key=KEY, seed=False)


def _rules(out: str) -> dict[str, str]:
    rules = {}
    for line in out.splitlines():
        if line.startswith(("PASS", "FAIL")):
            verdict, name = line.split()[:2]
            rules[name] = verdict
    return rules


def test_every_rule_passes_against_the_daemon(daemon: httpx.Client, capsys: pytest.CaptureFixture[str],
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(VAR, KEY)
    code = main(["aml", "check", str(daemon.base_url), "--key-env", VAR])
    out = capsys.readouterr().out
    rules = _rules(out)
    assert code == 0, out
    assert set(rules) >= {"add-echo", "add-sync", "result-shape", "replay", "conflict", "top-k", "isolation",
                          "content-parts", "422:add-empty-messages", "422:search-top-k-string", "auth"}
    assert set(rules.values()) == {"PASS"}, out
    assert "the check's users deleted" in out
    # ... and it left nothing of its users behind.
    log = daemon.services.log  # type: ignore[attr-defined]
    assert [m for m in log.since(0) if (m.owner or "").startswith("aml-check-")] == []


def _broken_app() -> Starlette:
    """Add always 200 (no idempotency, no 409, no validation); Search returns every user's messages and
    ignores top_k."""
    stored: list[dict[str, Any]] = []

    async def add(request: Request) -> JSONResponse:
        body = await request.json()
        for m in body.get("messages") or []:
            content = m.get("content")
            text = content if isinstance(content, str) else " ".join(p.get("text", "") for p in content)
            stored.append({"id": f"m{len(stored)}", "content": text, "score": 1.0,
                           "created_at": "2023-05-08T13:56:00Z"})
        return JSONResponse({"success": True, "request_id": body.get("request_id"), "user_id": body.get("user_id"),
                             "session_id": body.get("session_id")})

    async def search(request: Request) -> JSONResponse:
        return JSONResponse({"data": list(stored)})

    return Starlette(routes=[Route("/v1/aml/add", add, methods=["POST"]),
                             Route("/v1/aml/search", search, methods=["POST"])])


def test_a_broken_server_fails_the_rules_it_breaks(capsys: pytest.CaptureFixture[str]) -> None:
    with ApiServer(_broken_app()) as server:
        code = main(["aml", "check", server.url + "/v1/aml/add"])
    out = capsys.readouterr().out
    rules = _rules(out)
    assert code == 1, out
    assert {n for n, v in rules.items() if v == "PASS"} == {"add-echo", "add-sync", "result-shape", "content-parts"}
    for name in ("replay", "conflict", "top-k", "isolation", "422:add-no-messages", "422:search-top-k-0"):
        assert rules[name] == "FAIL", out
    assert "stored 2 times after a replay" in out and "answered 200, not 409" in out
    assert "top_k 1 returned" in out and "another user's Search returned" in out
    assert "were left (DELETE answered [404, 404])" in out


def test_unreachable_and_bad_usage(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    assert main(["aml", "check", f"http://127.0.0.1:{free_port()}", "--timeout", "2"]) == 1
    out = capsys.readouterr().out
    assert out.startswith("FAIL  add-echo") and "could not reach" in out
    monkeypatch.delenv(VAR, raising=False)
    assert main(["aml", "check", "http://127.0.0.1:1", "--key-env", VAR]) == 2
    assert f"--key-env {VAR}" in capsys.readouterr().err
    assert main(["aml", "check", "127.0.0.1:8765"]) == 2
    assert "must start with http://" in capsys.readouterr().err
