"""What one forget answers: every place it cut (the long-standing fields the faces render), one line
per registered store (`stores`), what it could not cut and why (`shared_kept`), the databases it
scrubbed, and - with a receipt asked for - the byte scan of the whole workspace that proves it.

`status` is "done" only when every holder answered without an error (the tombstone says the same);
"pending" means some store failed and the forget will be run again (`errors` names them).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any


@dataclass
class ForgetReport:
    agent: str
    owner: str | None
    fingerprint: str  # sha256 of the normalised claim: what the tombstone keeps instead of the words
    batch: str  # the run's batch id: `mateclaw-mem undo AGENT --run BATCH` within the undo window
    tombstone_new: bool
    files: list[dict[str, Any]] = field(default_factory=list)  # {"file", "lines"}
    skipped: list[dict[str, Any]] = field(default_factory=list)  # {"file", "reason"}: could not be read
    log_messages: int = 0
    aml_facts: int = 0
    message_index_docs: int = 0  # messages.db (AML Search)
    search_index_rows: int = 0  # index.db conversation chunks (memory files re-ingest on their write)
    facts_forgotten: list[str] = field(default_factory=list)
    history_purged: int = 0
    history_purge_due: str | None = None
    status: str = "pending"  # "done" once every store answered without an error
    stores: list[dict[str, Any]] = field(default_factory=list)  # {"store", "holds", "removed", ...} per holder
    errors: list[dict[str, Any]] = field(default_factory=list)  # {"store", "error"}
    shared_kept: list[dict[str, Any]] = field(default_factory=list)  # {"file", "scope", "why"}: not its to cut
    scrubbed: list[dict[str, Any]] = field(default_factory=list)  # {"db", "fts_optimized", "vacuumed", "wal_bytes"}
    scan: dict[str, Any] | None = None  # the byte scan (a receipt was asked for)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @property
    def places(self) -> int:
        return len(self.files) + self.log_messages + self.aml_facts

    @property
    def removed(self) -> int:
        """Everything every store removed (records, lines, rows, provider memories)."""
        return sum(int(s.get("removed") or 0) for s in self.stores)
