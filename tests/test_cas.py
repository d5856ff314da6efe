"""The machine writers' compare-and-swap loop (workspace/cas.py) against a real store and real saves."""

from __future__ import annotations

import pytest

from mateclaw_mem.errors import ConflictError, RejectedError
from mateclaw_mem.workspace.cas import retry_on_conflict
from mateclaw_mem.workspace.store import WorkspaceStore

AGENT = "default"


def _hand_save(store: WorkspaceStore, text: str) -> None:
    # A person's editor: a plain write to the file, from outside the store.
    store.path(AGENT, "MEMORY.md").write_text(text, encoding="utf-8")


def test_a_conflict_plans_again_on_the_persons_version(store: WorkspaceStore) -> None:
    store.write(AGENT, "MEMORY.md", "# M\n\n- one\n", expected_sha=None, actor="person")
    seen: list[str] = []

    def attempt(n: int) -> str:
        snap = store.read(AGENT, "MEMORY.md")
        seen.append(snap.text)
        if n == 0:
            _hand_save(store, snap.text + "- the person's line\n")  # lands between our read and our write
        store.write(AGENT, "MEMORY.md", snap.text + "- machine line\n", expected_sha=snap.sha, actor="extraction")
        return snap.text

    assert retry_on_conflict(attempt, retries=1) == "# M\n\n- one\n- the person's line\n"
    assert len(seen) == 2
    text = store.read(AGENT, "MEMORY.md").text
    assert "- the person's line\n" in text and "- machine line\n" in text


def test_the_last_conflict_propagates_and_the_persons_text_stays(store: WorkspaceStore) -> None:
    store.write(AGENT, "MEMORY.md", "# M\n", expected_sha=None, actor="person")
    calls: list[int] = []

    def attempt(n: int) -> None:
        calls.append(n)
        snap = store.read(AGENT, "MEMORY.md")
        _hand_save(store, snap.text + f"- edit {n}\n")
        store.write(AGENT, "MEMORY.md", "# M\n\n- machine\n", expected_sha=snap.sha, actor="dreaming")

    with pytest.raises(ConflictError):
        retry_on_conflict(attempt, retries=2)
    assert calls == [0, 1, 2]
    assert store.read(AGENT, "MEMORY.md").text == "# M\n- edit 0\n- edit 1\n- edit 2\n"


def test_other_errors_are_not_retried(store: WorkspaceStore) -> None:
    calls: list[int] = []

    def attempt(n: int) -> None:
        calls.append(n)
        raise RejectedError("refused by a guard")

    with pytest.raises(RejectedError):
        retry_on_conflict(attempt, retries=3)
    assert calls == [0]
