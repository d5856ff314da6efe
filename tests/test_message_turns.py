"""`parse_doc` (index/messages/turns.py) counts and flags each turn as the plain definitions do: the
packed counts are the per-field `Counter`s, capped; the number, name and question flags are the
straightforward regex and slicing versions - on seeded random turns, a hostile long one included."""

from __future__ import annotations

import itertools
import random
import re
from collections import Counter

import pytest

from mateclaw_mem.index.messages.fields import FIELDS
from mateclaw_mem.index.messages.turns import (
    _CAPITAL_RE,
    COUNT_CAP,
    _has_number,
    _proper_names,
    _question_share,
    parse_doc,
    unpack,
)
from mateclaw_mem.index.tokenizer import tokenize

_PLAIN_NUMBER_RE = re.compile(
    r"\d|\b(?:one|two|three|four|five|six|seven|eight|nine|ten|eleven|twelve|fifteen|twenty|thirty"
    r"|forty|fifty|hundred|thousand|million|dozen|couple|several|once|twice)\b", re.IGNORECASE)
NUMBER_WORDS = _PLAIN_NUMBER_RE.pattern.split("(?:")[1].split(")")[0].split("|")
ALPHABET = "onetwhrfuivsxglcdmNETWHRFUIVSXGLCDMſK 5٣_'é-.!?:;\"(\n\t\u2013\u2014"


def _plain_names(text: str) -> frozenset[str]:
    spoken = re.sub(r"\[shares image:[^\]]*\]", "", text)
    out: set[str] = set()
    for m in _CAPITAL_RE.finditer(spoken):
        before = spoken[: m.start()].rstrip()
        if not before or before[-1] in ".!?:;\"'(-\u2013\u2014":
            continue
        out.update(tokenize(m.group(0)))
    return frozenset(out)


def _random_text(rng: random.Random) -> str:
    parts = []
    for _ in range(rng.randint(0, 8)):
        r = rng.random()
        if r < 0.3:
            word = rng.choice(NUMBER_WORDS)
            parts.append(word.upper() if rng.random() < 0.3 else word.capitalize() if rng.random() < 0.3 else word)
            parts.append(rng.choice(["", "s", "_", " ", "'s", "3"]))
        elif r < 0.5:
            parts.append(rng.choice(["Matt", "Caroline's", "Paris", "I", "Ann", "Élodie"]))
        elif r < 0.6:
            parts.append("[shares image: a Dog. Named Rex]")
        else:
            parts.append("".join(rng.choice(ALPHABET) for _ in range(rng.randint(0, 10))))
        parts.append(rng.choice([" ", "  ", ". ", "? ", "\n", ""]))
    return "".join(parts)


@pytest.mark.parametrize("seed", range(8))
def test_the_flags_match_their_plain_definitions(seed: int) -> None:
    rng = random.Random(seed)
    for _ in range(2000):
        text = _random_text(rng)
        assert _has_number(text) == bool(_PLAIN_NUMBER_RE.search(text)), text
        spoken = re.sub(r"\[shares image:[^\]]*\]", "", text)
        assert _proper_names(spoken) == _plain_names(text), text
        assert _proper_names(spoken) == _plain_names(text)  # the second time from the name cache
        assert 0.0 <= _question_share(spoken) <= 1.0


def _row(**fields: object) -> dict[str, object]:
    base = {"id": 7, "speaker": "Ann", "is_question": 0, "conversation_id": "c", "role": "user",
            "content": "Ann: we met Matt in May, twice. Fun?", "ts_ms": 1, "body": "", "ctx": "", "nb": "", "dt": ""}
    return {**base, **fields}


def _plain_counts(row: dict[str, object]) -> dict[str, tuple[int, int, int, int]]:
    per_field = [Counter(str(row[f]).split()) for f in FIELDS]
    return {t: tuple(min(c.get(t, 0), COUNT_CAP) for c in per_field)  # type: ignore[misc]
            for t in dict.fromkeys(itertools.chain(*per_field))}


@pytest.mark.parametrize("seed", range(4))
def test_packed_counts_are_the_per_field_counts_in_first_seen_order(seed: int) -> None:
    rng = random.Random(seed)
    words = [f"w{i}" for i in range(30)]
    for _ in range(300):
        row = _row(**{f: " ".join(rng.choice(words) for _ in range(rng.randint(0, 40))) for f in FIELDS})
        doc = parse_doc(row)  # type: ignore[arg-type]
        want = _plain_counts(row)
        assert list(doc.counts) == list(want)  # the order feedback ties break by
        assert doc.counts is not None and {t: unpack(c) for t, c in doc.counts.items()} == want
        assert doc.terms == tuple(want)
        assert doc.body == tuple(t for t, c in want.items() if c[0])
        assert doc.lens == tuple(len(str(row[f]).split()) for f in FIELDS)


def test_a_field_over_the_cap_is_capped_without_carrying_into_the_next() -> None:
    row = _row(body="spam " * (COUNT_CAP + 5) + "ham", ctx="spam", nb="spam " * 3, dt="ham")
    doc = parse_doc(row)  # type: ignore[arg-type]
    assert doc.counts is not None
    assert {t: unpack(c) for t, c in doc.counts.items()} == {"spam": (COUNT_CAP, 1, 3, 0), "ham": (1, 0, 0, 1)}
    assert _plain_counts(row) == {"spam": (COUNT_CAP, 1, 3, 0), "ham": (1, 0, 0, 1)}
    assert doc.has_number and doc.names == frozenset(tokenize("Matt May")) and doc.question_share > 0


def test_a_turns_date_tokens_are_its_utc_dates_at_every_moment_of_the_day() -> None:
    """`docfields.date_tokens` keeps each UTC day's tokens: the same as made from the date each time,
    at a day's first and last millisecond, before 1970 and far ahead."""
    from datetime import UTC, datetime

    from mateclaw_mem.index.messages.docfields import date_tokens
    from mateclaw_mem.index.messages.fields import MONTHS, WEEKDAYS

    def plain(ts_ms: int) -> list[str]:
        d = datetime.fromtimestamp(ts_ms / 1000, tz=UTC)
        return tokenize(f"{d.day} {MONTHS[d.month - 1]} {d.year} {WEEKDAYS[d.weekday()]}")

    rng = random.Random(5)
    for _ in range(3000):
        day = rng.randint(-20_000, 40_000) * 86_400_000
        ts = day + rng.choice((0, 1, 999, 86_399_999, 86_400_000, -1, rng.randint(0, 86_399_999)))
        got = date_tokens(ts)
        assert got == plain(ts), ts
        got.append("x")  # (a caller's list of its own: the kept tokens stay as they were)
        assert date_tokens(ts) == plain(ts)


@pytest.mark.parametrize("seed", range(5))
def test_a_turn_parsed_from_its_token_lists_is_the_turn_parsed_from_its_stored_fields(seed: int) -> None:
    """An Add hands `parse_doc` its new turns' fields as token lists (`docfields.row`), not joined
    and split again: the same Doc as from the space-joined fields `docfields.read` gives, for
    random texts (the tokens hold no space and none is empty)."""
    from dataclasses import astuple

    from mateclaw_mem.index.messages.docfields import row

    rng = random.Random(seed)
    for _ in range(300):
        fields = tuple(tokenize(_random_text(rng)) for _ in range(4))
        content = "Ann: " + _random_text(rng)
        got = row(7, "a", "o", "Ann", rng.random() < 0.3, "c", "user", content, 11, fields)
        joined = {**got, **{f: " ".join(x) for f, x in zip(FIELDS, fields, strict=True)}}
        assert astuple(parse_doc(got)) == astuple(parse_doc(joined))
        assert all(" ".join(x).split() == x for x in fields)
