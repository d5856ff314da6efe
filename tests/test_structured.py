from __future__ import annotations

from datetime import timedelta

import pytest

from mateclaw_mem.errors import ConflictError, InvalidInputError, NotFoundError
from mateclaw_mem.markdown import frontmatter
from mateclaw_mem.markdown import structured as fmt
from mateclaw_mem.memory.structured.entries import StructuredMemory, search_relevance

HAND_WRITTEN = """---
enabled: false
note: kept as written
---
# My user facts

## language
Prefers answers in German,
even for code comments.
> Source: conversation 12 | Updated: 2026-10-01

##   Coffee  order
<!-- pin -->
Flat white, no sugar.
>Source: told me twice|Updated: 2026-09-02
## timezone
Europe/Berlin
> Updated: 2026-08-01
"""


def test_parse_reads_every_field_and_render_round_trips_byte_for_byte() -> None:
    block, body = frontmatter.split(HAND_WRITTEN)
    doc = fmt.parse(body)
    assert [e.key for e in doc.entries] == ["language", "Coffee  order", "timezone"]
    lang, coffee, tz = doc.entries
    assert lang.text == "Prefers answers in German,\neven for code comments."
    assert (lang.source, lang.updated, lang.pinned) == ("conversation 12", "2026-10-01", False)
    assert (coffee.text, coffee.source, coffee.updated, coffee.pinned) == (
        "Flat white, no sugar.", "told me twice", "2026-09-02", True)
    assert (tz.text, tz.source, tz.updated) == ("Europe/Berlin", "", "2026-08-01")
    assert block + fmt.render(doc) == HAND_WRITTEN


def test_a_changed_entry_is_rendered_in_the_seed_format_and_the_others_stay_verbatim() -> None:
    _, body = frontmatter.split(HAND_WRITTEN)
    doc = fmt.parse(body)
    doc.entries[2] = doc.entries[2].changed(text="Asia/Tokyo", source="api", updated="2026-11-30")
    out = fmt.render(doc)
    assert out.startswith(body[: body.index("## timezone")])
    assert out.endswith("## timezone\nAsia/Tokyo\n> Source: api | Updated: 2026-11-30\n\n")


def test_remember_creates_a_disabled_file_in_the_seed_format(services) -> None:
    res = services.structured.remember("default", "user", "language", "Prefers German.", actor="api",
                                       source="conversation 7")
    assert res.created and res.changed
    snap = services.store.read("default", "structured/user.md")
    assert frontmatter.parse(snap.text).meta == {"enabled": False}
    assert snap.body == "## language\nPrefers German.\n> Source: conversation 7 | Updated: 2026-11-30\n\n"


def test_keys_match_whole_never_as_a_prefix(services) -> None:
    s = services.structured
    s.remember("default", "user", "language", "Prefers German.", actor="api")
    s.remember("default", "user", "lang", "short key", actor="api")  # a new entry, not an overwrite
    entries = s.entries("default", "user")
    assert [(e.key, e.text) for e in entries] == [("language", "Prefers German."), ("lang", "short key")]
    assert [i.entry.text for i in s.recall("default", "user", "LANGUAGE")] == ["Prefers German."]
    s.forget("default", "user", "lang", actor="api")
    assert [e.key for e in s.entries("default", "user")] == ["language"]
    with pytest.raises(NotFoundError, match="'lang'"):
        s.recall("default", "user", "lang")
    with pytest.raises(NotFoundError):
        s.forget("default", "user", "lang", actor="api")
    assert [e.key for e in s.entries("default", "user")] == ["language"]


def test_remember_replaces_in_place_without_touching_hand_written_entries(services, clock) -> None:
    services.store.write("default", "structured/user.md", HAND_WRITTEN, expected_sha="", actor="person")
    clock.advance(timedelta(days=1))
    res = services.structured.remember("default", "user", "TIMEZONE", "Asia/Tokyo", actor="extraction")
    assert not res.created and res.changed
    text = services.store.read("default", "structured/user.md").text
    assert text.startswith(HAND_WRITTEN[: HAND_WRITTEN.index("## timezone")])
    assert text.endswith("## timezone\nAsia/Tokyo\n> Source: extraction | Updated: 2026-12-01\n\n")
    again = services.structured.remember("default", "user", "timezone", "Asia/Tokyo", actor="extraction")
    assert not again.changed


def test_pinned_entries_are_only_changed_by_a_person(services) -> None:
    services.store.write("default", "structured/user.md", HAND_WRITTEN, expected_sha="", actor="person")
    s = services.structured
    with pytest.raises(ConflictError, match="pinned"):
        s.remember("default", "user", "coffee order", "Espresso", actor="extraction")
    with pytest.raises(ConflictError, match="pinned"):
        s.forget("default", "user", "coffee order", actor="api")
    s.remember("default", "user", "coffee order", "Espresso", actor="person")
    entry = s.recall("default", "user", "coffee order")[0].entry
    assert entry.text == "Espresso" and entry.pinned


def test_invalid_input_is_named(services) -> None:
    s = services.structured
    with pytest.raises(InvalidInputError, match="unknown structured entry type 'misc'"):
        s.remember("default", "misc", "k", "v", actor="api")
    with pytest.raises(InvalidInputError, match="no text"):
        s.remember("default", "user", "k", "  ", actor="api")
    with pytest.raises(InvalidInputError, match="new entry"):
        s.remember("default", "user", "k", "line\n## injected", actor="api")


def _entries(n: int, *, start_day: int = 1, text: str = "fact number {i} about the person") -> str:
    parts = ["---\nenabled: false\n---\n"]
    for i in range(n):
        parts.append(f"## k{i:02d}\n{text.format(i=i)}\n> Source: test | Updated: 2026-01-{start_day + i % 28:02d}\n\n")
    return "".join(parts)


def test_always_on_block_admits_the_newest_renders_in_file_order_and_says_what_is_left_out(services) -> None:
    store = services.store
    # 50 user entries: k00..k27 dated Jan 1..28, then k28..k49 dated Jan 1..22 again.
    store.write("default", "structured/user.md", _entries(50), expected_sha="", actor="person")
    store.write("default", "structured/feedback.md", _entries(3, start_day=20), expected_sha="", actor="person")
    before = {rel: store.read("default", rel).sha for rel in ("structured/user.md", "structured/feedback.md")}
    s = StructuredMemory(store, services.clock, max_chars=100_000, max_entries_per_type=40)
    block = s.always_on_block("default")
    assert block.included == {"user": 40, "feedback": 3} and block.omitted == {"user": 10, "feedback": 0}
    user_lines = [ln for ln in block.text.splitlines() if ln.startswith("- k")][:40]
    keys = [ln.split(":")[0][2:] for ln in user_lines]
    assert keys == sorted(keys)  # file order, not date order
    # The 10 oldest (Jan 1..5, each date twice) are the ones left out.
    left_out = {f"k{i:02d}" for i in range(50)} - set(keys)
    assert left_out == {"k00", "k01", "k02", "k03", "k04", "k28", "k29", "k30", "k31", "k32"}
    assert block.text.endswith("(10 more structured entries not shown: over the 100000-char / 40-per-type "
                               "budget; recall them by key)")
    assert {rel: store.read("default", rel).sha for rel in before} == before  # disk untouched


def test_always_on_block_stays_within_its_char_budget(services) -> None:
    services.store.write("default", "structured/user.md", _entries(30), expected_sha="", actor="person")
    s = StructuredMemory(services.store, services.clock, max_chars=600, max_entries_per_type=40)
    block = s.always_on_block("default")
    assert len(block.text) <= 600
    assert 0 < block.included["user"] < 30
    assert f"({block.omitted['user']} more structured entries not shown" in block.text


def test_project_and_reference_entries_join_only_when_relevant(services) -> None:
    s = StructuredMemory(services.store, services.clock)  # no search injected: token overlap
    s.remember("default", "project", "garden", "Planting tomatoes on the balcony this spring", actor="api")
    s.remember("default", "reference", "tax", "Tax office letters go in the blue folder", actor="api")
    s.remember("default", "project", "跑步计划", "用户喜欢周日早上跑步", actor="api")
    assert [i.entry.key for i in s.relevant("default", "how are my tomatoes doing?")] == ["garden"]
    assert [i.entry.key for i in s.relevant("default", "周日早上做什么")] == ["跑步计划"]
    assert s.relevant("default", "what is the weather") == []
    assert "garden" not in s.always_on_block("default").text


def test_relevance_through_the_search_index(services) -> None:
    s = StructuredMemory(services.store, services.clock, relevance=search_relevance(lambda: services.search))
    s.remember("default", "project", "garden", "Planting tomatoes on the balcony this spring", actor="api")
    s.remember("default", "reference", "tax", "Tax office letters go in the blue folder", actor="api")
    hits = s.relevant("default", "where do the tax letters go?")
    assert [(i.type, i.entry.key) for i in hits] == [("reference", "tax")]
    assert services.search.retrieval_hits("default", since=services.clock.now().replace(year=2000)) == []
