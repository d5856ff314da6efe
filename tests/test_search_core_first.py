"""An equal match ranks core files above the daily ledger, as the seed promises and `search.file-weights`
says (issue 38.4): today's note outranked MEMORY.md, every note of the last three weeks outranked
AGENTS.md, and the same phrase inside a long AGENTS.md section scored a third of a one-line note's.
Recency still orders the notes among themselves. Real files, the real index."""

from __future__ import annotations

from mateclaw_mem.runtime.services import Services

PHRASE = "the quarterly board review moved to Thursday"
# Today is 2026-11-30 (tests/conftest.py's clock).
TODAY, EARLIER, OLD = "memory/2026-11-30.md", "memory/2026-11-10.md", "memory/2026-10-01.md"


def write(svc: Services, rel: str, text: str) -> None:
    svc.store.write("default", rel, text, expected_sha=None, actor="person")


def add_section(svc: Services, rel: str, title: str, line: str) -> None:
    snap = svc.store.read("default", rel)
    svc.store.write("default", rel, snap.text + f"\n## {title}\n\n- {line}\n", expected_sha=snap.sha, actor="person")


def ranked(svc: Services, query: str) -> list[str]:
    return [h.file for h in svc.search.search(query, scope="files").hits]


def test_the_same_section_ranks_by_file_weight_and_recency_only_among_notes(services: Services) -> None:
    for rel in ("MEMORY.md", "AGENTS.md"):
        add_section(services, rel, "Board", PHRASE)
    for rel in (TODAY, EARLIER, OLD):
        write(services, rel, f"# {rel[7:17]}\n\n## Board\n\n- {PHRASE}\n")
    assert ranked(services, PHRASE) == ["MEMORY.md", "AGENTS.md", TODAY, EARLIER, OLD]
    assert ranked(services, "board review") == ["MEMORY.md", "AGENTS.md", TODAY, EARLIER, OLD]


def test_a_phrase_inside_a_long_core_section_still_ranks_above_a_short_note(services: Services) -> None:
    # The seeded AGENTS.md's first section is long; the note is one line under a title that does not match.
    snap = services.store.read("default", "AGENTS.md")
    first = "Your memory is Markdown files a person can read and edit; their edit is the truth."
    assert first in snap.text
    services.store.write("default", "AGENTS.md", snap.text.replace(first, f"{first} Note: {PHRASE}."),
                         expected_sha=snap.sha, actor="person")
    write(services, TODAY, f"# 2026-11-30\n\n## 10:00 Chat\n\n- {PHRASE}\n")
    assert ranked(services, PHRASE)[:2] == ["AGENTS.md", TODAY]


def test_a_verbatim_phrase_in_a_long_section_beats_the_same_words_apart_in_a_short_one(services: Services) -> None:
    # Normalising a verbatim match as the shortest chunk must never sink it below scattered words.
    filler = " ".join(f"item{i}" for i in range(120))
    write(services, "notes/long.md", f"# Long\n\n## Minutes\n\n{filler} {PHRASE}. {filler}\n")
    write(services, "notes/short.md", "# Short\n\n## Minutes\n\nThursday: review moved; quarterly board.\n")
    assert ranked(services, PHRASE)[:2] == ["notes/long.md", "notes/short.md"]
