"""A stored document's field tokens (`body`, `ctx`, `nb`, `dt`: messages/storage.py), made again from
its text and its conversation neighbours' whenever they are needed - an Add's postings, a merge's
previous turn, a search's feedback bodies, a rebuild of one owner's postings after a forget.

No table keeps them: they were a second copy of every turn's words, and of each neighbour's twice
(441 B a message, the largest table of `messages.db` after the postings), while everything they
hold follows from `docs.content`, the conversation order and the time."""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

from mateclaw_mem.index.messages.fields import FACT_BASE, MONTHS, WEEKDAYS, split_speaker
from mateclaw_mem.index.tokenizer import tokenize

# What `parse_doc` (turns.py) reads of a document, besides the fields.
DOC = ("SELECT d.id, d.agent, d.owner, d.speaker, d.is_question, d.conversation_id, d.role, d.content, d.ts_ms"
       " FROM docs{s} d WHERE {where}")


def date_tokens(ts_ms: int) -> list[str]:
    d = datetime.fromtimestamp(ts_ms / 1000, tz=UTC)
    return tokenize(f"{d.day} {MONTHS[d.month - 1]} {d.year} {WEEKDAYS[d.weekday()]}")


def body_tokens(doc_id: int, content: str) -> list[str]:
    """A document's own words: a turn's without its "Speaker:" prefix, a fact's whole text."""
    return tokenize(content if doc_id >= FACT_BASE else split_speaker(content)[1])


def _near(conn: sqlite3.Connection, s: str, r: Any, op: str, order: str) -> sqlite3.Row | None:
    """The turn just before (`<`) or after (`>`) `r` in its conversation (facts are no turns)."""
    return conn.execute(
        f"SELECT id, speaker, is_question, content FROM docs{s} WHERE agent = ? AND owner = ? AND conversation_id = ?"
        f" AND id {op} ? AND id < ? ORDER BY id {order} LIMIT 1",
        (r["agent"], r["owner"], r["conversation_id"], r["id"], FACT_BASE)).fetchone()


def with_fields(conn: sqlite3.Connection, rows: Sequence[Any], s: str = "",
                known: dict[int, tuple[list[str], ...]] | None = None) -> list[dict[str, Any]]:
    """`rows` (`DOC` rows) as dicts with their four fields, space-joined, exactly as an Add makes
    them: `nb` the previous and the next turn's bodies, `ctx` the previous one's when it is another
    speaker's question. `known`: fields already in hand, by id (an Add's own turns)."""
    bodies: dict[int, list[str]] = {}

    def body(i: int, content: str) -> list[str]:
        got = bodies.get(i)
        if got is None:
            got = bodies[i] = body_tokens(i, content)
        return got

    out: list[dict[str, Any]] = []
    for r in rows:
        d = dict(zip(r.keys(), r, strict=True))
        fields = known.get(r["id"]) if known is not None else None
        if fields is None:
            mine = body(r["id"], r["content"])
            ctx: list[str] = []
            nb: list[str] = []
            if r["id"] < FACT_BASE:
                prev, nxt = _near(conn, s, r, "<", "DESC"), _near(conn, s, r, ">", "ASC")
                if prev is not None:
                    nb = list(body(prev["id"], prev["content"]))
                    if prev["is_question"] and prev["speaker"] != r["speaker"]:
                        ctx = nb[:]
                if nxt is not None:
                    nb += body(nxt["id"], nxt["content"])
            fields = (mine, ctx, nb, date_tokens(r["ts_ms"]))
        d["body"], d["ctx"], d["nb"], d["dt"] = (" ".join(f) for f in fields)
        out.append(d)
    return out


def read(conn: sqlite3.Connection, where: str, params: Sequence[object], s: str = "", tail: str = "",
         known: dict[int, tuple[list[str], ...]] | None = None) -> list[dict[str, Any]]:
    """The documents `where` (on `d.`) selects, with their fields; `tail`: ORDER BY / LIMIT."""
    return with_fields(conn, conn.execute(DOC.format(s=s, where=where) + tail, params).fetchall(), s, known)
