"""A constrained reranker for AML Search (`aml.rerank`): a model may only put the lexical ranking's
first candidates in another order. It never adds, drops or invents a result.

Two ways to ask (`aml.rerank.kind`):

- `rerank`: a `/rerank` endpoint as llama.cpp's server (with `--rerank`), vLLM, Cohere-compatible and
  Jina servers serve it: POST `{model, query, documents: [text…], top_n}` → `{"results": [{"index",
  "relevance_score"}…]}`. TEI's `/rerank` takes `texts` and answers a bare list of `{"index",
  "score"}`: a 4xx naming `texts` is asked again in that shape, and both answers are read.
- `chat`: an OpenAI-compatible chat model (`url` its base, …/v1) is shown the candidates under their
  ids and asked, with a JSON schema whose only allowed values are those ids, for the ids best first.

What comes back is untrusted: an index or id that is not one of the candidates (invented, another
user's, out of range, repeated) is dropped, candidates the answer leaves out keep their lexical order
after the ones it placed, and anything unusable leaves the lexical order as it was. The whole call is
bounded by `deadline-seconds` (a slow or trickling server is abandoned, its answer ignored). Every
failure is recorded like any model step's (`llm/failures.py`, step `aml_rerank`, with the user as
owner) and every call in the usage log.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from mateclaw_mem.llm.failures import record_failure
from mateclaw_mem.llm.jsonparse import JSONExtractError, extract_json_object
from mateclaw_mem.llm.usage import UsageRecord

if TYPE_CHECKING:
    import httpx

    from mateclaw_mem.llm.usage import UsageLog
    from mateclaw_mem.settings import RerankSettings

log = logging.getLogger(__name__)
STEP = "aml_rerank"
MAX_DOC_CHARS = 2000  # a candidate's text as shown to the model (LoCoMo turns are far shorter)
_SYSTEM = (
    "You order retrieved chat messages by how useful each is for answering a question. Answer with JSON "
    '{"ids": [...]}: the ids of the candidates, most useful first. Use only the ids shown; do not answer '
    "the question."
)


@dataclass(frozen=True)
class Candidate:
    id: str
    text: str


class RerankFailed(Exception):
    def __init__(self, kind: str, reason: str) -> None:
        super().__init__(reason)
        self.kind = kind
        self.reason = reason


class Reranker:
    def __init__(self, settings: RerankSettings, usage: UsageLog | None, *, api_key: str | None = None,
                 transport: httpx.BaseTransport | None = None) -> None:
        self.settings = settings
        self.usage = usage  # `record_failure` reads it off this object, as off the model client
        import httpx  # here: only a configured reranker needs it (~25 ms of every daemon start before listening)

        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self._http = httpx.Client(headers=headers, timeout=settings.deadline_seconds, transport=transport)
        # Calls run here so the deadline holds even against a server that trickles its answer.
        self._pool = ThreadPoolExecutor(max_workers=4, thread_name_prefix="aml-rerank")
        self.counts: Counter[str] = Counter()  # calls, reordered, unchanged, failed (for `status`)
        self._lock = threading.Lock()

    def close(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)
        self._http.close()

    def status(self) -> dict[str, Any]:
        s = self.settings
        with self._lock:
            counts = dict(self.counts)
        return {"url": s.url, "kind": s.kind, "model": s.model or None, "top_n": s.top_n,
                "deadline_seconds": s.deadline_seconds, **counts}

    def _count(self, what: str) -> None:
        with self._lock:
            self.counts[what] += 1

    def order(self, query: str, candidates: list[Candidate], *, agent: str, owner: str) -> list[str] | None:
        """The candidates' ids, best first, as the model ranks them (only ids of `candidates`, each once,
        every candidate present); None when the model gave nothing usable in time."""
        if len(candidates) < 2:
            return None
        self._count("calls")
        started = time.monotonic()
        future = self._pool.submit(self._ask, query, candidates)
        try:
            placed = future.result(timeout=self.settings.deadline_seconds)
        except FutureTimeout:
            future.cancel()
            self._failed("timeout", f"no answer within {self.settings.deadline_seconds:g} s", started, agent, owner)
            return None
        except RerankFailed as exc:
            self._failed(exc.kind, exc.reason, started, agent, owner)
            return None
        except Exception as exc:  # a bug here must never cost a search: the lexical order stands
            self._failed("error", f"{type(exc).__name__}: {exc}", started, agent, owner)
            return None
        known = [c.id for c in candidates]
        valid = set(known)
        chosen = list(dict.fromkeys(i for i in placed if i in valid))
        if not chosen:
            self._failed("invalid_output", "the answer named none of the candidates", started, agent, owner)
            return None
        dropped = len(placed) - len(chosen)
        self._record(started, ok=True, error=f"{dropped} unknown or repeated id(s) dropped" if dropped else None)
        ordered = chosen + [i for i in known if i not in set(chosen)]
        self._count("reordered" if ordered != known else "unchanged")
        return ordered

    def _failed(self, kind: str, reason: str, started: float, agent: str, owner: str) -> None:
        # The reason may quote the server, and a server may quote the documents (the user's words): it
        # goes only to the failure record, filed under the user (deleted with them), not to the usage
        # log (no owner) nor the daemon's log.
        self._count("failed")
        self._record(started, ok=False, kind=kind)
        record_failure(self, STEP, kind, reason, agent=agent, owner=owner)
        log.warning("AML rerank failed (%s); the lexical order stands (status shows the reason)", kind)

    def _record(self, started: float, *, ok: bool, kind: str | None = None, error: str | None = None) -> None:
        if self.usage is None:
            return
        rec = UsageRecord(STEP, self.settings.model or self.settings.kind, 0, 0,
                          int((time.monotonic() - started) * 1000), ok, kind, error)
        try:
            self.usage.record(rec)
        except Exception as exc:  # a closed or locked log must not turn into a failed search
            log.warning("could not record the AML rerank call: %s", exc)

    # -- the two ways to ask ------------------------------------------------------------------------

    def _ask(self, query: str, candidates: list[Candidate]) -> list[str]:
        if self.settings.kind == "chat":
            return self._ask_chat(query, candidates)
        return self._ask_rerank(query, candidates)

    def _post(self, url: str, body: dict[str, Any]) -> Any:
        import httpx

        try:
            r = self._http.post(url, json=body)
        except httpx.TimeoutException as exc:
            raise RerankFailed("timeout", f"{type(exc).__name__}: {exc}") from exc
        except httpx.HTTPError as exc:
            raise RerankFailed("connection", f"{type(exc).__name__}: {exc}") from exc
        if r.status_code != 200:
            kind = "auth" if r.status_code in (401, 403) else "server" if r.status_code >= 500 else "bad_request"
            raise RerankFailed(kind, f"HTTP {r.status_code}: {r.text[:200]}")
        try:
            return r.json()
        except ValueError as exc:
            raise RerankFailed("invalid_output", f"an answer that is not JSON: {r.text[:200]!r}") from exc

    def _ask_rerank(self, query: str, candidates: list[Candidate]) -> list[str]:
        docs = [c.text[:MAX_DOC_CHARS] for c in candidates]
        body: dict[str, Any] = {"query": query, "documents": docs, "top_n": len(docs)}
        if self.settings.model:
            body["model"] = self.settings.model
        try:
            answer = self._post(self.settings.url, body)
        except RerankFailed as exc:  # TEI names its list `texts` and refuses a body without it
            if exc.kind != "bad_request" or "texts" not in exc.reason:
                raise
            answer = self._post(self.settings.url, {"query": query, "texts": docs})
        results = answer.get("results", answer.get("data")) if isinstance(answer, dict) else answer
        if not isinstance(results, list):
            raise RerankFailed("invalid_output", f"no results list in {json.dumps(answer)[:200]}")
        scored: list[tuple[float, int]] = []
        for item in results:
            if not isinstance(item, dict):
                continue
            index, score = item.get("index"), item.get("relevance_score", item.get("score"))
            if isinstance(index, bool) or not isinstance(index, int) or not 0 <= index < len(candidates):
                continue  # an index that is no candidate: invented, dropped
            if isinstance(score, bool) or not isinstance(score, int | float) or score != score:
                continue
            scored.append((float(score), index))
        # Sorted here (servers usually do, not all); ties keep the lexical order.
        return [candidates[i].id for _, i in sorted(scored, key=lambda s: (-s[0], s[1]))]

    def _ask_chat(self, query: str, candidates: list[Candidate]) -> list[str]:
        ids = [c.id for c in candidates]
        listing = "\n".join(f"[{c.id}] {c.text[:MAX_DOC_CHARS]}" for c in candidates)
        schema = {"type": "object", "additionalProperties": False, "required": ["ids"],
                  "properties": {"ids": {"type": "array", "items": {"type": "string", "enum": ids}}}}
        body: dict[str, Any] = {
            "model": self.settings.model, "temperature": 0, "max_tokens": 16 * len(ids) + 32,
            "messages": [{"role": "system", "content": _SYSTEM},
                         {"role": "user", "content": f"Question: {query}\n\nCandidates:\n{listing}"}],
            "response_format": {"type": "json_schema",
                                "json_schema": {"name": "candidate_order", "strict": True, "schema": schema}},
        }
        answer = self._post(self.settings.url.rstrip("/") + "/chat/completions", body)
        try:
            text = answer["choices"][0]["message"]["content"]
            placed = extract_json_object(text).get("ids")
        except (KeyError, IndexError, TypeError, JSONExtractError) as exc:
            raise RerankFailed("invalid_output", f"no JSON ids in the answer ({exc})") from exc
        if not isinstance(placed, list):
            raise RerankFailed("invalid_output", "the answer's ids is not a list")
        return [i for i in placed if isinstance(i, str)]
