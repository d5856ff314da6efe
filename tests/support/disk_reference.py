"""The on-disk message index (index/messages/postings.py, disk_view.py) beside the in-memory view
it replaced (tests/support/owner_view.py) over the same stored turns: the reference view is parsed
from the documents exactly as the index used to parse it, and the disk's statistics, features and
links are read back for comparison."""

from __future__ import annotations

import random
from collections import Counter
from dataclasses import dataclass, replace
from typing import Any

import pytest

from mateclaw_mem.index.messages import disk_view as _dv
from mateclaw_mem.index.messages import postings as _postings
from mateclaw_mem.index.messages import view_cache as _view_cache
from mateclaw_mem.index.messages.delta import unpack_segment
from mateclaw_mem.index.messages.disk_view import ByteCache, DiskView, open_view
from mateclaw_mem.index.messages.index import MessageIndex
from mateclaw_mem.index.messages.rank_types import Ranking
from mateclaw_mem.index.messages.turns import parse_doc
from tests.support.owner_view import OwnerView

BASE = Ranking()
# The default ranking and knobs that take other branches of it: what the two views are compared under.
RANKINGS = {
    "default": BASE,
    "requery": replace(BASE, prf_requery=True),
    "last-question": replace(BASE, question_mode="last"),
    "few-candidates": replace(BASE, max_candidates=7),
    "all-candidates": replace(BASE, max_candidates=0),
    # A field weighing 0: a turn holding a word only there scores 0 for it (the saturated values keep a
    # mask of the postings that score, not all of them).
    "unweighted-fields": replace(BASE, weights={"body": 1.0, "ctx": 0.0, "nb": 0.0, "dt": 0.0}),
}


def reference_view(index: MessageIndex, agent: str, owner: str) -> OwnerView:
    """The owner's documents parsed into a fresh in-memory view, in id order (as a first search did)."""
    view = OwnerView()
    with index.lock:
        rows = index._storage.doc_rows(agent, owner, "1", ())
    view.apply([parse_doc(r) for r in rows])
    return view


def disk_view(index: MessageIndex, agent: str, owner: str, cache: ByteCache | None = None) -> DiskView:
    with index.lock:
        got = open_view(index._storage._conn, agent, owner, cache if cache is not None else index.cache)
    assert got is not None
    return got


@dataclass
class DiskState:
    n: int
    len_sum: list[int]
    df: dict[str, int]  # terms with a body df > 0
    postings: dict[str, dict[int, int]]  # term -> {doc id: packed counts}
    lens: dict[int, tuple[int, ...]]
    features: dict[int, tuple[object, ...]]  # doc id -> (qshare, echo, has_time, has_number, names, links)
    speakers: set[str]


def disk_state(index: MessageIndex, agent: str, owner: str) -> DiskState:
    """Everything the tables hold of one owner, by doc id."""
    import numpy as np

    from mateclaw_mem.index.messages.delta import decode
    from mateclaw_mem.index.messages.postings import HAS_NUMBER, HAS_TIME

    conn = index._storage._conn
    with index.lock:
        o = conn.execute("SELECT * FROM powners WHERE agent = ? AND owner = ?", (agent, owner)).fetchone()
        ids: list[int] = []
        lens: list[tuple[int, ...]] = []
        for r in conn.execute("SELECT ids, lens FROM pdocs WHERE okey = ? ORDER BY seg", (o["okey"],)):
            ids += np.frombuffer(r["ids"], dtype=np.int64).tolist()
            lens += [tuple(x) for x in np.frombuffer(r["lens"], dtype=np.uint32).reshape(-1, 4).tolist()]
        postings: dict[str, dict[int, int]] = {}
        df: dict[str, int] = {}
        last_first: dict[str, int] = {}
        for r in conn.execute("SELECT * FROM postings WHERE okey = ? ORDER BY term, first", (o["okey"],)):
            seg_ords, seg_packed = unpack_segment(r["ords"], r["packed"])
            ords = seg_ords.tolist()
            assert ords == sorted(ords) and r["first"] == ords[0], "a segment is keyed by its first ordinal, ascending"
            assert r["first"] > last_first.get(r["term"], -1)
            last_first[r["term"]] = ords[-1]
            got = postings.setdefault(r["term"], {})
            got.update(zip((ids[k] for k in ords), seg_packed.tolist(), strict=True))
            df[r["term"]] = r["df"]
        for r in conn.execute("SELECT first_new, terms, counts, ords, packed FROM pdelta WHERE okey = ? ORDER BY id",
                              (o["okey"],)):  # the unmerged Adds, over the segments
            d = decode(*tuple(r))
            for t, k, packed in d.items():
                postings.setdefault(t, {})[ids[k]] = packed
            for t in d.terms:
                df[t] = df.get(t, 0) + d.df_inc(t)
        features = {}
        for r in conn.execute("SELECT p.* FROM pfeat p JOIN docs d ON d.id = p.id WHERE d.agent = ? AND d.owner = ?",
                              (agent, owner)):
            features[r["id"]] = (r["qshare"], r["echo"], bool(r["flags"] & HAS_TIME), bool(r["flags"] & HAS_NUMBER),
                                 frozenset(r["names"].split()), (r["prev"], r["next"], r["tprev"], r["tnext"]))
        speakers = {r[0] for r in conn.execute("SELECT speaker FROM pspeakers WHERE okey = ?", (o["okey"],))}
    return DiskState(o["n"], [o["l0"], o["l1"], o["l2"], o["l3"]], {t: c for t, c in df.items() if c},
                     postings, dict(zip(ids, lens, strict=True)), features, speakers)


def reference_state(view: OwnerView) -> DiskState:
    """`disk_state`'s figures computed by the in-memory view."""
    cols = view.cols

    def link(q: int) -> int | None:
        return int(view.ids[q]) if q >= 0 else None

    features = {}
    for i, d in view.by_id.items():
        p = view.pos[i]
        features[i] = (d.question_share, d.echo, d.has_time, d.has_number, d.names,
                       tuple(link(int(q)) for q in cols.links[p]))
    return DiskState(view.n, list(view.len_sum), {t: c for t, c in view.df.items() if c},
                     {t: {view.ids[p]: c for p, c in ds.items()} for t, ds in view.postings.items()},
                     {i: tuple(d.lens) for i, d in view.by_id.items()}, features,
                     set(view.speakers))


# -- random conversations -------------------------------------------------------------------------

WORDS = ["pottery", "glazes", "kiln", "camping", "mountains", "lake", "sunset", "painting", "guitar", "violin", "turtle", "dog", "cats", "adoption", "agency", "studio", "dance", "store", "clothing", "recipe", "soup", "garden", "roses", "marathon", "running", "book", "novel", "museum", "trip", "beach", "concert", "piano"]
TIME_WORDS = ("yesterday", "last week", "in May", "on Monday", "next year")
NUMBERS = ("3", "two", "twelve", "2019", "a dozen")
NAMES = ("Matt", "Paris", "Tokyo", "Lisa")
SPEAKERS = ("Ann", "Bo", "Cy")


def random_line(rng: random.Random) -> str:
    words = rng.sample(WORDS, rng.randint(1, 7)) + ["the", "and", "my"][: rng.randint(0, 3)]
    rng.shuffle(words)
    if rng.random() < 0.25:
        words.append(rng.choice(TIME_WORDS))
    if rng.random() < 0.25:
        words.insert(rng.randint(0, len(words)), rng.choice(NUMBERS))
    if rng.random() < 0.25:
        words.insert(1 if len(words) > 1 else 0, f"with {rng.choice(NAMES)}")
    text = " ".join(words)
    text = text[:1].upper() + text[1:]
    if rng.random() < 0.3:
        text += "?"
    elif rng.random() < 0.3:
        text += ". How about " + rng.choice(WORDS) + "?"
    else:
        text += "."
    if rng.random() < 0.1:
        text += f" [shares image: a {rng.choice(WORDS)}]"
    speaker = rng.choice((*SPEAKERS, None))
    return f"{speaker}: {text}" if speaker else text


def random_query(rng: random.Random) -> tuple[str, list[str]]:
    words = rng.sample(WORDS, rng.randint(1, 4))
    lead = rng.choice(("", "When did ", "How many ", "Who ", "Where ", "What did "))
    if rng.random() < 0.4:
        words.insert(0, rng.choice(SPEAKERS) + rng.choice(("", "'s")))
    if rng.random() < 0.15:
        words.append(rng.choice(SPEAKERS))
    options = [" ".join(rng.sample(WORDS, 2)) for _ in range(rng.choice((0, 0, 0, 2)))]
    return lead + " ".join(words) + "?", options


def shrunk_layout(monkeypatch: pytest.MonkeyPatch, seg_docs: int, block_segs: int, fields_from: int) -> Counter[str]:
    """The layout set to these sizes in every module that reads it; the large-owner paths counted."""
    for m in (_postings, _dv, _view_cache):
        monkeypatch.setattr(m, "SEG_DOCS", seg_docs)
    for m in (_dv, _view_cache):
        monkeypatch.setattr(m, "BLOCK_SEGS", block_segs)
        monkeypatch.setattr(m, "BLOCK", seg_docs * block_segs)
    monkeypatch.setattr(_dv, "_LOOK_AHEAD_DOCS", 2 * seg_docs)
    monkeypatch.setattr(_dv, "_FIELDS_FROM", fields_from)
    seen: Counter[str] = Counter()
    ahead = [False]
    block, want_lengths, by_field = _dv.DiskView._block, _dv.DiskView.want_lengths, _dv.saturate_fields

    def counted_block(self: _dv.DiskView, b: int, local: Any) -> Any:
        seen["a block past the first"] += b > 0
        seen["read ahead"] += ahead[0]
        return block(self, b, local)

    def counted_want_lengths(self: _dv.DiskView, terms: Any, key: Any) -> None:
        ahead[0] = True
        try:
            want_lengths(self, terms, key)
        finally:
            ahead[0] = False

    def counted_by_field(*args: Any) -> Any:
        seen["field by field"] += 1
        return by_field(*args)

    monkeypatch.setattr(_dv.DiskView, "_block", counted_block)
    monkeypatch.setattr(_dv.DiskView, "want_lengths", counted_want_lengths)
    monkeypatch.setattr(_dv, "saturate_fields", counted_by_field)
    return seen
