"""The everyday category lexicon: categories reach their members (and back), stemmed like the index."""

from __future__ import annotations

from mateclaw_mem.index.lexicon import related
from mateclaw_mem.index.tokenizer import tokenize


def _rel(text: str, **kw: float) -> dict[str, dict[str, float]]:
    return related(tokenize(text), **kw)


def test_a_category_word_brings_its_members_in_their_stemmed_form() -> None:
    pets = _rel("pets", down=0.3, up=0.0)[tokenize("pets")[0]]
    for member in ("turtles", "dog", "kitten", "hamster"):
        assert pets[tokenize(member)[0]] == 0.3
    cities = _rel("cities", down=1.0, up=0.0)[tokenize("cities")[0]]
    assert tokenize("Chicago")[0] in cities and tokenize("Tokyo")[0] in cities
    assert tokenize("violin")[0] in _rel("instruments", up=0.0)[tokenize("instruments")[0]]
    assert tokenize("tennis")[0] in _rel("sports", up=0.0)[tokenize("sports")[0]]
    # Irregular plurals go through the tokenizer too: "children" is "child".
    assert tokenize("son")[0] in _rel("children", up=0.0)[tokenize("children")[0]]


def test_a_member_brings_its_categories_only_when_asked() -> None:
    violin = tokenize("violin")[0]
    assert violin not in _rel("violin", down=1.0, up=0.0)
    assert _rel("violin", down=0.0, up=0.2)[violin][tokenize("instrument")[0]] == 0.2


def test_nothing_for_unrelated_words_and_never_the_query_words_themselves() -> None:
    assert _rel("quarterly spreadsheet") == {}
    got = _rel("pets dog")
    assert all(t not in group for group in got.values() for t in tokenize("pets dog"))
    # Generic words of multi-word names ("new york", "united states") are not expansions.
    everything = set().union(*(g.keys() for g in _rel("cities countries").values()))
    assert not {"new", "united", "south", "san"} & everything
