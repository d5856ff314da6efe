"""What one search reads of an owner's documents beyond their columns (messages/disk_view.py): a
document's names, neighbours and body (`DocInfo`, `DiskView.by_id`, `DiskView.bodies`), the rows it
read them from (`FetchedRows`) and the terms' document frequencies (`DiskView.df`), each read when
first asked for - and, where the ranking knows it will ask for many, all of them in one statement
(`Docs.want`, `Bodies.want`, `Frequencies.want`)."""

from __future__ import annotations

import weakref
from collections.abc import Iterable, Iterator, Sequence
from typing import Any

import numpy as np

from mateclaw_mem.index.messages.docfields import TEXT, body_tokens
from mateclaw_mem.index.messages.view_cache import RowChunk, RowTables
from mateclaw_mem.index.tokenizer import STOPWORDS

CHUNK = 512  # ids or terms per `IN (...)` read


def in_list(values: Sequence[Any]) -> tuple[str, list[Any]]:
    """The `?, ?, ...` of an `IN (...)` of `values`, and what to bind: their number rounded up to a
    power of two by repeating the last (an `IN` reads each value once). A search's lists differ in
    length from one statement to the next, and each length was a statement text of its own, prepared
    anew once the connection's cache of 128 statements had moved past it (~45 us for 250 values).
    Rounded, a search's statements are a few dozen texts, kept prepared: 600 searches spread over 100
    owners, alternating with and without it, p50 2-4% lower in each of 4 runs."""
    size = 1 << (len(values) - 1).bit_length()
    bound = list(values)
    bound += bound[-1:] * (size - len(bound))
    return ",".join("?" * size), bound


# Each term's document frequency (NULL: no postings). `VALUES` columns are column1 in SQLite and PostgreSQL alike.
_LAST_DF = ("SELECT t.column1, (SELECT p.df FROM postings p WHERE p.okey = ? AND p.term = t.column1"
            " ORDER BY p.first DESC LIMIT 1) FROM (VALUES {marks}) AS t")
# (The view these read through is a `disk_view.DiskView`, typed Any: that module imports this one.)


class DocInfo:
    """What the ranking reads of one document beyond its columns: its names (who/where answers), its
    neighbours (padding) and its body terms (feedback, read only when asked)."""

    __slots__ = ("_body", "_names", "_view", "id", "next", "prev")

    def __init__(self, view: Any, rows: RowChunk, at: int, tables: RowTables) -> None:
        self._view = view  # a weak proxy (`Docs`): no cycle through the view
        self._body: tuple[str, ...] | None = None
        self.id: int = int(rows.ids[at])
        self._names: str | frozenset[str] = tables.values[rows.names[at]]
        prev, nxt = rows.links[at, :2].tolist()
        self.prev: int | None = None if prev < 0 else prev
        self.next: int | None = None if nxt < 0 else nxt

    @property
    def names(self) -> frozenset[str]:
        if isinstance(self._names, str):
            self._names = frozenset(self._names.split())
        return self._names

    @property
    def body(self) -> tuple[str, ...]:
        """The body's terms in first-seen order (`turns.Doc.body`)."""
        if self._body is None:
            text = self._view.body_of(self.id)
            self._body = tuple(dict.fromkeys(text.split())) if text is not None else ()
        return self._body



class Docs:
    """`DiskView.by_id`: documents by id, read when first asked for."""

    def __init__(self, view: Any) -> None:
        # Weak: a view and its parts referring to each other strongly made each search's view (its
        # columns and arrays, MBs at 100k messages) cyclic garbage, freed only by a full collection
        # - RSS grew by ~100 MB over the byte cache's bound (issue 36.3). Gone with its search now.
        self.view: Any = weakref.proxy(view)
        self.got: dict[int, DocInfo] = {}

    def __getitem__(self, doc_id: int) -> DocInfo:
        doc_id = int(doc_id)
        got = self.got.get(doc_id)
        if got is None:
            row = self.view.rows.get(doc_id)
            if row is None:
                self.view.fetch([doc_id])
                row = self.view.rows[doc_id]
            assert self.view.tables is not None  # (set by the `fetch` that read the row)
            rows, at = row
            got = self.got[doc_id] = DocInfo(self.view, rows, at, self.view.tables)
        return got

    def want(self, ids: Iterable[int]) -> None:
        """Read the rows of these documents not read yet, in one statement (the padding asks for
        its neighbours one by one: a statement and a row store copy each)."""
        view = self.view
        missing = [i for i in dict.fromkeys(map(int, ids)) if i not in self.got and i not in view.rows]
        if missing:
            view.fetch(missing)


class FetchedRows:
    """The `_FEATURES` rows one search read, by id (`get`: (rows, at)), later reads first: the chunks
    as read, looked up when asked (a search asks for a few of its hundreds of rows: a dict of them
    all, made at every read, cost more than the lookups)."""

    __slots__ = ("_read",)

    def __init__(self) -> None:
        # (rows, their ids ascending, the order that sorts them or None)
        self._read: list[tuple[RowChunk, Any, Any]] = []

    def add(self, rows: RowChunk) -> None:
        ids = rows.ids
        if len(ids) < 2 or bool((ids[1:] >= ids[:-1]).all()):
            self._read.append((rows, ids, None))
        else:
            order = np.argsort(ids, kind="stable")
            self._read.append((rows, ids[order], order))

    def get(self, doc_id: int) -> tuple[RowChunk, int] | None:
        for rows, ids, order in reversed(self._read):
            at = int(np.searchsorted(ids, doc_id))
            if at < len(ids) and ids[at] == doc_id:
                return rows, at if order is None else int(order[at])
        return None

    def __contains__(self, doc_id: int) -> bool:
        return self.get(doc_id) is not None

    def __getitem__(self, doc_id: int) -> tuple[RowChunk, int]:
        got = self.get(doc_id)
        if got is None:
            raise KeyError(doc_id)
        return got

    def __iter__(self) -> Iterator[int]:
        """The ids read, each once."""
        return iter(dict.fromkeys(i for _, ids, _ in self._read for i in ids.tolist()))


class Bodies:
    """`DiskView.bodies`: documents' body tokens, space-joined (None: no such document), read when
    asked for - the feedback's top turns together (`want`), with their terms' frequencies."""

    def __init__(self, view: Any) -> None:
        self.view: Any = weakref.proxy(view)  # weak: see `Docs`
        self.got: dict[int, str | None] = {}

    def want(self, ids: Iterable[int]) -> None:
        view = self.view
        todo = [i for i in dict.fromkeys(map(int, ids)) if i not in self.got]
        if todo and not view.batch_bodies:
            self._read(todo)
        view.df.want(t for i in todo if (b := self.get(i)) for t in b.split() if t not in STOPWORDS)

    def get(self, doc_id: int) -> str | None:
        if doc_id in self.got:
            return self.got[doc_id]
        view = self.view
        if not view.batch_bodies:
            r = view.conn.execute(f"SELECT {TEXT} FROM docs d WHERE d.id = ?", (doc_id,)).fetchone()
            return " ".join(body_tokens(doc_id, r[0])) if r is not None else None
        # (Where a query is a round trip: every candidate's with it.)
        want = [doc_id, *(i for i in view.rows if i not in self.got and i != doc_id)]
        for k in range(0, len(want), CHUNK):
            self._read(want[k : k + CHUNK])
        return self.got[doc_id]

    def _read(self, ids: list[int]) -> None:
        self.got.update(dict.fromkeys(ids))
        marks, bound = in_list(ids)
        self.got.update((i, " ".join(body_tokens(i, text))) for i, text in self.view.conn.execute(
            f"SELECT d.id, {TEXT} FROM docs d WHERE d.id IN ({marks})", bound).fetchall())


class Frequencies:
    """`DiskView.df`: body document frequencies, read per term when first asked for."""

    def __init__(self, view: Any) -> None:
        self.view: Any = weakref.proxy(view)  # weak: see `Docs`
        self.got: dict[str, int] = {}

    def get(self, term: str, default: int | None = None) -> int | None:
        got = self.got.get(term)
        if got is None:
            self.want((term,))
            got = self.got[term]
        return got if got else default

    def want(self, terms: Iterable[str]) -> None:
        """Read the frequencies of these terms not known yet: from the cached postings, the rest in
        one statement (the feedback asks for every body term of the top turns: ~50 statements)."""
        view = self.view
        todo = []
        for t in dict.fromkeys(terms):
            if t not in self.got:
                cached = view.cache.get(("t", view.okey, t), view.version)
                if cached is None:
                    todo.append(t)
                else:
                    self._add(t, cached[2])
        for k in range(0, len(todo), CHUNK):
            part = todo[k : k + CHUNK]
            # A term's frequency is its last segment's: one index seek from the end per term (a
            # filter on max(first) visited every segment of a common term, and ran a subquery on each).
            found = view.conn.execute(_LAST_DF.format(marks=",".join(["(?)"] * len(part))), (view.okey, *part))
            for t, df in found.fetchall():
                self._add(t, df or 0)

    def _add(self, term: str, df: int) -> None:
        extra = self.view._delta.entries(term)
        self.got[term] = df + extra[2] if extra is not None else df


