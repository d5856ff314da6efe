"""Window defense (the seed's `mate.agent.conversation.window`): keep a conversation inside the
model's input budget without losing its thread.

Stage 1 — past `compact-trigger-ratio` (75%) of the budget, the earlier turns are summarised (by the
  model, at most `summary-max-tokens`; deterministically in rules mode) and replaced by the summary as
  a USER message — never system, because a summary quotes the person and must not gain the authority
  of instructions. The recent tail stays verbatim and is sized by tokens, as the seed sizes it: as
  many recent messages as fit TAIL_SHARE (20%) of the compaction threshold, never fewer than
  `protect-last-min-messages` (10) or 2 × `preserve-recent-pairs`, whichever is larger — a chat of
  short turns keeps more of them verbatim, one of long pastes is not left with only the floor's worth
  of budget for everything else. Summaries are cached for 30 minutes by content hash, so a long chat
  does not pay for the same summary every turn. The summary joins the first user message of the tail
  (and every other run of same-role messages is merged, `llm.roles.normalise_roles`): strict chat
  templates (Gemma's, llama-server's built-ins) reject two messages of one role in a row.
  The request never waits for a slow model: a model summary not ready within `summary-wait-ms` is
  finished in the background for the next turn, and this one uses the conversation's previous model
  summary or the rules digest (`Window.summary_source` says which). An answer that is a placeholder
  or echoes the summary instructions is rejected: not cached, recorded as a failure.
Stage 2 — the model still answers "context too large": stop calling it for summaries, keep the last
  2 turns (a turn = a user message and the replies after it) and retry once.
Stage 3 — drop messages from the front until the estimate fits, always keeping the last 2 messages.
  Applied before sending when stage 1 was not enough, and after a stage-2 retry that failed too
  (then against the limit the model reported, or 75% of what it refused).

`send_with_defense` takes the `send` callable that talks to the model, so the stages can be driven by
any client — and by the scripted model server in tests.
"""

from __future__ import annotations

import logging
import re
import threading
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any, TypeVar

from mateclaw_mem.errors import ModelError
from mateclaw_mem.llm.failures import UNUSABLE, record_failure
from mateclaw_mem.llm.prompts import summary as summary_prompt
from mateclaw_mem.llm.roles import normalise_roles
from mateclaw_mem.memory.context.summary_checks import RejectedSummary, summary_key, summary_problem
from mateclaw_mem.memory.context.tokens import estimate_tokens, message_tokens, messages_tokens

if TYPE_CHECKING:
    from mateclaw_mem.clock import Clock
    from mateclaw_mem.llm.client import ModelClient
    from mateclaw_mem.settings import WindowSettings

log = logging.getLogger(__name__)
T = TypeVar("T")
Message = dict[str, Any]

TAIL_SHARE = 0.2  # of the compaction threshold: the verbatim tail's token budget above its floor
KEEP_LAST_MESSAGES = 2
EMERGENCY_TURNS = 2
SUMMARY_TTL = timedelta(minutes=30)
SUMMARY_HEADER = "[Summary of the earlier part of this conversation — {n} messages compressed]\n"
_LIMIT_RE = re.compile(r"(?:context length|context window|limit)\D{0,20}?(\d[\d,]*)\s*tokens", re.IGNORECASE)


@dataclass
class Window:
    """What the defense decided for one request."""

    messages: list[Message]
    tokens: int
    budget: int
    stage: int = 0  # 0 untouched · 1 summarised · 2 emergency trim · 3 hard trim
    summary: str | None = None
    summarised: int = 0  # earlier messages replaced by the summary
    dropped: int = 0  # messages dropped without a summary
    notes: list[str] = field(default_factory=list)
    summary_source: str | None = None  # see `Summary.source`
    joined: bool = False  # the summary shares its message with the first user message after it

    def as_dict(self) -> dict[str, Any]:
        return {"stage": self.stage, "tokens": self.tokens, "budget": self.budget, "summarised": self.summarised,
                "dropped": self.dropped, "summary": self.summary, "summary_source": self.summary_source,
                "notes": list(self.notes)}


@dataclass(frozen=True)
class Summary:
    """A stage-1 summary and where it came from (`Window.summary_source`): "rules" (rules mode),
    "model", "model (previous)" (the conversation's last model summary, plus a rules digest of the
    messages it does not cover), "rules (model not ready)", "rules (model failed)" or
    "rules (model answer rejected)"."""

    text: str
    source: str
    note: str = ""


class _Job:
    """One model summary: computed on the worker, waited for (briefly) by any number of assemblies."""

    def __init__(self, key: str, messages: list[Mapping[str, Any]]) -> None:
        self.key = key
        self.messages = messages
        self.done = threading.Event()
        self.text: str | None = None
        self.failure = ""  # why there is no text: "failed: …" or "rejected: …"


class Summarizer:
    """Stage-1 summaries: the model when one is configured, else the rules digest. Model summaries
    are cached 30 minutes by a hash of the exact messages (and budget), timed by the injected clock.

    A model summary is computed on a bounded background worker (`workers` threads, at most
    `max_pending` summaries queued, one at a time per conversation, never the same messages twice at
    once); an assembly waits for it only up to the `summary-wait-ms` deadline. When it is not ready
    the conversation's previous model summary stands in (if it covers a prefix of the same messages),
    else the rules digest, and the next assembly finds the new summary in the cache."""

    def __init__(self, clock: Clock, *, model: Callable[[], ModelClient | None] = lambda: None,
                 max_tokens: int = 300, ttl: timedelta = SUMMARY_TTL, workers: int = 1,
                 max_pending: int = 32) -> None:
        self.clock = clock
        self.client = model()  # the shared client (runtime/build/types.ModelProvider); it fixes the mode
        self.max_tokens = max_tokens
        self.ttl = ttl
        self.max_pending = max_pending
        self._cache: dict[str, tuple[datetime, str]] = {}
        # conversation -> (expires, messages covered, hash of those messages, summary text)
        self._previous: dict[str, tuple[datetime, int, str, str]] = {}
        self._jobs: dict[str, _Job] = {}  # by message hash: queued or running
        self._wanted: dict[str, _Job] = {}  # per conversation: the newest summary asked for, not started
        self._active: set[str] = set()  # conversations with a drain task on the pool
        self._lock = threading.Lock()
        self._pool = ThreadPoolExecutor(max_workers=max(1, workers), thread_name_prefix="window-summary")
        self._closed = False
        self.calls = 0  # summaries actually computed (not served from the cache)

    @property
    def mode(self) -> str:
        return "model" if self.client is not None else "rules"

    def close(self) -> None:
        """No new background summaries; queued ones are dropped (the next assembly asks again)."""
        with self._lock:
            self._closed = True
            for job in self._wanted.values():
                self._finish(job, "failed: shutting down")
            self._wanted.clear()
        self._pool.shutdown(wait=False, cancel_futures=True)

    def summarize(self, messages: Sequence[Mapping[str, Any]]) -> str:
        """The summary, waiting for the model as long as it takes (ModelError if it fails)."""
        if self.client is None:
            return self._rules(messages)
        s = self.summary_for(messages, wait=None)
        if s.source != "model":
            raise ModelError(s.note or "the window summary failed", kind="invalid_answer")
        return s.text

    def summary_for(self, messages: Sequence[Mapping[str, Any]], *, conversation: str | None = None,
                    wait: float | None) -> Summary:
        """The best summary available within `wait` seconds (None: no deadline)."""
        if self.client is None:
            return Summary(self._rules(messages), "rules")
        msgs = list(messages)
        key = summary_key(msgs, self.max_tokens)
        conv = conversation or summary_key(msgs[:1], 0)  # the first message names a conversation well enough
        now = self.clock.now()
        with self._lock:
            hit = self._cache.get(key)
            if hit is not None and hit[0] > now:
                return Summary(hit[1], "model")
            job = self._request(conv, key, msgs)
        if job is None:
            return self._fallback(msgs, conv, "rules (model not ready)", "window summary queue is full")
        if job.done.wait(wait):
            if job.text is not None:
                return Summary(job.text, "model")
            reason = "rules (model answer rejected)" if job.failure.startswith("rejected") else "rules (model failed)"
            return self._fallback(msgs, conv, reason, f"summary {job.failure}")
        return self._fallback(msgs, conv, "rules (model not ready)",
                              "model summary not ready in time: it is being computed for the next turn")

    # -- fallback --------------------------------------------------------------------------------

    def _rules(self, messages: Sequence[Mapping[str, Any]], max_tokens: int | None = None) -> str:
        if self.client is None:  # in model mode a digest is a stand-in, not a computed summary
            with self._lock:
                self.calls += 1
        return summary_prompt.rules_summary(messages, max_tokens=max_tokens or self.max_tokens).text

    def _fallback(self, msgs: list[Mapping[str, Any]], conv: str, source: str, note: str) -> Summary:
        """The conversation's previous model summary when it covers a prefix of these messages (the
        messages after it as a rules digest), else the rules digest of them all."""
        with self._lock:
            prev = self._previous.get(conv)
        if prev is not None and prev[0] > self.clock.now() and prev[1] <= len(msgs) \
                and summary_key(msgs[:prev[1]], self.max_tokens) == prev[2]:
            text, rest = prev[3], msgs[prev[1]:]
            if rest:
                budget = max(self.max_tokens // 4, self.max_tokens - estimate_tokens(text))
                text += "\n\nSince then:\n" + self._rules(rest, budget)
            return Summary(text, "model (previous)", note)
        return Summary(self._rules(msgs), source, note)

    # -- the background worker -------------------------------------------------------------------

    def _request(self, conv: str, key: str, msgs: list[Mapping[str, Any]]) -> _Job | None:
        """The job computing `key`, queued if needed (the caller holds the lock)."""
        job = self._jobs.get(key)
        if job is not None:
            return job
        if self._closed:
            return None
        stale = self._wanted.pop(conv, None)
        if stale is not None:  # a newer state of the same conversation replaces one not yet started
            self._finish(stale, "failed: superseded by a newer summary of the conversation")
        if len(self._jobs) >= self.max_pending:
            return None
        job = self._jobs[key] = _Job(key, msgs)
        self._wanted[conv] = job
        if conv not in self._active:
            self._active.add(conv)
            self._pool.submit(self._drain, conv)
        return job

    def _finish(self, job: _Job, failure: str = "") -> None:
        """Called with the lock held."""
        if failure:
            job.failure = failure
        self._jobs.pop(job.key, None)
        job.done.set()

    def _drain(self, conv: str) -> None:
        """One conversation's summaries, one at a time, newest request only."""
        while True:
            with self._lock:
                job = self._wanted.pop(conv, None)
                if job is None or self._closed:
                    self._active.discard(conv)
                    if job is not None:
                        self._finish(job, "failed: shutting down")
                    return
            failure = ""
            try:
                self._compute(conv, job)
            except ModelError as exc:
                failure = f"failed ({exc.kind}): {exc.message}"
                log.warning("window summary for a conversation failed: %s", failure)
                record_failure(self.client, "summary", exc.kind, exc.message)
            except RejectedSummary as exc:
                failure = f"rejected: {exc}"
                log.warning("window summary rejected (not cached): %s", exc)
                record_failure(self.client, "summary", UNUSABLE, str(exc))
            except Exception as exc:  # never kill the worker; say what happened
                failure = f"failed (internal): {type(exc).__name__}: {exc}"
                log.exception("window summary failed")
            with self._lock:
                self._finish(job, failure)

    def _compute(self, conv: str, job: _Job) -> None:
        assert self.client is not None
        result = self.client.chat(summary_prompt.build_messages(job.messages, max_tokens=self.max_tokens),
                                  step="window.summary", max_tokens=self.max_tokens)
        problem = summary_problem(result.text, self.max_tokens)
        if problem:
            raise RejectedSummary(problem)
        text = summary_prompt.bound(result.text, self.max_tokens).text
        now = self.clock.now()
        with self._lock:
            self.calls += 1
            # Expired entries go on the next write, so the caches cannot grow without bound.
            for k in [k for k, (exp, _) in self._cache.items() if exp <= now]:
                del self._cache[k]
            for k in [k for k, v in self._previous.items() if v[0] <= now]:
                del self._previous[k]
            self._cache[job.key] = (now + self.ttl, text)
            self._previous[conv] = (now + self.ttl, len(job.messages), summary_key(job.messages, self.max_tokens), text)
            job.text = text


class WindowDefense:
    def __init__(self, settings: WindowSettings, summarizer: Summarizer) -> None:
        self.settings = settings
        self.summarizer = summarizer

    # -- before sending ----------------------------------------------------------------------------

    def fit(
        self,
        prefix: Sequence[Message],
        history: Sequence[Message],
        current: Message | None,
        *,
        budget: int | None = None,
        conversation: str | None = None,
    ) -> Window:
        """Stage 1 (and stage 3 if stage 1 is not enough) on the estimate, before any model call.
        `conversation` names the chat, so its previous summary can stand in for one not ready yet."""
        budget = budget or self.settings.default_max_input_tokens
        prefix, history = list(prefix), list(history)
        tail_msgs = [current] if current is not None else []
        whole = prefix + history + tail_msgs
        tokens = messages_tokens(whole)
        window = Window(whole, tokens, budget)
        if tokens <= self.settings.compact_trigger_ratio * budget:
            return window
        body = history
        start = self._tail_start(history, int(TAIL_SHARE * self.settings.compact_trigger_ratio * budget))
        if start > 0:
            earlier, tail = history[:start], history[start:]
            wait_ms = self.settings.summary_wait_ms
            summary = self.summarizer.summary_for(earlier, conversation=conversation,
                                                  wait=None if wait_ms < 0 else wait_ms / 1000)
            if summary.note:
                window.notes.append(summary.note)
            summary_msg = {"role": "user", "content": SUMMARY_HEADER.format(n=len(earlier)) + summary.text}
            body = [summary_msg, *tail]
            window.stage, window.summary, window.summarised = 1, summary.text, len(earlier)
            window.summary_source = summary.source
        window.messages = prefix + body + tail_msgs
        window.tokens = messages_tokens(window.messages)
        if window.tokens > budget:
            self._hard_trim(window, prefix, body, tail_msgs, budget)
        _alternate(window)
        return window

    def _tail_start(self, history: list[Message], tail_budget: int) -> int:
        """Where the verbatim tail begins: the newest messages that fit `tail_budget` tokens, at least
        max(protect-last-min-messages, 2 × preserve-recent-pairs) of them, moved back to a user
        message so that no turn is cut in half."""
        floor = max(self.settings.protect_last_min_messages, 2 * self.settings.preserve_recent_pairs)
        start, used = len(history), 0
        while start > 0:
            cost = message_tokens(history[start - 1])
            if len(history) - start >= floor and used + cost > tail_budget:
                break
            used += cost
            start -= 1
        while 0 < start < len(history) and history[start].get("role") != "user":
            start -= 1
        return start

    @staticmethod
    def _hard_trim(window: Window, prefix: list[Message], body: list[Message], tail_msgs: list[Message],
                   target: int) -> None:
        """Stage 3: drop from the front of the conversation (the summary goes first) until the
        estimate is within `target`; the last 2 messages always stay."""
        convo = body + tail_msgs
        protected = min(KEEP_LAST_MESSAGES, len(convo))
        total = messages_tokens(prefix + convo)
        drop = 0
        while drop < len(convo) - protected and total > target:
            total -= message_tokens(convo[drop])
            drop += 1
        if drop == 0:
            if messages_tokens(prefix + convo) > target:
                window.notes.append("still over budget with only the last messages left")
            return
        if window.summary is not None and convo and str(convo[0].get("content", "")).startswith(SUMMARY_HEADER[:12]):
            # The summary itself went: the turns it stood for are now dropped too (and the user
            # message it was joined to, if it was).
            window.dropped += window.summarised + drop - (0 if window.joined else 1)
            window.summary, window.summarised, window.summary_source, window.joined = None, 0, None, False
        else:
            window.dropped += drop
        window.messages = prefix + convo[drop:]
        window.tokens = messages_tokens(window.messages)
        window.stage = 3
        if window.tokens > target:
            window.notes.append("still over budget with only the last messages left")

    # -- sending -----------------------------------------------------------------------------------

    def emergency(self, prefix: Sequence[Message], history: Sequence[Message], current: Message | None,
                  *, budget: int | None = None) -> Window:
        """Stage 2: the last 2 turns verbatim, no summary, no model call."""
        budget = budget or self.settings.default_max_input_tokens
        history = list(history)
        start, users = len(history), 0
        for i in range(len(history) - 1, -1, -1):
            start = i
            if history[i].get("role") == "user":
                users += 1
                if users == EMERGENCY_TURNS:
                    break
        kept = history[start:] if history else []
        tail_msgs = [current] if current is not None else []
        messages = normalise_roles(list(prefix) + kept + tail_msgs)
        return Window(messages, messages_tokens(messages), budget, stage=2, dropped=len(history) - len(kept),
                      notes=["the model reported the context too large: kept the last 2 turns"])

    def send_with_defense(
        self,
        prefix: Sequence[Message],
        history: Sequence[Message],
        current: Message | None,
        send: Callable[[list[Message]], T],
        *,
        budget: int | None = None,
    ) -> tuple[T, Window]:
        """Send through all three stages. `send(messages)` raises ModelError(kind="context_too_large")
        when the model refuses the size; any other error propagates untouched."""
        for stage in (self.fit, self.emergency):
            window = stage(prefix, history, current, budget=budget)
            try:
                return send(window.messages), window
            except ModelError as exc:
                if exc.kind != "context_too_large":
                    raise
                refused = exc
        target = int(window.tokens * 0.75)
        reported = reported_limit(refused.message)
        if reported:
            target = min(target, reported)
        trimmed = Window(list(window.messages), window.tokens, window.budget, stage=2, dropped=window.dropped,
                         notes=list(window.notes))
        n_prefix = 1 if prefix and window.messages and window.messages[0].get("role") == "system" else 0
        convo = trimmed.messages[n_prefix:]
        self._hard_trim(trimmed, trimmed.messages[:n_prefix], convo, [], target)
        _alternate(trimmed)
        if trimmed.stage != 3:
            raise refused  # nothing left to drop: the fixed prompt alone is too large for this model
        return send(trimmed.messages), trimmed


def _alternate(window: Window) -> None:
    """Merge every run of same-role messages (the summary and the user message after it first of
    all), so a strict chat template accepts the prompt; the system message stays first and single."""
    merged = normalise_roles(window.messages)
    if len(merged) != len(window.messages):
        if window.summary is not None and not window.joined:
            head = next((m for m in merged if str(m.get("content", "")).startswith(SUMMARY_HEADER[:12])), None)
            window.joined = head is not None and len(str(head.get("content", ""))) > len(
                SUMMARY_HEADER.format(n=window.summarised) + window.summary)
        window.messages = merged
        window.tokens = messages_tokens(merged)


def reported_limit(message: str) -> int | None:
    """The context limit a model named in its refusal ("maximum context length is 4096 tokens")."""
    m = _LIMIT_RE.search(message or "")
    if not m:
        return None
    try:
        return int(m.group(1).replace(",", ""))
    except ValueError:
        return None
