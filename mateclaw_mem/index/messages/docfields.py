"""A stored document's field tokens (`body`, `ctx`, `nb`, `dt`: messages/storage.py), made again from
its text and its conversation neighbours' whenever they are needed - an Add's postings, a merge's
previous turn, a search's feedback bodies, a rebuild of one owner's postings after a forget.

No table keeps them: they were a second copy of every turn's words, and of each neighbour's twice
(441 B a message, the largest table of `messages.db` after the postings), while everything they
hold follows from the document's text (`TEXT`), the conversation order and the time."""

from __future__ import annotations

import sqlite3
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

from mateclaw_mem.index.messages.fields import FACT_BASE, MONTHS, WEEKDAYS, split_speaker
from mateclaw_mem.index.tokenizer import tokenize


def text_of(d: str) -> str:
    """SQL for the text of the document aliased `d`: its own `content` when it holds one (a fact's;
    a turn an older version stored whose words the log no longer matched), else the log's message
    at the same id - `messages` is log.db attached to the index's connection on SQLite
    (storage.MessageStorage), the same database's table on PostgreSQL. A turn is stored once, in the
    log: `docs.content` is '' for it. NULL: the message is gone from the log."""
    return f"COALESCE(NULLIF({d}.content, ''), (SELECT m.content FROM messages m WHERE m.id = {d}.id))"


TEXT = text_of("d")
# What `parse_doc` (turns.py) reads of a document, besides the fields.
DOC = ("SELECT d.id, d.agent, d.owner, d.speaker, d.is_question, d.conversation_id, d.role, " + TEXT
       + " AS content, d.ts_ms FROM docs{s} d WHERE {where}")


_DAY_MS = 86_400_000
_DAYS: dict[int, tuple[str, ...]] = {}  # UTC day -> its tokens (an Add's turns share a day or two)


def date_tokens(ts_ms: int) -> list[str]:
    day = ts_ms // _DAY_MS  # (UTC days are whole multiples of a day's milliseconds: the same date)
    got = _DAYS.get(day)
    if got is None:
        d = datetime.fromtimestamp(ts_ms / 1000, tz=UTC)
        if len(_DAYS) >= 4096:
            _DAYS.clear()
        got = _DAYS[day] = tuple(tokenize(f"{d.day} {MONTHS[d.month - 1]} {d.year} {WEEKDAYS[d.weekday()]}"))
    return list(got)


def body_tokens(doc_id: int, content: str | None) -> list[str]:
    """A document's own words: a turn's without its "Speaker:" prefix, a fact's whole text (none:
    the text is gone from the log)."""
    if content is None:
        return []
    return tokenize(content if doc_id >= FACT_BASE else split_speaker(content)[1])


def _near(conn: sqlite3.Connection, s: str, r: Any, op: str, order: str) -> sqlite3.Row | None:
    """The turn just before (`<`) or after (`>`) `r` in its conversation (facts are no turns)."""
    return conn.execute(
        f"SELECT d.id, d.speaker, d.is_question, {TEXT} AS content FROM docs{s} d WHERE d.agent = ? AND d.owner = ?"
        f" AND d.conversation_id = ? AND d.id {op} ? AND d.id < ? ORDER BY d.id {order} LIMIT 1",
        (r["agent"], r["owner"], r["conversation_id"], r["id"], FACT_BASE)).fetchone()


def with_fields(conn: sqlite3.Connection, rows: Sequence[Any], s: str = "",
                known: dict[int, tuple[list[str], ...]] | None = None,
                texts: Mapping[int, str] | None = None) -> list[dict[str, Any]]:
    """`rows` (`DOC` rows) as dicts with their four fields, space-joined, exactly as an Add makes
    them: `nb` the previous and the next turn's bodies, `ctx` the previous one's when it is another
    speaker's question. `known`: fields already in hand, by id (an Add's own turns). `texts`: the
    text of turns the caller has in hand (an Add's), for those the log's snapshot read here may not
    show yet (a write transaction here began reading the attached log before they were logged)."""
    bodies: dict[int, list[str]] = {}

    def body(i: int, content: str | None) -> list[str]:
        if content is None and texts is not None:
            content = texts.get(i)
        got = bodies.get(i)
        if got is None:
            got = bodies[i] = body_tokens(i, content)
        return got

    out: list[dict[str, Any]] = []
    for r in rows:
        d = dict(zip(r.keys(), r, strict=True))
        if d["content"] is None:  # (else gone from the log: an empty document until it is deleted)
            d["content"] = texts.get(r["id"], "") if texts is not None else ""
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


def row(doc_id: int, agent: str, owner: str, speaker: str | None, is_question: bool, conversation_id: str,
        role: str, content: str, ts_ms: int, fields: Sequence[Sequence[str]]) -> dict[str, Any]:
    """A document's row as `read` gives it, from what its writer has in hand (`owner` as stored,
    `content` its text); its fields kept as token lists (`parse_doc` takes them as they are: what
    splitting them joined gives back, no token being empty or holding a space)."""
    f0, f1, f2, f3 = (list(f) if "" not in f else " ".join(f) for f in fields)
    return {"id": doc_id, "agent": agent, "owner": owner, "speaker": speaker, "is_question": int(is_question),
            "conversation_id": conversation_id, "role": role, "content": content, "ts_ms": ts_ms,
            "body": f0, "ctx": f1, "nb": f2, "dt": f3}


def read(conn: sqlite3.Connection, where: str, params: Sequence[object], s: str = "", tail: str = "",
         known: dict[int, tuple[list[str], ...]] | None = None,
         texts: Mapping[int, str] | None = None) -> list[dict[str, Any]]:
    """The documents `where` (on `d.`) selects, with their fields; `tail`: ORDER BY / LIMIT."""
    return with_fields(conn, conn.execute(DOC.format(s=s, where=where) + tail, params).fetchall(), s, known, texts)
