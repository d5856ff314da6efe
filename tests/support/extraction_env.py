"""The extraction test environment: a real store, log and service (model mode against the scripted
server, or rules mode), shared by the extraction test modules through conftest."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from mateclaw_mem.clock import ManualClock
from mateclaw_mem.conversations.log import ConversationLog
from mateclaw_mem.llm.client import ModelClient
from mateclaw_mem.llm.usage import UsageLog
from mateclaw_mem.memory.extraction.service import ExtractionService
from mateclaw_mem.settings import Settings, load_settings
from mateclaw_mem.workspace.store import WorkspaceStore
from tests.support.model_server import ModelServer

AGENT = "default"


@dataclass
class Env:
    settings: Settings
    store: WorkspaceStore
    log: ConversationLog
    clock: ManualClock
    client: ModelClient | None
    svc: ExtractionService

    def turn(self, conv: str, user: str, assistant: str = "Sure, noted.", **kw: Any):
        return self.svc.record_turn(AGENT, conv, user, assistant, **kw)

    def warm(self, conv: str = "c1") -> None:
        """Two turns of chatter so the message-count gate is met by the next turn (no run yet)."""
        r = self.turn(conv, "hi")
        assert not r.scheduled

    def text(self, rel: str) -> str:
        return self.store.read(AGENT, rel).text

    def body(self, rel: str) -> str:
        return self.store.read(AGENT, rel).body

    def daily(self) -> str:
        return self.store.read(AGENT, self.store.daily_rel()).text

    def runs(self) -> list[dict[str, Any]]:
        return self.svc.runs(limit=100)[::-1]

    def idle(self) -> None:
        assert self.svc.wait_idle(timeout=30)

    def restart(self) -> ExtractionService:
        self.svc.shutdown()
        self.svc = ExtractionService(self.settings, self.store, self.log, clock=self.clock, model=lambda: self.client,
                                     timers=False)
        self.svc.start()
        return self.svc


@pytest.fixture
def make_env(tmp_path: Path, clock: ManualClock, monkeypatch: pytest.MonkeyPatch):
    for key in [k for k in os.environ if k.startswith("MATECLAW_")]:
        monkeypatch.delenv(key, raising=False)
    envs: list[Env] = []

    def make(*, server: ModelServer | None = None, memory: dict | None = None, model: dict | None = None) -> Env:
        cfg = tmp_path / "mateclaw.yaml"
        cfg.write_text("timezone: Europe/Berlin\n", encoding="utf-8")
        overrides: dict[str, Any] = {"mate": {"memory": memory or {}}}
        if server is not None:
            overrides["model"] = {"base_url": server.base_url, "model": "test-model", "timeout_seconds": 5,
                                  "max_retries": 1, **(model or {})}
        settings = load_settings(cfg, tmp_path / "workspace", overrides)
        store = WorkspaceStore.from_settings(settings, clock)
        store.ensure_agent(AGENT)
        log = ConversationLog(settings.state_dir / "log.db")
        client = None
        if server is not None:
            client = ModelClient.from_settings(settings, usage=UsageLog(settings.state_dir / "log.db"),
                                               backoff_base=0.001, retry_after_cap=0.01)
        svc = ExtractionService(settings, store, log, clock=clock, model=lambda: client, timers=False)
        svc.start()
        env = Env(settings, store, log, clock, client, svc)
        envs.append(env)
        return env

    yield make
    for env in envs:
        env.svc.shutdown()
        env.log.close()


def answer(*, memory: str = "", profile: str = "", title: str = "Noted", body: str = "- noted",
           should: bool = True, reason: str = "test") -> dict[str, Any]:
    return {"should_update": should, "reason": reason, "daily_entry": {"title": title, "body": body} if should else None,
            "memory_update": memory, "profile_update": profile}
