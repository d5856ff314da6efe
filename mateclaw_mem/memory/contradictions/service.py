"""The contradiction inbox: detection after every projection, the model's judgement, and resolutions
that change the files.

    inbox = ContradictionService(settings, facts, store, clock, model=lambda: services.model,
                                 forget=lambda: services.forget)
    inbox.on_projection(agent, owner)             # after every refresh / rebuild (runtime/events.py): re-detects
    inbox.list(agent, owner)                      # open pairs side by side (judged first, with a model)
    inbox.resolve(agent, owner, id, "KEEP_A" | "KEEP_B" | "MERGE" | "IGNORE", text=None)

`fact.contradiction-check-enabled` (off by default, as in the seed) switches the whole check: off,
nothing is detected and the inbox lists nothing — the seed's key means "no contradiction checking",
and detecting anyway filled an inbox the person had turned off. On, the rules detect; with a model
too, open pairs are judged in batches of at most 5 (llm/prompts/contradiction.py) before they are
listed; the judge's "no" dismisses a pair (remembered by fingerprint like IGNORE), its reason is
stored and shown.

An owner sees the pairs among their own facts and the shared (team) facts; pairs are stored per
(agent, owner) and every read names both. A shared file changing re-detects for every owner of the
agent.
"""

from __future__ import annotations

import difflib
import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from mateclaw_mem.errors import ConflictError, InvalidInputError, MateclawError, NotFoundError
from mateclaw_mem.llm.prompts import contradiction as prompt
from mateclaw_mem.markdown import frontmatter
from mateclaw_mem.markdown.edits import Edit, apply_edits
from mateclaw_mem.markdown.sections import join, normalise_title, split_sections
from mateclaw_mem.memory.contradictions.detect import detect, fingerprint
from mateclaw_mem.memory.contradictions.inbox import InboxDB, PairRow, Side
from mateclaw_mem.memory.forget.matching import MIN_TOKENS, Fingerprint
from mateclaw_mem.redaction import redact
from mateclaw_mem.workspace.journal import Step

if TYPE_CHECKING:
    from mateclaw_mem.clock import Clock
    from mateclaw_mem.memory.facts.service import FactService
    from mateclaw_mem.memory.facts.storage import Row
    from mateclaw_mem.settings import Settings
    from mateclaw_mem.workspace.records import Snapshot
    from mateclaw_mem.workspace.store import WorkspaceStore

log = logging.getLogger(__name__)
ACTIONS = ("KEEP_A", "KEEP_B", "MERGE", "IGNORE")
KEY = "mate.memory.fact.contradiction-check-enabled"


@dataclass
class Resolution:
    pair: PairRow
    action: str
    files: list[dict[str, str]] = field(default_factory=list)  # {file, scope, diff}
    forgot_with: str = ""  # "forget" (the forget service) | "edit" (the line removed through the writer) | ""

    def to_dict(self) -> dict[str, Any]:
        return {"pair": self.pair.to_dict(), "action": self.action, "files": self.files,
                "forgot_with": self.forgot_with}


# (owner, side, the file as read, its new text) per file a resolution writes; outside the class,
# whose `list` method would shadow the builtin in its annotations.
Planned = list[tuple[str | None, Side, "Snapshot", str]]
Edits = list[Edit]


class ContradictionService:
    def __init__(self, settings: Settings, facts: FactService, store: WorkspaceStore, clock: Clock, *,
                 model: Callable[[], Any] = lambda: None, forget: Callable[[], Any] = lambda: None) -> None:
        self.settings = settings
        self.facts = facts
        self.store = store
        self.clock = clock
        self._model = model
        self._forget = forget
        self.db = InboxDB(settings.facts_db)
        self._resolving: set[str] = set()  # pair ids whose files are being changed (re-detection skips them)

    @property
    def enabled(self) -> bool:
        return self.settings.mate.memory.fact.contradiction_check_enabled

    def close(self) -> None:
        self.db.close()

    def _now(self) -> int:
        return int(self.clock.now().timestamp() * 1000)

    # -- detection -------------------------------------------------------------------------------

    def on_projection(self, agent: str, owner: str | None) -> None:
        """FactService listener: a file of (agent, owner) was reprojected. A shared file is seen by
        every owner, so it re-detects for each of them."""
        if not self.enabled:
            return
        owners: list[str | None] = [owner]
        if owner is None:
            owners += sorted({o for a, o, _ in self.facts.db.files(agent) if a == agent and o is not None})
        for o in owners:
            self.detect(agent, o)

    def _visible(self, agent: str, owner: str | None) -> list[Row]:
        rows = self.facts.db.list(agent, owner)
        return rows + self.facts.db.list(agent, None) if owner is not None else rows

    def detect(self, agent: str, owner: str | None) -> int:
        """Re-detect the pairs (agent, owner) sees; returns how many are new (none with the check off)."""
        if not self.enabled:
            return 0
        found = detect(self._visible(agent, owner))
        records = [(fingerprint(agent, owner, f.a.text, f.b.text), f.kind, f.reason, _side(f.a), _side(f.b))
                   for f in found]
        return self.db.sync(agent, owner, records, self._now(), busy=frozenset(self._resolving))

    # -- the judge -------------------------------------------------------------------------------

    def judge(self, agent: str, owner: str | None) -> int:
        """Judge the open, unjudged pairs with the model (batches of <= 5). Returns how many calls
        were made. A failed call leaves its pairs unjudged (open) for the next look; never raises."""
        model = self._model() if self.enabled else None
        if model is None:
            return 0
        pending, calls = self.db.unjudged(agent, owner), 0
        for i in range(0, len(pending), prompt.BATCH):
            batch = pending[i:i + prompt.BATCH]
            inputs = [prompt.PairInput(p.a.text, _where(p.a), p.b.text, _where(p.b)) for p in batch]
            calls += 1
            try:
                answer = model.chat_json(prompt.build_messages(inputs), prompt.Judgement, step=prompt.STEP,
                                         check=prompt.checker(len(batch)))
            except MateclawError as exc:
                log.warning("contradiction check failed for %s: %s", agent, exc.message)
                continue
            for v in answer.verdicts:
                p = batch[v.pair - 1]
                reason = redact(" ".join(v.reason.split()))[:prompt.REASON_MAX]
                self.db.set_verdict(p.id, "contradiction" if v.contradiction else "compatible", reason,
                                    "open" if v.contradiction else "dismissed")
        return calls

    def _owner(self, owner: str | None) -> str | None:
        # With isolation off every owner shares the agent's files, and so its inbox.
        return owner if self.store.owner_isolation else None

    def list(self, agent: str, owner: str | None, *, status: str | None = "open") -> list[PairRow]:
        if not self.enabled:
            return []  # pairs stored while it was on are no longer kept up to date: not shown
        owner = self._owner(owner)
        self.judge(agent, owner)
        return self.db.list(agent, owner, status)

    def get(self, agent: str, owner: str | None, pid: str) -> PairRow:
        owner = self._owner(owner)
        pair = self.db.get(agent, owner, pid)
        if pair is None:
            raise NotFoundError(f"no contradiction {pid!r} for agent {agent!r}"
                                + (f" (owner {owner})" if owner else ""))
        return pair

    # -- resolving -------------------------------------------------------------------------------

    def resolve(self, agent: str, owner: str | None, pid: str, action: str, *, text: str | None = None,
                actor: str = "person") -> Resolution:
        """Change the files as the person decided: KEEP_A / KEEP_B forget the other claim, MERGE writes
        `text` in place of A and removes B, IGNORE only remembers the decision."""
        action = action.strip().upper()
        if action not in ACTIONS:
            raise InvalidInputError(f"resolve action {action!r}: use one of {', '.join(ACTIONS)}")
        merged = " ".join((text or "").split())
        if action == "MERGE" and not merged:
            raise InvalidInputError("MERGE needs the merged text (--text / \"text\")")
        if not self.enabled:
            raise ConflictError(f"contradiction checking is off: set {KEY}: true in the settings and restart "
                                "to use the contradiction inbox")
        owner = self._owner(owner)
        pair = self.get(agent, owner, pid)
        if pair.status != "open":
            raise ConflictError(f"contradiction {pid} is already {pair.status}"
                                + (f" ({pair.action})" if pair.action else ""))
        out = Resolution(pair, action)
        batch = f"resolve-{agent}-{pid}-{self.clock.now():%Y%m%dT%H%M%S}"
        # The writes re-project and so re-detect midway (after A changed, before B did): the pair is
        # left alone until its files are as the person decided.
        self._resolving.add(pid)
        try:
            loser = pair.b if action == "KEEP_A" else pair.a
            forget = self._forget() if action in ("KEEP_A", "KEEP_B") else None
            by_forget = forget is not None and getattr(forget, "enabled", False) and _fingerprintable(loser.text)
            planned = [] if by_forget or action == "IGNORE" else self._plan(agent, owner, pair, action, merged)
            if planned and action != "MERGE":
                out.forgot_with = "edit"
            # Journaled (workspace/journal.py): a kill between the two sides, or before the pair is
            # closed, is finished at the next start as the person decided.
            steps = [Step(agent, o, side.file, snap.sha, text.encode("utf-8"), actor, "contradiction resolved")
                     for o, side, snap, text in planned]
            finish = {"agent": agent, "owner": owner, "pair": pid, "action": action, "actor": actor,
                      "forget": "b" if by_forget and action == "KEEP_A" else "a" if by_forget else ""}
            with self.store.journal.operation("contradiction", batch, steps, finish=finish):
                if by_forget:
                    self._remove(agent, owner, loser, actor, out)
                for o, side, snap, text in planned:
                    self.store.write(agent, side.file, text, expected_sha=snap.sha, actor=actor, owner=o,
                                     reason="contradiction resolved", batch=batch)
                    self._record(agent, o, side, snap.text, out)
                self.db.close_pair(pid, "ignored" if action == "IGNORE" else "resolved", action, self._now())
        finally:
            self._resolving.discard(pid)
        out.pair = self.get(agent, owner, pid)
        return out

    def hold(self, finish: dict[str, Any]) -> str:
        """Before the journal replays an interrupted resolution's files: the pair is being resolved
        (re-detection between its two files would drop it, as during `resolve`)."""
        self._resolving.add(str(finish["pair"]))
        return ""

    def finish_resolve(self, finish: dict[str, Any]) -> str:
        """The journal's finisher: the files are as planned (replayed before this); a claim given to
        forget is forgotten (again: a forget is idempotent), and the pair is closed."""
        agent, owner, pid, action = finish["agent"], finish.get("owner"), str(finish["pair"]), finish["action"]
        self._resolving.add(pid)
        try:
            pair = self.db.get(agent, owner, pid)
            if pair is None or pair.status != "open":
                return ""
            if finish.get("forget"):
                side = pair.b if finish["forget"] == "b" else pair.a
                self._remove(agent, owner, side, str(finish.get("actor") or "person"), Resolution(pair, action))
            self.db.close_pair(pid, "ignored" if action == "IGNORE" else "resolved", action, self._now())
        finally:
            self._resolving.discard(pid)
        return f"contradiction {pid} closed ({action})"

    def _plan(self, agent: str, owner: str | None, pair: PairRow, action: str, merged: str) -> Planned:
        """Each file's new text, all computed before the first write (a side that changed since the
        pair was found refuses the whole resolution, nothing written)."""
        a, b = pair.a, pair.b
        oa, ob = self._side_owner(owner, a), self._side_owner(owner, b)
        if action in ("KEEP_A", "KEEP_B"):
            side = b if action == "KEEP_A" else a
            o = ob if action == "KEEP_A" else oa
            return [self._planned(agent, o, side, [Edit("remove", section=side.section, old=side.text)], tidy=True)]
        update = Edit("update", section=a.section, old=a.text, text=merged)
        if (a.file, a.scope) == (b.file, b.scope):
            return [self._planned(agent, oa, a, [update, Edit("remove", section=b.section, old=b.text)])]
        return [self._planned(agent, oa, a, [update]),
                self._planned(agent, ob, b, [Edit("remove", section=b.section, old=b.text)])]

    def _side_owner(self, owner: str | None, side: Side) -> str | None:
        return owner if side.scope == "personal" else None

    def _remove(self, agent: str, owner: str | None, side: Side, actor: str, out: Resolution) -> None:
        o = self._side_owner(owner, side)
        forget = self._forget()
        before = self.store.read(agent, side.file, owner=o).text
        # forgotten everywhere, tombstoned so extraction and dreaming never bring it back
        forget.forget(agent, o, side.text, actor=actor)
        out.forgot_with = "forget"
        self._drop_emptied(agent, o, side, actor)
        self._record(agent, o, side, before, out)

    def _drop_emptied(self, agent: str, o: str | None, side: Side, actor: str) -> None:
        """The forget service removes lines, never headings: a section it emptied goes here."""
        snap = self.store.read(agent, side.file, owner=o)
        text = frontmatter.with_body(snap.text, _without_emptied(snap.body, side.section))
        if text == snap.text:
            return
        try:
            self.store.write(agent, side.file, text, expected_sha=snap.sha, actor=actor, owner=o,
                             reason="contradiction resolved: its emptied section removed")
        except ConflictError:  # changed meanwhile: an empty heading is untidy, never worth a lost edit
            log.info("%s changed while resolving a contradiction; its empty ## %s stays", side.file, side.section)

    def _planned(self, agent: str, o: str | None, side: Side, edits: Edits, *, tidy: bool = False
                 ) -> tuple[str | None, Side, Snapshot, str]:
        if side.file.startswith("structured/") and any(e.op == "remove" for e in edits):
            raise InvalidInputError(f"{side.file}: a structured entry is removed with forget "
                                    f"(`mateclaw-mem structured forget`), not from the inbox")
        snap = self.store.read(agent, side.file, owner=o)
        result = apply_edits(snap.body, edits)
        if result.skipped:
            raise ConflictError(f"{side.file} changed since the contradiction was found "
                                f"({result.skipped[0][1]}); list the inbox again")
        body = _without_emptied(result.body, side.section) if tidy else result.body
        return o, side, snap, frontmatter.with_body(snap.text, body)

    def _record(self, agent: str, o: str | None, side: Side, before: str, out: Resolution) -> None:
        after = self.store.read(agent, side.file, owner=o).text
        self.facts.refresh(agent, o, side.file)  # the projection (and so the inbox) follows at once
        diff = "".join(difflib.unified_diff(before.splitlines(keepends=True), after.splitlines(keepends=True),
                                            f"a/{side.file}", f"b/{side.file}"))
        out.files.append({"file": side.file, "scope": side.scope, "diff": diff})


def _without_emptied(body: str, section: str) -> str:
    """`body` without its `## section` when the section holds nothing but blank lines any more: the
    claim a Keep removed was its last line, and an empty heading left behind is noise in the file
    and in every prompt that carries it. A pinned section keeps its mark, so it is never empty."""
    if not section:
        return body
    preamble, sections = split_sections(body)
    key = normalise_title(section)
    kept = [s for s in sections if not (s.key == key and not s.text.partition("\n")[2].strip())]
    return body if len(kept) == len(sections) else join(preamble, kept)


def _fingerprintable(text: str) -> bool:
    """Whether forget can take this claim (too short a claim to fingerprint is cut from its file)."""
    return Fingerprint.of(" ".join(text.split())).n >= MIN_TOKENS


def _side(r: Row) -> Side:
    return Side(r.id, r.text, r.file, r.section, r.line, "personal" if r.owner else "team")


def _where(s: Side) -> str:
    return f"{s.file}" + (f" ## {s.section}" if s.section else "") + f" ({s.scope})"
