"""Context assembly: what the model sees for one turn, in a fixed order.

1. one system message: the caller's system prompt, then the enabled workspace files by `sort_order`
   as `--- NAME ---` blocks (body only: frontmatter is never injected), the structured block (user
   and feedback entries within budget) and, when a query is given, the project/reference entries
   relevant to it and the `--- RECALLED MEMORY ---` block: what the memory providers prefetched
   (search hits in the memory files, earlier conversations), within the providers' deadlines and
   `provider-prefetch-max-chars`, minus anything the prompt already holds (`memory/context/recall.py`);
   before it, with fact projection on, the `--- FACTS ---` block: the facts relevant to the query, most
   trusted first (`FactService.recall`), within a third of `provider-prefetch-max-chars` (the recalled
   block gets what the facts leave); exactly the facts recall returned are injected, so each use it
   counts is a real one, and each use event carries the turn id;
2. a summary of earlier turns if the window defense compressed them — as a USER message, joined to
   the first user message after it: no two messages of one role are ever adjacent, as strict chat
   templates demand (`window.summary_source` says whether the model's summary, its previous one or
   the rules digest was used; a slow model never holds the prompt up);
3. the recent messages;
4. the current user message, last (merged into the last one if the history ends with a user message).

Owner isolation: identity files (AGENTS.md, SOUL.md, and other agent-level files) come from the
agent's folder, personal memory (PROFILE.md, MEMORY.md, daily notes) from the owner's folder.

Memoryless mode (the Clawdiators seed): no memory beyond the agent's identity — only AGENTS.md and
SOUL.md, no structured block, no relevant entries, no prefetch. The flag lives with the conversation
in the conversation log (`ConversationLog.append(memoryless=True)`, which is also what extraction
gates on), and a conversation once memoryless stays memoryless: `build` looks the flag up.

A file over its size ceiling is injected whole (a person's edit is never cut on disk) with a one-line
note in its block, so both the model and `status` show the overrun.

Every build is a turn (`Context.turn`): what it injected -- files by sha, structured entries, facts,
recalled items, by id and hash -- is recorded in the turn log (`memory/context/turns.py`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TypeVar

from mateclaw_mem.errors import InvalidInputError
from mateclaw_mem.memory.context.recall import RecalledBlock, recalled_block
from mateclaw_mem.memory.context.tokens import estimate_tokens, messages_tokens
from mateclaw_mem.memory.context.turns import TurnMemory, new_turn_id, text_hash
from mateclaw_mem.memory.structured.entries import StructuredBlock, TypedEntry
from mateclaw_mem.workspace.walk import normalise_owner

if TYPE_CHECKING:
    from mateclaw_mem.conversations.log import ConversationLog
    from mateclaw_mem.memory.context.turns import TurnLog
    from mateclaw_mem.memory.context.window import Window, WindowDefense
    from mateclaw_mem.memory.facts.service import FactService, FactView
    from mateclaw_mem.memory.structured.entries import StructuredMemory
    from mateclaw_mem.providers.registry import Prefetch, ProviderRegistry
    from mateclaw_mem.workspace.store import FileInfo, WorkspaceStore

T = TypeVar("T")
Message = dict[str, Any]

IDENTITY_FILES: tuple[str, ...] = ("AGENTS.md", "SOUL.md")
PERSONAL_FILES: tuple[str, ...] = ("PROFILE.md", "MEMORY.md")
ROLES = ("system", "user", "assistant", "tool")
FACTS_TITLE = "--- FACTS ---"
# The facts block's share of `provider-prefetch-max-chars`: at most 1/FACTS_SHARE of it.
FACTS_SHARE = 3


def is_personal(rel: str) -> bool:
    """Memory about the person (lives in the owner's folder when owner isolation is on)."""
    return rel in PERSONAL_FILES or rel.startswith("memory/")


@dataclass(frozen=True)
class FileBlock:
    rel: str
    chars: int
    ceiling: int
    personal: bool  # read from the owner's folder
    text: str = field(default="", repr=False)  # what the prompt carries of it
    sha: str = ""  # the version injected (the store's sha)

    @property
    def tokens(self) -> int:
        # Estimated on demand: a prompt build needs only the whole prompt's estimate.
        return estimate_tokens(self.text)

    @property
    def over_budget(self) -> bool:
        return self.ceiling > 0 and self.chars > self.ceiling

    def as_dict(self) -> dict[str, Any]:
        return {"file": self.rel, "chars": self.chars, "tokens": self.tokens, "budget": self.ceiling or None,
                "over_budget": self.over_budget, "personal": self.personal}


@dataclass
class Context:
    agent: str
    owner: str | None
    memoryless: bool
    messages: list[Message]
    system: str
    files: list[FileBlock] = field(default_factory=list)
    structured: StructuredBlock | None = None
    relevant: list[TypedEntry] = field(default_factory=list)
    window: Window | None = None
    # What the window defense needs to retry (kept apart from the assembled messages).
    prefix: list[Message] = field(default_factory=list)
    history: list[Message] = field(default_factory=list)
    current: Message | None = None
    recalled: RecalledBlock | None = None
    prefetch: Prefetch | None = None  # None: no prefetch ran (memoryless, no query, no providers)
    facts: list[FactView] = field(default_factory=list)  # exactly what the FACTS block carries
    turn: str | None = None  # the turn id its bookkeeping is under (None: no turn log)

    @property
    def tokens(self) -> int:
        return messages_tokens(self.messages)

    def as_dict(self) -> dict[str, Any]:
        block = self.structured
        return {
            "agent": self.agent,
            "owner": self.owner,
            "turn": self.turn,
            "memoryless": self.memoryless,
            "tokens": self.tokens,
            "messages": self.messages,
            "files": [f.as_dict() for f in self.files],
            "structured": None if block is None else {
                "chars": len(block.text), "tokens": estimate_tokens(block.text), "budget": block.max_chars,
                "included": block.included, "omitted": block.omitted,
            },
            "relevant": [r.as_dict() for r in self.relevant],
            "facts": [{"id": f.id, "text": f.text, "file": f.file, "trust": f.trust} for f in self.facts],
            "recalled": self.recalled.as_dict() if self.recalled else None,
            "prefetch": self.prefetch.as_dict() if self.prefetch else None,
            "window": self.window.as_dict() if self.window else None,
        }


class ContextService:
    def __init__(
        self,
        store: WorkspaceStore,
        structured: StructuredMemory,
        window: WindowDefense,
        *,
        log: ConversationLog | None = None,
        relevant_limit: int = 5,
        providers: ProviderRegistry | None = None,
        recall_max_chars: int = 2000,
        facts: FactService | None = None,
        turns: TurnLog | None = None,
        card_pointer: Callable[[str, str | None], str | None] | None = None,
    ) -> None:
        self.store = store
        self.structured = structured
        self.window = window
        self.log = log
        self.relevant_limit = relevant_limit
        self.providers = providers
        self.recall_max_chars = recall_max_chars
        self.facts = facts
        self.turns = turns
        # The morning card's one-line pointer, for the day's first context (`dream.morning-card-pointer`).
        self.card_pointer = card_pointer

    # -- assembly ----------------------------------------------------------------------------------

    def build(
        self,
        agent: str,
        *,
        owner: str | None = None,
        query: str = "",
        history: Sequence[Mapping[str, Any]] = (),
        current: str | Mapping[str, Any] | None = None,
        system_prompt: str = "",
        memoryless: bool = False,
        conversation_id: str | None = None,
        budget: int | None = None,
    ) -> Context:
        """Assemble the prompt for one turn. `current` (the new user message) defaults to `query`;
        `query` (what relevance is judged on) defaults to the current message's text."""
        owner = normalise_owner(owner)
        if conversation_id and not memoryless and self.log is not None:
            memoryless = self.is_memoryless(agent, conversation_id, owner=owner)
        current_msg = _as_message(current) if current is not None else (
            {"role": "user", "content": query} if query else None)
        if not query and current_msg is not None:
            query = str(current_msg.get("content") or "")
        system, files, block, relevant = self._system(agent, owner, query, system_prompt, memoryless)
        hist = [_as_message(m) for m in history]
        if not memoryless and self.card_pointer is not None and self.turns is not None \
                and self.turns.first_today(agent, owner) and (pointer := self.card_pointer(agent, owner)):
            system = f"{system}\n\n{pointer}" if system else pointer
        turn = new_turn_id() if self.turns is not None else None
        facts, facts_text = self._facts(agent, owner, query, memoryless, turn)
        if facts_text:
            system = f"{system}\n\n{facts_text}" if system else facts_text
        recall_budget = self.recall_max_chars - (len(facts_text) + 2 if facts_text else 0)
        recalled, prefetch = self._recall(agent, owner, query, memoryless, system, [*hist, current_msg],
                                          recall_budget)
        if recalled is not None and recalled.text:
            system = f"{system}\n\n{recalled.text}" if system else recalled.text
        prefix = [{"role": "system", "content": system}] if system else []
        # Without an id the defense keys the conversation by its first message.
        conversation = f"{agent}/{owner or ''}/{conversation_id}" if conversation_id else None
        window = self.window.fit(prefix, hist, current_msg, budget=budget, conversation=conversation)
        built = Context(agent, owner, memoryless, window.messages, system, files, block, relevant, window,
                        prefix, hist, current_msg, recalled=recalled, prefetch=prefetch, facts=facts, turn=turn)
        if self.turns is not None and turn is not None:
            self.turns.record(_turn_memory(built, turn, self.turns.now_ms(), conversation_id))
        return built

    def send(self, context: Context, send: Callable[[list[Message]], T], *, budget: int | None = None) -> T:
        """Send an assembled context through the window defense (stages 2 and 3 on refusal);
        `context.window` records what was finally sent."""
        answer, window = self.window.send_with_defense(context.prefix, context.history, context.current, send,
                                                       budget=budget or (context.window.budget if context.window
                                                                         else None))
        context.window, context.messages = window, window.messages
        return answer

    def is_memoryless(self, agent: str, conversation_id: str, *, owner: str | None = None) -> bool:
        if self.log is None:
            return False
        return bool(self.log.conversation_flags(agent, conversation_id, owner).get("memoryless"))

    def _system(
        self, agent: str, owner: str | None, query: str, system_prompt: str, memoryless: bool
    ) -> tuple[str, list[FileBlock], StructuredBlock | None, list[TypedEntry]]:
        parts: list[str] = [system_prompt.strip()] if system_prompt.strip() else []
        files: list[FileBlock] = []
        for info, personal in self._files(agent, owner, memoryless):
            snap = self.store.read(agent, info.rel, owner=owner if personal else None)
            body = snap.body.strip()
            if not body:
                continue
            block = f"--- {info.rel} ---\n"
            if info.ceiling and len(snap.body) > info.ceiling:
                block += (f"[note: {info.rel} is {len(snap.body)} chars, over its {info.ceiling}-char budget; "
                          "it was edited by hand and is shown whole]\n")
            parts.append(block + body)
            files.append(FileBlock(info.rel, len(snap.body), info.ceiling, personal, body, snap.sha))
        block_out: StructuredBlock | None = None
        relevant: list[TypedEntry] = []
        if not memoryless:
            block_out = self.structured.always_on_block(agent, owner=owner)
            if block_out.text:
                parts.append(block_out.text)
            relevant = self.structured.relevant(agent, query, owner=owner, limit=self.relevant_limit)
            if relevant:
                parts.append(self.structured.render_relevant(relevant))
        return "\n\n".join(parts), files, block_out, relevant

    def _facts(self, agent: str, owner: str | None, query: str, memoryless: bool,
               turn: str | None) -> tuple[list[FactView], str]:
        """The FACTS block: what `FactService.recall` returned, every fact of it and nothing else
        (recall counts a use for each one it returns, so the block must carry each one whole)."""
        facts = self.facts
        if memoryless or facts is None or not facts.enabled or not query.strip() or self.recall_max_chars <= 0:
            return [], ""
        # recall budgets `len(text) + 3` per fact: exactly the "- text\n" lines rendered here.
        room = self.recall_max_chars // FACTS_SHARE - len(FACTS_TITLE) - 1
        chosen = facts.recall(agent, owner, query, budget_chars=room, turn=turn or "")
        if not chosen:
            return [], ""
        return chosen, "\n".join([FACTS_TITLE, *(f"- {' '.join(f.text.split())}" for f in chosen)])

    def _recall(
        self, agent: str, owner: str | None, query: str, memoryless: bool, system: str,
        messages: Sequence[Message | None], budget: int,
    ) -> tuple[RecalledBlock | None, Prefetch | None]:
        """Provider prefetch: none for a memoryless context, an empty query or a zero budget."""
        if memoryless or not query.strip() or self.providers is None or self.recall_max_chars <= 0 or budget <= 0:
            return None, None
        prefetch = self.providers.prefetch(agent, owner, query)
        seen = [system, *(str(m.get("content") or "") for m in messages if m is not None)]
        return recalled_block(prefetch.items, seen, budget), prefetch

    def _files(self, agent: str, owner: str | None, memoryless: bool) -> list[tuple[FileInfo, bool]]:
        """Enabled files by (sort_order, name), each with whether it comes from the owner's folder."""
        isolated = bool(owner and self.store.owner_isolation)
        chosen: list[tuple[FileInfo, bool]] = []
        for info in self.store.list_files(agent):
            if not info.enabled or info.rel.startswith("structured/"):
                continue
            if memoryless and info.rel not in IDENTITY_FILES:
                continue
            if isolated and is_personal(info.rel):
                continue  # the owner's own copy is used instead
            chosen.append((info, False))
        if isolated and not memoryless:
            for info in self.store.list_files(agent, owner=owner):
                if info.enabled and not info.rel.startswith("structured/"):
                    chosen.append((info, True))
        chosen.sort(key=lambda x: (x[0].sort_order, x[0].rel))
        return chosen

    # -- budgets -----------------------------------------------------------------------------------

    def budget_report(self, agents: Sequence[str] | None = None) -> dict[str, Any]:
        """Each always-on file and the structured block against its budget (chars and tokens)."""
        out: dict[str, Any] = {}
        for agent in agents or self.store.agents():
            files = []
            for info, _personal in self._files(agent, None, False):
                body = self.store.read(agent, info.rel).body
                files.append({"file": info.rel, "chars": len(body), "tokens": estimate_tokens(body),
                              "budget_chars": info.ceiling or None,
                              "budget_tokens": -(-info.ceiling // 4) if info.ceiling else None,
                              "over_budget": bool(info.ceiling and len(body) > info.ceiling)})
            block = self.structured.always_on_block(agent)
            out[agent] = {
                "files": files,
                "structured_block": {
                    "chars": len(block.text), "tokens": estimate_tokens(block.text),
                    "budget_chars": block.max_chars, "budget_per_type": self.structured.max_entries_per_type,
                    "included": block.included, "omitted": block.omitted,
                },
            }
        return out


def _turn_memory(ctx: Context, turn: str, at_ms: int, conversation_id: str | None) -> TurnMemory:
    """Ids and hashes of what `ctx` injected (its system message is what the model sees of memory)."""
    entries = [{"type": e.type, "key": e.entry.key, "sha": text_hash(e.entry.text), "block": "always_on"}
               for e in (ctx.structured.entries if ctx.structured else ())]
    entries += [{"type": e.type, "key": e.entry.key, "sha": text_hash(e.entry.text), "block": "relevant"}
                for e in ctx.relevant]
    return TurnMemory(
        turn, ctx.agent, ctx.owner, at_ms, conversation_id, ctx.memoryless,
        files=[{"file": f.rel, "sha": f.sha, "personal": f.personal} for f in ctx.files],
        entries=entries,
        facts=[{"id": f.id, "sha": text_hash(f.text), "file": f.file} for f in ctx.facts],
        recalled=[{"provider": i.provider, "source": i.source, "sha": text_hash(i.text)}
                  for i in (ctx.recalled.items if ctx.recalled else ())],
    )


def _as_message(m: str | Mapping[str, Any]) -> Message:
    if isinstance(m, str):
        return {"role": "user", "content": m}
    role = m.get("role")
    if role not in ROLES:
        raise InvalidInputError(f"message role {role!r} is not one of {', '.join(ROLES)}")
    return {"role": role, "content": "" if m.get("content") is None else m.get("content")}
