"""What the message ranking reads, kept on disk beside `docs` (messages.db), written in the
same transaction as the documents, so a search reads only its query terms' postings and the
features of its candidates (messages/disk_view.py), never a whole history.

Per owner (`powners`: an integer key, the document count, the four field-length sums, a version
bumped by every write) each document gets an ordinal, 0, 1, ... in the order it was indexed:

- `pdocs`: per segment of `SEG_DOCS` ordinals, the documents' ids (int64) and field lengths (four
  uint32 each) - what a term's saturated BM25F scores divide by.
- `postings`: per (owner, term) segments of at most `SEG_POSTINGS` entries (a table clustered by its
  key, with no rowid; a file made before it keeps its rowid table and unique index, read and written
  the same, until a rebuild: `mateclaw-mem reindex`), ascending ordinals with the four field counts
  packed in one uint64 (`turns.unpack`), stored gap-encoded and as narrow as the segment allows in
  one blob (`delta.pack_segment`; rows an older version wrote, ordinals as uint32 and counts in
  `packed`, read as they are: `delta.unpack_segment`), keyed by their first ordinal. An Add appends
  to the last segment of each term it touches (rewriting a few KB, not the term's history; a merge
  splices the new entries into the stored blob as bytes, `delta.extend`, decoding it only when they
  need wider widths); the last segment's `df` is the term's body document frequency.
- `pfeat`: per document, what the later ranking steps read (question share, echo, a time, a number,
  names) and its links: the turns before and after it in its conversation, and the same speaker's
  turns two steps away (the in-memory view's `Doc.around` / `Doc.thread`).
- `pspeakers`: the owner's speakers (the query's named speakers are matched against them).

Blobs are in this machine's byte order, as numpy and `array` write them. Every value is what
`tests/support/owner_view.OwnerView` computes from the same turns (tests/test_aml_disk_index.py).
"""

from __future__ import annotations

import sqlite3
from array import array
from bisect import bisect_left
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np

from mateclaw_mem.db import owner_column
from mateclaw_mem.index.messages import docfields
from mateclaw_mem.index.messages.delta import (
    DELTA_HARD,
    DELTA_MAX,
    encode_docs,
    extend,
    gather_flat,
    pack_segment,
    unpack_segment,
)
from mateclaw_mem.index.messages.fields import FACT_BASE
from mateclaw_mem.index.messages.turns import Doc, echo_of, parse_doc
from mateclaw_mem.index.messages.worker import give_way

# RSS a merge holds per entry folded, at most about (its rows, the terms' last segments and their new
# blobs, SQLite's dirty pages): at 100k messages of one user, 17 MB for 24k entries at the most.
MERGE_BYTES = 1024
SEG_DOCS = 512  # ordinals per `pdocs` row: 12 KB of ids and lengths, rewritten by an Add
# Entries per `postings` row. The table is clustered by (okey, term, first) with no rowid: its
# unique index repeated every key (~60 B a message at 1,000 owners x 300 turns, a fifth of the
# file). A row of such a table is kept inside its page only up to ~1 KB (SQLite's index-page
# payload limit at 4 KB pages), the rest spilling to an overflow page mostly empty: 512 entries
# (1-2 KB at 100k turns) made messages.db 1.7x larger there; 256 keep nearly every row inside.
# (In the rowid table older files keep, 256 left a third of the pages unused once merges had moved
# the growing last segments to the end of the table, and 512 halved that.)
SEG_POSTINGS = 256
_CHUNK = 500  # ids per `IN (...)` read

# Flags of `pfeat.flags`.
HAS_TIME, HAS_NUMBER = 1, 2


def tables(s: str = "") -> str:
    """The tables; `s` is the suffix of a copy built aside (`MessageStorage.rebuild`)."""
    return f"""
CREATE TABLE IF NOT EXISTS powners{s} (
    okey INTEGER PRIMARY KEY, agent TEXT NOT NULL, owner TEXT NOT NULL,
    n INTEGER NOT NULL, l0 INTEGER NOT NULL, l1 INTEGER NOT NULL, l2 INTEGER NOT NULL, l3 INTEGER NOT NULL,
    version INTEGER NOT NULL, pending INTEGER NOT NULL DEFAULT 0, UNIQUE (agent, owner));
CREATE TABLE IF NOT EXISTS pspeakers{s} (okey INTEGER NOT NULL, speaker TEXT NOT NULL,
    PRIMARY KEY (okey, speaker)) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS pdocs{s} (okey INTEGER NOT NULL, seg INTEGER NOT NULL, ids BLOB NOT NULL,
    lens BLOB NOT NULL, PRIMARY KEY (okey, seg)) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS postings{s} (okey INTEGER NOT NULL, term TEXT NOT NULL, first INTEGER NOT NULL,
    df INTEGER NOT NULL, ords BLOB NOT NULL, packed BLOB NOT NULL, PRIMARY KEY (okey, term, first)) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS pdelta{s} (id INTEGER PRIMARY KEY, okey INTEGER NOT NULL, first_new INTEGER NOT NULL,
    terms TEXT NOT NULL, counts BLOB NOT NULL, ords BLOB NOT NULL, packed BLOB NOT NULL);
CREATE INDEX IF NOT EXISTS pdelta_by_owner{s} ON pdelta{s} (okey, id);
CREATE TABLE IF NOT EXISTS pfeat{s} (id INTEGER PRIMARY KEY, ord INTEGER NOT NULL, qshare REAL NOT NULL,
    echo REAL NOT NULL, flags INTEGER NOT NULL, names TEXT NOT NULL,
    prev INTEGER, next INTEGER, tprev INTEGER, tnext INTEGER);
"""


def has_rowid(conn: sqlite3.Connection, s: str = "") -> bool:
    """Whether this file's `postings{s}` is the rowid table (with a unique index) older versions made."""
    row = conn.execute("SELECT sql FROM sqlite_master WHERE type = 'table' AND name = ?", (f"postings{s}",)).fetchone()
    return row is not None and "WITHOUT ROWID" not in row[0].upper()


TABLES = ("powners", "pspeakers", "pdocs", "postings", "pdelta", "pfeat")


class Invalidate(Protocol):
    """What a writer tells the read cache (disk_view.ByteCache) about the rows it rewrote."""

    def wrote(self, okey: int, old_version: int, new_version: int, terms: Iterable[str], segs: Iterable[int],
              speakers: bool, docs: Iterable[int], cuts: Mapping[str, int] | None = None) -> None: ...

    def make_room(self, nbytes: int) -> None:
        """Before a write that holds about `nbytes` beside the cache for a moment (a merge)."""


@dataclass
class _Seg:
    key: int | None  # its `first` as stored (None: not stored yet)
    df: int
    ords: array
    packed: array
    dirty: bool = False


@dataclass
class _Owner:
    okey: int
    n: int
    lens: list[int]
    version: int
    new: bool
    pending: int  # entries in the owner's `pdelta` rows
    first_new: int | None = None  # the first ordinal this writer gave
    terms: set[str] = field(default_factory=set)
    segs: set[int] = field(default_factory=set)
    speakers: bool = False
    known_speakers: set[str] | None = None


class PostingWriter:
    """Folds parsed documents into the tables inside the caller's write transaction, then `flush`."""

    splice = True  # a merge appends to stored segments as bytes (`delta.extend`); False: decoded, as a reference

    def __init__(self, conn: sqlite3.Connection, s: str = "", cache: Invalidate | None = None, *,
                 direct: bool = False, background: bool = False) -> None:
        self.conn, self.s, self.cache = conn, s, cache
        self.direct = direct  # into the segments at once (a build from scratch), not through `pdelta`
        # Merges left to a merger of their own (storage.MessageStorage's): an Add merges only an
        # owner so far past `DELTA_MAX` that the merger has fallen behind; `due` says whose to merge.
        self.background = background
        self.due: set[int] = set()
        self.delta: dict[int, list[tuple[int, dict[str, int]]]] = {}  # okey -> (ordinal, postings) per doc
        self.entries: dict[int, int] = {}  # okey -> postings in its `delta`
        self.owners: dict[tuple[str, str], _Owner] = {}
        self.docsegs: dict[tuple[int, int], tuple[array, array]] = {}
        self.segs: dict[tuple[int, str, int], _Seg] = {}  # by (okey, term, key or -1 - id(new))
        self.last: dict[tuple[int, str], _Seg | None] = {}
        self.top: dict[tuple[int, str], _Seg | None] = {}  # each term's stored segment of the greatest first
        self.term_segs: dict[tuple[int, str], list[_Seg]] = {}  # what `segs` holds, by term
        self.feat: dict[int, list[object]] = {}  # doc id -> its pfeat row, as written at flush
        self.parsed: dict[int, Doc] = {}
        self.absent: set[int] = set()  # ids known to have no `pfeat` row yet (`prefetch`)
        self.tails: dict[tuple[str, str, str], int] = {}  # the last turn put per conversation
        self.speaker: dict[int, str | None] = {}
        self.cuts: dict[int, dict[str, int]] = {}  # okey -> term -> first ordinal of a segment `_merge` wrote

    # -- reading what is stored --------------------------------------------------------------------

    def _owner(self, agent: str, owner: str) -> _Owner:
        o = self.owners.get((agent, owner))
        if o is None:
            r = self.conn.execute(f"SELECT okey, n, l0, l1, l2, l3, version, pending FROM powners{self.s}"
                                  " WHERE agent = ? AND owner = ?", (agent, owner)).fetchone()
            if r is None:
                okey = self.conn.execute(f"INSERT INTO powners{self.s} (agent, owner, n, l0, l1, l2, l3, version)"
                                         " VALUES (?, ?, 0, 0, 0, 0, 0, 0)", (agent, owner)).lastrowid
                assert okey is not None
                o = _Owner(okey, 0, [0, 0, 0, 0], 0, True, 0)
            else:
                o = _Owner(r[0], r[1], [r[2], r[3], r[4], r[5]], r[6], False, r[7])
            self.owners[(agent, owner)] = o
        return o

    def _docseg(self, okey: int, seg: int) -> tuple[array, array]:
        got = self.docsegs.get((okey, seg))
        if got is None:
            r = self.conn.execute(f"SELECT ids, lens FROM pdocs{self.s} WHERE okey = ? AND seg = ?",
                                  (okey, seg)).fetchone()
            ids, lens = array("q"), array("I")
            if r is not None:
                ids.frombytes(r[0])
                lens.frombytes(r[1])
            got = self.docsegs[(okey, seg)] = (ids, lens)
        return got

    def _seg_of(self, r: sqlite3.Row | None) -> _Seg | None:
        if r is None:
            return None
        return self._seg_of_tail(r["okey"], r["term"], (r["first"], r["df"], r["ords"]), r["packed"])

    def _seg_of_tail(self, okey: int, term: str, tail: tuple[int, int, bytes], packed: bytes = b"") -> _Seg:
        """A stored segment (first, df, ords blob; `packed` as stored) decoded, once per writer."""
        first = tail[0]
        got = self.segs.get((okey, term, first))
        if got is None:
            o, p = unpack_segment(tail[2], packed)
            ords, counts = array("I"), array("Q")
            ords.frombytes(o.tobytes())
            counts.frombytes(p.tobytes())
            got = self.segs[(okey, term, first)] = _Seg(first, tail[1], ords, counts)
            self.term_segs.setdefault((okey, term), []).append(got)
        return got

    def _last(self, okey: int, term: str) -> _Seg | None:
        if (okey, term) not in self.last:
            self.last[(okey, term)] = self.top[(okey, term)] = self._seg_of(self.conn.execute(
                f"SELECT * FROM postings{self.s} WHERE okey = ? AND term = ? ORDER BY first DESC LIMIT 1",
                (okey, term)).fetchone())
        return self.last[(okey, term)]

    def _tails(self, okey: int, terms: Sequence[str]) -> tuple[list[tuple[int, int, bytes] | None], Any]:
        """Each term's stored segment of the greatest first, as stored: (first, df, blob) or None (a
        merge touches hundreds: one query per chunk, not per term); and which of them the merge leaves
        to the segment-by-segment path (`delta.extend`): a row in an older format (decoded and
        registered here), or a term this writer holds segments of already."""
        tails: list[tuple[int, int, bytes] | None] = [None] * len(terms)
        at = {t: i for i, t in enumerate(terms)}
        loaded = {t for k, t in self.last if k == okey} if self.last else set()
        cur = self.conn.cursor()
        cur.row_factory = None  # (tuples: a merge reads hundreds of rows)
        for k in range(0, len(terms), _CHUNK):
            part = terms[k : k + _CHUNK]
            # Each term's greatest first found by a seek to its end (a GROUP BY read every segment's
            # key of every term: at 100k turns, 3x the time).
            for t, first, df, ords, packed in cur.execute(
                    f"WITH t(term) AS (VALUES {','.join(['(?)'] * len(part))}) SELECT p.term, p.first, p.df,"
                    f" p.ords, p.packed FROM t JOIN postings{self.s} p ON p.okey = ? AND p.term = t.term AND p.first"
                    f" = (SELECT MAX(first) FROM postings{self.s} q WHERE q.okey = ? AND q.term = t.term)",
                    (*part, okey, okey)).fetchall():
                if t in loaded:
                    continue
                if len(packed):
                    self.last[(okey, t)] = self.top[(okey, t)] = self._seg_of_tail(okey, t, (first, df, ords),
                                                                                   bytes(packed))
                    loaded.add(t)
                else:
                    tails[at[t]] = (first, df, bytes(ords))
        slow = np.array([t in loaded for t in terms], dtype=bool) if loaded else np.zeros(len(terms), dtype=bool)
        return tails, slow

    def _doc(self, doc_id: int) -> Doc:
        """A stored document parsed (the previous turn of a new one, when not in this batch)."""
        got = self.parsed.get(doc_id)
        if got is None:
            r = docfields.read(self.conn, "d.id = ?", (doc_id,), self.s)[0]
            got = self.parsed[doc_id] = parse_doc(r)
            self.speaker[doc_id] = r["speaker"]
        return got

    def _speakers(self, o: _Owner) -> set[str]:
        if o.known_speakers is None:
            o.known_speakers = {r[0] for r in self.conn.execute(
                f"SELECT speaker FROM pspeakers{self.s} WHERE okey = ?", (o.okey,))}
        return o.known_speakers

    def _speaker(self, doc_id: int) -> str | None:
        if doc_id not in self.speaker:
            r = self.conn.execute(f"SELECT speaker FROM docs{self.s} WHERE id = ?", (doc_id,)).fetchone()
            self.speaker[doc_id] = r[0]
        return self.speaker[doc_id]

    def _links(self, doc_id: int) -> list[object]:
        got = self.feat.get(doc_id)
        if got is None:
            r = self.conn.execute(f"SELECT * FROM pfeat{self.s} WHERE id = ?", (doc_id,)).fetchone()
            got = self.feat[doc_id] = list(r)
        return got

    # -- folding documents in ----------------------------------------------------------------------

    def put(self, agent: str, owner: str, d: Doc) -> None:
        """A document new to the tables, or one stored whose fields grew (its `nb` when the next
        turn of its conversation arrived): its counts and lengths replace the old ones."""
        o = self._owner(agent, owner)
        self.parsed[d.id] = d
        self.speaker[d.id] = d.speaker
        stored = self.feat.get(d.id) if d.id in self.feat or d.id in self.absent else self._stored_feat(d.id)
        if stored is not None:
            ordinal = int(stored[1])  # type: ignore[call-overload]
            ids, lens = self._docseg(o.okey, ordinal // SEG_DOCS)
            at = ordinal % SEG_DOCS
            for f in range(4):
                o.lens[f] += d.lens[f] - lens[4 * at + f]
                lens[4 * at + f] = d.lens[f]
            o.segs.add(ordinal // SEG_DOCS)
            self._post_all(o, d, ordinal, False)
            return
        ordinal = o.n
        o.n += 1
        if o.first_new is None:
            o.first_new = ordinal
        for f in range(4):
            o.lens[f] += d.lens[f]
        ids, lens = self._docseg(o.okey, ordinal // SEG_DOCS)
        ids.append(d.id)
        lens.extend(d.lens)
        o.segs.add(ordinal // SEG_DOCS)
        self._post_all(o, d, ordinal, True)
        if d.speaker is not None and d.speaker not in self._speakers(o):
            self.conn.execute(f"INSERT INTO pspeakers{self.s} (okey, speaker) VALUES (?, ?)", (o.okey, d.speaker))
            o.known_speakers.add(d.speaker)  # type: ignore[union-attr]
            o.speakers = True
        prev = None
        if d.id < FACT_BASE:  # a fact is no turn: no neighbours
            prev = self.tails.get((agent, owner, d.conversation_id))
            if prev is None:
                r = self.conn.execute(
                    f"SELECT id FROM docs{self.s} WHERE agent = ? AND owner = ? AND conversation_id = ? AND id < ?"
                    " ORDER BY id DESC LIMIT 1", (agent, owner, d.conversation_id, d.id)).fetchone()
                prev = r[0] if r is not None else None
            self.tails[(agent, owner, d.conversation_id)] = d.id
        echo, tprev = 0.0, None
        if prev is not None:
            p = self._doc(prev)
            echo = echo_of(d, p)
            plinks = self._links(prev)
            plinks[7] = d.id  # its next
            pp = plinks[6]
            if pp is not None:
                pp = int(pp)  # type: ignore[call-overload]
                if self._speaker(pp) == d.speaker:  # (None == None: two turns without a speaker)
                    tprev = pp
                    self._links(pp)[9] = d.id  # its thread's next
        self.feat[d.id] = [d.id, ordinal, d.question_share, echo, HAS_TIME * d.has_time + HAS_NUMBER * d.has_number,
                           " ".join(sorted(d.names)), prev, None, tprev, None]

    def prefetch(self, ids: Sequence[int]) -> None:
        """The stored `pfeat` rows of these documents, read at once (and which have none)."""
        for k in range(0, len(ids), _CHUNK):
            part = ids[k : k + _CHUNK]
            for r in self.conn.execute(f"SELECT * FROM pfeat{self.s} WHERE id IN ({','.join('?' * len(part))})",
                                       part):
                self.feat[r[0]] = list(r)
        self.absent.update(i for i in ids if i not in self.feat)

    def _stored_feat(self, doc_id: int) -> list[object] | None:
        r = self.conn.execute(f"SELECT * FROM pfeat{self.s} WHERE id = ?", (doc_id,)).fetchone()
        if r is None:
            return None
        got = self.feat[doc_id] = list(r)
        return got

    def _post_all(self, o: _Owner, d: Doc, ordinal: int, new: bool) -> None:
        """Every term of `d` at `ordinal`: into the writer's delta at once (an Add's ~1,000 entries:
        one call each was a tenth of indexing it), or `_post` by `_post` when building directly."""
        if not self.direct:
            if d.counts:
                self.delta.setdefault(o.okey, []).append((ordinal, d.counts))
                self.entries[o.okey] = self.entries.get(o.okey, 0) + len(d.counts)
            return
        for t, packed in (d.counts or {}).items():
            self._post(o, t, ordinal, packed, new)

    def _post(self, o: _Owner, t: str, ordinal: int, packed: int, new: bool) -> None:
        """One entry written to the segments directly (a writer that keeps no delta)."""
        if new:  # the owner's highest ordinal: the end of the term's last segment
            self._append(o, t, ordinal, packed, bool(packed & 0xFFFF))
        else:
            self._upsert(o, t, ordinal, packed)

    def _merge(self, o: _Owner) -> None:
        """Fold the owner's `pdelta` rows, then this writer's entries, into the segments, in the
        caller's transaction (a half merge is never seen, and a killed one never happened): per term,
        the entries of turns new in their Add appended in bulk (most of them), then the others
        (turns whose neighbour field grew) put in place, in the order they were written. Most terms'
        last segments take them as bytes (`delta.extend`); the rest go segment by segment."""
        rows = self.conn.execute(f"SELECT first_new, terms, counts, ords, packed FROM pdelta{self.s} WHERE okey = ?"
                                 " ORDER BY id", (o.okey,)).fetchall()
        mine = self.delta.pop(o.okey, [])
        self.entries.pop(o.okey, None)
        names, new, old = gather_flat([*(tuple(r) for r in rows),
                                       (o.first_new if o.first_new is not None else o.n, *encode_docs(mine))])
        tails, slow = self._tails(o.okey, names)
        done: list[tuple[int, bool, int, int, bytes]] = []
        if self.splice:
            done, slow = extend(tails, new, old, SEG_POSTINGS, slow)
        else:
            slow[:] = True
        s, cuts = self.s, self.cuts.setdefault(o.okey, {})
        self.conn.executemany(f"UPDATE postings{s} SET df = ?, ords = ?, packed = ? WHERE okey = ? AND term = ?"
                              " AND first = ?", [(df, blob, b"", o.okey, names[t], f) for t, kept, f, df, blob in done
                                                 if kept])
        self.conn.executemany(f"INSERT OR REPLACE INTO postings{s} (okey, term, first, df, ords, packed)"
                              " VALUES (?, ?, ?, ?, ?, ?)",
                              [(o.okey, names[t], f, df, blob, b"") for t, kept, f, df, blob in done if not kept])
        for t, _, f, _, _ in done:  # (a term's segments in order: its cut is the first's)
            cuts.setdefault(names[t], f)
            o.terms.add(names[t])
        nt, no, npk = new
        bounds = np.searchsorted(nt, np.arange(len(names) + 1)).tolist()
        for i in np.flatnonzero(slow).tolist():
            term, tail = names[i], tails[i]
            if (o.okey, term) not in self.last:
                self.last[(o.okey, term)] = self.top[(o.okey, term)] = (
                    None if tail is None else self._seg_of_tail(o.okey, term, tail))
            if bounds[i + 1] > bounds[i]:
                self._append_many(o, term, no[bounds[i] : bounds[i + 1]], npk[bounds[i] : bounds[i + 1]])
        ot, oo, opk = old
        for i, ordinal, packed in zip(ot.tolist(), oo.tolist(), opk.tolist(), strict=True):
            if slow[i]:
                self._upsert(o, names[i], ordinal, packed)
        self.conn.execute(f"DELETE FROM pdelta{self.s} WHERE okey = ?", (o.okey,))
        o.pending = 0

    def _append_many(self, o: _Owner, t: str, ords: Any, packs: Any) -> None:
        """Entries of new turns (ordinals ascending, above every stored one: uint32 and uint64 numpy)
        at the end of `t`'s segments; their body counts move its document frequency (kept on the
        last segment)."""
        last = self._last(o.okey, t)
        i = 0
        while i < len(ords):
            if last is None or len(last.ords) >= SEG_POSTINGS:
                last = self.last[(o.okey, t)] = self._new_seg(o, t, last.df if last is not None else 0)
            room = SEG_POSTINGS - len(last.ords)
            last.ords.frombytes(ords[i : i + room].tobytes())
            last.packed.frombytes(packs[i : i + room].tobytes())
            last.dirty = True
            i += room
        assert last is not None
        last.df += int(np.count_nonzero(packs & np.uint64(0xFFFF)))
        o.terms.add(t)

    def _new_seg(self, o: _Owner, t: str, df: int) -> _Seg:
        seg = _Seg(None, df, array("I"), array("Q"))
        self.segs[(o.okey, t, -1 - id(seg))] = seg
        self.term_segs.setdefault((o.okey, t), []).append(seg)
        return seg

    def _append(self, o: _Owner, t: str, ordinal: int, packed: int, in_body: bool) -> None:
        last = self._last(o.okey, t)
        if last is None or len(last.ords) >= SEG_POSTINGS:
            last = self.last[(o.okey, t)] = self._new_seg(o, t, last.df if last is not None else 0)
        last.ords.append(ordinal)
        last.packed.append(packed)
        last.df += in_body
        last.dirty = True
        o.terms.add(t)

    def _upsert(self, o: _Owner, t: str, ordinal: int, packed: int) -> None:
        # The segment whose range holds `ordinal`: the one with the greatest first ordinal not above
        # it, among those stored and those this writer made or loaded (not stored yet); else the
        # first segment (its key moves down to `ordinal`).
        self._last(o.okey, t)  # loaded (a term's last segment is where most of these land)
        mine = [g for g in self.term_segs.get((o.okey, t), ()) if g.ords]
        top = self.top[(o.okey, t)]
        if top is None or (top.key is not None and top.key <= ordinal):
            stored = top  # (no stored segment; or the last one starts at or below it: it is the one)
        else:
            stored = self._seg_of(self.conn.execute(
                f"SELECT * FROM postings{self.s} WHERE okey = ? AND term = ? AND first <= ?"
                " ORDER BY first DESC LIMIT 1", (o.okey, t, ordinal)).fetchone())
        below = [g for g in (*mine, stored) if g is not None and g.ords[0] <= ordinal]
        if below:
            seg = max(below, key=lambda g: g.ords[0])
        else:
            lowest = self._seg_of(self.conn.execute(
                f"SELECT * FROM postings{self.s} WHERE okey = ? AND term = ? ORDER BY first LIMIT 1",
                (o.okey, t)).fetchone())
            above = [g for g in (*mine, lowest) if g is not None]
            seg = min(above, key=lambda g: g.ords[0]) if above else self._new_seg(o, t, 0)
            if not above:
                self.last[(o.okey, t)] = seg
        k = bisect_left(seg.ords, ordinal)
        if k < len(seg.ords) and seg.ords[k] == ordinal:
            seg.packed[k] = packed
        else:
            seg.ords.insert(k, ordinal)
            seg.packed.insert(k, packed)
        seg.dirty = True
        o.terms.add(t)

    def flush(self) -> None:
        s, conn = self.s, self.conn
        for o in self.owners.values():
            entries = self.entries.get(o.okey, 0)
            if not entries:
                continue
            if o.pending + entries > (DELTA_HARD * DELTA_MAX if self.background else DELTA_MAX):
                self._merge(o)
            else:
                conn.execute(f"INSERT INTO pdelta{s} (okey, first_new, terms, counts, ords, packed)"
                             " VALUES (?, ?, ?, ?, ?, ?)", (o.okey, o.first_new if o.first_new is not None else o.n,
                                                           *encode_docs(self.delta[o.okey])))
                o.pending += entries
                if o.pending > DELTA_MAX:
                    self.due.add(o.okey)
        # Segments whose first ordinal moved lose their old row, then every dirty one is written: two
        # batches, not a statement each (a merge rewrites hundreds; on PostgreSQL each is a round trip).
        # No segment starts where a moved one started (that ordinal is still in the moved one).
        dirty = [(okey, term, seg) for (okey, term, _), seg in self.segs.items() if seg.dirty]
        conn.executemany(f"DELETE FROM postings{s} WHERE okey = ? AND term = ? AND first = ?",
                         [(okey, term, seg.key) for okey, term, seg in dirty
                          if seg.key is not None and seg.key != seg.ords[0]])
        # A segment stored under the same first ordinal is updated where it is: a REPLACE gave it a
        # new rowid at the table's end and left a hole in its page at every merge (aml_scale, 100k
        # turns: the table's pages 45% empty). The rest are new rows.
        conn.executemany(f"UPDATE postings{s} SET df = ?, ords = ?, packed = ?"
                         " WHERE okey = ? AND term = ? AND first = ?",
                         [(seg.df, pack_segment(seg.ords, seg.packed), b"", okey, term, seg.key)
                          for okey, term, seg in dirty if seg.key == seg.ords[0]])
        conn.executemany(f"INSERT OR REPLACE INTO postings{s} (okey, term, first, df, ords, packed)"
                         " VALUES (?, ?, ?, ?, ?, ?)",
                         [(okey, term, seg.ords[0], seg.df, pack_segment(seg.ords, seg.packed), b"")
                          for okey, term, seg in dirty if seg.key != seg.ords[0]])
        conn.executemany(f"INSERT OR REPLACE INTO pdocs{s} (okey, seg, ids, lens) VALUES (?, ?, ?, ?)",
                         [(okey, seg, ids.tobytes(), lens.tobytes())
                          for (okey, seg), (ids, lens) in self.docsegs.items()])
        conn.executemany(f"INSERT OR REPLACE INTO pfeat{s} (id, ord, qshare, echo, flags, names, prev, next,"
                         " tprev, tnext) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)", list(self.feat.values()))
        # Per term, the lowest ordinal a rewritten segment held or holds: its postings below it are
        # as they were, so a search's cache keeps them (`ByteCache.wrote`) - a merge appends new
        # turns to a term's last segment and leaves the rest alone.
        cuts = self.cuts
        for okey, term, seg in dirty:
            low = seg.ords[0] if seg.key is None else min(seg.key, seg.ords[0])
            mine = cuts.setdefault(okey, {})
            mine[term] = min(mine.get(term, low), low)
        for o in self.owners.values():
            conn.execute(f"UPDATE powners{s} SET n = ?, l0 = ?, l1 = ?, l2 = ?, l3 = ?, version = ?, pending = ?"
                         " WHERE okey = ?", (o.n, *o.lens, o.version + 1, o.pending, o.okey))
            if self.cache is not None and not s:
                self.cache.wrote(o.okey, o.version, o.version + 1, o.terms, o.segs, o.speakers, self.feat,
                                 cuts.get(o.okey))


def index_docs(conn: sqlite3.Connection, ids: Sequence[int], s: str = "", cache: Invalidate | None = None, *,
               background: bool = False, known: dict[int, tuple[list[str], ...]] | None = None,
               texts: dict[int, str] | None = None, in_hand: Mapping[int, dict[str, Any]] | None = None) -> set[int]:
    """Fold the stored documents `ids` (new, or grown since they were folded in) into the tables;
    the caller holds the write transaction (the documents' own). `background`: merges are the
    caller's to run later (`merge_owner`); returns the owners due one. `known`: the fields of
    documents the caller has in hand, `texts` their texts (docfields.with_fields); `in_hand`: whole
    rows as `docfields.read` gives them (`docfields.row`), not read again."""
    if not ids:
        return set()
    unique = sorted(set(ids))
    rows: list[Mapping[str, Any]] = [in_hand[i] for i in unique if i in in_hand] if in_hand else []
    todo = [i for i in unique if i not in in_hand] if in_hand else unique
    for k in range(0, len(todo), _CHUNK):
        part = todo[k : k + _CHUNK]
        rows += docfields.read(conn, f"d.id IN ({','.join('?' * len(part))})", part, s, known=known, texts=texts)
    w = PostingWriter(conn, s, cache, background=background)
    w.prefetch(unique)
    for r in sorted(rows, key=lambda r: r["id"]):
        give_way()
        w.put(r["agent"], r["owner"], parse_doc(r))
    give_way()
    w.flush()  # (the caller commits and gives way next)
    return w.due


def merge_owner(conn: sqlite3.Connection, okey: int, cache: Invalidate | None = None, *, above: int = 0) -> int:
    """Fold the owner's unmerged rows into its segments when they hold more than `above` entries, in
    the caller's write transaction; returns the entries folded (0: nothing to do - merged already
    by another process or by an Add, or the owner gone)."""
    r = conn.execute("SELECT agent, owner, pending FROM powners WHERE okey = ?", (okey,)).fetchone()
    if r is None or r[2] <= above or r[2] == 0:
        return 0
    if cache is not None:
        cache.make_room(r[2] * MERGE_BYTES)
    w = PostingWriter(conn, "", cache)
    w._merge(w._owner(r[0], r[1]))
    w.flush()
    return int(r[2])


def derive(conn: sqlite3.Connection, agent: str | None = None, owner: str | None = None, s: str = "",
           cache: Invalidate | None = None, batch: int = 2000) -> int:
    """Build the tables afresh from `docs` for one owner (`agent` given), or all of them: the
    one-time migration of an older file, and after a forget rewrote words. Returns documents folded."""
    where, params = ("d.agent = ? AND d.owner = ?", (agent, owner_column(owner))) if agent is not None else ("1", ())
    if agent is not None:
        r = conn.execute(f"SELECT okey, version FROM powners{s} WHERE agent = ? AND owner = ?", params).fetchone()
        if r is not None:
            delete(conn, r[0], s)
            conn.execute(f"INSERT INTO powners{s} (okey, agent, owner, n, l0, l1, l2, l3, version)"
                         " VALUES (?, ?, ?, 0, 0, 0, 0, 0, ?)", (r[0], *params, r[1] + 1))
    else:
        for t in TABLES:
            conn.execute(f"DELETE FROM {t}{s}")
    # One owner's ids read once (the conversation index holds them), then their rows in id order by
    # batches: no index orders an owner's documents by id alone, and a batch ordered by id found by
    # (agent, owner) would sort the owner's every document again.
    ids = sorted(r[0] for r in conn.execute(f"SELECT id FROM docs{s} WHERE agent = ? AND owner = ?", params)) \
        if agent is not None else None
    done, after, at = 0, -1, 0
    while True:
        if ids is None:
            rows = docfields.read(conn, f"{where} AND d.id > ?", (*params, after, batch), s, " ORDER BY d.id LIMIT ?")
        else:
            part, at = ids[at : at + batch], at + batch
            rows = docfields.read(conn, f"d.id IN ({','.join('?' * len(part))})", part, s, " ORDER BY d.id") \
                if part else []
        if not rows:
            return done
        w = PostingWriter(conn, s, cache, direct=True)
        w.prefetch([r["id"] for r in rows])
        for r in rows:
            w.put(r["agent"], r["owner"], parse_doc(r))
        w.flush()
        done += len(rows)
        after = rows[-1]["id"]


def migrate(conn: sqlite3.Connection) -> int:
    """The tables made afresh (an earlier layout's dropped) and built from the documents: the
    one-time migration of a file (`run_once`, in its write transaction)."""
    for t in TABLES:
        conn.execute(f"DROP TABLE IF EXISTS {t}")
    for statement in tables().split(";"):
        if statement.strip():
            conn.execute(statement)
    return derive(conn)


def delete(conn: sqlite3.Connection, okey: int, s: str = "") -> None:
    """Every row of one owner (its words included) removed from the tables."""
    conn.execute(f"DELETE FROM pfeat{s} WHERE id IN (SELECT id FROM docs{s} d JOIN powners{s} o"
                 " ON d.agent = o.agent AND d.owner = o.owner WHERE o.okey = ?)", (okey,))
    for t in ("postings", "pdelta", "pdocs", "pspeakers", "powners"):
        conn.execute(f"DELETE FROM {t}{s} WHERE okey = ?", (okey,))


def delete_owner(conn: sqlite3.Connection, agent: str, owner: str | None) -> None:
    r = conn.execute("SELECT okey FROM powners WHERE agent = ? AND owner = ?", (agent, owner_column(owner))).fetchone()
    if r is not None:
        delete(conn, r[0])
