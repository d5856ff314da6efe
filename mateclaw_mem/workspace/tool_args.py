"""The workspace tools' argument names: the seed's spelling and ours, accepted alike on every face.

The seed's tools take `filename`, `filenamePrefix`, `oldText`, `newText` and `replaceAll`; ours took
`path`, `prefix`, `old_text` (HTTP: `old`), `new_text` (`new`) and `replace_all`. A client written for
either reaches the same tool, so MCP and HTTP accept every spelling in `SPELLINGS` (the seed's first:
it is the name the published schemas show). Two spellings of one argument in one call are refused
rather than one silently winning, and so is a name no spelling matches: an ignored `filenamePrefix`
listed every file as if the filter had been applied.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pydantic import AliasChoices, BaseModel

SPELLINGS: dict[str, tuple[str, ...]] = {
    "path": ("filename", "path"),
    "prefix": ("filenamePrefix", "prefix"),
    "old_text": ("oldText", "old_text", "old"),
    "new_text": ("newText", "new_text", "new"),
    "replace_all": ("replaceAll", "replace_all"),
}


def spelled(argument: str) -> AliasChoices:
    """The `validation_alias` of an argument with several spellings (the seed's shown in schemas)."""
    return AliasChoices(*SPELLINGS[argument])


def also(argument: str) -> str:
    """A description's tail naming the other spellings, so a model reading the schema knows them."""
    _, *others = SPELLINGS[argument]
    return f" (also accepted as {' or '.join(f'`{o}`' for o in others)})" if others else ""


def _names(field_name: str, field: Any) -> tuple[str, ...]:
    alias = field.validation_alias
    if isinstance(alias, AliasChoices):
        return tuple(c for c in alias.choices if isinstance(c, str))
    if isinstance(alias, str):
        return (alias,)
    return (field.alias or field_name,)


def check_names(model: type[BaseModel], data: Any, what: str) -> Any:
    """A model's before-validator: every key is one spelling of one of `model`'s fields, no field is
    given twice, and a required field with several spellings is there under one of them (pydantic's
    own "filename: Field required" would mislead a caller who spells it `path`). Messages name what
    the caller wrote and what `what` (the tool or request) takes."""
    if not isinstance(data, Mapping):
        return data  # the wrong shape altogether: pydantic says so
    fields = {name: _names(name, f) for name, f in model.model_fields.items()}
    takes = ", ".join(" or ".join(names) for names in fields.values()) or "no arguments"
    owner = {spelling: name for name, names in fields.items() for spelling in names}
    for key in data:
        if key not in owner:
            raise ValueError(f"unknown argument {key!r}: {what} takes {takes}")
    for name, names in fields.items():
        given = [n for n in names if n in data]
        if len(given) > 1:
            raise ValueError(f"{' and '.join(repr(g) for g in given)} are the same argument: give one")
        if not given and len(names) > 1 and model.model_fields[name].is_required():
            raise ValueError(f"missing argument {names[0]!r} (or {' or '.join(repr(n) for n in names[1:])})")
    return data
