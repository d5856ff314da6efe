"""What ranking a view's turns is made of: the view it reads, its knobs, a query as analysed.

Their own module because the ranking's steps in numpy (candidates.py, scoring.py) read these while
ranking.py calls those steps: with the types in ranking.py the two sides imported each other.
`ranking` still exports them, the name callers know.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from mateclaw_mem.index.messages.bm25f import SatKey
from mateclaw_mem.index.messages.fields import FIELDS


class View(Protocol):
    """What the ranking reads of an owner's turns: the on-disk index (disk_view.DiskView, one per
    search) or the in-memory view it replaced (tests/support/owner_view.OwnerView, the reference).
    Positions index `cols` and `ids`; `load` and `prepare` read what the next step needs."""

    speakers: dict[str, frozenset[str]]
    df: Any  # term -> body document frequency (`get`)
    cols: Any  # columns.Columns over positions
    by_id: Any  # turn id -> its `content`, `names`, `body`, `prev`, `next`, ...

    @property
    def ids(self) -> Any: ...
    def idf(self, term: str) -> float: ...
    def load(self, terms: Iterable[str]) -> None: ...
    def prepare(self, pos: Any) -> None: ...
    def sat_arrays(self, term: str, key: SatKey) -> tuple[Any, Any]: ...
    def sat_among(self, term: str, key: SatKey, pos: list[int]) -> tuple[Any, Any] | None: ...
    # `sat_among` of each term (the on-disk view reads and scores them together); a term left out
    # or None: read its `sat_arrays`.
    def sat_among_all(self, terms: Iterable[str], key: SatKey, pos: Any) -> Mapping[str, tuple[Any, Any] | None]: ...
    # These turns' rows, or their bodies and their terms' frequencies, are read next: read them at once.
    def want_turns(self, ids: Iterable[int]) -> None: ...
    def want_bodies(self, ids: Iterable[int]) -> None: ...


@dataclass(frozen=True)
class Ranking:
    """Ranking knobs. Defaults were chosen on LoCoMo dev as whole features, not per question, and
    kept only when they helped on both halves of a conversation split (tune conv-26/30/41, confirm
    conv-42/43); `scripts/bench/aml_inprocess.py --set name=value` measures a change in seconds."""

    k1: float = 1.2
    # Per-field length normalisation. Short chat turns: a 6-word "Thanks, that's sweet!" must not
    # outrank an informative 40-word turn just for being short, so b is well below the usual 0.75.
    # (body 0.3 before the echo penalty took over part of that job; 0.35-0.5 is now a plateau.)
    b: dict[str, float] = field(default_factory=lambda: {"body": 0.4, "ctx": 0.3, "nb": 0.3, "dt": 0.0})
    # ctx (the question this turn answers) counts as much as the turn itself; neighbours only a
    # little (they add recall but blur which turn of an exchange is the answer).
    weights: dict[str, float] = field(default_factory=lambda: {"body": 1.0, "ctx": 1.0, "nb": 0.1, "dt": 0.5})
    question_penalty: float = 0.6  # a turn that only asks rarely holds the answer
    # Down-weighting by `Doc.echo` (score x (1 - echo_penalty x echo)). LoCoMo dev: Hit@1 +4/+2
    # and MRR up on both halves, Hit@10 -2 on the tune half and +6 on the confirm half.
    echo_penalty: float = 0.4
    # "share": the penalty scales with how much of the turn is asking ("Oscar, my guinea pig. How
    # are yours?" is mostly an answer); "last": all or nothing on whether the turn ends with '?'.
    question_mode: str = "share"
    speaker_boost: float = 1.2  # the question names who said it
    # With two speakers named, only those named as subjects (not as "X's") get the speaker boost.
    possessive_rule: bool = True
    drop_speaker_names: bool = True  # speaker names are not search terms (see `_rank`)
    when_boost: float = 1.5  # a "when"/"how long" question and a turn that mentions time
    # Answer types: "how many" wants a number, "who"/"where" a name (other than the speakers').
    count_boost: float = 1.2
    name_boost: float = 1.2
    option_weight: float = 0.3  # multiple-choice texts: hints, not the question
    session_weight: float = 0.3  # boost for turns of the sessions that match best overall
    neighbour_weight: float = 0.3  # share of the best neighbouring turn's score a turn inherits
    # Share a turn inherits from the same speaker's turn two steps away - the speaker's own thread
    # across the other's reaction ("I opened my studio!" / "How do you feel?" / "Excited!"). Such a
    # turn never overtakes the one it inherits from. LoCoMo dev: Hit@10 +8 on the tune half, +1 on
    # the confirm half, MRR up on both.
    thread_weight: float = 0.4
    prf_docs: int = 5  # pseudo-relevance feedback: expand from the top N turns...
    prf_terms: int = 10  # ...with this many of their strongest terms...
    prf_weight: float = 0.15  # ...each weighted this much relative to a query term
    prf_requery: bool = False  # expansion terms also fetch new candidates (not only reorder)
    # First slot: a second feedback pass, each top turn's terms weighted by its share of the top
    # turns' scores and each term by `first_prf_weight` x its gain relative to the strongest one,
    # chooses only the turn in position 1 (the rest keep their order). LoCoMo dev: Hit@1 and MRR
    # up on both halves; applied to the whole head the same feedback costs Hit@10. Only a turn
    # already in the head moves. 0 = off.
    first_prf_weight: float = 0.25
    first_prf_docs: int = 5
    first_prf_terms: int = 10
    # Category lexicon (`index.lexicon`): "pets" also matches "turtle" (down), "violin" also
    # matches "instrument" (up). Low weights: a related word is weaker evidence than the word itself.
    lexicon_down: float = 0.1
    lexicon_up: float = 0.0
    # Below the first `tail_start` results the order comes from this ranking with these overrides
    # ({} = one ranking for all). The head is read first and must be precise; the tail is read
    # under a token budget and should recall: wider lexicon expansion both ways, neighbouring turns
    # as text rather than as inherited score, a stronger pull to the named speaker's own turns.
    tail_start: int = 10
    tail_overrides: dict[str, object] = field(default_factory=lambda: {
        "weights": {"body": 1.0, "ctx": 1.0, "nb": 0.3, "dt": 0.5},
        "lexicon_down": 0.3, "lexicon_up": 0.15, "speaker_boost": 1.5,
        "neighbour_weight": 0.0,  # the heavier nb field already carries the neighbours
        "session_weight": 0.0,  # recall reaches into every session, not only the best-matching ones
    })
    # Turns kept after word matching (see `_rank`); 0 = all. LoCoMo dev gives the same figures at
    # 200, 300, 400 and 1,000 (its conversations rarely match more); 30,000 turns of one user take
    # a third of the time at 300 as at 1,000 (scripts/bench/aml_scale.py).
    max_candidates: int = 300
    pad_neighbours: int = 30  # when fewer turns match than asked for, add the surroundings of this many...
    pad_distance: int = 2  # ...up to this many turns either side

    def sat_key(self) -> SatKey:
        return self.k1, tuple(self.weights[f] for f in FIELDS), tuple(self.b[f] for f in FIELDS)


@dataclass(frozen=True)
class Boosts:
    """What a query asks of a turn beyond its words (see `Ranking` for each knob)."""

    named: frozenset[str]  # speakers the question is about
    when: bool  # a when/how-long question: turns that mention time
    count: bool  # a how-many question: turns with a number
    known_names: frozenset[str] | None  # a who/where question: names the answer must not merely repeat


@dataclass(frozen=True)
class Query:
    """What `_rank` reads of a query: its weighted terms, their lexicon groups and the boosts."""

    qweights: dict[str, float]
    groups: tuple[dict[str, float], ...]
    boosts: Boosts
