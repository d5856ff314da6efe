"""Forget that forgets: a claim out of every live place it is in, and a tombstone so nothing brings
it back.

    forget = ForgetService(settings, store, log, clock, file_index=..., message_index=..., facts=...)
    forget.forget(agent, owner, "I take my tea without sugar", actor="person")   # -> ForgetReport
    forget.forget_fact(agent, owner, fact_id, actor="person")                     # the fact's text
    forget.guard(agent, owner)          # what extraction and dreaming consult before they write
    forget.purge_due()                  # history copies past the undo window (scheduler, next forget)

Where it reaches (one owner: an owner's personal files and messages, or with owner None the
agent's shared ones - never another owner's): every memory file of that owner on disk (always-on
files AGENTS.md / SOUL.md / PROFILE.md / MEMORY.md included: they are in every prompt, so a claim
left there is a claim still told; structured entries, daily notes, DREAMS.md, `memory/archive/`),
each written through the store under one batch id (one undoable run), re-ingested into the search
index and the facts by the store's write listener; then the conversation log (messages and AML
facts: the cut sentence becomes `[forgotten]`) with both derived copies of it (`messages.db` for
AML Search, `index.db`'s conversation chunks for search). History copies holding the claim are
purged once `fact.forget-undo-hours` have passed (at once with `now=True`); an undo of the forget
run inside the window cancels the purge and lifts the tombstone.

The files are written as the person (`actor="person"`, the face in the reason), like an undo: a
forget is the person's decision about their own words, so a pinned or hand-written line is no
obstacle to it.
"""

from __future__ import annotations

import uuid
from dataclasses import asdict, dataclass, field
from datetime import datetime
from functools import partial
from typing import TYPE_CHECKING, Any

from mateclaw_mem.errors import DisabledError, InvalidInputError, MateclawError
from mateclaw_mem.index.messages.storage import FACT_BASE
from mateclaw_mem.markdown import frontmatter
from mateclaw_mem.memory.extraction.forget_requests import forget_requests
from mateclaw_mem.memory.forget.guard import Guard
from mateclaw_mem.memory.forget.matching import MIN_TOKENS, Fingerprint, Matcher, cut_text
from mateclaw_mem.memory.forget.tombstones import TombstoneDB
from mateclaw_mem.workspace import month_archive

if TYPE_CHECKING:
    from mateclaw_mem.clock import Clock
    from mateclaw_mem.conversations.log import ConversationLog
    from mateclaw_mem.index.files.index import FileIndex
    from mateclaw_mem.index.messages.index import MessageIndex
    from mateclaw_mem.memory.facts.service import FactService
    from mateclaw_mem.settings import Settings
    from mateclaw_mem.workspace.store import WorkspaceStore

PERSON = "person"
ALWAYS_ON = frozenset({"AGENTS.md", "SOUL.md", "PROFILE.md", "MEMORY.md"})  # their headings stay
KEY = "mate.memory.fact.forget-enabled"


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

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @property
    def places(self) -> int:
        return len(self.files) + self.log_messages + self.aml_facts


class ForgetService:
    def __init__(self, settings: Settings, store: WorkspaceStore, log: ConversationLog, clock: Clock, *,
                 file_index: FileIndex | None = None, message_index: MessageIndex | None = None,
                 facts: FactService | None = None, db: TombstoneDB | None = None) -> None:
        self.settings = settings
        self.store = store
        self.log = log
        self.clock = clock
        self.file_index = file_index
        self.message_index = message_index
        self.facts = facts
        self.db = db or TombstoneDB(settings.state_dir / "forget.db")

    @classmethod
    def from_services(cls, services: Any) -> ForgetService:
        """Built by `runtime.services.Services` (`services.forget`) from the parts it reaches."""
        svc = cls(services.settings, services.store, services.log, services.clock, file_index=services.file_index,
                  message_index=services.message_index, facts=services.facts)
        services.on_close(svc)
        return svc

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

    def forget_fact(self, agent: str, owner: str | None, fact_id: str, *, actor: str, now: bool = False
                    ) -> ForgetReport:
        if self.facts is None:
            raise InvalidInputError("forget by fact id needs the facts layer (fact.projection-enabled)")
        self.require_enabled()
        return self.forget(agent, owner, self.facts.get(agent, owner, fact_id).text, actor=actor, now=now)

    def forget(self, agent: str, owner: str | None, text: str, *, actor: str, now: bool = False) -> ForgetReport:
        """Remove the claim `text` from every live place of (agent, owner) and tombstone it."""
        self.require_enabled()
        self.store.require_agent(agent)
        claim = " ".join(text.split())
        fp = Fingerprint.of(claim)
        if fp.n < MIN_TOKENS:
            raise InvalidInputError(f"forget needs a claim of at least {MIN_TOKENS} words, got {claim!r}")
        self.purge_due()
        matcher = Matcher([fp])
        files_owner = self._files_owner(owner)
        stamp = self.clock.now()
        batch = f"forget-{agent}-{stamp:%Y%m%dT%H%M%S}-{uuid.uuid4().hex[:6]}"
        report = ForgetReport(agent, owner, fp.sha, batch,
                              self.db.add(agent, files_owner, fp, at_ms=self._now_ms(), actor=actor, batch=batch))
        facts = self._matching_facts(agent, files_owner, matcher)
        for f in list(self.store.walk_files(agent)):
            if f.owner != files_owner:
                continue
            try:
                lines = self._cut_file(agent, files_owner, f.rel, matcher, batch, actor)
            except MateclawError as exc:  # one unreadable file (not UTF-8) must not stop the rest; say so
                report.skipped.append({"file": f.rel, "reason": exc.message})
                continue
            if lines:
                report.files.append({"file": f.rel, "lines": lines})
        self._cut_archives(agent, files_owner, matcher, batch, actor, report)
        self._cut_log(agent, owner, matcher, report)
        for fid in facts:
            self.facts.db.add_event(fid, agent, files_owner, "forget", self._now_ms(), actor=actor)  # type: ignore[union-attr]
        report.facts_forgotten = facts
        if now:
            report.history_purged = self._purge(agent, files_owner, matcher)
        else:
            due = self._now_ms() + int(self.settings.mate.memory.fact.forget_undo_hours * 3_600_000)
            self.db.schedule(agent, files_owner, fp, batch, due)
            report.history_purge_due = datetime.fromtimestamp(due / 1000, tz=self.clock.tz).isoformat(
                timespec="seconds")
        return report

    def _matching_facts(self, agent: str, owner: str | None, matcher: Matcher) -> list[str]:
        if self.facts is None or not self.facts.enabled:
            return []
        return [r.id for r in self.facts.db.list(agent, owner) if matcher.contains(r.text)]

    def _cut_file(self, agent: str, owner: str | None, rel: str, matcher: Matcher, batch: str, actor: str) -> int:
        cut = {"lines": 0}

        def change(text: str) -> str | None:
            body, lines = cut_text(frontmatter.body(text), matcher, drop_empty_sections=rel not in ALWAYS_ON)
            cut["lines"] = lines
            return frontmatter.with_body(text, body) if lines else None

        if not matcher.contains(self.store.read(agent, rel, owner=owner).text):
            return 0
        self.store.update(agent, rel, change, actor=PERSON, owner=owner, reason=f"forget (via {actor})", batch=batch)
        return cut["lines"]

    def _cut_archives(self, agent: str, owner: str | None, matcher: Matcher, batch: str, actor: str,
                      report: ForgetReport) -> None:
        """Inside the compressed monthly archives too: each kept file that holds the claim is cut."""
        for month in month_archive.months(self.store, agent, owner=owner):
            if month["error"]:
                report.skipped.append({"file": month["file"], "reason": month["error"]})
                continue
            cut: list[tuple[str, int]] = []
            month_archive.update_month(self.store, agent, month["month"], partial(_cut_members, matcher, cut),
                                       actor=PERSON, owner=owner, reason=f"forget (via {actor})", batch=batch)
            report.files.extend({"file": f"{month['file']}:{rel}", "lines": n} for rel, n in cut)

    def _cut_log(self, agent: str, owner: str | None, matcher: Matcher, report: ForgetReport) -> None:
        changed = self.log.rewrite(agent, owner, lambda t: cut_text(t, matcher, marker=True)[0])
        messages, facts = changed.get("messages", {}), changed.get("aml_facts", {})
        report.log_messages, report.aml_facts = len(messages), len(facts)
        if self.message_index is not None:
            docs = {**messages, **{FACT_BASE + i: t for i, t in facts.items()}}
            report.message_index_docs = self.message_index.rewrite(agent, owner, docs)
        if self.file_index is not None:
            report.search_index_rows = self.file_index.rewrite_messages(messages)

    # -- history ------------------------------------------------------------------------------------

    def _purge(self, agent: str, owner: str | None, matcher: Matcher) -> int:
        key = self.store.agent_key(agent, owner)
        return len(self.store.history_store.purge(key, lambda data: matcher.contains(data.decode("utf-8", "replace"))))

    def purge_due(self) -> int:
        """Purge the history copies of every forget whose undo window has passed; a forget undone
        meanwhile (its run has an undo run) is cancelled instead: purge dropped, tombstone lifted."""
        total = 0
        for p in self.db.due(self._now_ms()):
            if self.store.history_store.batch(f"undo-{p.batch}"):
                self.db.remove(p.agent, p.owner, p.print.sha)
                self.db.done(p.id, self._now_ms(), 0)
                continue
            n = self._purge(p.agent, p.owner, Matcher([p.print]))
            self.db.done(p.id, self._now_ms(), n)
            total += n
        return total


def _cut_members(matcher: Matcher, cut: list[tuple[str, int]], members: dict[str, bytes]) -> dict[str, bytes] | None:
    """One month archive's members with the claim cut from each that holds it (None: none does)."""
    cut.clear()
    for rel, data in members.items():
        text = data.decode("utf-8")
        if matcher.contains(text):
            body, lines = cut_text(text, matcher, drop_empty_sections=True)
            members[rel] = body.encode("utf-8")
            cut.append((rel, lines))
    return members if cut else None
