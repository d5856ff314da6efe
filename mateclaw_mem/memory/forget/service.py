"""Forget that forgets: a claim out of every store that can hold a person's words, a tombstone so
nothing brings it back, and - asked for - a receipt that proves it byte by byte.

    forget = services.forget            # built by runtime/build/lifecycle.py, with runtime/holders.py's registry
    forget.forget(agent, owner, "I take my tea without sugar", actor="person", receipt=True)  # -> ForgetReport
    forget.forget_fact(agent, owner, fact_id, actor="person")                     # the fact's text
    forget.guard(agent, owner)          # what extraction and dreaming consult before they write
    forget.purge_due()                  # history copies past the undo window; forgets that died midway

One run: the tombstone first (status "pending": extraction and dreaming already refuse the claim),
then every holder of runtime/holders.py in its order, each answering what it removed; a holder that
fails is named in `errors` and the others still run. Then every database a holder changed is
scrubbed (memory/forget/scrub.py: FTS5 optimized, VACUUM, WAL truncated) - and so is any database
whose bytes still hold the claim, a forget from before the scrub included. The tombstone says
"done" only when no holder failed; a pending one is run again from its fingerprint by `purge_due`
(the scheduler's heartbeat) once it is `RESUME_AFTER_MS` old, so a forget that died midway finishes
instead of looking finished.

Owners: one owner's forget reaches that owner's files and messages (with isolation off everyone
shares the agent's files, so the files' owner is None); the workspace's own person (owner None)
also reaches GLOBAL memory. What an owner's forget may not cut - the agent's shared files and
GLOBAL memory, read by every owner - is listed in `shared_kept` with why, never silently left.

History copies holding the claim are purged once `fact.forget-undo-hours` have passed (at once with
`now=True`); an undo of the forget run inside the window cancels the purge and lifts the tombstone.
"""

from __future__ import annotations

import logging
import threading
import uuid
from collections.abc import Callable
from datetime import datetime
from typing import TYPE_CHECKING, Any

from mateclaw_mem.errors import DisabledError, InvalidInputError, MateclawError
from mateclaw_mem.memory.extraction.forget_requests import forget_requests
from mateclaw_mem.memory.forget import scan
from mateclaw_mem.memory.forget.guard import Guard
from mateclaw_mem.memory.forget.holder import Cut, Holder
from mateclaw_mem.memory.forget.matching import MIN_TOKENS, Fingerprint, Matcher
from mateclaw_mem.memory.forget.places import Places
from mateclaw_mem.memory.forget.receipt import ForgetReport
from mateclaw_mem.memory.forget.scrub import scrub
from mateclaw_mem.memory.forget.tombstones import TombstoneDB
from mateclaw_mem.workspace.paths import owner_dirname
from mateclaw_mem.workspace.walk import GLOBAL, OWNERS_DIR

if TYPE_CHECKING:
    from mateclaw_mem.clock import Clock
    from mateclaw_mem.conversations.log import ConversationLog
    from mateclaw_mem.index.files.index import FileIndex
    from mateclaw_mem.index.messages.index import MessageIndex
    from mateclaw_mem.memory.facts.service import FactService
    from mateclaw_mem.settings import Settings
    from mateclaw_mem.workspace.store import WorkspaceStore

__all__ = ["ForgetReport", "ForgetService"]
log = logging.getLogger(__name__)
KEY = "mate.memory.fact.forget-enabled"
FILE_DERIVED = ("index.db", "facts.db")  # rows re-made from the memory files (search index, fact projection)
RESUME_AFTER_MS = 10 * 60_000  # a pending forget younger than this may still be running in another process
TEAM_WHY = ("the agent's shared memory: every owner's prompt and search read it, so one owner's forget "
            "does not cut it; a forget without an owner (the workspace's own person) does")
GLOBAL_WHY = ("GLOBAL memory: every agent's prompt reads it; a forget without an owner (the workspace's "
              "own person) cuts it")


class ForgetService:
    def __init__(self, settings: Settings, store: WorkspaceStore, log: ConversationLog, clock: Clock, *,
                 holders: Callable[[ForgetService], list[Holder]], file_index: FileIndex | None = None,
                 message_index: MessageIndex | None = None, facts: FactService | None = None,
                 db: TombstoneDB | None = None) -> None:
        self.settings = settings
        self.store = store
        self.log = log
        self.clock = clock
        self.facts = facts
        self.db = db or TombstoneDB(settings.forget_db)
        self.places = Places(store, log, self.db, clock, undo_hours=settings.mate.memory.fact.forget_undo_hours,
                             file_index=file_index, message_index=message_index, facts=facts)
        self.holders: list[Holder] = holders(self)
        self._live: set[str] = set()  # batches running in this process (never resumed beside themselves)
        self._live_lock = threading.Lock()

    @property
    def enabled(self) -> bool:
        return self.settings.mate.memory.fact.forget_enabled

    def close(self) -> None:
        self.db.close()

    def _now_ms(self) -> int:
        return int(self.clock.now().timestamp() * 1000)

    def _files_owner(self, owner: str | None) -> str | None:
        # With isolation off every owner shares the agent's files, so their tombstones are shared too.
        return owner if self.store.owner_isolation else None

    def require_enabled(self) -> None:
        if not self.enabled:
            raise DisabledError(f"forget is off ({KEY}: false); set {KEY}: true to forget claims everywhere")

    # -- what extraction and dreaming consult -------------------------------------------------------

    def guard(self, agent: str, owner: str | None) -> Guard:
        """The owner's tombstones, as extraction and dreaming check them (empty: nothing blocked)."""
        return Guard(Matcher(self.db.prints(agent, self._files_owner(owner))))

    def handle_requests(self, agent: str, owner: str | None, texts: list[str]) -> list[ForgetReport]:
        """Run the forget requests in these person's messages ("forget that …", "忘记…"); with
        forget off they are ordinary messages and nothing happens."""
        if not self.enabled:
            return []
        return [self.forget(agent, owner, claim, actor="conversation")
                for text in texts for claim in forget_requests(text)]

    # -- forgetting ---------------------------------------------------------------------------------

    def forget_fact(self, agent: str, owner: str | None, fact_id: str, *, actor: str, now: bool = False,
                    receipt: bool = False) -> ForgetReport:
        if self.facts is None:
            raise InvalidInputError("forget by fact id needs the facts layer (fact.projection-enabled)")
        self.require_enabled()
        return self.forget(agent, owner, self.facts.get(agent, owner, fact_id).text, actor=actor, now=now,
                           receipt=receipt)

    def forget(self, agent: str, owner: str | None, text: str, *, actor: str, now: bool = False,
               receipt: bool = False) -> ForgetReport:
        """Remove the claim `text` from every store of (agent, owner) and tombstone it; with
        `receipt`, scan every byte of the workspace for it afterwards (`report.scan`)."""
        self.require_enabled()
        self.store.require_agent(agent)
        claim = " ".join(text.split())
        fp = Fingerprint.of(claim)
        if fp.n < MIN_TOKENS:
            raise InvalidInputError(f"forget needs a claim of at least {MIN_TOKENS} words, got {claim!r}")
        self.purge_due()
        batch = f"forget-{agent}-{self.clock.now():%Y%m%dT%H%M%S}-{uuid.uuid4().hex[:6]}"
        cut = self._cut(agent, owner, fp, batch, actor, now, claim)
        # Journaled (workspace/journal.py) before the tombstone: the process's death is seen at the
        # very next start (not RESUME_AFTER_MS later) and the forget finished from its fingerprint -
        # the journal names the fingerprint, never the words.
        finish = {"agent": agent, "owner": cut.files_owner, "asked": owner, "sha": fp.sha, "n": fp.n,
                  "batch": batch, "actor": actor}
        with self.store.journal.operation("forget", batch, finish=finish):
            cut.report.tombstone_new = self.db.add(agent, cut.files_owner, fp, at_ms=self._now_ms(), actor=actor,
                                                   batch=batch, asked=owner)
            self._run(cut)
        if receipt:
            cut.report.scan = self._prove(cut)
        return cut.report

    def _cut(self, agent: str, owner: str | None, fp: Fingerprint, batch: str, actor: str, now: bool,
             claim: str | None) -> Cut:
        files_owner = self._files_owner(owner)
        report = ForgetReport(agent, owner, fp.sha, batch, tombstone_new=False)
        return Cut(agent, owner, files_owner, Matcher([fp]), fp, batch, actor, now, claim, report)

    def _run(self, cut: Cut) -> None:
        report = cut.report
        touched: set[str] = set()
        with self._live_lock:
            self._live.add(cut.batch)
        try:
            for holder in self.holders:
                try:
                    out = holder.forget(cut)
                except Exception as exc:  # one store failing must not keep the claim in the others
                    log.warning("forget %s: %s failed (%s: %s)", cut.batch, holder.name, type(exc).__name__, exc)
                    error = exc.message if isinstance(exc, MateclawError) else f"{type(exc).__name__}: {exc}"
                    report.errors.append({"store": holder.name, "error": error})
                    report.stores.append({"store": holder.name, "holds": holder.holds, "removed": 0, "error": error})
                    touched.update(holder.databases)
                    continue
                report.stores.append({"store": holder.name, "holds": holder.holds, **out})
                if out.get("removed"):
                    touched.update(holder.databases)
                if due := out.get("due_ms"):
                    report.history_purge_due = datetime.fromtimestamp(due / 1000, tz=self.clock.tz).isoformat(
                        timespec="seconds")
            report.shared_kept = self._shared(cut)
            self._scrub(cut, touched)
            if not report.errors:
                self.db.finish(cut.agent, cut.files_owner, cut.fingerprint.sha)
                report.status = "done"
        finally:
            with self._live_lock:
                self._live.discard(cut.batch)

    def _scrub(self, cut: Cut, touched: set[str]) -> None:
        state = self.settings.state_dir
        pats = scan.patterns(cut.claim) if cut.claim is not None else None
        if pats is not None:  # bytes an older forget left behind (before the scrub existed) count too
            for path in sorted(state.glob("*.db")):
                if any(scan.occurrences(p, pats) for p in (path, path.with_name(path.name + "-wal"))):
                    touched.add(path.name)
        for name in sorted(touched):
            if (state / name).exists():
                done = scrub(state / name, pats)
                cut.report.scrubbed.append(done)
                if "error" in done:
                    cut.report.errors.append({"store": f"scrub {name}", "error": done["error"]})

    def _shared(self, cut: Cut) -> list[dict[str, Any]]:
        """What this forget may not cut and still holds the claim: the agent's shared files for one
        owner with isolation on, GLOBAL memory for any owner."""
        if cut.owner is None:
            return []
        scopes = [(cut.agent, None, "team", TEAM_WHY)] if self.store.owner_isolation else []
        if cut.agent != GLOBAL:
            scopes.append((GLOBAL, None, "global", GLOBAL_WHY))
        out = []
        for agent, owner, scope, why in scopes:
            prefix = f"{GLOBAL}/" if agent == GLOBAL else ""
            for f in list(self.store.walk_files(agent)):
                if f.owner != owner:
                    continue
                try:
                    held = cut.holds(self.store.read(agent, f.rel, owner=owner).text)
                except MateclawError:
                    continue
                if held:
                    out.append({"file": prefix + f.rel, "scope": scope, "why": why})
        return out

    def _prove(self, cut: Cut) -> dict[str, Any]:
        assert cut.claim is not None
        root = self.settings.workspace
        proof = scan.prove(root, self.settings.state_dir, cut.claim)
        shared = {s["file"] for s in cut.report.shared_kept}
        mine = owner_dirname(cut.files_owner) if cut.files_owner else None
        for hit in proof["found"]:
            hit["why"] = _why(hit["file"], cut, shared, mine, cut.report.history_purge_due)
        proof["unexplained"] = sum(h["count"] for h in proof["found"] if not h["why"])
        proof["proof"] = ("clean" if not proof["unexplained"] else "found") if proof["control"]["ok"] \
            else "not proven: the control was not found"
        return proof

    # -- pending forgets and history ----------------------------------------------------------------

    def resume_pending(self) -> int:
        """Run again every forget that did not finish (from its fingerprint: the words are gone)."""
        done = 0
        for p in self.db.pending(self._now_ms() - RESUME_AFTER_MS):
            with self._live_lock:
                if p.batch in self._live:
                    continue
            try:
                self.store.require_agent(p.agent)
            except MateclawError:
                continue  # the agent is gone, and its words with it
            cut = self._cut(p.agent, p.asked or p.owner, p.print, p.batch, "resume", False, None)
            self._run(cut)
            done += cut.report.status == "done"
        return done

    def finish_interrupted(self, finish: dict[str, Any]) -> str:
        """The journal's finisher: run again the forget a kill interrupted, from its fingerprint (its
        tombstone added first if the kill came before it)."""
        agent, owner, fp = finish["agent"], finish.get("owner"), Fingerprint(finish["sha"], int(finish["n"]))
        status = self.db.status(agent, owner, fp.sha)
        if status == "done":
            return ""
        try:
            self.store.require_agent(agent)
        except MateclawError:
            return ""  # the agent is gone, and its words with it
        if status is None:
            self.db.add(agent, owner, fp, at_ms=self._now_ms(), actor=str(finish.get("actor") or "resume"),
                        batch=finish["batch"], asked=finish.get("asked"))
        cut = self._cut(agent, finish.get("asked"), fp, finish["batch"], "resume", False, None)
        self._run(cut)
        if cut.report.status != "done":
            raise MateclawError(f"forget run {cut.batch} is still not done: "
                                + "; ".join(f"{e['store']}: {e['error']}" for e in cut.report.errors))
        return f"forget run {cut.batch} finished: every store cut, its record now says done"

    def purge_due(self) -> int:
        """Finish the forgets that died midway, then purge the history copies of every forget whose
        undo window has passed; a forget undone meanwhile (its run has an undo run) is cancelled
        instead: purge dropped, tombstone lifted."""
        self.resume_pending()
        total = 0
        for p in self.db.due(self._now_ms()):
            if self.store.history_store.batch(f"undo-{p.batch}"):
                self.db.remove(p.agent, p.owner, p.print.sha)
                self.db.done(p.id, self._now_ms(), 0)
                continue
            n = self.places.purge(p.agent, p.owner, Matcher([p.print]))
            self.db.done(p.id, self._now_ms(), n)
            total += n
        return total


def _why(rel: str, cut: Cut, shared: set[str], mine: str | None, due: str | None) -> str:
    """Why an occurrence the scan found is not this forget's to remove ("" = it should have been)."""
    parts = rel.split("/")
    history = parts[:2] == [".mateclaw", "history"]
    inside = parts[2:] if history else parts
    if len(inside) > 2 and inside[1] == OWNERS_DIR and inside[2] != mine:
        return "another owner's memory"
    if history and due:
        return f"history copy kept for undo until {due}"
    agent_rel = "/".join(inside[1:]) if inside[:1] == [cut.agent] else "/".join(inside)
    if history:
        agent_rel = agent_rel.rpartition("/")[0]  # the copy's folder is the file's path
    if agent_rel in shared or "/".join(inside) in shared:
        return "shared memory (see shared_kept)"
    if shared and not history and parts[0] == ".mateclaw" and parts[-1].removesuffix("-wal") in FILE_DERIVED:
        return "rows made from the shared memory above (this owner's own rows are checked: see stores)"
    return ""
