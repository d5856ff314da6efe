"""SOUL.md evolution, reviewed (issue 17, point 7): proposals every `soul-update-interval` memory
writes, never silent; apply keeps pinned and person-written sections; undo is byte for byte."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from mateclaw_mem.runtime.services import Services
from mateclaw_mem.settings import load_settings

AGENT = "default"
SOUL = ("# SOUL.md\n\n## Core <!-- pin -->\n- Be honest, always.\n\n## Voice\n- Plain words.\n\n"
        "## Habits\n- Reply in English.\n")
LEARNED = "## What I have learned about working with you"


def make(tmp_path: Path, clock: Any, memory: str = "", overrides: dict[str, Any] | None = None) -> Services:
    cfg = tmp_path / "mateclaw.yaml"
    cfg.write_text("timezone: Europe/Berlin\nmate:\n  memory:\n" + memory, encoding="utf-8")
    svc = Services(load_settings(cfg, tmp_path / "ws", overrides=overrides), clock)
    svc.store.ensure_agent(AGENT)
    snap = svc.store.read(AGENT, "SOUL.md")
    svc.store.write(AGENT, "SOUL.md", SOUL, expected_sha=snap.sha, actor="person")
    _ = svc.soul
    return svc


def feedback(svc: Services, n: int, start: int = 0) -> None:
    for i in range(start, start + n):
        svc.structured.remember(AGENT, "feedback", f"rule{i}", f"Keep answers under {i + 3} lines.", actor="person")


@pytest.fixture
def every3(tmp_path: Path, clock: Any) -> Services:
    svc = make(tmp_path, clock, "    soul-update-interval: 3\n")
    yield svc
    svc.close()


def test_a_proposal_comes_after_n_writes_and_is_not_written(every3: Services) -> None:
    feedback(every3, 2)
    assert every3.soul.pending(AGENT) is None
    feedback(every3, 1, start=2)
    proposal = every3.soul.pending(AGENT)
    assert proposal is not None and proposal.mode == "rules"
    assert f"+{LEARNED}" in proposal.diff and "+- Keep answers under 3 lines." in proposal.diff
    assert every3.store.read(AGENT, "SOUL.md").body == SOUL  # proposed, not written


def test_interval_zero_never_proposes(tmp_path: Path, clock: Any) -> None:
    svc = make(tmp_path, clock, "    soul-update-interval: 0\n")
    try:
        feedback(svc, 5)
        assert svc.soul.pending(AGENT) is None and svc.soul.writes(AGENT, None) == 0
        assert svc.store.read(AGENT, "SOUL.md").body == SOUL
    finally:
        svc.close()


def test_apply_keeps_pinned_and_person_sections_and_undo_restores_bytes(every3: Services) -> None:
    feedback(every3, 3)
    # The person edits a section after the proposal was made: apply must keep their words.
    snap = every3.store.read(AGENT, "SOUL.md")
    edited = SOUL.replace("- Plain words.", "- Plain words, and a little humour.")
    every3.store.write(AGENT, "SOUL.md", edited, expected_sha=snap.sha, actor="person")
    before = (every3.store.read(AGENT, "SOUL.md").path).read_bytes()
    done = every3.soul.apply(AGENT)
    text = every3.store.read(AGENT, "SOUL.md").body
    assert "## Core <!-- pin -->\n- Be honest, always.\n" in text
    assert "- Plain words, and a little humour.\n" in text and LEARNED in text
    assert every3.soul.pending(AGENT) is None
    every3.store.undo_batch(done["batch"])
    assert every3.store.read(AGENT, "SOUL.md").path.read_bytes() == before


def test_reject_leaves_soul_alone(every3: Services) -> None:
    feedback(every3, 3)
    every3.soul.reject(AGENT)
    assert every3.soul.pending(AGENT) is None and every3.store.read(AGENT, "SOUL.md").body == SOUL


def test_auto_apply_writes_the_proposal_undoably(tmp_path: Path, clock: Any) -> None:
    svc = make(tmp_path, clock, "    soul-update-interval: 2\n    soul:\n      auto-apply: true\n")
    try:
        feedback(svc, 2)
        applied = svc.soul.db.latest(AGENT, None)
        assert applied is not None and applied.status == "applied" and applied.batch
        assert LEARNED in svc.store.read(AGENT, "SOUL.md").body
        svc.store.undo_batch(applied.batch)
        assert svc.store.read(AGENT, "SOUL.md").body == SOUL
    finally:
        svc.close()


def test_owner_proposals_stay_with_their_owner(tmp_path: Path, clock: Any) -> None:
    svc = make(tmp_path, clock, "    soul-update-interval: 1\n", overrides={"owner_isolation": True})
    try:
        svc.structured.remember(AGENT, "feedback", "tone", "Be brief with me.", actor="person", owner="alice")
        assert svc.soul.pending(AGENT, "alice") is not None
        assert svc.soul.pending(AGENT, "bob") is None and svc.soul.pending(AGENT) is None
    finally:
        svc.close()


def test_model_mode_rewrite_keeps_pinned_and_person_sections(tmp_path: Path, clock: Any, model_server: Any,
                                                              model_settings_overrides: dict[str, Any]) -> None:
    svc = make(tmp_path, clock, "    soul-update-interval: 1\n", overrides=model_settings_overrides)
    try:
        # A machine wrote SOUL.md last, then the person reworded `## Voice`: only Habits is the model's.
        svc.store.write(AGENT, "SOUL.md", SOUL + "\n", expected_sha=svc.store.read(AGENT, "SOUL.md").sha, actor="tool")
        svc.store.write(AGENT, "SOUL.md", SOUL.replace("Plain words.", "Plain words, my way.") + "\n",
                        expected_sha=svc.store.read(AGENT, "SOUL.md").sha, actor="person")
        model_server.reply_json({"should_update": True, "reason": "the person likes brevity",
                                 "soul_content": "# SOUL.md\n\n## Core\n- Be clever.\n\n## Voice\n- Fancy words.\n\n"
                                                 "## Habits\n- Reply in short English sentences.\n"})
        svc.store.write(AGENT, "MEMORY.md", "# MEMORY.md\n\n- likes brevity\n",
                        expected_sha=svc.store.read(AGENT, "MEMORY.md").sha, actor="person")
        proposal = svc.soul.pending(AGENT)
        assert proposal is not None and proposal.mode == "model", model_server.chat_requests
        assert "SOUL.md (current)" in model_server.chat_requests[-1].prompt_text
        svc.soul.apply(AGENT)
        text = svc.store.read(AGENT, "SOUL.md").body
        assert "## Core <!-- pin -->\n- Be honest, always.\n" in text and "Be clever" not in text
        assert "- Plain words, my way." in text and "Fancy" not in text
        assert "- Reply in short English sentences." in text  # the part that was the machine's changed
    finally:
        svc.close()
