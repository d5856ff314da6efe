"""The chat import: an export read and checked whole, appended chunk by chunk, handed to extraction.

    imp = services.chat_import                  # runtime/build/lifecycle.py builds it
    parsed = imp.read(path_or_stream, name="conversations.json", fmt=None)    # raises, naming the record
    imp.preview(parsed, agent, owner, max_tokens=None, dream=False) -> ImportSummary   # writes nothing
    imp.run(parsed, agent, owner, max_tokens=None, extract=False, dream=False, progress=None) -> ImportSummary

How a run goes, and why:
- Nothing is written before the whole file has parsed (`read`), so a malformed export leaves nothing
  half-imported; in model mode the extraction it will cause is estimated first and `max_tokens`
  refuses it before the first row.
- Conversations go in date order (the oldest first message first), each in chunks of CHUNK_MESSAGES.
  A chunk is one transaction (`ConversationLog.append_once`) whose request id is the hash of the
  conversation id and the chunk's messages: a run killed half-way has committed whole chunks, and the
  next run finds their messages already logged and appends the rest. A message already in the log
  (same role, time and redacted text) is not appended again, so a second run adds nothing and an
  export in which a conversation grew adds only what is new. Each message keeps its own time
  (`ts_ms`); the log redacts secrets on insert, as it does for every turn; rows say `trigger_source`
  "import".
- Then, in date order again, each conversation is handed to extraction through the same gates as a
  chat turn: queued (`ExtractionService.trigger`; the daemon's workers run it, files what they find
  under the day it was said) or, with `extract`, run now on this thread until its backlog is done.
  The ledger (ledger.py) records each hand-over; conversations handed over before are not again.
- With `dream`, a dream for each imported day, oldest first (`DreamingService.dream(as_of=day)`).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import re
from collections import Counter
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from datetime import date, datetime
from pathlib import Path
from typing import IO, Any

from mateclaw_mem.clock import Clock
from mateclaw_mem.conversations.imports.estimate import Estimate, estimate
from mateclaw_mem.conversations.imports.ledger import ImportLedger
from mateclaw_mem.conversations.imports.records import Conversation, Message, Parsed
from mateclaw_mem.conversations.imports.source import read_export
from mateclaw_mem.conversations.log import ConversationLog, NewMessage
from mateclaw_mem.errors import InvalidInputError, MateclawError
from mateclaw_mem.memory.extraction.gates import gate
from mateclaw_mem.redaction import redact
from mateclaw_mem.workspace.walk import normalise_owner

CHUNK_MESSAGES = 500  # one transaction: ~10 ms of inserts, so a daemon's other writers barely wait
TRIGGER_SOURCE = "import"  # on every imported row; the gates treat it as a chat turn (gates.py)
REQUEST_PREFIX = "import-chats:"
EXTRACT_ROUNDS = 1000  # runs of one conversation with `extract`, at most (30 new messages each by default)

# (phase, done, total): "write" counts messages, "extract" conversations, "dream" days.
Progress = Callable[[str, int, int], None]


@dataclass
class _Work:
    """One conversation of the file and what the import will do with it."""

    conv: Conversation
    sha: str
    handed_over: bool  # in the ledger with this content: nothing to do
    chunks: list[tuple[str, str, list[Message]]] = field(default_factory=list)  # (request id, body hash, to append)

    @property
    def new(self) -> list[Message]:
        return [m for _, _, msgs in self.chunks for m in msgs]


@dataclass
class ImportSummary:
    file: str
    format: str
    agent: str
    owner: str | None
    dry_run: bool
    mode: str  # "model" | "rules"
    conversations: int = 0
    messages: int = 0
    new_conversations: int = 0  # with at least one message to append
    new_messages: int = 0
    present_messages: int = 0  # already in the log
    first: str | None = None  # ISO time of the oldest message, in the workspace's time zone
    last: str | None = None
    days: list[str] = field(default_factory=list)  # the days its conversations were held, oldest first
    skipped: dict[str, int] = field(default_factory=dict)  # messages left out, by reason
    skipped_conversations: dict[str, int] = field(default_factory=dict)
    cut: int = 0
    estimate: dict[str, int] | None = None  # model mode only
    max_tokens: int | None = None
    over_budget: bool = False
    extraction: dict[str, Any] = field(default_factory=dict)
    dreams: list[dict[str, Any]] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _sha(conv_id: str, messages: list[Message]) -> str:
    h = hashlib.sha256(conv_id.encode())
    for m in messages:
        h.update(f"\x1e{m.role}\x1f{m.ts_ms}\x1f".encode())
        h.update(m.content.encode("utf-8", "surrogatepass"))
    return h.hexdigest()


class ChatImport:
    def __init__(self, log: ConversationLog, ledger: ImportLedger, clock: Clock, *, mem: Any, mode: str,
                 store: Any = None, extraction: Any = None, dreaming: Any = None) -> None:
        self.log = log
        self.ledger = ledger
        self.clock = clock
        self.mem = mem  # settings.mate.memory: the gates' and the estimate's settings
        self.mode = mode
        self.store = store  # PROFILE.md / MEMORY.md for the estimate
        self.extraction = extraction
        self.dreaming = dreaming

    def read(self, source: Path | IO[bytes], *, name: str, fmt: str | None = None) -> Parsed:
        return read_export(source, name=name, fmt=fmt, tz=self.clock.tz)

    # -- the plan -------------------------------------------------------------------------------

    def _plan(self, parsed: Parsed, agent: str, owner: str | None) -> list[_Work]:
        done = self.ledger.handed_over(agent, owner)
        plan: list[_Work] = []
        for conv in parsed.conversations:
            sha = _sha(conv.id, conv.messages)
            work = _Work(conv, sha, (conv.id, sha) in done)
            if not work.handed_over:
                work.chunks = self._chunks(conv, agent, owner)
            plan.append(work)
        return plan

    def _chunks(self, conv: Conversation, agent: str, owner: str | None) -> list[tuple[str, str, list[Message]]]:
        """The conversation's chunks, each with the messages of it that the log does not hold yet.
        Chunk bounds are fixed positions in the conversation, so every run, and two at once, name
        a chunk by the same request id."""
        logged = Counter((m.role, m.ts_ms, m.content) for m in self.log.messages(agent, conv.id, owner=owner))
        out = []
        for start in range(0, len(conv.messages), CHUNK_MESSAGES):
            chunk = conv.messages[start:start + CHUNK_MESSAGES]
            missing = chunk
            if logged:  # the log holds redacted text: compare with what it would hold
                missing = []
                for m in chunk:
                    key = (m.role, m.ts_ms, redact(m.content))
                    if logged[key] > 0:
                        logged[key] -= 1
                    else:
                        missing.append(m)
            if missing:
                body = _sha(conv.id, chunk)
                out.append((REQUEST_PREFIX + body[:40], body, missing))
        return out

    def _summary(self, parsed: Parsed, plan: list[_Work], agent: str, owner: str | None, *, dry_run: bool,
                 max_tokens: int | None, dream: bool) -> ImportSummary:
        tz = self.clock.tz
        out = ImportSummary(parsed.file, parsed.format, agent, owner, dry_run, self.mode,
                            conversations=len(plan), messages=parsed.message_count,
                            skipped=dict(parsed.skipped.most_common()),
                            skipped_conversations=dict(parsed.skipped_conversations.most_common()),
                            cut=parsed.cut, max_tokens=max_tokens)
        new = [(w.conv, w.new) for w in plan]
        out.new_conversations = sum(1 for _, msgs in new if msgs)
        out.new_messages = sum(len(msgs) for _, msgs in new)
        out.present_messages = out.messages - out.new_messages
        if plan:
            out.first = _iso(min(w.conv.first_ms for w in plan), tz)
            out.last = _iso(max(w.conv.last_ms for w in plan), tz)
        out.days = [d.isoformat() for d in _days(plan, tz)]
        if self.mode == "model":
            est = self._estimate(new, agent, owner, len(out.days) if dream else 0)
            out.estimate = est.to_dict()
            out.over_budget = max_tokens is not None and est.total_tokens > max_tokens
        return out

    def _estimate(self, work: list[tuple[Conversation, list[Message]]], agent: str, owner: str | None,
                  dream_days: int) -> Estimate:
        profile = self.store.read(agent, "PROFILE.md", owner=owner).body if self.store is not None else ""
        memory = self.store.read(agent, "MEMORY.md", owner=owner).body if self.store is not None else ""
        return estimate(work, mem=self.mem, agent=agent, profile=redact(profile), memory=redact(memory),
                        dream_days=dream_days)

    # -- the faces' calls -----------------------------------------------------------------------

    def preview(self, parsed: Parsed, agent: str, owner: str | None = None, *, max_tokens: int | None = None,
                dream: bool = False) -> ImportSummary:
        """What `run` would do: counts, dates, the estimate; nothing is written."""
        owner = normalise_owner(owner)
        return self._summary(parsed, self._plan(parsed, agent, owner), agent, owner, dry_run=True,
                             max_tokens=max_tokens, dream=dream)

    def run(self, parsed: Parsed, agent: str, owner: str | None = None, *, max_tokens: int | None = None,
            extract: bool = False, dream: bool = False, progress: Progress | None = None) -> ImportSummary:
        owner = normalise_owner(owner)
        plan = self._plan(parsed, agent, owner)
        out = self._summary(parsed, plan, agent, owner, dry_run=False, max_tokens=max_tokens, dream=dream)
        if out.over_budget:
            est = out.estimate or {}
            raise InvalidInputError(
                f"{parsed.file}: the extraction this import causes is estimated at {est.get('total_tokens')} tokens"
                f" in {est.get('calls')} model calls, over --max-tokens {max_tokens}; nothing was imported (raise"
                " the budget, or import the export in parts)")
        pending = [w for w in plan if not w.handed_over]
        # Journaled (workspace/journal.py) when a store is there to hold it: the messages still to
        # append staged first, so a kill mid-way is finished at the next start - every conversation
        # of the file in the log and handed to extraction, not the first half of them.
        journal = self.store.journal if self.store is not None and pending else None
        batch = f"import-chats-{agent}-{self.clock.now():%Y%m%dT%H%M%S}"
        with (journal.operation("import-chats", batch, finish={"agent": agent, "owner": owner},
                                staged={"chats": _staged(pending)})
              if journal is not None else contextlib.nullcontext()):
            self._write(plan, agent, owner, out.messages, progress)
            out.extraction = self._hand_over(pending, agent, owner, extract or dream, progress)
        if dream:
            out.dreams = self._dream(out.days, agent, owner, progress)
        return out

    # -- the steps ------------------------------------------------------------------------------

    def _write(self, plan: list[_Work], agent: str, owner: str | None, total: int, progress: Progress | None) -> None:
        done = 0
        for work in plan:
            for request_id, body, msgs in work.chunks:
                self.log.append_once(
                    request_id, body, "", agent, work.conv.id,
                    [NewMessage(m.role, m.content, m.ts_ms) for m in msgs],
                    owner=owner, trigger_source=TRIGGER_SOURCE, now_ms=self._now_ms(),
                )
                done += len(msgs)
                if progress is not None:
                    progress("write", done, total)
            done += len(work.conv.messages) - len(work.new)
        if progress is not None:
            progress("write", total, total)

    def _hand_over(self, pending: list[_Work], agent: str, owner: str | None, now: bool,
                   progress: Progress | None) -> dict[str, Any]:
        """Each conversation to extraction, oldest first: queued, or (`now`) run on this thread."""
        report: dict[str, Any] = {"how": "now" if now else "queued", "conversations": len(pending), "scheduled": 0,
                                  "gated_out": 0, "reasons": Counter(), "runs": 0, "files_changed": [], "errors": []}
        changed: set[str] = set()
        for n, work in enumerate(pending, 1):
            conv_id = work.conv.id
            if report["errors"]:  # a failed run (the model) stops running now; the rest is queued
                now = False
            if now:
                decision = gate(self.mem, self.log, agent, conv_id, owner, TRIGGER_SOURCE, False, None)
            else:
                decision = self.extraction.trigger(agent, conv_id, owner=owner, trigger_source=TRIGGER_SOURCE)
            if decision.scheduled:
                report["scheduled"] += 1
                handed = "queued" if not now else self._extract(agent, owner, conv_id, report, changed)
            else:
                report["gated_out"] += 1
                report["reasons"][_reason(decision.reason)] += 1
                handed = "gated: " + decision.reason
            if handed != "error":
                self.ledger.record(agent, owner, conv_id, work.sha, len(work.conv.messages), handed, self._now_ms())
            if progress is not None:
                progress("extract", n, len(pending))
        report["reasons"] = dict(report["reasons"].most_common())
        report["files_changed"] = sorted(changed)
        return report

    def _extract(self, agent: str, owner: str | None, conv_id: str, report: dict[str, Any], changed: set[str]) -> str:
        """Run extraction of one conversation until its backlog is done: "extracted" or "error"."""
        for _ in range(EXTRACT_ROUNDS):
            outcome = self.extraction.extract_now(agent, conv_id, owner)
            report["runs"] += 1
            changed.update(outcome.files_changed)
            if outcome.outcome == "error":
                report["errors"].append({"conversation": conv_id, "kind": outcome.error_kind,
                                         "error": outcome.error or outcome.reason})
                self.extraction.trigger(agent, conv_id, owner=owner, trigger_source=TRIGGER_SOURCE)
                return "error"
            if conv_id not in outcome.backlog:
                return "extracted"
        return "extracted"

    def _dream(self, days: list[str], agent: str, owner: str | None, progress: Progress | None) -> list[dict[str, Any]]:
        out: list[dict[str, Any]] = []
        for n, day in enumerate(days, 1):
            try:
                dreamt = self.dreaming.dream(agent, owner=owner, as_of=date.fromisoformat(day), trigger="import")
                out.append({"day": day, "run_id": dreamt.run_id, "status": dreamt.status, "reason": dreamt.reason})
            except MateclawError as exc:  # busy (a scheduled dream), a model failure: said, and the next day goes on
                out.append({"day": day, "run_id": None, "status": "error", "reason": exc.message})
            if progress is not None:
                progress("dream", n, len(days))
        return out

    def _now_ms(self) -> int:
        return int(self.clock.now().timestamp() * 1000)

    def finish_interrupted(self, finish: dict[str, Any]) -> str:
        """The journal's finisher: the staged chunks appended (each once: a chunk committed before the
        kill is a replay) and every conversation handed to extraction (queued)."""
        agent, owner = finish["agent"], finish.get("owner")
        data = json.loads(Path(finish["staged"]["chats"]).read_text(encoding="utf-8"))
        done = self.ledger.handed_over(agent, owner)
        plan = []
        for w in data:
            conv = Conversation(w["id"], [Message(*m) for _, _, msgs in w["chunks"] for m in msgs])
            chunks = [(rid, body, [Message(*m) for m in msgs]) for rid, body, msgs in w["chunks"]]
            plan.append(_Work(conv, w["sha"], (w["id"], w["sha"]) in done, chunks))
        pending = [w for w in plan if not w.handed_over]
        if not pending:
            return ""  # every conversation handed over, so written before: it was killed at its very end
        self._write(plan, agent, owner, sum(len(w.new) for w in plan), None)
        self._hand_over(pending, agent, owner, False, None)
        return f"{len(plan)} conversation(s) of a chat import in the log, {len(pending)} handed to extraction"


def _staged(pending: list[_Work]) -> bytes:
    """What `finish_interrupted` needs of each conversation: its id, hash and the chunks to append."""
    return json.dumps([{"id": w.conv.id, "sha": w.sha,
                        "chunks": [[rid, body, [[m.role, m.content, m.ts_ms] for m in msgs]]
                                   for rid, body, msgs in w.chunks]} for w in pending],
                      ensure_ascii=False).encode("utf-8", "surrogatepass")


def _iso(ms: int, tz: Any) -> str:
    return datetime.fromtimestamp(ms / 1000, tz=tz).isoformat(timespec="seconds")


def _days(plan: list[_Work], tz: Any) -> list[date]:
    """The days of the conversations this import hands over (those of a finished import are done)."""
    return sorted({datetime.fromtimestamp(m.ts_ms / 1000, tz=tz).date()
                   for w in plan if not w.handed_over for m in w.conv.messages})


def _reason(text: str) -> str:
    """A gate's reason without its numbers, so that reasons count together ("only N messages …")."""
    return re.sub(r"\d+", "N", text)
