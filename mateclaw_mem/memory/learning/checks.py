"""Limits of the learning memory and the input checks that enforce them (shared by its parts).

Each limit is a clear `InvalidInputError` (reflections are the exception: they rotate, see
memory/learning/global_memory.py):
- strategies (global and per task): at most 10. Adding an 11th is refused: strategies are curated,
  and silently dropping one a person chose would be worse than asking them to remove one.
- task notes, category notes, the stats summary: 2,000 characters each; a reflection 1,000; a
  strategy 500 (one line). Headings of level 1-3 inside text become level 4 so they cannot split the
  file's structure.
- scores (a result and each part of its breakdown) lie in 0-1,000, the seed's scale (its challenges
  score out of `max_score: 1000`, and the "stable within 50 points" trend rule is measured on it).
"""

from __future__ import annotations

import math
import re
from typing import TYPE_CHECKING, Any

from mateclaw_mem.errors import ConflictError, InvalidInputError, NotFoundError
from mateclaw_mem.markdown import learning as md
from mateclaw_mem.workspace.store import PERSON

if TYPE_CHECKING:
    from mateclaw_mem.workspace.store import WorkspaceStore

MAX_REFLECTIONS = 20
MAX_STRATEGIES = 10
MAX_NOTES_CHARS = 2000
MAX_STATS_CHARS = 2000
MAX_CATEGORY_CHARS = 2000
MAX_REFLECTION_CHARS = 1000
MAX_STRATEGY_CHARS = 500
MAX_CATEGORY_NAME = 64
MAX_BREAKDOWN_KEYS = 50
MIN_SCORE = 0
MAX_SCORE = 1000

LIMITS = {
    "reflections": MAX_REFLECTIONS,
    "strategies": MAX_STRATEGIES,
    "notes_chars": MAX_NOTES_CHARS,
    "stats_chars": MAX_STATS_CHARS,
    "category_chars": MAX_CATEGORY_CHARS,
    "reflection_chars": MAX_REFLECTION_CHARS,
    "strategy_chars": MAX_STRATEGY_CHARS,
    "max_score": MAX_SCORE,
}

SLUG = re.compile(r"^[a-z0-9](?:[a-z0-9._-]{0,62}[a-z0-9])?$")


def check_slug(slug: str) -> str:
    if not isinstance(slug, str) or not SLUG.match(slug) or ".." in slug:
        raise InvalidInputError(
            f"invalid task slug {slug!r}: use 1-64 lowercase letters, digits, '.', '_' or '-', "
            "starting and ending with a letter or digit (no '..')"
        )
    return slug


def require_agent(store: WorkspaceStore, agent: str) -> None:
    if not store.agent_dir(agent).is_dir():
        raise NotFoundError(f"agent {agent!r} does not exist (create it with `mateclaw-mem init {agent}`)")


def guard_pins(body: str, titles: list[str], rel: str, actor: str) -> None:
    """A machine writer refuses to change a section a person pinned, instead of letting the store
    silently keep the pin (the caller would believe its change landed)."""
    if actor == PERSON:
        return
    for title in titles:
        if md.pinned(body, title):
            raise ConflictError(
                f"{rel}: section '## {title}' is pinned (<!-- pin -->); unpin it to let {actor} change it"
            )


def clean_number(value: float) -> float | int:
    """870.0 reads better as 870 in a file a person edits."""
    if isinstance(value, float) and value.is_integer() and abs(value) < 2**53:
        return int(value)
    return value


def score(value: Any, what: str = "score") -> float | int:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise InvalidInputError(f"{what} must be a number, not {type(value).__name__}")
    if not math.isfinite(value):
        raise InvalidInputError(f"{what} must be a finite number")
    if not MIN_SCORE <= value <= MAX_SCORE:
        raise InvalidInputError(f"{what} {value:g} is out of range: scores are {MIN_SCORE}-{MAX_SCORE}")
    return clean_number(value)


def breakdown(value: Any) -> dict[str, float | int]:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise InvalidInputError("breakdown must be an object of name -> number")
    if len(value) > MAX_BREAKDOWN_KEYS:
        raise InvalidInputError(f"breakdown has {len(value)} entries; the limit is {MAX_BREAKDOWN_KEYS}")
    out: dict[str, float | int] = {}
    for key, number in value.items():
        if not isinstance(key, str) or not key.strip() or len(key) > 64 or "\n" in key:
            raise InvalidInputError(f"breakdown key {key!r} must be a name of 1-64 characters on one line")
        out[key.strip()] = score(number, f"breakdown[{key!r}]")
    return out


def text(value: Any, what: str, limit: int) -> str:
    if not isinstance(value, str):
        raise InvalidInputError(f"{what} must be text")
    out = md.demote_headings(value.strip().replace("\r\n", "\n"))
    if len(out) > limit:
        raise InvalidInputError(f"{what} is {len(out)} characters; the limit is {limit}")
    return out


def strategy(value: Any) -> str:
    if not isinstance(value, str):
        raise InvalidInputError("a strategy must be text")
    out = md.one_line(value)
    if not out:
        raise InvalidInputError("a strategy must not be empty")
    if len(out) > MAX_STRATEGY_CHARS:
        raise InvalidInputError(f"a strategy is {len(out)} characters; the limit is {MAX_STRATEGY_CHARS}")
    return out


def strategy_list(values: Any, where: str) -> list[str]:
    if not isinstance(values, list):
        raise InvalidInputError("strategies must be a list of text")
    items = [strategy(v) for v in values]
    seen: set[str] = set()
    for item in items:
        if item.casefold() in seen:
            raise InvalidInputError(f"{where}: strategy {item!r} is listed twice")
        seen.add(item.casefold())
    if len(items) > MAX_STRATEGIES:
        raise InvalidInputError(f"{where}: {len(items)} strategies; the cap is {MAX_STRATEGIES}")
    return items


def category_name(value: Any) -> str:
    if not isinstance(value, str):
        raise InvalidInputError("a category name must be text")
    name = md.one_line(value)
    if not name or len(name) > MAX_CATEGORY_NAME or name.startswith("#"):
        raise InvalidInputError(
            f"invalid category name {value!r}: 1-{MAX_CATEGORY_NAME} characters on one line, not starting with '#'"
        )
    return name


def add_strategy(items: list[str], item: str, where: str) -> list[str]:
    if any(i.casefold() == item.casefold() for i in items):
        return items  # already there: adding is idempotent, even at the cap
    if len(items) >= MAX_STRATEGIES:
        raise InvalidInputError(
            f"{where}: already {len(items)} strategies; the cap is {MAX_STRATEGIES} — remove one first"
        )
    return [*items, item]


def remove_strategy(items: list[str], which: int | str, where: str) -> list[str]:
    if isinstance(which, int) and not isinstance(which, bool):
        if not 1 <= which <= len(items):
            raise NotFoundError(f"{where}: no strategy number {which} (there are {len(items)})")
        return items[: which - 1] + items[which:]
    if isinstance(which, str):
        key = md.one_line(which).casefold()
        if key.isdigit():
            return remove_strategy(items, int(key), where)
        kept = [i for i in items if i.casefold() != key]
        if len(kept) == len(items):
            raise NotFoundError(f"{where}: no strategy {which!r}")
        return kept
    raise InvalidInputError("name the strategy to remove by its number (1-based) or its text")
