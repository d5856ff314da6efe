"""After the rows are cut: the old words out of the database file itself.

An UPDATE or DELETE only unlinks the old bytes (unless the connection had `secure_delete` on, which
some SQLite builds compile in and others do not). They stay in the page's free space, in freed pages,
in the WAL until a checkpoint, and FTS5 keeps the tokens of deleted rows in its segment b-tree
(`*_data`) until a merge. So each database a forget changed is:

1. every FTS5 table `optimize`d (its segments merged into one, deleted rows' tokens dropped);
2. checkpointed with `wal_checkpoint(TRUNCATE)` (the WAL, which held the old page images, copied
   back and cut to zero bytes);
3. `VACUUM`ed (the file rewritten from its live rows: no free space, no freed pages left) when the
   claim's bytes are still in the file, or always when the claim is not known (a resumed forget), then
   checkpointed again. VACUUM costs about the file's size in writes (measured: 4-7 s per forget at
   64 MB of workspace on 2 loaded cores), so a file whose freed bytes were already zeroed skips it.

A checkpoint needs every other reader to let go of the old snapshot; one that does not within the
busy timeout leaves `wal_bytes` > 0 in the answer (and the byte scan will say whether that matters).
VACUUM builds its copy in SQLite's temp directory (outside the workspace) and removes it.
"""

from __future__ import annotations

import re
import sqlite3
from pathlib import Path
from typing import Any

from mateclaw_mem.db import connect
from mateclaw_mem.memory.forget.scan import occurrences

_FTS5 = ("SELECT name FROM sqlite_master WHERE type = 'table' AND sql LIKE 'CREATE VIRTUAL TABLE%'"
         " AND sql LIKE '%fts5(%'")


def scrub(path: Path, pats: list[re.Pattern[str]] | None = None) -> dict[str, Any]:
    """Optimize, truncate and (when `pats` still match the file, or are not given) vacuum one
    database; what was done, and what is left of its WAL."""
    conn = connect(path)
    vacuumed = False
    try:
        conn.execute("PRAGMA secure_delete = ON")
        fts = [r[0] for r in conn.execute(_FTS5)]
        for name in fts:
            conn.execute(f'INSERT INTO "{name}" ("{name}") VALUES (\'optimize\')')
        _truncate(conn)
        if pats is None or occurrences(path, pats):
            conn.execute("VACUUM")
            vacuumed = True
            _truncate(conn)
    except sqlite3.Error as exc:
        return {"db": path.name, "fts_optimized": [], "vacuumed": vacuumed, "wal_bytes": _size(path, "-wal"),
                "error": f"{type(exc).__name__}: {exc}"}
    finally:
        conn.close()
    return {"db": path.name, "fts_optimized": fts, "vacuumed": vacuumed, "wal_bytes": _size(path, "-wal")}


def _truncate(conn: sqlite3.Connection) -> None:
    for _ in range(3):  # a reader finishing its statement lets the next try through
        if not conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()[0]:
            return


def _size(path: Path, suffix: str) -> int:
    try:
        return (path.parent / (path.name + suffix)).stat().st_size
    except OSError:
        return 0
