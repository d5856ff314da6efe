from __future__ import annotations

from pathlib import Path

import pytest

from mateclaw_mem.clock import ManualClock
from mateclaw_mem.errors import BusyError
from mateclaw_mem.llm.client import ModelClient
from mateclaw_mem.markdown import structured as fmt
from mateclaw_mem.memory.structured.consolidation import StructuredConsolidation
from mateclaw_mem.runtime.services import Services
from mateclaw_mem.settings import load_settings

REL = "structured/user.md"
# Ten entries, three near-duplicate pairs: (language, lang-pref), (coffee, coffee2), (city, home).
ENTRIES = [
    ("language", "Prefers answers in German.", "2026-10-01"),
    ("editor", "Uses Neovim with a light theme.", "2026-10-02"),
    ("coffee", "Drinks flat white without sugar.", "2026-10-03"),
    ("lang-pref", "prefers answers in German", "2026-11-01"),
    ("city", "Lives in Berlin, Kreuzberg district, since 2019.", "2026-10-05"),
    ("pet", "Has a cat called Miso.", "2026-10-06"),
    ("coffee2", "Drinks flat white without any sugar.", "2026-10-07"),
    ("home", "Lives in Berlin Kreuzberg district since 2019.", "2026-11-08"),
    ("sport", "Runs on Sunday mornings.", "2026-10-09"),
    ("music", "Listens to jazz while working.", "2026-10-10"),
]


def _remember_all(services: Services, owner: str | None = None, entries=ENTRIES, type_: str = "user") -> None:
    for key, text, _ in entries:
        services.structured.remember("default", type_, key, text, actor="api", owner=owner)

    # Backdate through the store (a machine write, so nothing counts as hand-edited).
    def backdate(text: str) -> str:
        for key, _, updated in entries:
            start = text.index(f"## {key}\n")
            end = text.index("Updated: ", start) + len("Updated: ")
            text = text[:end] + updated + text[end + 10 :]
        return text
    services.store.update("default", f"structured/{type_}.md", backdate, actor="api", owner=owner)


def _keys(services: Services, owner: str | None = None) -> list[str]:
    return [e.key for e in services.structured.entries("default", "user", owner=owner)]


def _model_services(tmp_path: Path, clock: ManualClock, overrides: dict, extra: str = "") -> Services:
    cfg = tmp_path / "model.yaml"
    cfg.write_text("timezone: Europe/Berlin\n" + extra, encoding="utf-8")
    over = {**overrides, "model": {**overrides["model"], "max_retries": 0}}
    services = Services(load_settings(cfg, tmp_path / "mws", overrides=over), clock)
    services.store.ensure_agent("default")
    return services


def test_rules_mode_merges_near_duplicates_and_reports_counts(services) -> None:
    _remember_all(services)
    report = services.structured_consolidation.run()
    d = report.as_dict()
    assert (d["ownersConsolidated"], d["updated"], d["entriesBefore"], d["entriesAfter"]) == (1, 1, 10, 7)
    assert _keys(services) == ["editor", "lang-pref", "pet", "coffee2", "home", "sport", "music"]
    entries = {e.key: e for e in services.structured.entries("default", "user")}
    assert entries["lang-pref"].updated == "2026-11-01"  # the newest of the group absorbed the others
    assert entries["editor"].raw  # untouched entries are kept byte for byte
    versions = services.store.history("default", REL)
    assert versions[-1].actor == "consolidation" and versions[-1].batch == report.run_id
    # Unchanged since its last consolidation: not sent again.
    again = services.structured_consolidation.run()
    assert again.buckets == [] and again.owners_consolidated == 0


def test_small_buckets_are_left_alone(services) -> None:
    _remember_all(services, entries=ENTRIES[:7])  # min-entries is 8
    before = services.store.read("default", REL).sha
    assert services.structured_consolidation.run().buckets == []
    assert services.store.read("default", REL).sha == before


def test_pinned_and_hand_edited_entries_are_never_merged_away(services) -> None:
    _remember_all(services)
    # A person pins one duplicate and edits another.
    def person_edit(text: str) -> str:
        text = text.replace("## coffee\n", "## coffee\n<!-- pin -->\n")
        return text.replace("prefers answers in German", "Prefers answers in German.")
    services.store.update("default", REL, person_edit, actor="person")
    services.structured_consolidation.run()
    keys = _keys(services)
    assert "coffee" in keys and "coffee2" not in keys  # the pinned one absorbed its duplicate
    assert "lang-pref" in keys and "language" not in keys  # the hand-edited one stays (and is newest)
    entries = {e.key: e for e in services.structured.entries("default", "user")}
    assert entries["coffee"].pinned and entries["coffee"].text == "Drinks flat white without sugar."


def test_a_bucket_written_only_by_a_person_is_all_locked(services) -> None:
    text = "---\nenabled: false\n---\n" + "".join(
        f"## k{i}\nThe very same sentence about tea.\n> Source: me | Updated: 2026-10-0{i % 9 + 1}\n\n"
        for i in range(9))
    services.store.write("default", REL, text, expected_sha="", actor="person")
    report = services.structured_consolidation.run()
    assert report.buckets[0].status == "unchanged"
    assert services.store.read("default", REL).text == text


def _plan(keep: list[tuple[str, str, list[str]]], dropped: list[tuple[str, str]] = ()) -> dict:
    return {"entries": [{"key": k, "text": t, "merged_from": m} for k, t, m in keep],
            "dropped": [{"key": k, "reason": r} for k, r in dropped]}


GOOD = _plan(
    [("language", "Prefers answers in German.", ["lang-pref"]), ("editor", "Uses Neovim.", []),
     ("coffee", "Flat white, no sugar.", ["coffee2"]), ("home", "Lives in Berlin-Kreuzberg since 2019.", ["city"]),
     ("pet", "Has a cat called Miso.", []), ("sport", "Runs on Sunday mornings.", [])],
    [("music", "obsolete")],
)


def test_model_mode_applies_a_valid_plan_and_does_not_resend_unchanged_buckets(
        tmp_path: Path, clock: ManualClock, model_server, model_settings_overrides) -> None:
    svc = _model_services(tmp_path, clock, model_settings_overrides)
    try:
        _remember_all(svc)
        model_server.reply_json(GOOD)
        report = svc.structured_consolidation.run()
        assert report.mode == "model" and (report.entries_before, report.entries_after) == (10, 6)
        assert _keys(svc) == ["language", "editor", "coffee", "pet", "home", "sport"]
        entries = {e.key: e for e in svc.structured.entries("default", "user")}
        assert entries["editor"].text == "Uses Neovim with a light theme."  # a singleton is never rewritten
        assert entries["home"].text == "Lives in Berlin-Kreuzberg since 2019."
        assert entries["home"].updated == "2026-11-08"
        assert "music: obsolete" in report.buckets[0].detail
        assert '"locked": false' in model_server.chat_requests[0].prompt_text
        assert svc.structured_consolidation.run().buckets == []
        assert len(model_server.chat_requests) == 1
    finally:
        svc.close()


BAD_PLANS = {
    "adds an entry": _plan([*[(k, t, []) for k, t, _ in ENTRIES], ("new-key", "invented", [])]),
    "drops a pinned one": _plan([(k, t, []) for k, t, _ in ENTRIES if k != "coffee"], [("coffee", "duplicate")]),
    "silently loses a key": _plan([(k, t, []) for k, t, _ in ENTRIES if k != "pet"]),
    "merges a pinned one away": _plan([(k, t, ["coffee"] if k == "coffee2" else [])
                                       for k, t, _ in ENTRIES if k != "coffee"]),
    "accounts for a key twice": _plan([(k, t, ["pet"] if k == "sport" else []) for k, t, _ in ENTRIES]),
}


@pytest.mark.parametrize("name", list(BAD_PLANS))
def test_unsafe_model_answers_are_rejected_and_the_file_is_untouched(
        name: str, tmp_path: Path, clock: ManualClock, model_server, model_settings_overrides) -> None:
    svc = _model_services(tmp_path, clock, model_settings_overrides)
    try:
        _remember_all(svc)
        svc.store.update("default", REL, lambda t: t.replace("## coffee\n", "## coffee\n<!-- pin -->\n"),
                         actor="person")  # only a person pins
        before = svc.store.read("default", REL).text
        model_server.reply_json(BAD_PLANS[name])
        model_server.reply_json(BAD_PLANS[name])  # the repair round trip gets the same answer
        report = svc.structured_consolidation.run()
        assert report.buckets[0].status == "error" and "invalid twice" in report.buckets[0].detail
        assert report.updated == 0 and report.entries_after == report.entries_before == 10
        assert svc.store.read("default", REL).text == before
        assert len(model_server.chat_requests) == 2
    finally:
        svc.close()


def test_a_person_editing_while_the_model_thinks_wins(
        tmp_path: Path, clock: ManualClock, model_server, model_settings_overrides) -> None:
    svc = _model_services(tmp_path, clock, model_settings_overrides)
    try:
        _remember_all(svc)

        def responder(body: dict) -> dict:
            svc.store.update("default", REL, lambda t: t.replace("Miso", "Miso and a dog"), actor="person")
            return GOOD

        model_server.responder = responder
        report = svc.structured_consolidation.run()
        assert report.buckets[0].status == "conflict" and report.updated == 0
        text = svc.store.read("default", REL).text
        assert "Miso and a dog" in text and len(fmt.parse(text.split("---\n", 2)[2]).entries) == 10
    finally:
        svc.close()


def test_rotation_is_fair_across_owners(tmp_path: Path, clock: ManualClock) -> None:
    cfg = tmp_path / "iso.yaml"
    cfg.write_text("timezone: Europe/Berlin\nowner-isolation: true\nmate:\n  memory:\n"
                   "    structured-consolidation-max-owners-per-run: 1\n", encoding="utf-8")
    svc = Services(load_settings(cfg, tmp_path / "ws"), clock)
    svc.store.ensure_agent("default")
    try:
        for owner in ("ann", "bob", "cy"):
            _remember_all(svc, owner=owner)
        order = []
        for _ in range(4):
            report = svc.structured_consolidation.run()
            order.append([b.owner for b in report.buckets])
            # ann's bucket changes again after every run: it is due every time but must not starve others.
            svc.structured.remember("default", "user", "pet", "Has a cat called Miso.", actor="api", owner="ann")
            svc.structured.remember("default", "user", "pet-again", "Has a cat called Miso!", actor="api",
                                    owner="ann")
        assert order == [["ann"], ["bob"], ["cy"], ["ann"]]
        # The cursor lives in state.db: a fresh service continues the rotation.
        fresh = StructuredConsolidation(svc.store, clock, state_db=svc.settings.state_dir / "state.db",
                                        max_owners_per_run=1)
        svc.structured.remember("default", "user", "x-dup", "Runs on Sunday mornings!", actor="api", owner="bob")
        assert [b.owner for b in fresh.run().buckets] == ["bob"]
        fresh.close()
    finally:
        svc.close()


def test_one_run_at_a_time(services) -> None:
    sc = services.structured_consolidation
    sc._run_lock.acquire()
    try:
        other = StructuredConsolidation(services.store, services.clock,
                                        state_db=services.settings.state_dir / "state.db")
        with pytest.raises(BusyError):
            other.run()
        other.close()
    finally:
        sc._run_lock.release()


def test_model_client_is_only_built_when_configured(services, tmp_path: Path, clock: ManualClock,
                                                   model_settings_overrides) -> None:
    assert services.model is None and services.structured_consolidation.mode == "rules"
    svc = _model_services(tmp_path, clock, model_settings_overrides)
    try:
        assert isinstance(svc.model, ModelClient) and svc.structured_consolidation.mode == "model"
        assert svc.context.window.summarizer.mode == "model"
    finally:
        svc.close()
