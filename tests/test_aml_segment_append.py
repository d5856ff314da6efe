"""A merge appends to each term's last stored segment as bytes (`delta.extend`) instead of decoding
it and packing it whole: the blob it writes must be exactly `pack_segment` of the whole segment -
on random segments and appends, with gaps and counts that fit the stored widths and ones that need
wider, entries of grown turns (replacing a new entry's counts or going in among them), and
appends that reach the `SEG_POSTINGS` limit (left to the segment-by-segment path). Then, through
the index itself, a long history with merges along the way leaves the very same tables whether
the merges splice or decode (`PostingWriter.splice`)."""

from __future__ import annotations

import random
from pathlib import Path

import numpy as np
import pytest

from mateclaw_mem.conversations.log import ConversationLog, NewMessage
from mateclaw_mem.index.messages import delta, postings
from mateclaw_mem.index.messages.delta import extend, pack_segment, unpack_segment
from mateclaw_mem.index.messages.index import MessageIndex
from mateclaw_mem.index.messages.storage import _Merger

LIMIT = 512
# Largest gap / count of a draw: within the narrowest width, or one of the wider ones.
GAPS = (3, 255, 256, 65_535, 65_536, 1 << 20)
COUNTS = (1, 3, 4, 15, 16, 255, 256, 0xFFFF)


def _entries(rng: random.Random, start: int, k: int, gap: int, count: int) -> tuple[list[int], list[int]]:
    """`k` ascending ordinals from `start` on (gaps up to `gap`) and packed counts (fields up to `count`)."""
    ords, at = [], start
    for _ in range(k):
        ords.append(at)
        at += rng.randint(1, gap)
    packs = []
    for _ in range(k):
        fields = [rng.choice((0, 0, 1, rng.randint(0, count))) for _ in range(4)]
        if not any(fields):
            fields[rng.randrange(4)] = 1
        packs.append(fields[0] | fields[1] << 16 | fields[2] << 32 | fields[3] << 48)
    return ords, packs


def _writer(stored: tuple[int, int, list[int], list[int]] | None, new: tuple[list[int], list[int]],
            old: list[tuple[int, int]]) -> list[tuple[bool, int, int, list[int], list[int]]]:
    """What the segment-by-segment writer (`_append_many`, then `_upsert` of each other entry in the
    order written) leaves of one term: (stored row, first, df, ordinals, counts) of each segment it
    rewrote. `stored`: the last stored segment (first, df, ordinals, counts)."""
    segs: list[list] = []  # [stored, df, ordinals, counts, dirty]
    if stored is not None:
        segs.append([True, stored[1], list(stored[2]), list(stored[3]), False])
    ords, packs = new
    i = 0
    while i < len(ords):
        if not segs or len(segs[-1][2]) >= LIMIT:
            segs.append([False, segs[-1][1] if segs else 0, [], [], False])
        room = LIMIT - len(segs[-1][2])
        segs[-1][2] += ords[i : i + room]
        segs[-1][3] += packs[i : i + room]
        segs[-1][4] = True
        i += room
    if ords:
        segs[-1][1] += sum(1 for p in packs if p & 0xFFFF)
    for o, p in old:
        below = [g for g in segs if g[2][0] <= o]
        if below:
            g = max(below, key=lambda g: g[2][0])
        elif segs:
            g = min(segs, key=lambda g: g[2][0])
        else:
            g = [False, 0, [], [], False]
            segs.append(g)
        if o in g[2]:
            g[3][g[2].index(o)] = p
        else:
            k = sum(1 for x in g[2] if x < o)
            g[2].insert(k, o)
            g[3].insert(k, p)
        g[4] = True
    return [(g[0], g[2][0], g[1], g[2], g[3]) for g in segs if g[4]]


def _arrays(tids: list[int], ords: list[int], packs: list[int]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    return np.array(tids, dtype=np.int64), np.array(ords, dtype=np.uint32), np.array(packs, dtype=np.uint64)


@pytest.mark.parametrize("seed", range(40))
def test_a_spliced_segment_is_the_whole_segment_packed(seed: int) -> None:
    rng = random.Random(seed)
    terms = rng.randint(1, 40)
    tails: list[tuple[int, int, bytes] | None] = []
    stored: list[tuple[list[int], list[int]] | None] = []
    new_t: list[int] = []
    new_o: list[int] = []
    new_p: list[int] = []
    olds: list[tuple[int, int, int]] = []
    want_new: list[tuple[list[int], list[int]]] = []
    want_old: list[list[tuple[int, int]]] = []
    for t in range(terms):
        if rng.random() < 0.8:
            n = rng.choice((1, 2, rng.randint(1, LIMIT), LIMIT - 1, LIMIT))
            seg = _entries(rng, rng.randint(0, 1000), n, rng.choice(GAPS), rng.choice(COUNTS))
            stored.append(seg)
            tails.append((seg[0][0], rng.randint(0, 300), pack_segment(np.array(seg[0], dtype=np.uint32),
                                                                        np.array(seg[1], dtype=np.uint64))))
            end = seg[0][-1]
        else:
            stored.append(None)
            tails.append(None)
            end = rng.randint(0, 1000)
        k = rng.choice((0, 1, rng.randint(1, 30), rng.randint(1, 600)))
        add = _entries(rng, end + rng.randint(1, rng.choice(GAPS)), k, rng.choice(GAPS[:3] if rng.random() < 0.7
                                                                                    else GAPS),
                       rng.choice(COUNTS[:3] if rng.random() < 0.7 else COUNTS))
        new_t += [t] * k
        new_o += add[0]
        new_p += add[1]
        want_new.append(add)
        # Grown turns: some at new entries' ordinals, some between them, a few at or below the end.
        mine: list[tuple[int, int]] = []
        for _ in range(rng.choice((0, 0, 1, 3))):
            near = end + rng.randint(-3 if stored[-1] else 1, 40)
            o = rng.choice(add[0]) if add[0] and rng.random() < 0.6 else near
            mine.append((max(o, 0), rng.randint(1, 1 << 20)))
        want_old.append(mine)
        olds += [(t, o, p) for o, p in mine]
    rng.shuffle(olds)  # (written in any order across terms; per term the order is kept below)
    per_term = {t: [(o, p) for tt, o, p in olds if tt == t] for t in range(terms)}
    got, slow = extend(tails, _arrays(new_t, new_o, new_p), _arrays(*map(list, zip(*olds, strict=True)))
                       if olds else _arrays([], [], []), LIMIT, np.zeros(terms, dtype=bool))
    done: dict[int, list[tuple[bool, int, int, bytes]]] = {}
    for t, kept, first, df, blob in got:
        done.setdefault(t, []).append((kept, first, df, blob))
    spliced = 0
    for t in range(terms):
        n = len(stored[t][0]) if stored[t] else 0
        k = len(want_new[t][0])
        below = stored[t] is not None and any(o < stored[t][0][0] for o, _ in per_term[t])  # type: ignore[index]
        overflow = (stored[t] is not None and k > 0 and n + k > LIMIT) or (stored[t] is None and k > LIMIT)
        assert bool(slow[t]) == (below or (overflow and bool(per_term[t]))), (t, n, k, below)
        if slow[t]:
            assert t not in done
            continue
        tail = tails[t]
        want = _writer(None if tail is None else (tail[0], tail[1], *stored[t]),  # type: ignore[misc]
                       want_new[t], per_term[t])
        assert [(kept, first, df, blob) for kept, first, df, blob in done.get(t, [])] == [
            (kept, first, df, pack_segment(np.array(o, dtype=np.uint32), np.array(p, dtype=np.uint64)))
            for kept, first, df, o, p in want], t
        for (_, _, _, blob), (_, _, _, o, p) in zip(done.get(t, []), want, strict=True):
            back = unpack_segment(blob, b"")
            assert back[0].tolist() == o and back[1].tolist() == p
        spliced += bool(want)
    assert spliced or terms < 3


def test_the_splice_keeps_the_stored_widths_only_while_they_hold() -> None:
    base = pack_segment(np.array([10, 11, 12], dtype=np.uint32), np.array([1, 2, 3], dtype=np.uint64))
    assert base[0] == 0  # one-byte gaps, two-bit counts
    for ords, packs, code in (([13, 14], [3, 1], 0), ([300], [1], 1), ([14], [4], 1 << 2),
                              ([70_000], [1 << 48 | 300], 2 | 3 << 2)):
        got, slow = extend([(10, 0, base)], _arrays([0] * len(ords), ords, packs), _arrays([], [], []), LIMIT,
                           np.zeros(1, dtype=bool))
        assert not slow[0]
        want = pack_segment(np.array([10, 11, 12, *ords], dtype=np.uint32),
                            np.array([1, 2, 3, *packs], dtype=np.uint64))
        assert got == [(0, True, 10, sum(1 for p in packs if p & 0xFFFF), want)]
        assert want[0] == code


def _lines(rng: random.Random, turn: int) -> str:
    """A turn of a long history: common words, rare ones (gaps past a byte), now and then a word said
    many times (counts past 2, 4 and 8 bits)."""
    words = [f"c{rng.randint(0, 30)}" for _ in range(rng.randint(1, 8))]
    if rng.random() < 0.2:
        words.append(f"r{rng.randint(0, 40)}")
    if turn % 97 == 0:
        words.append(f"once{turn}")
    if rng.random() < 0.05:
        words += [f"c{rng.randint(0, 30)}"] * rng.choice((4, 17, 300))
    return " ".join(words)


def _history(tmp_path: Path, seed: int, splice: bool, monkeypatch: pytest.MonkeyPatch) -> dict[str, list[tuple]]:
    monkeypatch.setattr(postings.PostingWriter, "splice", splice)
    rng = random.Random(seed)
    log = ConversationLog(tmp_path / "log.db")
    index = MessageIndex(tmp_path / "messages.db")
    st = index._storage
    turn = 0
    for _ in range(140):
        owner = rng.choice(("u1", "u2"))
        conv = f"{owner}-c{rng.randint(0, 2)}"
        k = rng.randint(1, 9)
        log.append("aml", conv, [NewMessage("user", _lines(rng, turn + i), 1683554160000 + turn + i)
                                 for i in range(k)], owner=owner, now_ms=1683554160000)
        turn += k
        index.sync(log)
        if rng.random() < 0.3:  # the merger's step, now and then (an Add merges past DELTA_HARD itself)
            st.merger.run_now()
    st.merger.run_now()
    with index.lock:
        tables = {t: [tuple(r) for r in st._conn.execute(f"SELECT * FROM {t} ORDER BY 1, 2, 3")]
                  for t in ("postings", "pdocs", "powners", "pdelta", "pfeat")}
    index.close()
    log.close()
    return tables


@pytest.mark.parametrize(("seed", "seg"), [(1, 4), (2, 16), (3, 64), (4, 512)])
def test_merges_that_splice_leave_the_tables_the_decoding_merges_leave(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, seed: int, seg: int) -> None:
    monkeypatch.setattr(postings, "SEG_POSTINGS", seg)
    monkeypatch.setattr(postings, "DELTA_MAX", 60)
    monkeypatch.setattr(postings, "DELTA_HARD", 3)
    monkeypatch.setattr(_Merger, "QUIET", 3600.0)  # merges only where the test (or an Add) runs them
    monkeypatch.setattr(_Merger, "PATIENCE", 3600.0)
    spliced: list[int] = []
    real = delta.extend

    def counting(*a: object) -> object:
        got = real(*a)  # type: ignore[arg-type]
        spliced.append(len(got[0]))
        return got

    monkeypatch.setattr(postings, "extend", counting)
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    want = _history(tmp_path / "a", seed, False, monkeypatch)
    assert not spliced
    got = _history(tmp_path / "b", seed, True, monkeypatch)
    assert sum(spliced) > 100  # most terms of most merges took the byte path
    assert got == want
    assert len(want["postings"]) > 50


@pytest.mark.parametrize("seed", range(20))
def test_an_adds_row_is_sorted_by_term_then_ordinal_however_its_documents_came(seed: int) -> None:
    """`encode_docs` (an Add's documents, each ordinal's postings a dict) writes the row `encode` of the
    (term, ordinal) entries writes, which is those entries sorted: terms in str order (with non-ASCII
    ones), ordinals ascending within a term, a later document at the same ordinal replacing the
    counts of the terms it repeats."""
    rng = random.Random(seed)
    words = ["a", "b", "ab", "b\u00e9", "\u00e9", "z", "\u4e2d", "a1", "10", "9"]
    docs = [(rng.randint(0, 12), {rng.choice(words): rng.randint(0, (1 << 64) - 1) for _ in range(rng.randint(0, 6))})
            for _ in range(rng.randint(0, 12))]
    entries: dict[tuple[str, int], int] = {}
    for o, c in docs:
        for t, p in c.items():
            entries[(t, o)] = p
    order = sorted(entries)
    names = sorted({t for t, _ in order})
    want = (" ".join(names), np.array([sum(1 for t, _ in order if t == n) for n in names], dtype=np.uint32).tobytes(),
            np.array([o for _, o in order], dtype=np.uint32).tobytes(),
            np.array([entries[k] for k in order], dtype=np.uint64).tobytes())
    assert delta.encode_docs(docs) == delta.encode(entries) == want


@pytest.mark.parametrize("seed", range(4))
def test_a_terms_segments_decoded_together_are_each_decoded_in_turn(seed: int) -> None:
    """`unpack_segments` (a cold search's read of a common word: hundreds of segments at once) gives
    what `unpack_segment` of each gives, concatenated: every gap and count width, mixed within a term,
    segments of one entry, ordinals near the top of uint32."""
    rng = random.Random(seed)
    for _ in range(300):
        at = rng.choice([0, rng.randint(0, 1 << 20), (1 << 32) - 250_000_000])  # (12 x 256 x 70,000 below: < 2^32)
        blobs, want_o, want_p = [], [], []
        for _ in range(rng.randint(1, 12)):
            n = rng.choice([1, 2, 3, rng.randint(1, 256)])
            top_gap = rng.choice([3, 300, 70_000])
            o = np.cumsum(np.array([rng.randint(1, top_gap) for _ in range(n)], dtype=np.int64)) + at
            at = int(o[-1])
            top = rng.choice([3, 15, 255, 65_535])
            c = np.array([[rng.randint(0, top) for _ in range(4)] for _ in range(n)], dtype=np.uint64)
            p = c[:, 0] | c[:, 1] << np.uint64(16) | c[:, 2] << np.uint64(32) | c[:, 3] << np.uint64(48)
            blobs.append(pack_segment(o.astype(np.uint32), p))
            want_o.append(o)
            want_p.append(p)
        got_o, got_p = delta.unpack_segments(blobs)
        each = [unpack_segment(b, b"") for b in blobs]
        assert got_o.dtype == np.uint32 and got_p.dtype == np.uint64
        assert got_o.tolist() == np.concatenate([e[0] for e in each]).tolist() == np.concatenate(want_o).tolist()
        assert got_p.tolist() == np.concatenate([e[1] for e in each]).tolist() == np.concatenate(want_p).tolist()


def test_a_merge_asks_its_cache_for_room_for_what_it_folds(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Before a merge holds its rows beside the search cache, the cache is told how much (`make_room`: the
    daemon's RSS budget shrinks it first where the two would pass the bound, runtime/malloc.py)."""
    monkeypatch.setattr(postings, "DELTA_MAX", 60)
    monkeypatch.setattr(_Merger, "QUIET", 3600.0)
    monkeypatch.setattr(_Merger, "PATIENCE", 3600.0)
    log = ConversationLog(tmp_path / "log.db")
    index = MessageIndex(tmp_path / "messages.db")
    asked: list[int] = []
    index.cache.room = asked.append
    rng = random.Random(5)
    for turn in range(0, 400, 8):
        log.append("aml", "u1-c0", [NewMessage("user", _lines(rng, turn + i), 1683554160000 + turn + i)
                                    for i in range(8)], owner="u1", now_ms=1683554160000)
        index.sync(log)
    with index.lock:
        pending = index._storage._conn.execute("SELECT pending FROM powners").fetchone()[0]
    assert pending > 60 and not asked
    index._storage.merger.run_now()
    assert asked == [pending * postings.MERGE_BYTES]
    with index.lock:
        assert index._storage._conn.execute("SELECT pending FROM powners").fetchone()[0] == 0
    index.close()
    log.close()
