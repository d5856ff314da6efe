"""The edit operations model steps answer with (extraction, dreaming), and how prompts describe them.

An edit names one bullet or `##` section, says what to do with it and what it rests on; the
deterministic applier (`markdown.edits.apply_edits`) carries it out. The seed's whole-file answers
(`memory_update`, `profile_update`, `memory_content`) stay accepted beside them.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import ConfigDict, Field, field_validator, model_validator

from mateclaw_mem.markdown.edits import Edit
from mateclaw_mem.wire import Wire

EDIT_TEXT_MAX = 1000
MAX_EDITS = 40
_FILES = {"memory": "MEMORY.md", "memory.md": "MEMORY.md", "profile": "PROFILE.md", "profile.md": "PROFILE.md"}


class EditOp(Wire):
    model_config = ConfigDict(extra="ignore")

    op: Literal["add", "update", "remove"]
    file: Literal["MEMORY.md", "PROFILE.md"] = "MEMORY.md"
    section: str = Field(default="", max_length=120)
    old: str = Field(default="", max_length=EDIT_TEXT_MAX)
    text: str = Field(default="", max_length=EDIT_TEXT_MAX)
    # Message ids (extraction) or note dates (dreaming) the edit rests on; strings either way.
    evidence: list[str] = Field(default_factory=list, max_length=50)

    @field_validator("op", mode="before")
    @classmethod
    def _op_words(cls, value: Any) -> Any:
        if isinstance(value, str):
            value = value.strip().lower()
            return {"append": "add", "insert": "add", "replace": "update", "change": "update",
                    "delete": "remove"}.get(value, value)
        return value

    @field_validator("file", mode="before")
    @classmethod
    def _file_names(cls, value: Any) -> Any:
        if isinstance(value, str):
            return _FILES.get(value.strip().lower(), value.strip())
        return value

    @field_validator("section", mode="before")
    @classmethod
    def _bare_title(cls, value: Any) -> Any:
        if value is None:
            return ""
        return value.strip().lstrip("#").strip() if isinstance(value, str) else value

    @field_validator("old", "text", mode="before")
    @classmethod
    def _none_is_empty(cls, value: Any) -> Any:
        return "" if value is None else value

    @field_validator("evidence", mode="before")
    @classmethod
    def _evidence_strings(cls, value: Any) -> Any:
        if value is None:
            return []
        if isinstance(value, (str, int)):
            value = [value]
        if isinstance(value, list):
            return [str(v).strip().lstrip("#") for v in value if str(v).strip()]
        return value

    @model_validator(mode="after")
    def _complete(self) -> EditOp:
        if self.op in ("add", "update") and not self.text.strip():
            raise ValueError(f"{self.op} needs `text`")
        if self.op == "update" and not self.old.strip():
            raise ValueError("update needs `old`: the line it replaces")
        if self.op == "remove" and not (self.old.strip() or self.section.strip()):
            raise ValueError("remove needs `old` (a line) or `section` (a whole section)")
        return self

    def to_edit(self) -> Edit:
        return Edit(self.op, section=self.section, old=self.old, text=self.text)


def edits_for(ops: list[EditOp], rel: str) -> list[Edit]:
    return [op.to_edit() for op in ops if op.file == rel]


def check_evidence(ops: list[EditOp], known: set[str], what: str) -> None:
    """ValueError (told to the model in the repair round trip) for an edit resting on nothing shown."""
    for i, op in enumerate(ops):
        if not op.evidence:
            raise ValueError(f"edits[{i}] has no evidence: give the {what} it rests on")
        unknown = [e for e in op.evidence if e not in known]
        if unknown:
            raise ValueError(f"edits[{i}].evidence {unknown[:3]} are not {what}s shown in the prompt")
