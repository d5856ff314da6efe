"""Harness lineage: every version of an agent's system prompt, by SHA-256, in `state.db`.

The harness is AGENTS.md + SOUL.md as the prompt assembles them: the enabled, non-empty ones by
(sort_order, name), as `--- NAME ---` blocks of their stripped bodies joined by a blank line.
Frontmatter is never part of a prompt, so a change to a key a person added does not make a new
version, but disabling SOUL.md does.

Versions come from three places, all idempotent (a hash is registered once, first time wins):
- machine writes: `on_write`, subscribed to the WorkspaceStore;
- hand edits: `on_file_changed`, which the file watcher calls;
- `check`, run on every lineage read and by the learning service, so the answer is right even
  when the daemon (and its watcher) was not running while someone edited a file.
Whichever of them sees it first, the harness the packaged seed files assemble to is recorded with
source `seed`: the seeding often happens before lineage listens (`init`, or `serve` seeding the
default agent), and the watcher or a later read would otherwise call the seed prompt a hand edit.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from functools import cache
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING, Any

from mateclaw_mem.db import SharedConnection
from mateclaw_mem.errors import InvalidInputError, NotFoundError
from mateclaw_mem.markdown import frontmatter
from mateclaw_mem.workspace.listing import ALWAYS_ON
from mateclaw_mem.workspace.store import sha256

if TYPE_CHECKING:
    from mateclaw_mem.clock import Clock
    from mateclaw_mem.workspace.store import WorkspaceStore, WriteEvent

HARNESS_FILES = ("AGENTS.md", "SOUL.md")
MAX_LABEL_CHARS = 200
SEED_SOURCE = "seed"

_SCHEMA = """
CREATE TABLE IF NOT EXISTS harness_versions (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    agent TEXT NOT NULL,
    hash TEXT NOT NULL,
    registered_at TEXT NOT NULL,
    label TEXT,
    source TEXT NOT NULL,
    UNIQUE (agent, hash)
);
"""


@dataclass(frozen=True)
class HarnessVersion:
    hash: str
    label: str | None
    registered_at: str
    source: str  # "seed", the actor of the write that produced it, "hand-edit" (watcher) or "check"

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _enabled(meta: dict[str, Any]) -> bool:
    value = meta.get("enabled", True)
    if isinstance(value, str):
        return value.strip().lower() not in ("false", "no", "off")
    return value is not False


def _order(meta: dict[str, Any], rel: str) -> int:
    value = meta.get("sort_order")
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    if isinstance(value, str) and value.strip().lstrip("-").isdigit():
        return int(value)
    return ALWAYS_ON.index(rel)


def assemble_texts(texts: dict[str, str | None]) -> str | None:
    """The harness from the files' texts (None: the file does not exist); None when neither does."""
    blocks: list[tuple[int, str, str]] = []
    seen = False
    for rel in HARNESS_FILES:
        text = texts.get(rel)
        if text is None:
            continue
        seen = True
        parsed = frontmatter.parse(text)
        body = parsed.body.strip()
        if _enabled(parsed.meta) and body:  # an empty file adds nothing to the prompt
            blocks.append((_order(parsed.meta, rel), rel, body))
    if not seen:
        return None
    # The same blocks, order and separators as the prompt (memory/context/assembly.py) builds them.
    return "\n\n".join(f"--- {rel} ---\n{body}" for _, rel, body in sorted(blocks))


@cache
def seed_hash() -> str | None:
    """The hash of the harness a freshly seeded agent has (the packaged seeds, as written)."""
    seeds = resources.files("mateclaw_mem.workspace") / "seeds"
    texts = {rel: (seeds / rel).read_text(encoding="utf-8") for rel in HARNESS_FILES if (seeds / rel).is_file()}
    text = assemble_texts(texts)  # type: ignore[arg-type]
    return None if text is None else sha256(text)


class HarnessLineage(SharedConnection):
    def __init__(self, store: WorkspaceStore, db_path: Path, clock: Clock) -> None:
        self.store = store
        self.clock = clock
        super().__init__(db_path, _SCHEMA)

    # -- the harness -------------------------------------------------------------------------

    def assemble(self, agent: str) -> str | None:
        """The harness text, or None when the agent has neither file."""
        texts = {}
        for rel in HARNESS_FILES:
            snap = self.store.read(agent, rel)
            texts[rel] = snap.text if snap.exists else None
        return assemble_texts(texts)

    def current_hash(self, agent: str) -> str | None:
        text = self.assemble(agent)
        return None if text is None else sha256(text)

    def check(self, agent: str, *, source: str = "check") -> str | None:
        """Hash the current harness; register it if it is new. Returns the hash (None: no harness)."""
        digest = self.current_hash(agent)
        if digest is not None:
            self._register(agent, digest, SEED_SOURCE if digest == seed_hash() else source)
        return digest

    def _register(self, agent: str, digest: str, source: str) -> None:
        at = self.clock.now().isoformat(timespec="seconds")
        with self._write() as conn:
            conn.execute(
                "INSERT OR IGNORE INTO harness_versions (agent, hash, registered_at, source) VALUES (?, ?, ?, ?)",
                (agent, digest, at, source),
            )

    # -- change feeds ------------------------------------------------------------------------

    def on_write(self, event: WriteEvent) -> None:
        """WorkspaceStore listener: a machine (or CLI/API person) write of AGENTS.md or SOUL.md."""
        if event.owner is None and event.rel in HARNESS_FILES:
            self.check(event.agent, source=event.actor)

    def on_file_changed(self, agent: str, owner: str | None, rel: str, deleted: bool) -> None:
        """File-watcher callback for hand edits (and deletions) on disk."""
        if owner is None and rel in HARNESS_FILES:
            self.check(agent, source="hand-edit")

    # -- reads and labels --------------------------------------------------------------------

    def _require_agent(self, agent: str) -> None:
        if not self.store.agent_dir(agent).is_dir():
            raise NotFoundError(f"agent {agent!r} does not exist (create it with `mateclaw-mem init {agent}`)")

    def versions(self, agent: str, *, check: bool = True) -> dict[str, Any]:
        """`{versions: [{hash, label, registered_at, source}], currentHash}`, oldest first.

        `check=False` lists what was recorded without registering the current version (currentHash
        is still computed from the files)."""
        self._require_agent(agent)
        current = self.check(agent) if check else self.current_hash(agent)
        with self._lock:
            rows = self._conn.execute(
                "SELECT hash, label, registered_at, source FROM harness_versions WHERE agent = ? ORDER BY seq",
                (agent,),
            ).fetchall()
        return {
            "versions": [HarnessVersion(r["hash"], r["label"], r["registered_at"], r["source"]).to_dict()
                         for r in rows],
            "currentHash": current,
        }

    def label(self, agent: str, digest: str | None, label: str) -> dict[str, Any]:
        """Label a version (default: the current one). `digest` may be a unique prefix of 8+ characters.
        An empty label clears it."""
        self._require_agent(agent)
        if not isinstance(label, str):
            raise InvalidInputError("label must be text")
        label = " ".join(label.split())
        if len(label) > MAX_LABEL_CHARS:
            raise InvalidInputError(f"label is {len(label)} characters; the limit is {MAX_LABEL_CHARS}")
        current = self.check(agent)
        if digest is None or not digest.strip():
            if current is None:
                raise NotFoundError(f"agent {agent!r} has no AGENTS.md or SOUL.md to label")
            digest = current
        digest = digest.strip().lower()
        if len(digest) < 8 or any(c not in "0123456789abcdef" for c in digest):
            raise InvalidInputError(f"hash {digest!r} is not a SHA-256 hex digest (or a prefix of 8+ of its digits)")
        with self._write() as conn:
            rows = conn.execute(
                "SELECT hash FROM harness_versions WHERE agent = ? AND hash LIKE ?", (agent, digest + "%")
            ).fetchall()
            if not rows:
                raise NotFoundError(f"agent {agent!r} has no harness version {digest[:16]}")
            if len(rows) > 1:
                raise InvalidInputError(f"hash prefix {digest!r} matches {len(rows)} versions; give more digits")
            full = rows[0]["hash"]
            conn.execute("UPDATE harness_versions SET label = ? WHERE agent = ? AND hash = ?",
                         (label or None, agent, full))
            row = conn.execute(
                "SELECT hash, label, registered_at, source FROM harness_versions WHERE agent = ? AND hash = ?",
                (agent, full),
            ).fetchone()
        return HarnessVersion(row["hash"], row["label"], row["registered_at"], row["source"]).to_dict()
