"""Facts and feedback in a snapshot (`mate.memory.snapshot-extras: [facts]`): `facts/events.jsonl`.

A fact's id hashes its agent (projection.fact_id), so an event cannot travel by id: each line carries
what the id is made of (owner, file, section, key or text) and the event (kind, time, actor, note),
and the import computes the id the same fact has in the target agent. Events are a log: one already
there (same fact, kind and time) is not added twice, so importing a snapshot again adds nothing.
"""

from __future__ import annotations

import json
from typing import Any

from mateclaw_mem.errors import InvalidInputError
from mateclaw_mem.memory.facts.projection import Claim, fact_id
from mateclaw_mem.memory.facts.storage import FactDB

EVENTS = "facts/events.jsonl"
_FIELDS = ("file", "section", "key", "text", "kind")


class FactEvents:
    """The sidecar Transfer carries as `facts/events.jsonl` (workspace code never sees facts.db)."""

    name = EVENTS

    def __init__(self, db: FactDB) -> None:
        self.db = db

    def export(self, agent: str) -> bytes:
        lines = [json.dumps(e, ensure_ascii=False, sort_keys=True) for e in self.db.agent_events(agent)]
        return ("\n".join(lines) + "\n").encode("utf-8") if lines else b""

    def plan(self, data: bytes) -> list[dict[str, Any]]:
        """The events of the file, checked line by line; a bad line refuses the snapshot."""
        out = []
        for n, line in enumerate(data.decode("utf-8").splitlines(), 1):
            if not line.strip():
                continue
            try:
                event = json.loads(line)
            except ValueError:
                event = None
            if not isinstance(event, dict) or not all(isinstance(event.get(k), str) for k in _FIELDS) \
                    or not isinstance(event.get("at_ms"), int) or not event["kind"]:
                raise InvalidInputError(f"{EVENTS} line {n} is not a fact event (file, section, key, text, kind,"
                                        " at_ms); refusing the whole archive")
            owner = event.get("owner")
            event["owner"] = owner if isinstance(owner, str) and owner else None
            out.append(event)
        return out

    def apply(self, agent: str, events: list[dict[str, Any]], *, dry_run: bool = False) -> int:
        """Add the events to the target agent's log (not with `dry_run`); returns how many are new."""
        rows = []
        for e in events:
            claim = Claim(file=e["file"], section=e["section"], line=0, key=e["key"], value="", text=e["text"])
            rows.append((fact_id(agent, e["owner"], claim), agent, e["owner"], e["kind"], e["at_ms"],
                         str(e.get("actor", "")), str(e.get("note", ""))))
        have = self.db.events(sorted({r[0] for r in rows}))
        seen = {(fid, ev.kind, ev.at_ms) for fid, evs in have.items() for ev in evs}
        new = []
        for r in rows:
            if (r[0], r[3], r[4]) not in seen:
                seen.add((r[0], r[3], r[4]))
                new.append(r)
        if not dry_run and new:
            self.db.add_events(new)
        return len(new)
