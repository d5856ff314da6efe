"""The lifecycle features a setting switches off, and the one sentence that says how to turn each on.

Shared by the faces (the MCP tool list, the Memory Browser's navigation and pages) so that a feature
that is off is hidden the same way everywhere and explained in the same words, instead of each face
answering a bare "Conflict" (issue 38.6). The services keep their own guards (`require_enabled`):
this module only decides what a face shows.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from mateclaw_mem.settings import Settings

PROJECTION = "mate.memory.fact.projection-enabled"
CONTRADICTIONS = "mate.memory.fact.contradiction-check-enabled"
FORGET = "mate.memory.fact.forget-enabled"


@dataclass(frozen=True)
class Feature:
    name: str  # what a person calls it
    keys: tuple[str, ...]  # every key that must be true

    def how_to_turn_on(self) -> str:
        sets = " and ".join(f"{k}: true" for k in self.keys)
        env = " and ".join(_env(k) + "=true" for k in self.keys)
        return (f"{self.name} is off: set {sets} in the settings file (config/mateclaw.yaml, or {env}) "
                "and restart mateclaw-mem.")


FACTS = Feature("Fact projection", (PROJECTION,))
INBOX = Feature("The contradiction inbox", (PROJECTION, CONTRADICTIONS))
FORGETTING = Feature("Forget", (FORGET,))


def _env(key: str) -> str:
    return "MATECLAW_" + key.replace("-", "_").replace(".", "__").upper()


def is_on(feature: Feature, settings: Settings) -> bool:
    fact = settings.mate.memory.fact
    values = {PROJECTION: fact.projection_enabled, CONTRADICTIONS: fact.contradiction_check_enabled,
              FORGET: fact.forget_enabled}
    return all(values[k] for k in feature.keys)


# Which MCP tools need which feature: with it off they are left out of the list, and a call names the key.
TOOL_FEATURES: dict[str, Feature] = {
    "memory_facts": FACTS, "memory_feedback": FACTS, "memory_confirm": FACTS, "morning_card_fact": FACTS,
    "memory_contradictions": INBOX, "memory_resolve_contradiction": INBOX,
    "memory_forget": FORGETTING,
}


def tools_off(settings: Settings) -> dict[str, str]:
    """Tool name -> the sentence saying how to turn its feature on, for every tool whose feature is off."""
    return {name: f.how_to_turn_on() for name, f in TOOL_FEATURES.items() if not is_on(f, settings)}
