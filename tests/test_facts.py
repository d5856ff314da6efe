"""Facts (issue 17, points 1-3): projected from the files through the ingest pipeline, trust that
decays from real events only, feedback, confirm, edit, and recall by relevance within a budget."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import pytest

from mateclaw_mem.errors import InvalidInputError, NotFoundError
from mateclaw_mem.memory.facts.trust import START, Event, trust
from mateclaw_mem.runtime.services import Services
from mateclaw_mem.settings import load_settings

AGENT = "default"
MEMORY = ("# MEMORY.md\n\n## Preferences\n- prefers dark mode in the editor\n- drinks green tea every morning\n\n"
          "## Work\n- works on Project Atlas with the platform team\n")
PROFILE = "## Profile\n- name: Dana\n- timezone: Europe/Berlin\n"


@pytest.fixture
def svc(tmp_path: Path, clock) -> Services:
    cfg = tmp_path / "mateclaw.yaml"
    cfg.write_text("timezone: Europe/Berlin\nmate:\n  memory:\n    fact:\n      projection-enabled: true\n"
                   "      trust-half-life-days: 60\n", encoding="utf-8")
    services = Services(load_settings(cfg, tmp_path / "workspace"), clock)
    services.store.ensure_agent(AGENT)
    _ = services.file_index  # the index exists, as in the daemon: writes are ingested
    _ = services.facts
    write(services, "MEMORY.md", MEMORY)
    write(services, "PROFILE.md", PROFILE)
    yield services
    services.close()


def write(services: Services, rel: str, body: str, *, owner: str | None = None, actor: str = "person") -> None:
    snap = services.store.read(AGENT, rel, owner=owner)
    services.store.write(AGENT, rel, body, expected_sha=snap.sha, actor=actor, owner=owner)


def by_text(services: Services, text: str, owner: str | None = None):
    found = [f for f in services.facts.list(AGENT, owner) if text in f.text]
    assert found, f"no fact with {text!r}: {[f.text for f in services.facts.list(AGENT, owner)]}"
    return found[0]


def test_facts_are_projected_with_their_source(svc: Services) -> None:
    facts = svc.facts.list(AGENT, None)
    texts = {f.text for f in facts}
    assert {"prefers dark mode in the editor", "drinks green tea every morning", "name: Dana",
            "timezone: Europe/Berlin"} <= texts
    tz = by_text(svc, "timezone")
    assert (tz.file, tz.section, tz.key, tz.value, tz.line) == ("PROFILE.md", "Profile", "timezone", "Europe/Berlin", 3)
    assert tz.trust == START and tz.uses == 0 and tz.scope == "team"


def test_structured_entries_are_facts(svc: Services) -> None:
    svc.structured.remember(AGENT, "user", "language", "Prefers answers in German.", actor="person")
    fact = by_text(svc, "Prefers answers in German")
    assert fact.file == "structured/user.md" and fact.key == "language"


def test_a_hand_edit_outside_the_store_reaches_the_facts_through_ingest(svc: Services) -> None:
    path = svc.store.path(AGENT, "MEMORY.md")
    path.write_text(path.read_text(encoding="utf-8") + "- plays the cello on Sundays\n", encoding="utf-8")
    svc.file_index.ingest(AGENT, None, "MEMORY.md")  # what the watcher does on the save
    assert by_text(svc, "plays the cello").section == "Work"


def test_a_corrected_value_keeps_the_fact_and_counts_as_an_edit(svc: Services, clock) -> None:
    before = by_text(svc, "timezone")
    clock.advance(timedelta(days=30))
    write(svc, "PROFILE.md", PROFILE.replace("Europe/Berlin", "Europe/Lisbon"))
    after = by_text(svc, "timezone")
    assert after.id == before.id and after.value == "Europe/Lisbon"
    assert after.trust == START  # the edit reset the decay clock


def test_trust_decays_from_the_last_real_event_never_from_a_rebuild(svc: Services, clock) -> None:
    fact = by_text(svc, "green tea")
    clock.advance(timedelta(days=121))  # 120 days and a DST change (the clock moves in wall time)
    svc.facts.rebuild()  # must not reset anything
    svc.facts.rebuild()
    decayed = svc.facts.get(AGENT, None, fact.id)
    assert decayed.trust <= 0.25 * START + 1e-9
    confirmed = svc.facts.confirm(AGENT, None, fact.id)
    assert confirmed.trust > decayed.trust and confirmed.last_confirmed is not None
    clock.advance(timedelta(days=60))
    assert svc.facts.get(AGENT, None, fact.id).trust == pytest.approx(confirmed.trust / 2, abs=1e-3)


def test_feedback_moves_trust_by_the_seeds_steps_and_is_visible(svc: Services) -> None:
    fact = by_text(svc, "dark mode")
    up = svc.facts.feedback(AGENT, None, fact.id, "HELPFUL")
    assert up.trust == pytest.approx(START + 0.1) and up.helpful == 1
    down = svc.facts.feedback(AGENT, None, fact.id, "unhelpful")
    assert down.trust == pytest.approx(START + 0.1 - 0.2) and down.unhelpful == 1
    for _ in range(5):
        down = svc.facts.feedback(AGENT, None, fact.id, "unhelpful")
    assert down.trust == 0.0  # clamped
    assert [h["kind"] for h in svc.facts.history(AGENT, None, fact.id)][:2] == ["unhelpful", "unhelpful"]
    with pytest.raises(InvalidInputError):
        svc.facts.feedback(AGENT, None, fact.id, "meh")


def test_events_survive_a_rebuild_from_scratch(svc: Services, tmp_path: Path) -> None:
    fact = by_text(svc, "dark mode")
    svc.facts.feedback(AGENT, None, fact.id, "helpful")
    svc.facts.db.replace_file(AGENT, None, "MEMORY.md", [], 0)  # the projection lost
    svc.facts.rebuild()
    assert svc.facts.get(AGENT, None, fact.id).helpful == 1


def test_trust_function_table() -> None:
    day = 86_400_000
    assert trust([], first_seen_ms=0, changed_ms=0, now_ms=60 * day, half_life_days=60) == pytest.approx(0.25)
    assert trust([Event("use", 60 * day)], first_seen_ms=0, changed_ms=0, now_ms=60 * day,
                 half_life_days=60) == pytest.approx(0.5)  # still in use: whole again
    assert trust([Event("use", 60 * day)], first_seen_ms=0, changed_ms=0, now_ms=120 * day,
                 half_life_days=60) == pytest.approx(0.25)
    assert trust([], first_seen_ms=0, changed_ms=90 * day, now_ms=120 * day,
                 half_life_days=60) == pytest.approx(0.5 * 2 ** -0.5, abs=1e-4)  # from the edit
    assert trust([Event("helpful", 0)] * 10, first_seen_ms=0, changed_ms=0, now_ms=0, half_life_days=60) == 1.0


def test_edit_writes_the_persons_text_through_the_writer(svc: Services) -> None:
    fact = by_text(svc, "dark mode")
    edited = svc.facts.edit(AGENT, None, fact.id, "prefers light mode in the editor")
    body = svc.store.read(AGENT, "MEMORY.md").body
    assert "- prefers light mode in the editor" in body and "dark mode" not in body
    assert edited.text == "prefers light mode in the editor"
    assert svc.store.history(AGENT, "MEMORY.md")[-1].actor == "person"


def test_recall_is_by_relevance_most_trusted_first_within_budget_and_counts_uses(svc: Services) -> None:
    write(svc, "MEMORY.md", MEMORY + "- the editor theme is solarized\n")
    theme = by_text(svc, "solarized")
    svc.facts.feedback(AGENT, None, theme.id, "helpful")
    got = svc.facts.recall(AGENT, None, "which editor theme should I use?", budget_chars=1000)
    assert [f.text for f in got][:2] == ["the editor theme is solarized", "prefers dark mode in the editor"]
    assert all("green tea" not in f.text for f in got)  # not relevant
    assert svc.facts.get(AGENT, None, theme.id).uses == 1
    assert svc.facts.get(AGENT, None, by_text(svc, "green tea").id).uses == 0
    small = svc.facts.recall(AGENT, None, "editor theme", budget_chars=35)
    assert [f.text for f in small] == ["the editor theme is solarized"]
    assert svc.facts.recall(AGENT, None, "早上喝什么茶", budget_chars=1000) == []


def test_cjk_facts_are_recalled(svc: Services) -> None:
    write(svc, "MEMORY.md", MEMORY + "\n## 习惯\n- 用户每天早上喝绿茶\n")
    got = svc.facts.recall(AGENT, None, "早上喝什么茶", budget_chars=1000)
    assert got and got[0].text == "用户每天早上喝绿茶"


def test_owner_isolation(tmp_path: Path, clock) -> None:
    cfg = tmp_path / "mateclaw.yaml"
    cfg.write_text("timezone: Europe/Berlin\nmate:\n  memory:\n    lifecycle-mediator-enabled: true\n"
                   "    fact:\n      projection-enabled: true\n", encoding="utf-8")
    services = Services(load_settings(cfg, tmp_path / "workspace"), clock)
    try:
        services.store.ensure_agent(AGENT)
        _ = services.file_index
        _ = services.facts
        for owner, fact in (("alice", "- alice likes jazz records\n"), ("bob", "- bob likes opera nights\n")):
            services.store.ensure_agent(AGENT, owner)
            write(services, "MEMORY.md", "## Music\n" + fact, owner=owner)
        alice = services.facts.list(AGENT, "alice")
        assert [f.text for f in alice] == ["alice likes jazz records"] and alice[0].scope == "personal"
        assert services.facts.recall(AGENT, "alice", "opera nights", budget_chars=500) == []
        bob_fact = services.facts.list(AGENT, "bob")[0]
        with pytest.raises(NotFoundError):
            services.facts.feedback(AGENT, "alice", bob_fact.id, "helpful")
        with pytest.raises(NotFoundError):
            services.facts.get(AGENT, None, bob_fact.id)
    finally:
        services.close()


def test_projection_off_means_no_recall(tmp_path: Path, clock) -> None:
    cfg = tmp_path / "mateclaw.yaml"
    cfg.write_text("timezone: Europe/Berlin\n", encoding="utf-8")
    services = Services(load_settings(cfg, tmp_path / "workspace"), clock)
    try:
        services.store.ensure_agent(AGENT)
        _ = services.file_index
        write(services, "MEMORY.md", MEMORY)
        assert services.facts.list(AGENT, None) == []  # nothing projected while the layer is off
        assert services.facts.recall(AGENT, None, "editor", budget_chars=500) == []
    finally:
        services.close()


def test_model_mode_facts_carry_the_messages_they_were_extracted_from(tmp_path: Path, clock, model_server) -> None:
    cfg = tmp_path / "mateclaw.yaml"
    cfg.write_text("timezone: Europe/Berlin\nmate:\n  memory:\n    min-messages-for-summarize: 0\n"
                   "    fact:\n      projection-enabled: true\n"
                   f"model:\n  base-url: {model_server.base_url}\n  model: test-model\n  max-retries: 0\n",
                   encoding="utf-8")
    services = Services(load_settings(cfg, tmp_path / "workspace"), clock)
    try:
        services.store.ensure_agent(AGENT)
        _ = services.file_index, services.facts

        def answer(body: dict) -> dict:
            line = next(ln for ln in body["messages"][-1]["content"].splitlines() if ln.startswith("[NEW #"))
            msg_id = line.split("#", 1)[1].split()[0]
            return {"should_update": True, "reason": "a preference",
                    "edits": [{"op": "add", "section": "Preferences", "text": "plays the cello on Sundays",
                               "evidence": [msg_id]}]}

        model_server.responder = answer
        services.extraction.record_turn(AGENT, "c7", "I play the cello every Sunday morning.", "Lovely.")
        out = services.extraction.extract_now(AGENT, "c7")
        assert out.outcome == "updated", out
        fact = by_text(services, "plays the cello")
        notes = [h["note"] for h in services.facts.history(AGENT, None, fact.id) if h["kind"] == "source"]
        assert notes and notes[0].startswith("conversation c7: message(s) ")
    finally:
        services.close()
