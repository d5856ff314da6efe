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

Scopes (workspace/walk.py): TEAM is the agent's own folder, GLOBAL the workspace's `global/` folder
(its files are `--- global/NAME ---` blocks, its structured entries a block of their own; with or
without isolation: every agent sees them), PERSONAL an owner's folder. With owner isolation on the
system message holds TEAM and GLOBAL only — byte-identical for every owner of the agent, so a prompt
cache keeps it — and everything the owner's or the turn's (their files and structured entries, the
relevant entries, facts, recalled memory, the card pointer) is the per-turn block at the head of the
current user message (`memory/context/personal.py` says why there). PROFILE.md is TEAM, as in the
seed; memory written before isolation was turned on is TEAM and stays in everyone's system message.
With isolation off every file is TEAM and the prompt is as it always was.

Memoryless mode (the Clawdiators seed): no memory beyond the agent's identity — only AGENTS.md and
SOUL.md, no structured block, no relevant entries, no prefetch. The flag lives with the conversation
in the conversation log (`ConversationLog.append(memoryless=True)`, which is also what extraction
gates on), and a conversation once memoryless stays memoryless: `build` looks the flag up.

A file over its size ceiling is injected whole (a person's edit is never cut on disk) with a one-line
note in its block, so both the model and `status` show the overrun - up to `prompt_file_max_chars`
(`mate.memory.prompt-file-max-chars`): past that only the file's head is injected, cut at a line, with
a note saying so. A person who saves a 3 MB MEMORY.md still gets a prompt a model can take (measured:
3.18 MB before), and the rest stays searchable.

Every build is a turn (`Context.turn`): what it injected -- files by sha, structured entries, facts,
recalled items, by id and hash -- is recorded in the turn log (`memory/context/turns.py`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TypeVar

from mateclaw_mem.errors import InvalidInputError
from mateclaw_mem.memory.context.personal import TurnBlock, with_turn_block
from mateclaw_mem.memory.context.recall import RecalledBlock, fold, fold_prompt, recalled_block
from mateclaw_mem.memory.context.tokens import estimate_tokens, messages_tokens
from mateclaw_mem.memory.context.turns import TurnMemory, new_turn_id, text_hash
from mateclaw_mem.memory.structured.entries import BLOCK_TITLE, StructuredBlock, TypedEntry
from mateclaw_mem.workspace.walk import GLOBAL, PERSONAL, TEAM, global_folder, normalise_owner

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
GLOBAL_BLOCK_TITLE = "--- GLOBAL STRUCTURED MEMORY ---"
ROLES = ("system", "user", "assistant", "tool")
FACTS_TITLE = "--- FACTS ---"
# The facts block's share of `provider-prefetch-max-chars`: at most 1/FACTS_SHARE of it.
FACTS_SHARE = 3


@dataclass(frozen=True)
class FileBlock:
    rel: str
    chars: int
    ceiling: int
    personal: bool  # read from the owner's folder
    text: str = field(default="", repr=False)  # what the prompt carries of it
    sha: str = ""  # the version injected (the store's sha)
    scope: str = TEAM  # team / global / personal (workspace/walk.py)

    @property
    def tokens(self) -> int:
        # Estimated on demand: a prompt build needs only the whole prompt's estimate.
        return estimate_tokens(self.text)

    @property
    def over_budget(self) -> bool:
        return self.ceiling > 0 and self.chars > self.ceiling

    def as_dict(self) -> dict[str, Any]:
        return {"file": self.rel, "chars": self.chars, "tokens": self.tokens, "budget": self.ceiling or None,
                "over_budget": self.over_budget, "personal": self.personal, "scope": self.scope}


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
    turn_block: TurnBlock | None = None  # owner isolation: the per-turn memory at the head of the user message

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
            "turn_block": self.turn_block.as_dict() if self.turn_block else None,
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
        recall_max_chars: int = 7000,
        facts: FactService | None = None,
        turns: TurnLog | None = None,
        card_pointer: Callable[[str, str | None], str | None] | None = None,
        personal_max_chars: int = 12000,
        prompt_file_max_chars: int = 32000,
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
        # Owner isolation: the per-turn block's PERSONAL part (files and structured entries); 0 = unbounded.
        self.personal_max_chars = personal_max_chars
        self.prompt_file_max_chars = prompt_file_max_chars  # 0 = a file is always injected whole

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
        # Isolation on: what is the owner's or the turn's goes into `per_turn`, never the system message.
        per_turn = TurnBlock(max_chars=self.personal_max_chars) if self.store.owner_isolation and not memoryless \
            else None
        system, files, block, relevant = self._system(agent, owner, query, system_prompt, memoryless, per_turn)
        hist = [_as_message(m) for m in history]

        def put(text: str) -> None:
            nonlocal system
            if per_turn is not None:
                per_turn.add(text)
            else:
                system = f"{system}\n\n{text}" if system else text

        if not memoryless and self.card_pointer is not None and self.turns is not None \
                and self.turns.first_today(agent, owner) and (pointer := self.card_pointer(agent, owner)):
            put(pointer)
        turn = new_turn_id() if self.turns is not None else None
        carried = system if per_turn is None else f"{system}\n\n{per_turn.text}"
        facts, facts_text = self._facts(agent, owner, query, memoryless, turn, carried)
        if facts_text:
            put(facts_text)
        recall_budget = self.recall_max_chars - (len(facts_text) + 2 if facts_text else 0)
        seen = system if per_turn is None else f"{system}\n\n{per_turn.text}"
        recalled, prefetch = self._recall(agent, owner, query, memoryless, seen, [*hist, current_msg],
                                          recall_budget)
        if recalled is not None and recalled.text:
            put(recalled.text)
        if per_turn is not None:
            current_msg = with_turn_block(current_msg, per_turn.text)
        prefix = [{"role": "system", "content": system}] if system else []
        # Without an id the defense keys the conversation by its first message.
        conversation = f"{agent}/{owner or ''}/{conversation_id}" if conversation_id else None
        window = self.window.fit(prefix, hist, current_msg, budget=budget, conversation=conversation)
        built = Context(agent, owner, memoryless, window.messages, system, files, block, relevant, window,
                        prefix, hist, current_msg, recalled=recalled, prefetch=prefetch, facts=facts, turn=turn,
                        turn_block=per_turn)
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
        self, agent: str, owner: str | None, query: str, system_prompt: str, memoryless: bool,
        per_turn: TurnBlock | None,
    ) -> tuple[str, list[FileBlock], StructuredBlock | None, list[TypedEntry]]:
        """The system message (and, isolation on, the PERSONAL part of `per_turn`)."""
        parts: list[str] = [system_prompt.strip()] if system_prompt.strip() else []
        files: list[FileBlock] = []
        personal_owner = owner if per_turn is not None else None
        for info, scope in self._files(agent, owner, memoryless, personal_owner):
            snap = self.store.read(GLOBAL if scope == GLOBAL else agent, info.rel,
                                   owner=owner if scope == PERSONAL else None)
            body = snap.body.strip()
            if not body:
                continue
            name = f"global/{info.rel}" if scope == GLOBAL else info.rel
            block = f"--- {name} ---\n"
            if self.prompt_file_max_chars and len(body) > self.prompt_file_max_chars:
                cut = body.rfind("\n", 0, self.prompt_file_max_chars)
                block += (f"[note: {name} is {len(snap.body)} chars; only its first {max(cut, 0)} are shown here "
                          f"(mate.memory.prompt-file-max-chars); search finds the rest]\n")
                body = body[:max(cut, 0)].rstrip()
            elif info.ceiling and len(snap.body) > info.ceiling:
                block += (f"[note: {name} is {len(snap.body)} chars, over its {info.ceiling}-char budget; "
                          "it was edited by hand and is shown whole]\n")
            if scope == PERSONAL and per_turn is not None:
                if not per_turn.add_personal(name, block + body):
                    continue
            else:
                parts.append(block + body)
            files.append(FileBlock(info.rel, len(snap.body), info.ceiling, scope == PERSONAL, body, snap.sha,
                                   scope))
        block_out: StructuredBlock | None = None
        relevant: list[TypedEntry] = []
        if not memoryless:
            # Isolation on: the system message has the TEAM entries, the owner's go in the turn block.
            block_out = self.structured.always_on_block(agent, owner=None if per_turn is not None else owner)
            if block_out.text:
                parts.append(block_out.text)
            global_block = self.structured.always_on_block(GLOBAL) if self._has(GLOBAL, None) else None
            if global_block is not None and global_block.text:
                parts.append(global_block.text.replace(BLOCK_TITLE, GLOBAL_BLOCK_TITLE, 1))
            if per_turn is not None and personal_owner is not None:
                mine = self.structured.always_on_block(agent, owner=personal_owner)
                if mine.text and per_turn.add_personal("structured entries", mine.text):
                    per_turn.structured = mine
            relevant = self.structured.relevant(agent, query, owner=owner, limit=self.relevant_limit)
            if per_turn is not None and personal_owner is not None:
                relevant += self.structured.relevant(agent, query, owner=None, limit=self.relevant_limit)
            if self._has(GLOBAL, None):
                relevant += self.structured.relevant(GLOBAL, query, limit=self.relevant_limit)
            relevant = relevant[: self.relevant_limit]
            if relevant:
                rendered = self.structured.render_relevant(relevant)
                if per_turn is not None:
                    per_turn.add(rendered)  # depends on the query: never in the cached system message
                else:
                    parts.append(rendered)
        return "\n\n".join(parts), files, block_out, relevant

    def _facts(self, agent: str, owner: str | None, query: str, memoryless: bool,
               turn: str | None, carried: str) -> tuple[list[FactView], str]:
        """The FACTS block: what `FactService.recall` returned, every fact of it and nothing else
        (recall counts a use for each one it returns, so the block must carry each one whole).
        A fact whose words the prompt already carries (its MEMORY.md or PROFILE.md line, injected
        whole) is not said twice: recall passes over it, so it is neither shown nor counted, and
        its room goes to a fact the prompt lacks."""
        facts = self.facts
        if memoryless or facts is None or not facts.enabled or not query.strip() or self.recall_max_chars <= 0:
            return [], ""
        # recall budgets `len(text) + 3` per fact: exactly the "- text\n" lines rendered here.
        room = self.recall_max_chars // FACTS_SHARE - len(FACTS_TITLE) - 1
        chosen = facts.recall(agent, owner, query, budget_chars=room, turn=turn or "",
                              skip=lambda text: (key := fold(text)) != "" and key in fold_prompt(carried))
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

    def _files(self, agent: str, owner: str | None, memoryless: bool,
               personal_owner: str | None = None) -> list[tuple[FileInfo, str]]:
        """Enabled files by (sort_order, scope, name), each with its scope: the agent's (TEAM),
        `global/` (GLOBAL) and, when `personal_owner` is given (isolation on), that owner's."""
        chosen: list[tuple[FileInfo, str]] = []
        for info in self.store.list_files(agent):
            if not info.enabled or info.rel.startswith("structured/"):
                continue
            if memoryless and info.rel not in IDENTITY_FILES:
                continue
            chosen.append((info, TEAM))
        if not memoryless:
            folders = [(GLOBAL, None, GLOBAL)]
            if personal_owner is not None and self.store.owner_isolation:
                folders.append((agent, personal_owner, PERSONAL))
            for where, who, scope in folders:
                for info in self.store.list_files(where, owner=who) if self._has(where, who) else ():
                    if info.enabled and not info.rel.startswith("structured/"):
                        chosen.append((info, scope))
        rank = {TEAM: 0, GLOBAL: 1, PERSONAL: 2}
        chosen.sort(key=lambda x: (x[0].sort_order, rank[x[1]], x[0].rel))
        return chosen

    def _has(self, agent: str, owner: str | None) -> bool:
        """Whether that folder exists (GLOBAL and an owner's folder are made by their first write)."""
        if agent == GLOBAL:  # a `global/` that links out of the workspace is no memory (never a crash)
            return bool(global_folder(self.store.root))
        return self.store.agent_dir(agent, owner).is_dir()

    # -- budgets -----------------------------------------------------------------------------------

    def budget_report(self, agents: Sequence[str] | None = None) -> dict[str, Any]:
        """Each always-on file and the structured block against its budget (chars and tokens)."""
        out: dict[str, Any] = {}
        for agent in agents or self.store.agents():
            files = []
            for info, scope in self._files(agent, None, False):
                body = self.store.read(GLOBAL if scope == GLOBAL else agent, info.rel).body
                name = f"global/{info.rel}" if scope == GLOBAL else info.rel
                files.append({"file": name, "chars": len(body), "tokens": estimate_tokens(body),
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
    mine = ctx.turn_block.structured if ctx.turn_block else None
    entries = [{"type": e.type, "key": e.entry.key, "sha": text_hash(e.entry.text), "block": "always_on"}
               for block in (ctx.structured, mine) if block is not None for e in block.entries]
    entries += [{"type": e.type, "key": e.entry.key, "sha": text_hash(e.entry.text), "block": "relevant"}
                for e in ctx.relevant]
    return TurnMemory(
        turn, ctx.agent, ctx.owner, at_ms, conversation_id, ctx.memoryless,
        files=[{"file": f.rel, "sha": f.sha, "personal": f.personal, "scope": f.scope} for f in ctx.files],
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
