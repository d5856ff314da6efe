"""SOUL.md evolution, reviewed (`services.soul`).

    soul = SoulService(settings, store, clock, facts=lambda: services.facts, model=lambda: services.model)
    soul.on_write(event)                    # each store write (runtime/events.py): counted per (agent, owner)
    soul.propose(agent, owner)              # -> Proposal | None (also every `soul-update-interval` writes)
    soul.pending(agent, owner)              # the proposal waiting for a person (morning card, CLI, HTTP)
    soul.apply(agent, owner) / soul.reject(agent, owner)

Every `mate.memory.soul-update-interval` memory writes (0 = off) a new SOUL.md is PROPOSED, never
written: model mode asks the model (llm/prompts/soul.py) from SOUL + PROFILE + MEMORY; rules mode
builds a "## What I have learned about working with you" section from the high-trust entries of
structured/feedback.md (trust from `services.facts` when fact projection is on). A proposal is
written only by `apply` (a person confirming), or at once when `mate.memory.soul.auto-apply: true`.
Whatever the proposal says, pinned sections and sections a person wrote since the last machine
write are put back verbatim (dreaming/gates.protected_sections, which reads the file's history),
and the write carries one batch id, so `store.undo_batch(batch)` restores SOUL.md byte for byte.

The proposal is made on the writing thread (the write that reached the interval): cheap in rules
mode, one model call every N writes in model mode; a failure is logged and the count goes on.
"""

from __future__ import annotations

import difflib
import logging
import re
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from mateclaw_mem.errors import ConflictError, ModelError, NotFoundError
from mateclaw_mem.llm.prompts.soul import MODEL_STEP, SoulResult, answer_check, build_messages
from mateclaw_mem.markdown import frontmatter
from mateclaw_mem.markdown.sections import Section, join, normalise_title, split_sections
from mateclaw_mem.memory.dreaming.gates import preserve_sections, protected_sections
from mateclaw_mem.memory.facts.projection import claims, fact_id
from mateclaw_mem.memory.soul.proposals import Proposal, SoulDB
from mateclaw_mem.redaction import redact
from mateclaw_mem.workspace.journal import Step
from mateclaw_mem.workspace.paths import owner_dirname

if TYPE_CHECKING:
    from mateclaw_mem.clock import Clock
    from mateclaw_mem.settings import Settings
    from mateclaw_mem.workspace.records import WriteEvent
    from mateclaw_mem.workspace.store import WorkspaceStore

log = logging.getLogger(__name__)

SOUL_REL = "SOUL.md"
FEEDBACK_REL = "structured/feedback.md"
ACTOR = "soul"
LEARNED_TITLE = "What I have learned about working with you"
HIGH_TRUST = 0.45  # a fresh entry is 0.5; an UNHELPFUL or a long-unused one falls below
LEARNED_MAX = 12
# Writes that are memory: what the agent learned. Not SOUL.md itself, nor the diary or archives.
_NOT_MEMORY = ("SOUL.md", "AGENTS.md", "DREAMS.md")
_NOT_MEMORY_DIRS = ("memory/archive/", "memory/dreams/")


def is_memory_write(rel: str) -> bool:
    return rel.endswith(".md") and rel not in _NOT_MEMORY and not rel.startswith(_NOT_MEMORY_DIRS)


class SoulService:
    def __init__(self, settings: Settings, store: WorkspaceStore, clock: Clock, *,
                 facts: Callable[[], Any] | None = None, model: Callable[[], Any] = lambda: None,
                 db: SoulDB | None = None) -> None:
        self.settings = settings
        self.store = store
        self.clock = clock
        self._facts = facts
        self._model = model  # the shared client, asked for only when a proposal is planned
        self.db = db or SoulDB(settings.state_db)

    @property
    def interval(self) -> int:
        return self.settings.mate.memory.soul_update_interval

    @property
    def auto_apply(self) -> bool:
        return self.settings.mate.memory.soul.auto_apply

    @property
    def mode(self) -> str:
        return "model" if self.settings.model.configured else "rules"

    def close(self) -> None:
        self.db.close()

    def _now(self) -> str:
        return self.clock.now().isoformat(timespec="seconds")

    # -- counting ----------------------------------------------------------------------------------

    def on_write(self, event: WriteEvent) -> None:
        """Store listener: count a memory write; every `interval` writes, propose."""
        if self.interval <= 0 or event.actor == ACTOR or not event.sha or not is_memory_write(event.rel):
            return
        if self.db.count_write(event.agent, event.owner) % self.interval:
            return
        try:
            self.propose(event.agent, event.owner)
        except Exception:  # a proposal is a suggestion; it must never fail the write that triggered it
            log.exception("SOUL.md proposal for %s failed; trying again after %d more writes", event.agent,
                          self.interval)

    def writes(self, agent: str, owner: str | None) -> int:
        return self.db.writes(agent, owner)

    # -- proposing ---------------------------------------------------------------------------------

    def propose(self, agent: str, owner: str | None = None) -> Proposal | None:
        """Make a proposal now (None when there is nothing to propose); applied at once with auto-apply."""
        snap = self.store.read(agent, SOUL_REL, owner=owner)
        protected = protected_sections(self.store, agent, owner, snap, rel=SOUL_REL)
        block, old_body = frontmatter.split(snap.text) if snap.exists else ("", "")
        if self.mode == "model":
            new_body, reason = self._plan_model(agent, owner, old_body)
        else:
            new_body, reason = self._plan_rules(agent, owner, old_body, protected)
        if new_body is None:
            log.info("SOUL.md of %s: no proposal (%s)", agent, reason)
            return None
        new_body = preserve_sections(old_body, new_body, protected)
        # A restored section may end without a blank line; our heading must not glue onto it.
        new_body = re.sub(rf"(?<=[^\n])\n(## {re.escape(LEARNED_TITLE)})", r"\n\n\1", new_body)
        # What the store would really write (pins restored, a person's lines kept, the ceiling).
        final = self.store.preview(agent, SOUL_REL, snap.text, block + new_body, actor=ACTOR, owner=owner)
        if final == snap.text:
            return None
        proposal = self.db.add(agent, owner, self._now(), self.mode, snap.sha, final, _diff(snap.text, final),
                               reason)
        if self.auto_apply:
            self.apply(agent, owner, proposal.id, actor=ACTOR)
            return self.db.get(agent, owner, proposal.id)
        return proposal

    def _plan_rules(self, agent: str, owner: str | None, old_body: str,
                    protected: set[str]) -> tuple[str | None, str]:
        learned = self.learned(agent, owner)
        if not learned:
            return None, f"no high-trust entries in {FEEDBACK_REL}"
        pre, sections = split_sections(old_body)
        key = normalise_title(LEARNED_TITLE)
        text = f"## {LEARNED_TITLE}\n\n" + "".join(f"- {t}\n" for t in learned) + "\n"
        at = next((i for i, s in enumerate(sections) if s.key == key), None)
        if at is not None and (sections[at].pinned or key in protected):
            return None, f"'## {LEARNED_TITLE}' is pinned or written by the person"
        if at is None:
            if sections and not sections[-1].text.endswith("\n\n"):
                sections[-1] = Section(sections[-1].title, sections[-1].text.rstrip("\n") + "\n\n")
            elif pre.strip() and not pre.endswith("\n\n"):
                pre = pre.rstrip("\n") + "\n\n"
            sections.append(Section(LEARNED_TITLE, text))
        else:
            sections[at] = Section(LEARNED_TITLE, text)
        n = len(learned)
        return join(pre, sections), f"{n} high-trust feedback entr{'y' if n == 1 else 'ies'} from {FEEDBACK_REL}"

    def learned(self, agent: str, owner: str | None) -> list[str]:
        """The feedback entries the rules-mode section holds, most trusted first."""
        snap = self.store.read(agent, FEEDBACK_REL, owner=owner)
        if not snap.exists:
            return []
        found = claims(FEEDBACK_REL, snap.body)
        facts = self._facts() if self._facts else None
        trusts: dict[str, float] = {}
        if facts is not None and facts.enabled:
            facts.refresh(agent, owner, FEEDBACK_REL)
            trusts = {v.id: v.trust for v in facts.list(agent, owner, file=FEEDBACK_REL)}
        ranked = []
        for i, c in enumerate(found):
            trust = trusts.get(fact_id(agent, owner, c), 0.5)
            if trust >= HIGH_TRUST:
                ranked.append((-trust, i, " ".join(redact(c.value).split())))
        return [t for _, _, t in sorted(ranked)[:LEARNED_MAX]]

    def _plan_model(self, agent: str, owner: str | None, old_body: str) -> tuple[str | None, str]:
        model = self._model()
        if model is None:
            raise ModelError("no model client for the SOUL.md proposal", kind="config", retryable=False)
        profile = self.store.read(agent, "PROFILE.md", owner=owner).body
        memory = self.store.read(agent, "MEMORY.md", owner=owner).body
        messages = build_messages(agent=agent, soul=old_body, profile=profile, memory=memory)
        result: SoulResult = model.chat_json(messages, SoulResult, step=MODEL_STEP, check=answer_check(old_body))
        if not result.should_update:
            return None, result.reason or "the model proposed no change"
        body = redact(result.soul_content)  # untrusted input: a secret it echoed never reaches SOUL.md
        body = body if body.endswith("\n") else body + "\n"
        # A pinned section comes back verbatim whatever the model wrote: its unpinned twin must go.
        pinned = {_bare(s.title) for s in split_sections(old_body)[1] if s.pinned}
        pre, sections = split_sections(body)
        return join(pre, [s for s in sections if _bare(s.title) not in pinned]), redact(result.reason)

    # -- deciding ----------------------------------------------------------------------------------

    def pending(self, agent: str, owner: str | None = None) -> Proposal | None:
        return self.db.latest(agent, owner, status="pending")

    def _pending(self, agent: str, owner: str | None, pid: int | None) -> Proposal:
        p = self.db.get(agent, owner, pid) if pid is not None else self.pending(agent, owner)
        who = f" (owner {owner})" if owner else ""
        if p is None:
            raise NotFoundError(f"no {'' if pid is None else f'#{pid} '}SOUL.md proposal for agent {agent!r}{who}"
                                + ("" if pid is not None else " waiting"))
        if p.status != "pending":
            raise ConflictError(f"SOUL.md proposal #{p.id} for agent {agent!r}{who} is already {p.status}")
        return p

    def apply(self, agent: str, owner: str | None = None, pid: int | None = None, *,
              actor: str = "person") -> dict[str, Any]:
        """Write the proposal. Sections pinned or written by the person since it was made stay theirs."""
        p = self._pending(agent, owner, pid)
        snap = self.store.read(agent, SOUL_REL, owner=owner)
        protected = protected_sections(self.store, agent, owner, snap, rel=SOUL_REL)
        block, proposed = frontmatter.split(p.text)
        body = preserve_sections(snap.body, proposed, protected)
        tag = f"-{owner_dirname(owner)[:32]}" if owner else ""
        batch = f"soul-{agent}{tag}-{p.id}-{self.clock.now():%Y%m%dT%H%M%S}"
        text = frontmatter.with_body(snap.text, body) if snap.exists else block + body
        reason = f"SOUL.md proposal #{p.id} applied ({actor})"
        # Journaled (workspace/journal.py): killed between the file and the proposal's record, the
        # next start finishes both, so SOUL.md never holds a proposal still shown as waiting.
        step = Step(agent, owner, SOUL_REL, snap.sha, text.encode("utf-8"), ACTOR, reason)
        with self.store.journal.operation("soul-apply", batch, [step],
                                          finish={"agent": agent, "owner": owner, "proposal": p.id,
                                                  "actor": actor, "batch": batch}):
            # The machine writes (actor "soul"): the store keeps a person's pins and lines whoever confirmed.
            result = self.store.write(agent, SOUL_REL, text, expected_sha=snap.sha, actor=ACTOR, owner=owner,
                                      reason=reason, batch=batch)
            self.db.decide(p.id, "applied", self._now(), actor, batch)
        return {"proposal": p.id, "status": "applied", "changed": result.changed, "batch": batch,
                "undo": f"mateclaw-mem undo {agent} --run {batch}"}

    def finish_apply(self, finish: dict[str, Any]) -> str:
        """The journal's finisher: a proposal whose SOUL.md write a kill interrupted is recorded applied."""
        p = self.db.get(str(finish["agent"]), finish.get("owner"), int(finish["proposal"]))
        if p is None or p.status != "pending":
            return ""
        self.db.decide(p.id, "applied", self._now(), str(finish.get("actor") or "person"), str(finish["batch"]))
        return f"SOUL.md proposal #{p.id} recorded as applied"

    def reject(self, agent: str, owner: str | None = None, pid: int | None = None, *,
               actor: str = "person") -> dict[str, Any]:
        p = self._pending(agent, owner, pid)
        self.db.decide(p.id, "rejected", self._now(), actor)
        return {"proposal": p.id, "status": "rejected"}

    def undo(self, agent: str, owner: str | None = None) -> dict[str, Any]:
        """Undo the latest applied proposal (its batch)."""
        p = self.db.latest(agent, owner, status="applied")
        if p is None or not p.batch:
            raise NotFoundError(f"no applied SOUL.md proposal for agent {agent!r}")
        restored = self.store.undo_batch(p.batch)
        self.db.decide(p.id, "undone", self._now(), "person", p.batch)
        return {"proposal": p.id, "status": "undone", "files": len(restored)}

    def card(self, agent: str, owner: str | None = None) -> dict[str, Any] | None:
        """The pending proposal as the morning card shows it."""
        p = self.pending(agent, owner)
        return None if p is None else p.to_dict()


def _bare(title: str) -> str:
    return normalise_title(re.sub(r"<!--.*?-->", "", title))


def _diff(before: str, after: str) -> str:
    lines = difflib.unified_diff(before.splitlines(keepends=True), after.splitlines(keepends=True),
                                 fromfile="SOUL.md (now)", tofile="SOUL.md (proposed)")
    return "".join(ln if ln.endswith("\n") else ln + "\n" for ln in lines)
