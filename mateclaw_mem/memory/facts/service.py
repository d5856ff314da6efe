"""The facts layer: projection kept fresh by the ingest pipeline, trust from the event log,
feedback / confirm / edit, and recall by relevance within a budget.

    facts = FactService(settings, store, clock)
    facts.refresh(agent, owner, rel)          # the ingest pipeline calls this for every changed file
    facts.rebuild()                           # `fact.projection-rebuild-cron`: reconcile with the disk
    facts.list(agent, owner, query=None)      # views with trust, uses, last confirmed / used
    facts.feedback(agent, owner, id, "helpful" | "unhelpful")
    facts.confirm(agent, owner, id) / facts.edit(agent, owner, id, text)
    facts.recall(agent, owner, query, budget_chars=...)   # relevant, most trusted first; counts a use

Owner isolation: a fact belongs to (agent, owner); every call names both and never sees another
owner's facts (the shared files are owner None).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from dataclasses import asdict, dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any

from mateclaw_mem.errors import ConflictError, InvalidInputError, NotFoundError
from mateclaw_mem.markdown import frontmatter
from mateclaw_mem.markdown import structured as fmt
from mateclaw_mem.markdown.edits import Edit, apply_edits, line_key
from mateclaw_mem.memory.facts.projection import STRUCTURED_PREFIX, claims, fact_id, is_source
from mateclaw_mem.memory.facts.storage import FactDB, Row
from mateclaw_mem.memory.facts.trust import Event, trust
from mateclaw_mem.workspace import oversized
from mateclaw_mem.workspace.walk import GLOBAL, scope_of

if TYPE_CHECKING:
    from mateclaw_mem.clock import Clock
    from mateclaw_mem.settings import Settings
    from mateclaw_mem.workspace.store import WorkspaceStore

log = logging.getLogger(__name__)
VERDICTS = ("helpful", "unhelpful")
RECALL_CANDIDATES = 24
MIN_RECALL_TRUST = 0.05
BIG_FILE_CHARS = 65_536  # a file this long is parsed again only when its hash changed (refresh)


@dataclass(frozen=True)
class FactView:
    id: str
    agent: str
    owner: str | None
    scope: str  # "personal" (an owner's) | "team" (the agent's shared files) | "global" (`global/`)
    file: str
    section: str
    line: int
    key: str
    value: str
    text: str
    trust: float
    uses: int
    helpful: int
    unhelpful: int
    created: str
    updated: str
    last_confirmed: str | None
    last_used: str | None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


class FactService:
    def __init__(self, settings: Settings, store: WorkspaceStore, clock: Clock, *, db: FactDB | None = None) -> None:
        self.settings = settings
        self.store = store
        self.clock = clock
        self.db = db or FactDB(settings.facts_db)
        self._listeners: list[Callable[[str, str | None], None]] = []
        self._held: set[tuple[str, str | None]] | None = None  # during a rebuild: who changed
        # (agent, owner, rel) -> (sha, facts) of a big file as last projected: not parsed again unchanged
        self._projected: dict[tuple[str, str | None, str], tuple[str, int]] = {}
        self._refreshing = threading.RLock()

    def add_listener(self, fn: Callable[[str, str | None], None]) -> None:
        """`fn(agent, owner)` after a file of theirs was reprojected (once per owner per rebuild);
        the contradiction inbox re-detects from here. A failing listener never fails the projection."""
        self._listeners.append(fn)

    def _changed(self, agent: str, owner: str | None) -> None:
        if self._held is not None:
            self._held.add((agent, owner))
            return
        for fn in self._listeners:
            try:
                fn(agent, owner)
            except Exception:  # a listener's bug must not stop the one ingest pipeline
                log.exception("fact listener failed for %s/%s", agent, owner or "-")

    @property
    def enabled(self) -> bool:
        return self.settings.mate.memory.fact.projection_enabled

    @property
    def half_life(self) -> float:
        return float(self.settings.mate.memory.fact.trust_half_life_days)

    def close(self) -> None:
        self.db.close()

    def require_enabled(self) -> None:
        """The faces' guard: with projection off there are no facts to show or act on (409 / exit 4)."""
        if not self.enabled:
            raise ConflictError("fact projection is off: set mate.memory.fact.projection-enabled: true "
                                "in the settings and restart to use facts")

    def _now(self) -> int:
        return int(self.clock.now().timestamp() * 1000)

    def _fmt(self, ms: int | None) -> str | None:
        return datetime.fromtimestamp(ms / 1000, tz=self.clock.tz).isoformat(timespec="seconds") if ms else None

    # -- projection ------------------------------------------------------------------------------

    def refresh(self, agent: str, owner: str | None, rel: str) -> int:
        """Reproject one file (a missing file has no facts). Returns how many it has."""
        if not is_source(rel):
            return 0
        with self._refreshing:  # one at a time: replace_file writes a big file in several transactions
            return self._refresh(agent, owner, rel)

    def _refresh(self, agent: str, owner: str | None, rel: str) -> int:
        snap = self.store.read(agent, rel, owner=owner)
        key = (agent, owner, rel)
        done = self._projected.get(key)
        if done is not None and done[0] == snap.sha and self.db.file_count(agent, owner, rel) == done[1]:
            return done[1]  # a big file projected as it is now: the scheduled rebuild costs no parse
        # An oversized file's facts come from its head: the whole would hold facts.db's lock for minutes.
        body = oversized.head(rel, snap.body, self.store.file_max_bytes, reader="fact projection")
        found = claims(rel, body) if snap.exists else []
        rows, seen = [], set()
        for c in found:
            fid = fact_id(agent, owner, c)
            if fid in seen:  # the same claim twice in one file is one fact
                continue
            seen.add(fid)
            rows.append(Row(fid, agent, owner, rel, c.section, c.line, c.key, c.value, c.text, 0, 0))
        self.db.replace_file(agent, owner, rel, rows, self._now())
        if len(snap.text) > BIG_FILE_CHARS:
            self._projected[key] = (snap.sha, len(rows))
        self._changed(agent, owner)
        return len(rows)

    def rebuild(self, agent: str | None = None) -> dict[str, int]:
        """Reconcile the projection with every source file on disk (and drop files that are gone)."""
        on_disk = {(f.agent, f.owner, f.rel) for f in self.store.walk_files(agent) if is_source(f.rel)}
        total, dropped, self._held = 0, 0, set()
        try:
            for a, o, rel in sorted(on_disk, key=lambda k: (k[0], k[1] or "", k[2])):
                try:
                    total += self.refresh(a, o, rel)
                except InvalidInputError as exc:  # not UTF-8, binary: its facts stay as they were
                    log.warning("facts of %s/%s%s not reprojected: %s", a, f"{o}/" if o else "", rel, exc)
            for key in self.db.files(agent):
                if key not in on_disk:
                    self.db.replace_file(*key, [], self._now())
                    self._held.add(key[:2])
                    dropped += 1
        finally:
            held, self._held = self._held, None
        # Owners first, then shared (whose listeners may fan out to every owner again).
        for a, o in sorted(held, key=lambda k: (k[0], k[1] is None, k[1] or "")):
            self._changed(a, o)
        return {"files": len(on_disk), "facts": total, "files_dropped": dropped}

    # -- reading ---------------------------------------------------------------------------------

    def _views(self, rows: list[Row]) -> list[FactView]:
        events = self.db.events([r.id for r in rows])
        now = self._now()
        out = []
        for r in rows:
            ev = events.get(r.id, [])
            out.append(self._view(r, ev, now))
        return out

    def _view(self, r: Row, ev: list[Event], now: int) -> FactView:
        def last(kind: str) -> int | None:
            return max((e.at_ms for e in ev if e.kind == kind), default=None)

        return FactView(
            r.id, r.agent, r.owner, scope_of(r.agent, r.owner), r.file, r.section, r.line, r.key, r.value,
            r.text, trust(ev, first_seen_ms=r.first_seen_ms, changed_ms=r.changed_ms, now_ms=now,
                          half_life_days=self.half_life),
            sum(1 for e in ev if e.kind == "use"), sum(1 for e in ev if e.kind == "helpful"),
            sum(1 for e in ev if e.kind == "unhelpful"), self._fmt(r.first_seen_ms) or "",
            self._fmt(r.changed_ms) or "", self._fmt(last("confirm")), self._fmt(last("use")),
        )

    def list(self, agent: str, owner: str | None, *, query: str | None = None, file: str | None = None,
             limit: int = 500) -> list[FactView]:
        if query:  # relevant ones first; `file` narrows them, it never widens the match
            rows = [r for r, _ in self._match(agent, owner, query, limit) if file is None or r.file == file]
        else:
            rows = self.db.list(agent, owner, file=file)[:limit]
        return self._views(rows)

    def _match(self, agent: str, owner: str | None, query: str, limit: int) -> list[tuple[Row, float]]:
        """The (agent, owner)'s matches and the GLOBAL ones (every agent and owner sees those), best first."""
        found = self.db.match(agent, owner, query, limit)
        if agent != GLOBAL:
            found = sorted([*found, *self.db.match(GLOBAL, None, query, limit)], key=lambda x: -x[1])[:limit]
        return found

    def get(self, agent: str, owner: str | None, fid: str) -> FactView:
        row = self.db.get(fid)
        if row is None or row.agent != agent or row.owner != owner:
            raise NotFoundError(f"no fact {fid!r} for agent {agent!r}" + (f" (owner {owner})" if owner else ""))
        return self._views([row])[0]

    def history(self, agent: str, owner: str | None, fid: str) -> list[dict[str, Any]]:
        self.get(agent, owner, fid)
        return [{**h, "at": self._fmt(h.pop("at_ms"))} for h in self.db.history(fid)]

    # -- what people and use do ------------------------------------------------------------------

    def feedback(self, agent: str, owner: str | None, fid: str, verdict: str, *, actor: str = "person",
                 note: str = "") -> FactView:
        verdict = verdict.strip().lower()
        if verdict not in VERDICTS:
            raise InvalidInputError(f"feedback {verdict!r}: use HELPFUL or UNHELPFUL")
        self.get(agent, owner, fid)
        self.db.add_event(fid, agent, owner, verdict, self._now(), actor=actor, note=note[:300])
        return self.get(agent, owner, fid)

    def confirm(self, agent: str, owner: str | None, fid: str, *, actor: str = "person") -> FactView:
        self.get(agent, owner, fid)
        self.db.add_event(fid, agent, owner, "confirm", self._now(), actor=actor)
        return self.get(agent, owner, fid)

    def edit(self, agent: str, owner: str | None, fid: str, text: str, *, actor: str = "person") -> FactView:
        """Replace the fact's line in its file with `text`, through the writer, as the person's words."""
        text = " ".join(text.split())
        if not text:
            raise InvalidInputError("an edit needs the new text (to remove a fact, forget it)")
        view = self.get(agent, owner, fid)
        snap = self.store.read(agent, view.file, owner=owner)
        body = _reworded(view, snap.body, text, f"{self.clock.now():%Y-%m-%d}")
        self.store.write(agent, view.file, frontmatter.with_body(snap.text, body), expected_sha=snap.sha,
                         actor=actor, owner=owner, reason=f"fact edit {fid}")
        self.refresh(agent, owner, view.file)
        new = [r for r in self.db.list(agent, owner, file=view.file) if text in r.text]
        target = new[0].id if new else fid
        self.db.add_event(target, agent, owner, "edit", self._now(), actor=actor)
        return self.get(agent, owner, target)

    def record_sources(self, agent: str, owner: str | None, items: list[tuple[str, str, list[str]]],
                       conversations: list[str]) -> int:
        """Model-mode extraction: the messages each edited line rests on, kept as the fact's `source`
        event (its history shows them). Returns how many facts got one."""
        if not self.enabled:
            return 0
        n = 0
        for rel, text, evidence in items:
            want = line_key(text)
            for row in self.db.list(agent, owner, file=rel):
                if line_key(row.text) == want or (row.key and line_key(f"{row.key}: {row.value}") == want):
                    note = f"conversation {', '.join(conversations)}: message(s) {', '.join(evidence)}"
                    self.db.add_event(row.id, agent, owner, "source", self._now(), actor="extraction", note=note[:300])
                    n += 1
        return n

    def recall(self, agent: str, owner: str | None, query: str, *, budget_chars: int, limit: int = 8,
               turn: str = "", skip: Callable[[str], bool] | None = None) -> list[FactView]:
        """Facts relevant to `query`, most trusted first, within `budget_chars`; each one returned is
        counted as used (it is what the prompt will carry). `skip(text)`: a fact the prompt holds
        already, passed over."""
        if not self.enabled or budget_chars <= 0 or not query.strip():
            return []
        matched = [r for r, _ in self._match(agent, owner, query, RECALL_CANDIDATES)]
        views = sorted((v for v in self._views(matched) if v.trust >= MIN_RECALL_TRUST
                        and (skip is None or not skip(v.text))),
                       key=lambda v: (-v.trust, v.file, v.line))
        chosen, used = [], 0
        for v in views:
            if len(chosen) >= limit or used + len(v.text) + 3 > budget_chars:
                continue
            chosen.append(v)
            used += len(v.text) + 3
        now = self._now()
        self.db.add_events((v.id, agent, owner, "use", now, "recall", turn) for v in chosen)
        return chosen


def _reworded(view: FactView, body: str, text: str, today: str) -> str:
    """`body` with the fact reworded: a structured entry's text under its `## key` (what a person
    added below its `> Source` line kept), else the fact's line, as `apply_edits` finds it."""
    if not view.file.startswith(STRUCTURED_PREFIX):
        result = apply_edits(body, [Edit("update", section=view.section, old=view.text, text=text)])
        if not result.applied:
            raise InvalidInputError(f"could not edit {view.file}: {result.skipped[0][1]}")
        return result.body
    doc = fmt.parse(body)
    at = fmt.find(doc.entries, view.key)
    if at is None:
        raise InvalidInputError(f"could not edit {view.file}: no entry {view.key!r} any more")
    if text.casefold().startswith(f"{view.key.casefold()}:"):  # "key: text", as the fact is shown
        text = text[len(view.key) + 1:].strip() or text
    old = doc.entries[at]
    full = f"{text}\n{old.tail}" if old.tail and old.tail not in text else text
    entries = list(doc.entries)
    entries[at] = old.changed(text=full, tail=old.tail if full != text else "", updated=today)
    return fmt.render(fmt.Document(doc.preamble, entries))
