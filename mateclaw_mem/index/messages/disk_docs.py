"""What one search reads of an owner's documents beyond their columns (messages/disk_view.py): a
document's names, neighbours and body (`DocInfo`, `DiskView.by_id`) and the terms' document
frequencies (`DiskView.df`), each read when first asked for - and, where the ranking knows it will
ask for many, all of them in one statement (`Docs.want`, `Frequencies.want`)."""

from __future__ import annotations

import weakref
from collections.abc import Iterable
from typing import Any

from mateclaw_mem.index.messages.view_cache import RowChunk, RowTables

CHUNK = 500  # ids or terms per `IN (...)` read
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
            # A term's frequency is its last segment's.
            found = dict(view.conn.execute(
                f"SELECT p.term, p.df FROM postings p WHERE p.okey = ? AND p.term IN ({','.join('?' * len(part))})"
                " AND p.first = (SELECT max(q.first) FROM postings q WHERE q.okey = p.okey AND q.term = p.term)",
                (view.okey, *part)).fetchall())
            for t in part:
                self._add(t, found.get(t, 0))

    def _add(self, term: str, df: int) -> None:
        extra = self.view._delta.entries(term)
        self.got[term] = df + extra[2] if extra is not None else df


