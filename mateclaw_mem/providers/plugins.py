"""Which memory providers run: `mate.memory.providers` names them, the entry-point group
`mateclaw_mem.providers` supplies them.

An entry point's value is a factory `build(context: ProviderContext, options: dict) -> MemoryProvider`;
`options` is the provider's own settings from its config entry (everything but `name`), keys as
written. So a package adds a provider by declaring, in its pyproject.toml,

    [project.entry-points."mateclaw_mem.providers"]
    my_provider = "my_package.module:build"

and a deployment turns it on by listing `my_provider`. Our own providers are declared the same way
in our pyproject.toml. An editable install only registers entry points when it is (re)installed, so
a checkout whose venv predates a declaration would lose them: the built-ins are then found by name
in `BUILTINS` (their origin says so in `status`).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from importlib.metadata import entry_points
from typing import Any

from mateclaw_mem.errors import ConfigError
from mateclaw_mem.providers.base import MemoryProvider, ProviderContext

GROUP = "mateclaw_mem.providers"
# name -> "module:attribute", exactly as pyproject.toml declares them.
BUILTINS = {
    "search_hits": "mateclaw_mem.providers.search_hits:build",
    "conversation_hits": "mateclaw_mem.providers.conversation_hits:build",
    "mem0": "mateclaw_mem.providers.mem0:build",
}
Factory = Callable[[ProviderContext, dict[str, Any]], MemoryProvider]


@dataclass(frozen=True)
class Installed:
    name: str
    value: str  # "module:attribute"
    declared_by: Any = None  # the importlib.metadata Distribution whose entry point this is, if known
    builtin: bool = False  # found by name in BUILTINS, no entry point installed

    @property
    def origin(self) -> str:
        """The distribution that declared it, or "built-in (...)". Read on demand: a distribution's
        name and version are parsed from its METADATA (~3 ms each), wanted only for what runs."""
        if self.builtin:
            return "built-in (entry point not installed: run scripts/setup.sh)"
        dist = self.declared_by
        return "entry point" if dist is None else f"{dist.name} {dist.version}"

    def load(self) -> Factory:
        module, _, attr = self.value.partition(":")
        import importlib

        obj: Any = importlib.import_module(module)
        for part in attr.split(".") if attr else []:
            obj = getattr(obj, part)
        return obj  # type: ignore[no-any-return]


def installed() -> dict[str, Installed]:
    """Every provider that can be named, read from the installed distributions now (a package
    installed while the process runs is seen by the next call)."""
    found: dict[str, Installed] = {}
    for ep in entry_points(group=GROUP):
        found.setdefault(ep.name, Installed(ep.name, ep.value, getattr(ep, "dist", None)))
    for name, value in BUILTINS.items():
        found.setdefault(name, Installed(name, value, builtin=True))
    return found


def entries(config: Sequence[str | dict[str, Any]]) -> list[tuple[str, dict[str, Any]]]:
    """`mate.memory.providers` as (name, options) pairs."""
    out = []
    for i, entry in enumerate(config):
        if isinstance(entry, str):
            out.append((entry, {}))
            continue
        options = dict(entry)
        name = options.pop("name", None)
        if not isinstance(name, str) or not name:
            raise ConfigError(f"mate.memory.providers[{i}]: a provider entry needs a `name` (got {entry!r})")
        out.append((name, options))
    return out


def build_providers(config: Sequence[str | dict[str, Any]],
                    context: ProviderContext) -> tuple[list[MemoryProvider], dict[str, Callable[[], str]]]:
    """The configured providers, in order, and where each came from. An unknown name stops the start
    and names the installed ones."""
    available = installed()
    providers: list[MemoryProvider] = []
    origins: dict[str, Callable[[], str]] = {}
    for name, options in entries(config):
        found = available.get(name)
        if found is None:
            raise ConfigError(f"mate.memory.providers: unknown memory provider {name!r}; installed: "
                              f"{', '.join(sorted(available))} (a package adds one through the "
                              f"{GROUP!r} entry-point group)")
        try:
            provider = found.load()(context, options)
        except ConfigError:
            raise
        except Exception as exc:  # a plug-in's own failure: name it, never a traceback
            raise ConfigError(f"memory provider {name!r} ({found.value}) failed to start: "
                              f"{type(exc).__name__}: {exc}") from exc
        providers.append(provider)
        origins[provider.name] = lambda found=found: found.origin  # read by `status` only
    return providers, origins


_CAMEL = re.compile(r"(?<=[a-z0-9])([A-Z])")


def snake_key(key: str) -> str:
    return _CAMEL.sub(r"_\1", key).lower().replace("-", "_")


def option_keys(options: dict[str, Any], provider: str = "a provider") -> dict[str, Any]:
    """A provider's options as snake_case: the seed's camelCase (`baseUrl`), kebab-case (`base-url`)
    and snake_case all name the same key. Two spellings of one key are refused: one silently winning
    would ignore the other."""
    out: dict[str, Any] = {}
    for key, value in options.items():
        snake = snake_key(key)
        if snake in out:
            first = next(k for k in options if snake_key(k) == snake)
            raise ConfigError(f"mate.memory.providers: {provider}: {first} and {key} are the same setting; keep one")
        out[snake] = value
    return out


def as_written(options: dict[str, Any], snake: str, seed_spelling: str | None = None) -> str:
    """A key as the person wrote it (`baseUrl`, `base-url`), for messages; one they did not write is
    named as the seed spells it (camelCase)."""
    for key in options:
        if snake_key(key) == snake:
            return key
    return seed_spelling or re.sub(r"_([a-z0-9])", lambda m: m.group(1).upper(), snake)


def limit_option(name: str, options: dict[str, Any], default: int) -> int:
    """The built-ins' one option: `limit` (hits per prompt)."""
    opts = option_keys(options, name)
    unknown = sorted(as_written(options, k) for k in set(opts) - {"limit"})
    if unknown:
        raise ConfigError(f"mate.memory.providers: {name} has no setting {', '.join(unknown)} (it takes: limit)")
    limit = opts.get("limit", default)
    if not isinstance(limit, int) or isinstance(limit, bool) or limit < 1:
        raise ConfigError(f"mate.memory.providers: {name}.limit must be a whole number >= 1 (got {limit!r})")
    return limit
