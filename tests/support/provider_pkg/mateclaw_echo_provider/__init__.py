"""A memory provider from outside mateclaw_mem: one item naming the query, agent and owner."""

from __future__ import annotations

from typing import Any

from mateclaw_mem.providers.base import ProviderContext, ProviderItem


class EchoProvider:
    name = "echo"

    def __init__(self, prefix: str) -> None:
        self.prefix = prefix
        self.turns: list[tuple[str, str | None, list[tuple[str, str]]]] = []

    def prefetch(self, agent: str, owner: str | None, query: str, *, deadline: float) -> list[ProviderItem]:
        return [ProviderItem(f"{self.prefix} {query} (agent {agent}, owner {owner})", "echo:1", 1.0)]

    def sync_turn(self, agent: str, owner: str | None, messages: list[tuple[str, str]]) -> None:
        self.turns.append((agent, owner, messages))

    def status(self) -> dict[str, Any]:
        return {"turns_heard": len(self.turns)}


def build(context: ProviderContext, options: dict[str, Any]) -> EchoProvider:
    return EchoProvider(str(options.get("prefix", "echo:")))
