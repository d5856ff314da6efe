"""The stores the forget service reaches through its own parts: the memory files (through the one
writer), the month archives, the conversation log with its two derived copies, the facts, the
search index's check, and the history copies. runtime/holders.py registers each of these beside
the stores reached by table rules and by providers.

Files are written as the person (`actor="person"`, the face in the reason), like an undo: a forget
is the person's decision about their own words, so a pinned or hand-written line is no obstacle.
GLOBAL memory (`global/`, in every agent's prompt) is cut too when the forget is the workspace's
own person's (owner None); an owner's forget leaves it, and says so (`shared_kept`).
"""

from __future__ import annotations

import gzip
import zlib
from functools import partial
from typing import TYPE_CHECKING, Any

from mateclaw_mem.errors import MateclawError
from mateclaw_mem.index.messages.storage import FACT_BASE
from mateclaw_mem.markdown import frontmatter
from mateclaw_mem.memory.forget.matching import Matcher, cut_text
from mateclaw_mem.workspace import month_archive
from mateclaw_mem.workspace.walk import GLOBAL

if TYPE_CHECKING:
    from mateclaw_mem.clock import Clock
    from mateclaw_mem.conversations.log import ConversationLog
    from mateclaw_mem.index.files.index import FileIndex
    from mateclaw_mem.index.messages.index import MessageIndex
    from mateclaw_mem.memory.facts.service import FactService
    from mateclaw_mem.memory.forget.holder import Cut
    from mateclaw_mem.memory.forget.tombstones import TombstoneDB
    from mateclaw_mem.workspace.store import WorkspaceStore

PERSON = "person"
ALWAYS_ON = frozenset({"AGENTS.md", "SOUL.md", "PROFILE.md", "MEMORY.md"})  # their headings stay


class Places:
    def __init__(self, store: WorkspaceStore, log: ConversationLog, db: TombstoneDB, clock: Clock, *,
                 undo_hours: float, file_index: FileIndex | None = None, message_index: MessageIndex | None = None,
                 facts: FactService | None = None) -> None:
        self.store = store
        self.clock = clock
        self.log = log
        self.db = db
        self.undo_hours = undo_hours
        self.file_index = file_index
        self.message_index = message_index
        self.facts = facts

    def _now_ms(self) -> int:
        return int(self.clock.now().timestamp() * 1000)

    def scopes(self, cut: Cut) -> list[tuple[str, str | None]]:
        """(agent, owner) folders this forget cuts: the owner's, and GLOBAL for the workspace's person."""
        out = [(cut.agent, cut.files_owner)]
        if cut.owner is None and cut.agent != GLOBAL:
            out.append((GLOBAL, None))
        return out

    # -- facts (before the files: the projection drops them once their lines are cut) --------------

    def facts_events(self, cut: Cut) -> dict[str, Any]:
        if self.facts is None or not self.facts.enabled:
            return {"removed": 0, "note": "fact projection is off"}
        ids = [r.id for r in self.facts.db.list(cut.agent, cut.files_owner) if cut.holds(r.text)]
        now_ms = self._now_ms()
        for fid in ids:
            self.facts.db.add_event(fid, cut.agent, cut.files_owner, "forget", now_ms, actor=cut.actor)
        cut.report.facts_forgotten = ids
        return {"removed": len(ids), "facts": ids}

    # -- memory files and month archives ------------------------------------------------------------

    def files(self, cut: Cut) -> dict[str, Any]:
        done: list[dict[str, Any]] = []
        for agent, owner in self.scopes(cut):
            prefix = f"{GLOBAL}/" if agent != cut.agent else ""
            for f in list(self.store.walk_files(agent)):
                if f.owner != owner:
                    continue
                try:
                    lines = self._cut_file(agent, owner, f.rel, cut)
                except MateclawError as exc:  # one unreadable file (not UTF-8) must not stop the rest; say so
                    cut.report.skipped.append({"file": prefix + f.rel, "reason": exc.message})
                    continue
                if lines:
                    done.append({"file": prefix + f.rel, "lines": lines})
        cut.report.files.extend(done)
        return {"removed": sum(d["lines"] for d in done), "files": len(done)}

    def _cut_file(self, agent: str, owner: str | None, rel: str, cut: Cut) -> int:
        lines = {"n": 0}

        def change(text: str) -> str | None:
            body, n = cut_text(frontmatter.body(text), cut.matcher, drop_empty_sections=rel not in ALWAYS_ON)
            lines["n"] = n
            return frontmatter.with_body(text, body) if n else None

        if not cut.holds(self.store.read(agent, rel, owner=owner).text):
            return 0
        self.store.update(agent, rel, change, actor=PERSON, owner=owner, reason=f"forget (via {cut.actor})",
                          batch=cut.batch)
        return lines["n"]

    def archives(self, cut: Cut) -> dict[str, Any]:
        """Inside the compressed month archives: each kept file that holds the claim is cut."""
        done: list[dict[str, Any]] = []
        for agent, owner in self.scopes(cut):
            prefix = f"{GLOBAL}/" if agent != cut.agent else ""
            for month in month_archive.months(self.store, agent, owner=owner):
                if month["error"]:
                    cut.report.skipped.append({"file": prefix + month["file"], "reason": month["error"]})
                    continue
                members: list[tuple[str, int]] = []
                month_archive.update_month(self.store, agent, month["month"],
                                           partial(_cut_members, cut.matcher, members), actor=PERSON, owner=owner,
                                           reason=f"forget (via {cut.actor})", batch=cut.batch)
                done.extend({"file": f"{prefix}{month['file']}:{rel}", "lines": n} for rel, n in members)
        cut.report.files.extend(done)
        return {"removed": sum(d["lines"] for d in done), "files": len(done)}

    # -- the conversation log and its derived copies ------------------------------------------------

    def conversation(self, cut: Cut) -> dict[str, Any]:
        changed = self.log.rewrite(cut.agent, cut.owner, lambda t: cut_text(t, cut.matcher, marker=True)[0])
        messages, facts = changed.get("messages", {}), changed.get("aml_facts", {})
        r = cut.report
        r.log_messages, r.aml_facts = len(messages), len(facts)
        if self.message_index is not None:
            docs = {**messages, **{FACT_BASE + i: t for i, t in facts.items()}}
            r.message_index_docs = self.message_index.rewrite(cut.agent, cut.owner, docs)
        if self.file_index is not None:
            r.search_index_rows = self.file_index.rewrite_messages(messages)
        return {"removed": len(messages) + len(facts), "messages": len(messages), "aml_facts": len(facts),
                "message_index_docs": r.message_index_docs, "search_index_rows": r.search_index_rows}

    # -- history ------------------------------------------------------------------------------------

    def history(self, cut: Cut) -> dict[str, Any]:
        """At once with `now`, else scheduled after the undo window (a purge due is done by the next
        forget or the scheduler's heartbeat)."""
        if cut.now:
            n = sum(self.purge(agent, owner, cut.matcher) for agent, owner in self.scopes(cut))
            cut.report.history_purged = n
            return {"removed": n}
        due = self._now_ms() + int(self.undo_hours * 3_600_000)
        for agent, owner in self.scopes(cut):
            self.db.schedule(agent, owner, cut.fingerprint, cut.batch, due)
        return {"removed": 0, "due_ms": due}

    def purge(self, agent: str, owner: str | None, matcher: Matcher) -> int:
        key = self.store.agent_key(agent, owner)
        return len(self.store.history_store.purge(key, lambda data: matcher.contains(_text(data))))


def _text(data: bytes) -> str:
    """A kept version as text: a history copy of a month archive is gzip, and holds the claim inside."""
    if data[:2] == b"\x1f\x8b":
        try:
            data = gzip.decompress(data)
        except (OSError, EOFError, zlib.error):
            pass
    return data.decode("utf-8", "replace")


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
