"""Issue 16.9: the daemon log says what a person wants to know — one INFO line at the end of every
extraction run, dream, structured consolidation and import (agent, owner, outcome, files, duration)
— and nothing per request from the MCP SDK. Real services on a temp workspace, a real daemon for HTTP."""

from __future__ import annotations

import logging
import re
from datetime import timedelta
from pathlib import Path

import anyio
import httpx
import pytest
from mcp import Client

from mateclaw_mem.runtime.services import Services

AGENT = "default"
MS = r"in \d+ ms"


def lines(caplog: pytest.LogCaptureFixture, logger: str) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == logger and r.levelno == logging.INFO]


def test_an_extraction_run_logs_one_line(services: Services, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO)
    services.extraction.record_turn(AGENT, "c1", "hi", "hello")  # below the gates: no run, no line
    services.extraction.record_turn(AGENT, "c1", "My name is Alice and I live in Berlin.", "Noted.")
    services.extraction.extract_now(AGENT, "c1")
    got = lines(caplog, "mateclaw_mem.memory.extraction.service")
    day = services.store.daily_rel()
    assert len(got) == 1, got
    assert re.fullmatch(rf"extraction default/c1: updated PROFILE\.md, {re.escape(day)} {MS} \(rules\)", got[0]), got


def test_a_dream_logs_one_line(services: Services, caplog: pytest.LogCaptureFixture) -> None:
    now = services.clock.now()
    for days in (1, 2):  # the same fact on two days: rules mode promotes it
        services.store.append_daily(AGENT, "Work", "- Project Atlas deadline: December 15", actor="extraction",
                                    when=now - timedelta(days=days))
    caplog.set_level(logging.INFO)
    out = services.dreaming.dream(AGENT)
    assert out.status == "done", out.reason
    got = lines(caplog, "mateclaw_mem.memory.dreaming.service")
    assert len(got) == 1 and re.fullmatch(rf"dream default: done MEMORY\.md, DREAMS\.md {MS} \(rules\)", got[0]), got
    caplog.clear()
    services.dreaming.dream(AGENT)  # again: nothing new, still one line that says so and why
    got = lines(caplog, "mateclaw_mem.memory.dreaming.service")
    assert len(got) == 1 and got[0].startswith("dream default: nothing_to_do DREAMS.md (") and "(rules)" in got[0]


def test_a_structured_consolidation_logs_one_line(services: Services, caplog: pytest.LogCaptureFixture) -> None:
    for i in range(9):  # near-duplicates: the rules merge them
        services.structured.remember(AGENT, "user", f"tea-{i}", "Likes green tea with no sugar", actor="extraction")
    caplog.set_level(logging.INFO)
    report = services.structured_consolidation.run(AGENT)
    assert report.updated == 1
    got = lines(caplog, "mateclaw_mem.memory.structured.consolidation")
    assert len(got) == 1, got
    assert re.fullmatch(rf"structured consolidation default: updated default/structured/user\.md "
                        rf"\(9 → {report.entries_after} entries\) {MS} \(rules\)", got[0]), got


def test_an_import_logs_one_line(services: Services, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    src = tmp_path / "vault"
    (src / "memory").mkdir(parents=True)
    (src / "memory" / "2026-11-02.md").write_text("# 2026-11-02\n\n- sencha in the morning\n", encoding="utf-8")
    caplog.set_level(logging.INFO)
    services.transfer.import_(src, agent=AGENT)
    services.transfer.import_(src, agent=AGENT, dry_run=True)  # a dry run writes nothing and logs nothing
    got = lines(caplog, "mateclaw_mem.workspace.transfer")
    assert len(got) == 1, got
    assert re.fullmatch(rf"import default from vault: updated memory/2026-11-02\.md \(1 create\) {MS}", got[0]), got


def test_http_mcp_calls_log_nothing_at_info_from_the_sdk(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    from mateclaw_mem.api.app import create_app
    from mateclaw_mem.runtime.daemon import Daemon
    from tests.support.server import daemon_services

    services = daemon_services(tmp_path / "workspace")
    daemon = Daemon(services, host="127.0.0.1", port=0, app_factory=lambda s, host: create_app(s, host=host))
    caplog.set_level(logging.INFO)
    daemon.start()
    try:
        async def calls() -> None:
            for _ in range(3):
                async with Client(daemon.url + "/mcp?tools=all") as mcp:  # `view` is outside the core profile
                    await mcp.call_tool("view", {"path": "/memories"})

        anyio.run(calls)
        # As curl, the MCP Inspector and older SDKs speak it (the 2025 protocol): the SDK's handshake path.
        for pv in ("2025-06-18", "2025-03-26"):
            r = httpx.post(daemon.url + "/mcp", headers={"accept": "application/json, text/event-stream",
                                                          "mcp-protocol-version": pv},
                           json={"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {}}, timeout=30)
            assert r.status_code == 200 and "read_workspace_memory_file" in r.text, r.text
    finally:
        daemon.stop()
    sdk = [f"{r.name}: {r.getMessage()}" for r in caplog.records
           if r.name.split(".")[0] == "mcp" and r.levelno <= logging.INFO]
    assert sdk == []
    assert any(r.name == "mateclaw_mem.daemon" for r in caplog.records)  # the capture did see the daemon's lines
