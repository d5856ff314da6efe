"""Documents of `messages.db` brought to a rewritten log text (a forget cut words out of turns).

A turn's tokens count in its own `body` and in its neighbours' `nb` (and `ctx`, when it asked the
question they answer), so the neighbours' field lengths are recomputed from theirs (the fields
themselves are made from the texts when read: docfields.py).
"""

from __future__ import annotations

import sqlite3

from mateclaw_mem.index.messages.docfields import TEXT, body_tokens
from mateclaw_mem.index.messages.storage import FACT_BASE, _is_question, split_speaker
from mateclaw_mem.index.tokenizer import tokenize


def rewrite_docs(conn: sqlite3.Connection, changes: dict[int, str]) -> int:
    """Apply {doc id: new text} inside the caller's write transaction; returns documents changed."""
    done: list[sqlite3.Row] = []
    for doc_id, text in changes.items():
        row = conn.execute("SELECT id, agent, owner, conversation_id FROM docs WHERE id = ?", (doc_id,)).fetchone()
        if row is None:
            continue
        said = text if doc_id >= FACT_BASE else split_speaker(text)[1]
        body = tokenize(said)
        # A turn's text is the log's, rewritten already: only a document with a text of its own keeps it.
        conn.execute("UPDATE docs SET content = CASE WHEN content = '' THEN '' ELSE ? END, body_len = ?,"
                     " is_question = ? WHERE id = ?",
                     (text, len(body), int(doc_id < FACT_BASE and _is_question(said)), doc_id))
        done.append(row)
    around: set[tuple[int, str, str, str]] = set()
    for r in done:
        if r["id"] >= FACT_BASE:
            continue
        for op, order in (("<", "DESC"), (">", "ASC")):
            n = conn.execute(f"SELECT id FROM docs WHERE agent = ? AND owner = ? AND conversation_id = ? AND id {op} ?"
                             f" AND id < ? ORDER BY id {order} LIMIT 1",
                             (r["agent"], r["owner"], r["conversation_id"], r["id"], FACT_BASE)).fetchone()
            if n is not None:
                around.add((n["id"], r["agent"], r["owner"], r["conversation_id"]))
        around.add((r["id"], r["agent"], r["owner"], r["conversation_id"]))
    for doc_id, agent, owner, conv in around:
        _relink(conn, doc_id, agent, owner, conv)
    return len(done)


def _relink(conn: sqlite3.Connection, doc_id: int, agent: str, owner: str, conv: str) -> None:
    def near(op: str, order: str) -> sqlite3.Row | None:
        return conn.execute(
            f"SELECT d.id, d.speaker, d.is_question, {TEXT} AS content FROM docs d"
            f" WHERE d.agent = ? AND d.owner = ? AND d.conversation_id = ? AND d.id {op} ? AND d.id < ?"
            f" ORDER BY d.id {order} LIMIT 1", (agent, owner, conv, doc_id, FACT_BASE)).fetchone()

    me = conn.execute("SELECT speaker FROM docs WHERE id = ?", (doc_id,)).fetchone()
    prev, nxt = near("<", "DESC"), near(">", "ASC")
    before = body_tokens(prev["id"], prev["content"]) if prev else []
    nb = before + (body_tokens(nxt["id"], nxt["content"]) if nxt else [])
    ctx = before if prev and prev["is_question"] and prev["speaker"] != me["speaker"] else []
    conn.execute("UPDATE docs SET nb_len = ?, ctx_len = ? WHERE id = ?", (len(nb), len(ctx), doc_id))
