"""Replaying one interrupted operation's planned files (workspace/journal.py): each file is found
done, written now under compare-and-swap, or - edited by hand after the crash - left alone."""

from __future__ import annotations

import contextlib
import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

from mateclaw_mem.errors import MateclawError
from mateclaw_mem.workspace import blobs

if TYPE_CHECKING:
    from mateclaw_mem.workspace.store_port import StorePort

DATA = "data"  # every planned file's new bytes, one after another (the intent says where)


def noted(path: Path) -> dict[tuple[str, str], set[str]]:
    """(key, rel) -> every hash the store was about to write for the batch (a torn last line skipped)."""
    out: dict[tuple[str, str], set[str]] = {}
    try:
        lines = path.read_text(encoding="utf-8", errors="replace").splitlines()
    except OSError:
        return out
    for line in lines:
        with contextlib.suppress(ValueError, KeyError, TypeError):
            rec = json.loads(line)
            out.setdefault((rec["key"], rec["rel"]), set()).add(rec["after"])
    return out


def replay(store: StorePort, folder: Path, batch: str, planned: dict[str, Any],
            noted: dict[tuple[str, str], set[str]]) -> dict[str, Any]:
    agent, owner, rel = planned["agent"], planned["owner"], planned["rel"]
    key = store.agent_key(agent, owner)
    shown = f"{key}/{rel}"
    binary = blobs.is_binary(rel)
    try:
        current = (blobs.read(store, agent, rel, owner=owner) if binary else store.read(agent, rel, owner=owner)).sha
        if current in {planned["after"]} | noted.get((key, rel), set()):
            return {"file": shown, "state": "done before the crash"}
        if current != planned["before"]:
            return {"file": shown, "state": "left alone: changed by hand after the crash (neither its hash before "
                                            "nor the operation's)"}
        how = {"expected_sha": current, "actor": planned["actor"], "owner": owner, "batch": batch,
               "reason": f"{planned['reason']} (finished at start)".strip()}
        if planned.get("at") is None:
            (blobs.delete(store, agent, rel, **how) if binary else store.delete(agent, rel, **how))
        else:
            offset, length = planned["at"]
            with open(folder / DATA, "rb") as fh:
                fh.seek(offset)
                data = fh.read(length)
            (blobs.write(store, agent, rel, data, **how) if binary
             else store.write(agent, rel, data.decode("utf-8"), **how))
    except MateclawError as exc:
        return {"file": shown, "state": f"left alone: {exc.message}"}
    return {"file": shown, "state": "written now"}


def how(outcome: str, files: list[dict[str, Any]], finish_note: str, error: str | None) -> str:
    made = sum(f["state"] == "written now" for f in files)
    left = sum(f["state"].startswith("left") for f in files)
    parts = []
    if files:
        parts.append(f"{made} of {len(files)} file(s) written now, {len(files) - made - left} done before the crash")
    if left:
        parts.append(f"{left} left alone (edited by hand after the crash)")
    if finish_note:
        parts.append(finish_note)
    if error:
        parts.append(f"not finished: {error}; tried again at the next start")
    return "; ".join(parts) or "nothing was left to do"
