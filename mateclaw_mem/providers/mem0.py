"""Mem0 as a memory provider (off until `mate.memory.providers` lists `mem0`), as the seed specifies.

- No system-prompt block: Mem0 memory is personal, so it is only prefetched per turn.
- prefetch: `POST {baseUrl}/memories/search/` with `query`, `user_id` = the owner key, `agent_id` =
  the agent (and `top_k` = `maxResults`); at most `maxResults` (5) memories come back as items whose
  source is `Mem0 Recall` (rendered `- [Mem0 Recall] …` inside the RECALLED MEMORY block).
- sync_turn: the turn's user and assistant messages go to `POST {baseUrl}/memories/` as
  `{messages: [{role, content}], user_id, agent_id}` from one background thread fed by a bounded
  queue (`syncQueueCapacity` 256); a full queue drops the turn with a warning and counts it.
- `searchEnabled` / `syncEnabled` (both true) switch each half off, as in the seed: recall-only (no
  turn is sent) or sync-only (no prefetch request; the provider answers no items).
- `timeoutMs` (3000) bounds each request whole, a server dripping bytes included (a prefetch also
  stops at the registry's deadline), and `maxAnswerBytes` (1 MiB) its answer: a longer one fails the
  call unread (providers/bounded_http.py);
  the key is `apiKey` (the seed's) or, to keep it out of the config file, `apiKeyEnv` naming the
  environment variable holding it; either is sent as `Authorization: Bearer …`.
- No owner: neither call is made (Mem0 memory is per person; there is no "shared" user).
- Sync failures are logged and counted only; recall failures raise, so the registry's breaker
  isolates them.

Wire shapes: Mem0 Platform API v1 (`/v1/memories/search/`, `/v1/memories/`, as in mem0ai/mem0's
`MemoryClient` of mem0ai 0.1.x); a search answer is a JSON list of `{id, memory, score, …}`, and
the open-source REST server's `{"results": [...]}` (mem0 v1.1 output format, `server/main.py`) is
read too. That server serves search at `/search` and adds at `/memories`: set `searchPath` and
`addPath` for it.
"""

from __future__ import annotations

import json
import logging
import os
import queue
import threading
import time
from typing import Any

from pydantic import ConfigDict, Field, StrictBool, ValidationError

from mateclaw_mem.errors import ConfigError
from mateclaw_mem.providers import bounded_http
from mateclaw_mem.providers.base import ProviderContext, ProviderItem
from mateclaw_mem.providers.plugins import as_written, option_keys
from mateclaw_mem.wire import Wire

log = logging.getLogger(__name__)
SOURCE = "Mem0 Recall"
_STOP = object()


class Mem0Options(Wire):
    """The provider's settings, keys as the seed names them (baseUrl, timeoutMs, ...)."""

    model_config = ConfigDict(extra="forbid")

    base_url: str = Field(min_length=1)
    api_key: str | None = Field(None, min_length=1)  # the seed's: the key itself, in the config
    api_key_env: str | None = Field(None, min_length=1)  # ours: the variable's name, the key out of the file
    search_enabled: StrictBool = True
    sync_enabled: StrictBool = True
    timeout_ms: int = Field(3000, ge=1)  # the whole call, a slow drip of bytes included
    max_answer_bytes: int = Field(1_048_576, ge=1024)  # ours: a longer answer is refused unread
    max_results: int = Field(5, ge=1)
    sync_queue_capacity: int = Field(256, ge=1)
    search_path: str = "/memories/search/"
    add_path: str = "/memories/"


class Mem0Error(RuntimeError):
    pass


class Mem0Provider:
    name = "mem0"

    def __init__(self, options: Mem0Options) -> None:
        self.options = options
        self._base = options.base_url.rstrip("/")
        self._key = options.api_key or (os.environ.get(options.api_key_env, "") if options.api_key_env else "")
        self._queue: queue.Queue[Any] = queue.Queue(maxsize=options.sync_queue_capacity)
        self._worker: threading.Thread | None = None  # started by the first turn, not by building
        self._lock = threading.Lock()
        self._closed = False
        self.synced = self.sync_failed = self.dropped = self.skipped_no_owner = 0
        self.last_sync_error: str | None = None

    def system_prompt_block(self, agent: str, owner: str | None) -> str:
        return ""  # the seed's systemPromptBlock: empty, so the system prompt stays cache-stable

    # -- recall ----------------------------------------------------------------------------------

    def prefetch(self, agent: str, owner: str | None, query: str, *, deadline: float) -> list[ProviderItem]:
        if not self.options.search_enabled:
            return []  # sync-only: Mem0 learns from the turns but is never asked
        if owner is None:
            self.skipped_no_owner += 1
            return []
        body = {"query": query, "user_id": owner, "agent_id": agent, "top_k": self.options.max_results}
        answer = self._post(self.options.search_path, body, deadline=deadline)
        rows = answer.get("results") if isinstance(answer, dict) else answer
        if not isinstance(rows, list):
            raise Mem0Error(f"search answered {type(answer).__name__}, not a list of memories")
        items = []
        for row in rows:
            text = row.get("memory") if isinstance(row, dict) else None
            if isinstance(text, str) and text.strip():
                score = row.get("score")
                items.append(ProviderItem(" ".join(text.split()), SOURCE,
                                          float(score) if isinstance(score, int | float) else 0.0))
            if len(items) >= self.options.max_results:
                break
        return items

    # -- sync ------------------------------------------------------------------------------------

    def sync_turn(self, agent: str, owner: str | None, messages: list[tuple[str, str]]) -> None:
        if not self.options.sync_enabled:
            return  # recall-only: nothing said here leaves for Mem0
        if owner is None:
            self.skipped_no_owner += 1
            return
        turn = [{"role": r, "content": c} for r, c in messages if r in ("user", "assistant") and c]
        if not turn:
            return
        with self._lock:
            if self._closed:
                return
            if self._worker is None:
                self._worker = threading.Thread(target=self._drain, name="mateclaw-mem0-sync", daemon=True)
                self._worker.start()
            try:
                self._queue.put_nowait({"messages": turn, "user_id": owner, "agent_id": agent})
            except queue.Full:
                self.dropped += 1
                log.warning("mem0: sync queue full (%d turns waiting); turn of %s/%s dropped (%d dropped so far)",
                            self.options.sync_queue_capacity, agent, owner, self.dropped)

    def _drain(self) -> None:
        while True:
            body = self._queue.get()
            try:
                if body is _STOP:
                    return
                self._post(self.options.add_path, body, deadline=None)
                self.synced += 1
            except Exception as exc:  # logged only: a lost sync must never reach the chat
                self.sync_failed += 1
                self.last_sync_error = f"{type(exc).__name__}: {exc}"
                log.warning("mem0: sync of a turn failed (%s)", self.last_sync_error)
            finally:
                self._queue.task_done()

    def wait_synced(self, timeout: float) -> bool:
        """Wait until every queued turn has been sent (or failed); False if some are left after `timeout`."""
        end = time.monotonic() + timeout
        with self._queue.all_tasks_done:
            while self._queue.unfinished_tasks:
                left = end - time.monotonic()
                if left <= 0:
                    return False
                self._queue.all_tasks_done.wait(left)
        return True

    # -- forget ----------------------------------------------------------------------------------

    def forget(self, agent: str, owner: str | None, holds: Any) -> dict[str, Any]:  # holds: (text) -> bool
        """A forgotten claim out of Mem0 (memory/forget/, registered in runtime/holders.py): the
        queued turns lose the messages that hold it before they leave, the one being sent is waited
        for, then every memory Mem0 keeps for (owner, agent) is listed (`GET {addPath}?user_id=…`,
        both the Platform's and the open-source server's) and each that holds it is deleted
        (`DELETE {addPath}{id}/`, or `{addPath}/{id}` for a path without the slash). Mem0 rewords
        what it keeps, so `holds` matches loosely (every content word of the claim). No owner: nothing
        was ever sent. Raises Mem0Error when Mem0 cannot be listed or a delete fails (the forget
        stays pending and is run again)."""
        from urllib.parse import quote, urlencode

        if owner is None:
            return {"removed": 0, "note": "no owner: nothing is ever sent to Mem0 without one"}
        dropped = 0
        with self._queue.mutex:  # turns not sent yet: what holds the claim never leaves
            for body in self._queue.queue:
                if isinstance(body, dict) and body.get("user_id") == owner and body.get("agent_id") == agent:
                    kept = [m for m in body["messages"] if not holds(str(m.get("content", "")))]
                    dropped += len(body["messages"]) - len(kept)
                    body["messages"] = kept
        self.wait_synced(self.options.timeout_ms / 1000)  # the turn in flight lands before the listing

        answer = self._request("GET", f"{self.options.add_path}?{urlencode({'user_id': owner, 'agent_id': agent})}")
        rows = answer.get("results") if isinstance(answer, dict) else answer
        if not isinstance(rows, list):
            raise Mem0Error(f"listing memories answered {type(answer).__name__}, not a list")
        doomed = [str(r["id"]) for r in rows if isinstance(r, dict) and r.get("id") is not None
                  and isinstance(r.get("memory"), str) and holds(r["memory"])]
        base = self.options.add_path
        for mid in (quote(m, safe="") for m in doomed):
            self._request("DELETE", f"{base}{mid}/" if base.endswith("/") else f"{base}/{mid}")
        return {"removed": len(doomed), "kept": len(rows) - len(doomed), "queued_messages_dropped": dropped}

    # -- HTTP ------------------------------------------------------------------------------------

    def _post(self, path: str, body: dict[str, Any], *, deadline: float | None) -> Any:
        return self._request("POST", path, body, deadline=deadline)

    def _request(self, method: str, path: str, body: dict[str, Any] | None = None, *,
                 deadline: float | None = None) -> Any:
        """One call to Mem0: its JSON answer (None for an empty one); Mem0Error naming the call.
        `timeoutMs` bounds the whole call, a slow drip of bytes included, and `maxAnswerBytes` its
        answer (providers/bounded_http.py)."""
        end = time.monotonic() + self.options.timeout_ms / 1000
        if deadline is not None:  # no use waiting past the point the registry stops listening
            end = min(end, deadline)
        where = f"{method} {path.split('?')[0]}"
        headers = {"Accept": "application/json"}
        if body is not None:
            headers["Content-Type"] = "application/json"
        if self._key:
            headers["Authorization"] = f"Bearer {self._key}"
        data = json.dumps(body).encode("utf-8") if body is not None else None
        try:
            answer = bounded_http.call(method, self._base + path, body=data, headers=headers, deadline=end,
                                       max_bytes=self.options.max_answer_bytes)
        except bounded_http.CallFailed as exc:
            raise Mem0Error(f"{where}: {exc}") from None
        if answer.status >= 300:
            raise Mem0Error(f"{where} answered HTTP {answer.status}")
        raw = answer.body
        try:
            return json.loads(raw.decode("utf-8")) if raw.strip() else None
        except ValueError:
            raise Mem0Error(f"{where} answered something that is not JSON") from None

    # -- status and shutdown ---------------------------------------------------------------------

    def status(self) -> dict[str, Any]:
        return {"sync_queue": self._queue.qsize(), "sync_queue_capacity": self.options.sync_queue_capacity,
                "synced": self.synced, "sync_failed": self.sync_failed, "dropped": self.dropped,
                "skipped_no_owner": self.skipped_no_owner, "last_sync_error": self.last_sync_error,
                "api_key": bool(self._key), "timeout_ms": self.options.timeout_ms,
                "search_enabled": self.options.search_enabled, "sync_enabled": self.options.sync_enabled}

    def close(self) -> None:
        """Stop taking turns; the worker leaves after what it is sending (queued turns are not waited for)."""
        with self._lock:
            self._closed = True
            worker = self._worker
        if worker is not None:
            while True:  # make room for the stop mark: shutdown must not block on a full queue
                try:
                    self._queue.put_nowait(_STOP)
                    break
                except queue.Full:
                    try:
                        self._queue.get_nowait()
                        self._queue.task_done()
                    except queue.Empty:
                        pass


def build(context: ProviderContext, options: dict[str, Any]) -> Mem0Provider:
    """The `mem0` entry point."""
    opts = option_keys(options, "mem0")
    if opts.get("api_key") is not None and opts.get("api_key_env") is not None:
        # One of them silently winning would send a key the person did not mean.
        raise ConfigError(f"mate.memory.providers: mem0: {as_written(options, 'api_key')} and "
                          f"{as_written(options, 'api_key_env')} both name the key; keep one")
    try:
        return Mem0Provider(Mem0Options(**opts))
    except ValidationError as exc:
        # Named as the person wrote them (`baseUrl`, `search-enabled`), not as our model spells them.
        problems = "; ".join(
            f"{'.'.join(as_written(options, p) if isinstance(p, str) else str(p) for p in e['loc']) or 'mem0'}: "
            f"{e['msg']}" for e in exc.errors())
        raise ConfigError(f"mate.memory.providers: mem0: {problems}") from None
