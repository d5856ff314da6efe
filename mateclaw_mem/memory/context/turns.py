"""Turn bookkeeping: for every context built, what memory it carried -- so "what did the agent know
when it answered?" has an answer (`GET /api/v1/memory/{agentId}/turns/{turnId}/memory`).

A turn records ids and hashes, never copies: the files by path and content sha (the store's sha, so
the version can be found in history), structured entries by type, key and a hash of their text,
facts by id and a hash of their text, recalled provider items by source and a hash. A forget that
removes a claim from the files therefore has nothing to remove here. Stored in `log.db`
(`context_turns`), one row per build, with the owner it was built for: a turn is only ever read
back by the same (agent, owner).
"""

from __future__ import annotations

import hashlib
import json
import uuid
from dataclasses import asdict, dataclass, field
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from mateclaw_mem.db import SharedConnection, owner_column

if TYPE_CHECKING:
    from mateclaw_mem.clock import Clock

_SCHEMA = """
CREATE TABLE IF NOT EXISTS context_turns (
    id TEXT PRIMARY KEY,
    agent TEXT NOT NULL,
    owner TEXT NOT NULL,
    at_ms INTEGER NOT NULL,
    conversation TEXT NOT NULL DEFAULT '',
    memoryless INTEGER NOT NULL DEFAULT 0,
    memory TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS context_turns_agent ON context_turns (agent, owner, at_ms);
"""


def text_hash(text: str) -> str:
    """What identifies a version of a short text without keeping it."""
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def new_turn_id() -> str:
    return f"turn-{uuid.uuid4().hex[:20]}"


@dataclass
class TurnMemory:
    """What one context build injected (lists of small dicts: ids and hashes)."""

    turn_id: str
    agent: str
    owner: str | None
    at_ms: int
    conversation_id: str | None = None
    memoryless: bool = False
    files: list[dict[str, Any]] = field(default_factory=list)  # {file, sha, personal}
    entries: list[dict[str, Any]] = field(default_factory=list)  # {type, key, sha, block}
    facts: list[dict[str, Any]] = field(default_factory=list)  # {id, sha, file}
    recalled: list[dict[str, Any]] = field(default_factory=list)  # {provider, source, sha}
    at: str = ""  # at_ms in the workspace's time zone, as read back

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


class TurnLog(SharedConnection):
    def __init__(self, path: Path, clock: Clock) -> None:
        super().__init__(path, _SCHEMA)
        self.clock = clock

    def now_ms(self) -> int:
        return int(self.clock.now().timestamp() * 1000)

    def record(self, turn: TurnMemory) -> None:
        memory = {"files": turn.files, "entries": turn.entries, "facts": turn.facts, "recalled": turn.recalled}
        with self._write() as conn:
            conn.execute(
                "INSERT INTO context_turns(id, agent, owner, at_ms, conversation, memoryless, memory)"
                " VALUES (?,?,?,?,?,?,?)",
                (turn.turn_id, turn.agent, owner_column(turn.owner), turn.at_ms, turn.conversation_id or "",
                 int(turn.memoryless), json.dumps(memory, ensure_ascii=False, separators=(",", ":"))))

    def first_today(self, agent: str, owner: str | None) -> bool:
        """True when no context was built for (agent, owner) yet today (the workspace's day)."""
        midnight = self.clock.now().replace(hour=0, minute=0, second=0, microsecond=0)
        with self._lock:
            row = self._conn.execute("SELECT 1 FROM context_turns WHERE agent=? AND owner=? AND at_ms>=? LIMIT 1",
                                     (agent, owner_column(owner), int(midnight.timestamp() * 1000))).fetchone()
        return row is None

    def get(self, agent: str, owner: str | None, turn_id: str) -> TurnMemory | None:
        """The turn, if it was built for this very (agent, owner); another owner's turn is None."""
        with self._lock:
            r = self._conn.execute("SELECT * FROM context_turns WHERE id=? AND agent=? AND owner=?",
                                   (turn_id, agent, owner_column(owner))).fetchone()
        if r is None:
            return None
        memory = json.loads(r["memory"])
        at = datetime.fromtimestamp(r["at_ms"] / 1000, tz=self.clock.tz).isoformat(timespec="seconds")
        return TurnMemory(r["id"], r["agent"], r["owner"] or None, r["at_ms"], r["conversation"] or None,
                          bool(r["memoryless"]), memory.get("files", []), memory.get("entries", []),
                          memory.get("facts", []), memory.get("recalled", []), at)
