"""Reading the file index for search: FTS5 matches, chunks by id or scope, corpus statistics."""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence
from dataclasses import dataclass

from mateclaw_mem.db import owner_column
from mateclaw_mem.index.chunker import CONVERSATION, SCOPES
from mateclaw_mem.index.files.storage import CENSUS_KEPT, FileStorage, owner_of, tag


@dataclass(slots=True)  # not frozen: ~90 are made per search, and frozen fields are set the slow way
class Candidate:
    id: int
    agent: str
    owner: str | None
    rel: str
    kind: str
    title: str
    line_start: int
    line_end: int
    text: str
    tokens: str  # the body tokens, space-joined (for coverage)
    bm25: float  # FTS5 bm25: lower is better
    ts_ms: int | None
    conversation_id: str | None
    message_id: int | None
    sha: str
    title_tokens: str = ""  # the title tokens as indexed, space-joined ("" for a message: never matched)


def _quote(term: str) -> str:
    return '"' + term.replace('"', '""') + '"'


def _candidate(r: sqlite3.Row, bm25: float) -> Candidate:
    return Candidate(
        id=r["id"], agent=r["agent"], owner=owner_of(r["owner"]), rel=r["rel"], kind=r["kind"], title=r["title"],
        line_start=r["line_start"], line_end=r["line_end"], text=r["text"], tokens=r["tokens"], bm25=bm25,
        ts_ms=r["ts_ms"], conversation_id=r["conversation_id"], message_id=r["message_id"], sha=r["sha"],
        title_tokens=r["title_tokens"],
    )


def match(
    db: FileStorage,
    match: str,
    *,
    scopes: Sequence[tuple[str, Sequence[str | None]]],
    scope: str,
    limit: int,
    ranked: bool = True,
    title_weight: float = 2.0,
    at_most: int | None = None,
    at_least: int = 0,
) -> list[Candidate]:
    """Chunks matching an FTS5 expression in any of `scopes` ((agent, owners) pairs; owner None: the
    shared ones) and the scope kind given, best bm25 first (`ranked=False`: newest rows first,
    without bm25; they come back with `bm25 = 0`). One query for all the pairs: FTS5 scores the
    whole expression each time it runs, and an agent's search and GLOBAL's asked it twice.

    Ranked, the scope is checked on the `chunks` row of each match, not by tag tokens in the
    MATCH: FTS5's bm25 computes an IDF for every phrase of the expression by walking its whole
    doclist, and a tag is in every chunk of its agent - at 100k chunks that walk was 3/4 of a
    search. Callers keep ranked expressions small (`search.CANDIDATE_BUDGET`), so the row checks
    are bounded. Unranked, nothing is scored and a query may match most of the index, so the
    tags stay in the MATCH: FTS5 seeks through their doclists and stops after `limit` rows.

    No column filter (`{title body} : ...`) on purpose: it makes FTS5 read every position list
    (5x slower at 10k chunks), and tag tokens are 17-character hashes no query word equals."""
    pairs = [(agent, [owner_column(o) for o in owners]) for agent, owners in scopes if owners]
    if not pairs:
        return []
    if ranked and at_least <= limit:
        # bm25 costs a walk of every phrase's whole doclist (its IDF) before the first row: ~0.5 ms
        # for an AND of common words at 50k chunks, most of a search. When no more than `limit`
        # chunks match at all, ranking them picks all of them: the same candidates, unranked.
        # `at_most`/`at_least` are the caller's bounds on the number of matches (document
        # frequencies); between them, asking for `limit` + 1 row ids tells (it stops early).
        if at_most is not None and at_most <= limit:
            return _all_matches(db, match, None, pairs, scope)
        found = db.read("SELECT rowid FROM fts WHERE fts MATCH ? LIMIT ?", [match, limit + 1])
        if len(found) <= limit:
            return _all_matches(db, match, [r[0] for r in found], pairs, scope)
    if ranked:
        cond, params = _in_scope("x", pairs, scope)
        bm = f"bm25(fts, {float(title_weight)}, 1.0, 0.0)"
        # The scope check costs a `chunks` row read per match (a third of the query at 50k chunks).
        # When every scope the index has ever held is in scope (one agent and GLOBAL, the common
        # case: `chunk_scopes`) and the trigger that keeps that census is on `chunks` (a rebuild by
        # an older version, or a hand, may have dropped it), it is skipped. Both tests are evaluated
        # once, in the same statement, so they see the same snapshot as the match. The inner select
        # sorts narrow (id, bm) rows; the wide columns are read for the winners only.
        sql = (
            "SELECT c.*, t.body AS tokens, t.title AS title_tokens, f.bm AS bm FROM ("
            f"  SELECT m.rowid AS id, m.bm AS bm FROM ("
            f"    SELECT rowid, {bm} AS bm FROM fts WHERE fts MATCH ?"
            "  ) AS m"
            f"  WHERE ({CENSUS_KEPT} AND NOT EXISTS (SELECT 1 FROM chunk_scopes AS x WHERE NOT ({cond})))"
            f"   OR EXISTS (SELECT 1 FROM chunks AS x WHERE x.id = m.rowid AND {cond})"
            "  ORDER BY m.bm LIMIT ?"
            ") AS f JOIN chunks AS c ON c.id = f.id JOIN fts AS t ON t.rowid = f.id ORDER BY f.bm, f.id"
        )
        params = [match, *params, *params, limit]
    else:
        who = " OR ".join(f"({_quote(tag('a', agent))} AND ({' OR '.join(_quote(tag('o', x)) for x in o)}))"
                          for agent, o in pairs)
        filters = [f"({who})"]
        if scope != "all":
            filters.append(_quote(tag("s", scope)))
        params = [f"({match}) AND " + " AND ".join(filters), limit]
        sql = (
            "SELECT c.*, f.body AS tokens, f.title AS title_tokens, 0.0 AS bm FROM ("
            "  SELECT rowid, title, body FROM fts WHERE fts MATCH ? ORDER BY rowid DESC LIMIT ?"
            ") AS f JOIN chunks AS c ON c.id = f.rowid ORDER BY c.id DESC"
        )
    return [_candidate(r, r["bm"]) for r in db.read(sql, params)]


def _in_scope(alias: str, pairs: list[tuple[str, list[str]]], scope: str) -> tuple[str, list]:
    """The SQL condition (and its parameters) that a `chunks` row `alias` is in one of the (agent,
    owners) pairs and of the scope's kinds."""
    who = " OR ".join(f"({alias}.agent = ? AND {alias}.owner IN ({','.join('?' * len(o))}))" for _, o in pairs)
    where = [f"({who})"]
    params: list = [*(x for agent, o in pairs for x in (agent, *o))]
    if scope != "all":
        kinds = SCOPES[scope]
        where.append(f"{alias}.kind IN ({','.join('?' * len(kinds))})")
        params.extend(kinds)
    return " AND ".join(where), params


def _all_matches(db: FileStorage, match: str, ids: list[int] | None, pairs: list[tuple[str, list[str]]],
                 scope: str) -> list[Candidate]:
    """Every chunk in scope matching `match` (ids of every chunk matching it, when known): few."""
    if ids is not None and not ids:
        return []
    cond, params = _in_scope("c", pairs, scope)
    if ids is None:
        found, first = "SELECT rowid FROM fts WHERE fts MATCH ?", [match]
    else:
        found, first = ",".join("?" * len(ids)), ids
    sql = (f"SELECT c.*, t.body AS tokens, t.title AS title_tokens FROM chunks AS c JOIN fts AS t ON t.rowid = c.id"
           f" WHERE c.id IN ({found}) AND {cond} ORDER BY c.id")
    return [_candidate(r, 0.0) for r in db.read(sql, [*first, *params])]


def chunks_by_ids(db: FileStorage, ids: list[int], bm25: dict[int, float] | None = None) -> list[Candidate]:
    """The chunks with these ids (any order), with their bm25 when given (else 0)."""
    if not ids:
        return []
    marks = ",".join("?" * len(ids))
    rows = db.read(
        f"SELECT c.*, f.body AS tokens, f.title AS title_tokens FROM chunks c JOIN fts f ON f.rowid = c.id"
        f" WHERE c.id IN ({marks})", ids
    )
    return [_candidate(r, bm25.get(r["id"], 0.0) if bm25 else 0.0) for r in rows]


def scope_chunks(
    db: FileStorage, *, agent: str, owners: Sequence[str | None], kinds: Sequence[str]
) -> list[tuple[int, str, str]]:
    """(id, sha, text-for-embedding) of every chunk in a scope (dense retrieval)."""
    om, km = ",".join("?" * len(owners)), ",".join("?" * len(kinds))
    rows = db.read(
        f"SELECT id, sha, kind, title, text FROM chunks WHERE agent = ? AND owner IN ({om}) AND kind IN ({km})",
        [agent, *(owner_column(o) for o in owners), *kinds],
    )
    # A section heading is content; a conversation chunk's title ("user message 12") is not.
    return [(r["id"], r["sha"], r["text"] if r["kind"] == CONVERSATION or not r["title"]
             else f"{r['title']}\n{r['text']}") for r in rows]


def corpus_stats(db: FileStorage) -> tuple[int, float]:
    """(number of chunks, average tokens per chunk), cached until the database changes."""
    def count() -> tuple[int, float]:
        row = db.read("SELECT COUNT(*), AVG(ntok) FROM chunks")[0]
        return int(row[0]), float(row[1] or 0.0)

    return db.until_changed("stats", count)


def doc_freqs(db: FileStorage, terms: list[str]) -> dict[str, int]:
    """How many chunks hold each term (any column; tag tokens never collide with words). Cached per
    reading connection until the database changes: `fts_vocab` walks each term's doclist."""
    if not terms:
        return {}
    known: dict[str, int | None] = db.until_changed("dfs", dict)
    if len(known) > 4096:
        known.clear()
    missing = [t for t in dict.fromkeys(terms) if t not in known]
    if missing:
        marks = ",".join("?" * len(missing))
        found = {r["term"]: r["doc"] for r in db.read(f"SELECT term, doc FROM fts_vocab WHERE term IN ({marks})",
                                                      missing)}
        for t in missing:
            known[t] = found.get(t)
    return {t: df for t in terms if (df := known[t]) is not None}
