"""Per-message search over the conversation log, in `workspace/.mateclaw/messages.db`.

Derived data: everything here is rebuilt from `log.db` by `rebuild(log)`, and `sync(log)` catches
up on whatever the log holds beyond the stored watermark (so a crash between the log commit and
indexing loses nothing - the next sync indexes it). Its own file so it never contends with the
workspace file index in `index.db`.

Each message is one document with fields (all tokenized by `index.tokenizer`):

- `body`: the message's own text (without its "Speaker:" prefix).
- `ctx`:  the turn just before it, when that turn is another speaker's question - an answer such
  as "Luna and Oliver!" shares no words with "What are your cats called?".
- `nb`:   the neighbouring turns (previous and next), low weight, for recall.
- `dt`:   month, year and weekday of the message time, so "in May 2023" can match.

FTS5 only finds candidates (any query token in any field of the owner's messages); the ranking is
BM25F computed in Python from the stored field tokens, because FTS5's built-in bm25() has fixed
k1/b and computes IDF over all owners together. See `Ranking` for the knobs and why each exists.
"""

from __future__ import annotations

import hashlib
import math
import re
import threading
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Protocol

from mateclaw_mem.db import connect
from mateclaw_mem.index.tokenizer import STOPWORDS, fts_query, tokenize

_SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS docs (
    id INTEGER PRIMARY KEY,            -- the log's message id
    agent TEXT NOT NULL,
    owner TEXT NOT NULL,
    conversation_id TEXT NOT NULL,
    role TEXT NOT NULL,
    speaker TEXT,                      -- parsed "Name:" prefix, NULL when there was none
    content TEXT NOT NULL,             -- the message exactly as stored in the log
    ts_ms INTEGER NOT NULL,
    is_question INTEGER NOT NULL,
    body_len INTEGER NOT NULL,
    ctx_len INTEGER NOT NULL,
    nb_len INTEGER NOT NULL
);
CREATE INDEX IF NOT EXISTS docs_by_owner ON docs (agent, owner, id);
CREATE INDEX IF NOT EXISTS docs_by_conversation ON docs (agent, owner, conversation_id, id);
CREATE VIRTUAL TABLE IF NOT EXISTS fts USING fts5(okey, body, ctx, nb, dt, tokenize='unicode61');
"""

_FIELDS = ("body", "ctx", "nb", "dt")
# "Caroline: text" - a short name before a colon. Up to four words and no sentence punctuation,
# so "Note: buy milk" is a false positive we accept (it only changes how the line is displayed).
_SPEAKER_RE = re.compile(r"^([^\s:?!.,][^:?!\n]{0,39}?):\s+(?=\S)")
_MONTHS = ("january", "february", "march", "april", "may", "june", "july", "august", "september",
           "october", "november", "december")
_WEEKDAYS = ("monday", "tuesday", "wednesday", "thursday", "friday", "saturday", "sunday")


class LoggedMessage(Protocol):
    """A message as the log stores it (`conversations.log.StoredMessage` fits)."""

    @property
    def id(self) -> int: ...
    @property
    def agent(self) -> str: ...
    @property
    def owner(self) -> str: ...
    @property
    def conversation_id(self) -> str: ...
    @property
    def role(self) -> str: ...
    @property
    def content(self) -> str: ...
    @property
    def ts_ms(self) -> int: ...


class MessageSource(Protocol):
    """What the index needs from the conversation log (`conversations.log.ConversationLog` fits).

    A protocol rather than an import: `index/` sits below `conversations/` in the layer order.
    """

    def since(self, after_id: int, *, limit: int = 1000) -> Sequence[LoggedMessage]: ...


def split_speaker(content: str) -> tuple[str | None, str]:
    """("Caroline", "hi") for "Caroline: hi"; (None, content) when there is no speaker prefix."""
    m = _SPEAKER_RE.match(content)
    if m and len(m.group(1).split()) <= 4:
        return m.group(1).strip(), content[m.end() :]
    return None, content


def _is_question(text: str) -> bool:
    # Image captions are appended as "[shares image: ...]"; the turn is a question when its
    # spoken part ends with a question mark.
    spoken = re.sub(r"\[shares image:[^\]]*\]\s*$", "", text).rstrip()
    return spoken.endswith("?")


def _date_tokens(ts_ms: int) -> list[str]:
    d = datetime.fromtimestamp(ts_ms / 1000, tz=UTC)
    return tokenize(f"{_MONTHS[d.month - 1]} {d.year} {_WEEKDAYS[d.weekday()]}")


def owner_key(agent: str, owner: str) -> str:
    """One FTS token per (agent, owner): exact, so owners sharing a prefix never match each other."""
    return "k" + hashlib.sha256(f"{agent}\x00{owner}".encode()).hexdigest()[:32]


@dataclass(frozen=True)
class Ranking:
    """Ranking knobs. Defaults were chosen on LoCoMo dev as whole features, not per question."""

    k1: float = 1.2
    # Per-field length normalisation. Short chat turns: a 6-word "Thanks, that's sweet!" must not
    # outrank an informative 40-word turn just for being short, so b is well below the usual 0.75.
    b: dict[str, float] = field(default_factory=lambda: {"body": 0.3, "ctx": 0.3, "nb": 0.3, "dt": 0.0})
    weights: dict[str, float] = field(
        default_factory=lambda: {"body": 1.0, "ctx": 0.5, "nb": 0.15, "dt": 0.3}
    )
    question_penalty: float = 0.85  # a turn that only asks rarely holds the answer
    speaker_boost: float = 1.15  # the question names who said it
    option_weight: float = 0.3  # multiple-choice texts: hints, not the question


@dataclass(frozen=True)
class Hit:
    id: int
    agent: str
    owner: str
    conversation_id: str
    role: str
    speaker: str | None
    content: str
    ts_ms: int
    score: float


@dataclass
class _Doc:
    id: int
    speaker: str | None
    is_question: bool
    fields: dict[str, Counter[str]]
    lens: dict[str, int]


class MessageIndex:
    """Thread-safe (one connection behind a lock); `sync` is idempotent and crash-safe."""

    def __init__(self, db_path: Path, ranking: Ranking | None = None) -> None:
        self.path = db_path
        self.ranking = ranking or Ranking()
        self._lock = threading.RLock()
        self._conn = connect(db_path)
        with self._lock:
            self._conn.executescript(_SCHEMA)

    # ------------------------------------------------------------------ indexing

    def watermark(self) -> int:
        with self._lock:
            row = self._conn.execute("SELECT value FROM meta WHERE key = 'watermark'").fetchone()
        return int(row["value"]) if row else 0

    def sync(self, log: MessageSource, *, batch: int = 1000) -> int:
        """Index every log message after the watermark; returns how many were indexed."""
        done = 0
        with self._lock:
            while True:
                self._conn.execute("BEGIN IMMEDIATE")
                try:
                    # Read the watermark inside the write transaction: another process may have
                    # indexed since we last looked.
                    row = self._conn.execute(
                        "SELECT value FROM meta WHERE key = 'watermark'"
                    ).fetchone()
                    mark = int(row["value"]) if row else 0
                    msgs = log.since(mark, limit=batch)
                    for m in msgs:
                        self._add(m)
                    if msgs:
                        self._conn.execute(
                            "INSERT INTO meta (key, value) VALUES ('watermark', ?)"
                            " ON CONFLICT(key) DO UPDATE SET value = excluded.value",
                            (str(msgs[-1].id),),
                        )
                except BaseException:
                    self._conn.execute("ROLLBACK")
                    raise
                self._conn.execute("COMMIT")
                done += len(msgs)
                if len(msgs) < batch:
                    return done

    def rebuild(self, log: MessageSource) -> int:
        """Drop everything derived and index the whole log again."""
        with self._lock:
            self._conn.executescript(
                "DROP TABLE IF EXISTS fts; DROP TABLE IF EXISTS docs; DELETE FROM meta;"
            )
            self._conn.executescript(_SCHEMA)
            return self.sync(log)

    def _add(self, m: LoggedMessage) -> None:
        conn = self._conn
        agent, owner, conv = m.agent, m.owner, m.conversation_id
        speaker, text = split_speaker(m.content)
        body = tokenize(text)
        prev = conn.execute(
            "SELECT d.id, d.speaker, d.content, d.is_question FROM docs d"
            " WHERE d.agent = ? AND d.owner = ? AND d.conversation_id = ? ORDER BY d.id DESC LIMIT 1",
            (agent, owner, conv),
        ).fetchone()
        ctx: list[str] = []
        nb: list[str] = []
        if prev is not None:
            prev_text = split_speaker(prev["content"])[1]
            prev_toks = tokenize(prev_text)
            nb = list(prev_toks)
            if prev["is_question"] and prev["speaker"] != speaker:
                ctx = prev_toks
            # The previous turn gains this one as its "next" neighbour.
            old = conn.execute("SELECT nb FROM fts WHERE rowid = ?", (prev["id"],)).fetchone()
            new_nb = (old["nb"] + " " if old and old["nb"] else "") + " ".join(body)
            conn.execute("UPDATE fts SET nb = ? WHERE rowid = ?", (new_nb, prev["id"]))
            conn.execute("UPDATE docs SET nb_len = ? WHERE id = ?", (len(new_nb.split()), prev["id"]))
        conn.execute(
            "INSERT INTO docs (id, agent, owner, conversation_id, role, speaker, content, ts_ms,"
            " is_question, body_len, ctx_len, nb_len) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (
                m.id,
                agent,
                owner,
                conv,
                m.role,
                speaker,
                m.content,
                m.ts_ms,
                int(_is_question(text)),
                len(body),
                len(ctx),
                len(nb),
            ),
        )
        conn.execute(
            "INSERT INTO fts (rowid, okey, body, ctx, nb, dt) VALUES (?, ?, ?, ?, ?, ?)",
            (
                m.id,
                owner_key(agent, owner),
                " ".join(body),
                " ".join(ctx),
                " ".join(nb),
                " ".join(_date_tokens(m.ts_ms)),
            ),
        )

    # ------------------------------------------------------------------ search

    def search(
        self,
        agent: str,
        owner: str,
        query: str,
        *,
        limit: int,
        options: Iterable[str] = (),
    ) -> list[Hit]:
        """The owner's messages best matching `query`, best first, at most `limit`."""
        r = self.ranking
        qtoks = tokenize(query)
        content_toks = [t for t in qtoks if t not in STOPWORDS] or qtoks
        qweights: dict[str, float] = {}
        for t in content_toks:
            qweights[t] = 1.0
        for opt in options:
            for t in tokenize(opt):
                if t not in STOPWORDS and t not in qweights:
                    qweights[t] = r.option_weight
        if not qweights or limit <= 0:
            return []
        okey = owner_key(agent, owner)
        match = f'okey:"{okey}" AND {{body ctx nb dt}}: ({fts_query(list(qweights))})'
        with self._lock:
            stats = self._conn.execute(
                "SELECT COUNT(*) AS n, AVG(body_len) AS body, AVG(ctx_len) AS ctx,"
                " AVG(nb_len) AS nb FROM docs WHERE agent = ? AND owner = ?",
                (agent, owner),
            ).fetchone()
            if not stats["n"]:
                return []
            rows = self._conn.execute(
                "SELECT f.rowid AS id, f.body, f.ctx, f.nb, f.dt, d.agent, d.owner, d.speaker,"
                " d.is_question FROM fts f JOIN docs d ON d.id = f.rowid WHERE fts MATCH ?",
                (match,),
            ).fetchall()
        # Exact owner check on top of the hashed key: isolation must not rest on a hash alone.
        rows = [row for row in rows if row["agent"] == agent and row["owner"] == owner]
        if not rows:
            return []
        n_docs = stats["n"]
        avg = {
            "body": max(stats["body"] or 1.0, 1.0),
            "ctx": max(stats["ctx"] or 1.0, 1.0),
            "nb": max(stats["nb"] or 1.0, 1.0),
            "dt": 3.0,
        }
        docs = []
        df: Counter[str] = Counter()
        for row in rows:
            fields = {f: Counter(row[f].split()) for f in _FIELDS}
            lens = {f: sum(c.values()) for f, c in fields.items()}
            docs.append(_Doc(row["id"], row["speaker"], bool(row["is_question"]), fields, lens))
            # Every message holding a query token in any field is a candidate, so the document
            # frequency of a query token within this owner's messages is exact from the candidates.
            for t in qweights:
                if t in fields["body"]:
                    df[t] += 1
        idf = {
            t: math.log(1.0 + (n_docs - df[t] + 0.5) / (df[t] + 0.5)) for t in qweights
        }
        speakers = {d.speaker for d in docs if d.speaker}
        named = {s for s in speakers if set(tokenize(s)) & set(qtoks)}

        scored: list[tuple[float, int]] = []
        for i, d in enumerate(docs):
            s = 0.0
            for t, qw in qweights.items():
                tf = 0.0
                for f in _FIELDS:
                    c = d.fields[f].get(t)
                    if c:
                        b = r.b[f]
                        norm = 1.0 - b + b * d.lens[f] / avg[f]
                        tf += r.weights[f] * c / norm
                if tf:
                    s += qw * idf[t] * tf / (r.k1 + tf)
            if d.is_question:
                s *= r.question_penalty
            if d.speaker in named:
                s *= r.speaker_boost
            scored.append((s, i))
        scored.sort(key=lambda x: (-x[0], docs[x[1]].id))
        top = [(s, docs[i].id) for s, i in scored[:limit] if s > 0]
        return self._hits(top)

    def _hits(self, top: list[tuple[float, int]]) -> list[Hit]:
        if not top:
            return []
        ids = [i for _, i in top]
        with self._lock:
            rows = self._conn.execute(
                f"SELECT * FROM docs WHERE id IN ({','.join('?' * len(ids))})", ids
            ).fetchall()
        by_id = {row["id"]: row for row in rows}
        return [
            Hit(
                id=i,
                agent=by_id[i]["agent"],
                owner=by_id[i]["owner"],
                conversation_id=by_id[i]["conversation_id"],
                role=by_id[i]["role"],
                speaker=by_id[i]["speaker"],
                content=by_id[i]["content"],
                ts_ms=by_id[i]["ts_ms"],
                score=round(s, 6),
            )
            for s, i in top
        ]

    def close(self) -> None:
        with self._lock:
            self._conn.close()


def rebuild(log: MessageSource, db_path: Path) -> int:
    """Rebuild `messages.db` at `db_path` from the log; returns the number of messages indexed."""
    index = MessageIndex(db_path)
    try:
        return index.rebuild(log)
    finally:
        index.close()
