"""The AML Add/Search contract checked against any deployment (`mateclaw-mem aml check URL`): for
people who host the service publicly before submitting, and for us against a running daemon.

Each rule sends real requests under fresh ids (`aml-check-<random>`) and says pass or fail with what
it saw. Rules (the contract as the leaderboard's client relies on it):

- `add-echo`       Add answers 200 with success true and the request, user and session ids echoed;
- `add-sync`       a Search right after the Add's answer finds the message (no eventual consistency);
- `result-shape`   each result has a string id and content, a number score and an ISO created_at;
- `replay`         the same request id with the same body answers the same and stores nothing twice;
- `conflict`       the same request id with a changed body is a 409;
- `top-k`          a Search never returns more than top_k results (1 and 3, with more matching);
- `isolation`      another user's Search never returns this user's messages;
- `content-parts`  a message sent as OpenAI content parts is stored and found by its text;
- `422:<case>`     malformed bodies (a missing field, top_k 0 or a string, empty messages, a number
                   user_id) are a 422, never a 200 or a 500;
- `auth`           with a key: a request without it is refused (401/403).

At the end the check's users are deleted where the deployment offers `DELETE /v1/aml/users/{id}`
(this daemon does); elsewhere they stay, which the report says.
"""

from __future__ import annotations

import secrets
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from functools import partial
from typing import Any

import httpx

TS = 1683554160000  # 2023-05-08 13:56 UTC


@dataclass
class Rule:
    name: str
    ok: bool
    detail: str


@dataclass
class Report:
    url: str
    rules: list[Rule] = field(default_factory=list)
    cleanup: str = ""

    @property
    def ok(self) -> bool:
        return bool(self.rules) and all(r.ok for r in self.rules)

    def as_dict(self) -> dict[str, Any]:
        return {"url": self.url, "ok": self.ok, "cleanup": self.cleanup,
                "rules": [{"name": r.name, "ok": r.ok, "detail": r.detail} for r in self.rules]}

    def lines(self) -> str:
        out = [f"{'PASS' if r.ok else 'FAIL'}  {r.name:<26} {r.detail}" for r in self.rules]
        failed = sum(not r.ok for r in self.rules)
        out.append(f"{len(self.rules) - failed}/{len(self.rules)} rules pass against {self.url}"
                   + (f"; {failed} fail" if failed else ""))
        if self.cleanup:
            out.append(f"cleanup: {self.cleanup}")
        return "\n".join(out)


class _Failed(Exception):
    """A rule's expectation not met (its message is the detail)."""


def _base(url: str) -> str:
    url = url.rstrip("/")
    for tail in ("/v1/aml/add", "/v1/aml/search", "/v1/aml"):
        if url.endswith(tail):
            return url[: -len(tail)]
    return url


class ContractCheck:
    def __init__(self, url: str, *, api_key: str | None = None, timeout: float = 30.0,
                 transport: httpx.BaseTransport | None = None) -> None:
        self.base = _base(url)
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self.key = api_key
        self.http = httpx.Client(base_url=self.base, headers=headers, timeout=timeout, transport=transport)
        self._bare = httpx.Client(base_url=self.base, timeout=timeout, transport=transport)  # no key
        self.first = {"request_id": "check-1", "user_id": "", "session_id": "s1"}
        self.answer: Any = None
        run = secrets.token_hex(4)
        self.user = f"aml-check-{run}-a"
        self.other = f"aml-check-{run}-b"
        self.token = f"quillhaven{run}"  # a word no real conversation holds: what the searches look for
        self.first["user_id"] = self.user

    def close(self) -> None:
        self.http.close()
        self._bare.close()

    # -- requests -----------------------------------------------------------------------------------

    def _post(self, path: str, body: Any) -> httpx.Response:
        return self.http.post(path, json=body)

    def _add(self, request_id: str, texts: list[Any], *, user: str | None = None, session: str = "s1"
             ) -> httpx.Response:
        return self._post("/v1/aml/add", {
            "request_id": request_id, "user_id": user or self.user, "session_id": session,
            "messages": [{"role": "user", "timestamp": TS + i, "content": t} for i, t in enumerate(texts)]})

    def _search(self, query: str, *, user: str | None = None, top_k: int = 10) -> list[dict[str, Any]]:
        r = self._post("/v1/aml/search", {"query": query, "user_id": user or self.user, "top_k": top_k})
        if r.status_code != 200:
            raise _Failed(f"Search answered {r.status_code}: {r.text[:200]}")
        data = r.json().get("data") if isinstance(r.json(), dict) else None
        if not isinstance(data, list):
            raise _Failed(f"Search answered without a data list: {r.text[:200]}")
        return data

    def _contents(self, items: list[dict[str, Any]]) -> list[str]:
        return [str(i.get("content", "")) if isinstance(i, dict) else "" for i in items]

    # -- rules --------------------------------------------------------------------------------------

    def run(self) -> Report:
        report = Report(self.base)
        steps: list[tuple[str, Callable[[], str]]] = [
            ("add-echo", self._add_echo), ("add-sync", self._add_sync), ("result-shape", self._result_shape),
            ("replay", self._replay), ("conflict", self._conflict), ("top-k", self._top_k),
            ("isolation", self._isolation), ("content-parts", self._content_parts),
        ]
        for name, fn in steps:
            report.rules.append(self._rule(name, fn))
            if name == "add-echo" and not report.rules[-1].ok and "could not reach" in report.rules[-1].detail:
                return report  # nothing else can be checked
        for case, body in self._malformed():
            report.rules.append(self._rule(f"422:{case}", partial(self._unprocessable, body)))
        if self.key:
            report.rules.append(self._rule("auth", self._auth))
        report.cleanup = self._cleanup()
        return report

    def _rule(self, name: str, fn: Callable[[], str]) -> Rule:
        try:
            return Rule(name, True, fn())
        except _Failed as exc:
            return Rule(name, False, str(exc))
        except httpx.HTTPError as exc:
            return Rule(name, False, f"could not reach {self.base}: {type(exc).__name__}: {exc}")
        except ValueError as exc:  # an answer that is not JSON
            return Rule(name, False, f"an answer that is not JSON ({exc})")

    def _add_echo(self) -> str:
        r = self._add("check-1", [f"Caroline: my {self.token} kite is red", "Mel: what a colour!"])
        if r.status_code != 200:
            raise _Failed(f"Add answered {r.status_code}: {r.text[:200]}")
        body = r.json()
        want = {"success": True, **self.first}
        wrong = {k: body.get(k) for k, v in want.items() if body.get(k) != v}
        if wrong:
            raise _Failed(f"Add answered {wrong}, expected {want}")
        self.answer = body
        return "200 with success and the ids echoed"

    def _add_sync(self) -> str:
        found = [c for c in self._contents(self._search(f"{self.token} kite colour")) if self.token in c]
        if not found:
            raise _Failed("a Search right after the Add's 200 did not find the message")
        return "found by the next Search"

    def _result_shape(self) -> str:
        items = self._search(f"{self.token} kite")
        if not items:
            raise _Failed("no results to check")
        for i, item in enumerate(items):
            problems = []
            if not isinstance(item.get("id"), str) or not item.get("id"):
                problems.append("id not a non-empty string")
            if not isinstance(item.get("content"), str):
                problems.append("content not a string")
            if isinstance(item.get("score"), bool) or not isinstance(item.get("score"), int | float):
                problems.append("score not a number")
            try:
                datetime.fromisoformat(str(item.get("created_at")).replace("Z", "+00:00"))
            except ValueError:
                problems.append(f"created_at {item.get('created_at')!r} not ISO-8601")
            if problems:
                raise _Failed(f"data[{i}]: {', '.join(problems)}")
        return f"{len(items)} result(s) with id, content, score, created_at"

    def _replay(self) -> str:
        r = self._add("check-1", [f"Caroline: my {self.token} kite is red", "Mel: what a colour!"])
        if r.status_code != 200:
            raise _Failed(f"the same request again answered {r.status_code}: {r.text[:200]}")
        if r.json() != self.answer:
            raise _Failed(f"the replay answered {r.text[:200]}, the first answer was {self.answer}")
        copies = [c for c in self._contents(self._search(f"{self.token} kite red", top_k=20)) if "kite is red" in c]
        if len(copies) != 1:
            raise _Failed(f"the message is stored {len(copies)} times after a replay")
        return "same answer, stored once"

    def _conflict(self) -> str:
        r = self._add("check-1", [f"Caroline: my {self.token} kite is blue"])
        if r.status_code != 409:
            raise _Failed(f"a changed body under a used request_id answered {r.status_code}, not 409")
        return "409"

    def _top_k(self) -> str:
        r = self._add("check-2", [f"Caroline: {self.token} note number {n}" for n in range(6)], session="s2")
        if r.status_code != 200:
            raise _Failed(f"Add answered {r.status_code}")
        for k in (1, 3):
            n = len(self._search(f"{self.token} note number", top_k=k))
            if n > k:
                raise _Failed(f"top_k {k} returned {n} results")
            if n == 0:
                raise _Failed(f"top_k {k} returned nothing although 6 messages match")
        return "never more than top_k (1 and 3; 6 matching)"

    def _isolation(self) -> str:
        answer = self._search(f"{self.token} kite note", user=self.other)
        leaked = [c for c in self._contents(answer) if self.token in c]
        if leaked:
            raise _Failed(f"another user's Search returned {len(leaked)} of this user's messages: {leaked[0][:80]!r}")
        return "another user's Search sees none of them"

    def _content_parts(self) -> str:
        parts = [{"type": "text", "text": f"Caroline: the {self.token} lantern"},
                 {"type": "text", "text": "hangs by the gate"}]
        r = self._add("check-3", [parts], session="s3")
        if r.status_code != 200:
            raise _Failed(f"Add with content parts answered {r.status_code}: {r.text[:200]}")
        found = [c for c in self._contents(self._search(f"{self.token} lantern gate")) if "lantern" in c]
        if not found:
            raise _Failed("the message sent as content parts was not found by its text")
        r = self._post("/v1/aml/search", {"query": [{"type": "text", "text": f"{self.token} lantern"}],
                                          "user_id": self.user, "top_k": 3})
        if r.status_code != 200:
            raise _Failed(f"a Search query of content parts answered {r.status_code}")
        return "stored, found, and a query of parts answered"

    def _malformed(self) -> list[tuple[str, dict[str, Any]]]:
        add = {"request_id": "check-bad", "user_id": self.user, "session_id": "s9",
               "messages": [{"role": "user", "content": "x"}]}
        search = {"query": "x", "user_id": self.user, "top_k": 3}
        return [
            ("add-no-messages", {k: v for k, v in add.items() if k != "messages"}),
            ("add-empty-messages", {**add, "messages": []}),
            ("add-number-user-id", {**add, "user_id": 123}),
            ("search-no-query", {k: v for k, v in search.items() if k != "query"} | {"_path": "search"}),
            ("search-top-k-0", {**search, "top_k": 0, "_path": "search"}),
            ("search-top-k-string", {**search, "top_k": "5", "_path": "search"}),
        ]

    def _unprocessable(self, body: dict[str, Any]) -> str:
        body = dict(body)
        path = "/v1/aml/search" if body.pop("_path", "add") == "search" else "/v1/aml/add"
        r = self._post(path, body)
        if r.status_code != 422:
            raise _Failed(f"answered {r.status_code}, not 422")
        return "422"

    def _auth(self) -> str:
        r = self._bare.post("/v1/aml/search", json={"query": "x", "user_id": self.user, "top_k": 1})
        if r.status_code not in (401, 403):
            raise _Failed(f"a Search without the key answered {r.status_code}")
        return f"{r.status_code} without the key"

    def _cleanup(self) -> str:
        answers = []
        for user in (self.user, self.other):
            try:
                answers.append(self.http.delete(f"/v1/aml/users/{user}").status_code)
            except httpx.HTTPError:
                answers.append(0)
        if all(a == 200 for a in answers):
            return "the check's users deleted"
        return f"the check's users ({self.user}, {self.other}) were left (DELETE answered {answers})"


def check(url: str, *, api_key: str | None = None, timeout: float = 30.0) -> Report:
    checker = ContractCheck(url, api_key=api_key, timeout=timeout)
    try:
        return checker.run()
    finally:
        checker.close()
