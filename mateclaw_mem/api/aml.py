"""`/v1/aml/*`: the Agent Memory Leaderboard Add/Search contract. Parse, call AmlService, render."""

from __future__ import annotations

from typing import Annotated, Any, Literal

import orjson
from fastapi import APIRouter, Depends, Request, Response
from pydantic import AfterValidator, ConfigDict, Field

from mateclaw_mem.api.auth import require_api_key
from mateclaw_mem.conversations.aml import MAX_TIMESTAMP_MS, AmlMessage, AmlService, check_iso
from mateclaw_mem.conversations.aml_users import AmlUsers
from mateclaw_mem.index.tokenizer import MAX_QUERY_CHARS
from mateclaw_mem.wire import Wire


class _Body(Wire):
    # Strict: "5" is not a top_k and 123 is not a user_id - wrong types are a 422, not a guess.
    # Unknown keys are ignored so that the platform can add fields without breaking us.
    model_config = ConfigDict(strict=True, extra="ignore")


class ImageUrl(_Body):
    url: str = Field(min_length=1, description="an http(s) link (kept, redacted) or a data: URL (its hash kept;"
                     " its bytes too with aml.images: keep)")
    detail: Literal["auto", "low", "high"] | None = None


class TextPart(_Body):
    type: Literal["text"]
    text: str


class ImagePart(_Body):
    type: Literal["image_url"]
    image_url: ImageUrl | str = Field(description="{url, detail}; a bare URL string is accepted too")
    caption: str | None = Field(None, description="alt text: stored as a line '[image: caption]' where the image"
                                " stood, so it is indexed and searched")


ContentPart = Annotated[TextPart | ImagePart, Field(discriminator="type")]
Parts = Annotated[list[ContentPart], Field(min_length=1, max_length=256)]
_PARTS = (
    " or a list of content parts (OpenAI chat format: {type: text, text} and {type: image_url, image_url: {url}});"
    " text parts are joined by newlines"
)


EpochMs = Annotated[int, Field(ge=0, le=MAX_TIMESTAMP_MS)]
IsoTime = Annotated[str, AfterValidator(check_iso)]


class MessageIn(_Body):
    role: str = Field(min_length=1)
    content: Annotated[str, Field(min_length=1)] | Parts = Field(
        description="the message text" + _PARTS + " and indexed; images are kept as references and returned"
        " with the message by Search"
    )
    # Upper bound: the last millisecond of year 9999 (a larger int overflows SQLite: a 500, not a 422).
    timestamp: EpochMs | IsoTime | None = Field(
        default=None,
        description="when it was said: unix epoch milliseconds (e.g. 1683554160000), or an ISO-8601 string"
        " (e.g. 2023-05-08T13:56:00Z; without an offset it is read in the workspace timezone); default: the"
        " time of the Add",
    )


class AddRequest(_Body):
    request_id: str = Field(min_length=1)
    messages: list[MessageIn] = Field(min_length=1)
    user_id: str = Field(min_length=1)
    session_id: str = Field(min_length=1)


class AddResponse(Wire):
    success: bool
    request_id: str
    user_id: str
    session_id: str


class SearchRequest(_Body):
    query: Annotated[str, Field(min_length=1, max_length=MAX_QUERY_CHARS)] | Parts = Field(
        description="a question or keywords" + _PARTS + " into the query; image parts take no part in ranking"
        " (with aml.images: keep an identical image finds its messages first)"
    )
    user_id: str = Field(min_length=1)
    top_k: int = Field(ge=1)
    options: list[Annotated[str, Field(max_length=MAX_QUERY_CHARS)]] | None = Field(None, max_length=16)


class ImageRefOut(Wire):
    url: str | None = Field(None, description="the link as sent (credentials in it redacted)")
    sha256: str | None = Field(None, description="a data: URL's image: SHA-256 of its bytes (the data is not kept)")
    media_type: str | None = None
    bytes: int | None = Field(None, description="a data: URL's decoded size")
    detail: str | None = None


class SearchItem(Wire):
    id: str
    content: str
    score: float
    created_at: str
    images: list[ImageRefOut] | None = Field(None, description="the message's images; absent when it had none")
    parts: list[dict[str, Any]] | None = Field(
        None, description="with aml.images: keep, a message with images as content parts in the order sent:"
        " {type: text, text} and {type: image_url, image_url: {url}} (a kept image as a data: URL)")


class SearchResponse(Wire):
    data: list[SearchItem]


async def _aml(request: Request) -> AmlService:
    return request.app.state.services.aml  # built once, at the first request (cheap)


router = APIRouter(prefix="/v1/aml", tags=["aml"], dependencies=[Depends(require_api_key)])


# Plain `def`: the service does blocking SQLite work, so FastAPI runs these in its thread pool.
# The answer is the JSON the log stored with the request (what a retry replays), sent as it is:
# returning a dict made the service parse it and FastAPI validate it against `AddResponse` (in a
# second pool thread) and encode it again, for four strings already encoded.
@router.post("/add", response_model=AddResponse)
def add(body: AddRequest, aml: AmlService = Depends(_aml)) -> Response:
    return Response(add_answer(body, aml), media_type="application/json")


def add_answer(body: AddRequest, aml: AmlService) -> bytes:
    """The Add's 200 body (this route's and the fast lane's, `api/aml_fast.py`)."""
    return aml.add_json(body.request_id, body.user_id, body.session_id, _messages(body)).encode()


def add_answer_now(body: AddRequest, aml: AmlService) -> bytes | None:
    """`add_answer` if it can be had without waiting (`AmlService.add_json_now`), else None."""
    stored = aml.add_json_now(body.request_id, body.user_id, body.session_id, _messages(body))
    return None if stored is None else stored.encode()


def _messages(body: AddRequest) -> list[AmlMessage]:
    return [AmlMessage(m.role, _parts(m.content), m.timestamp) for m in body.messages]


def _parts(content: str | list[Any]) -> str | list[dict[str, Any]]:
    return content if isinstance(content, str) else [p.model_dump(exclude_none=True) for p in content]


# Plain `def` too: ranking is pure Python, and on the event loop three clients with long queries held
# every other request (even /health) behind them. In a pool thread the GIL is handed back to the loop
# every few milliseconds (scripts/bench/event_loop.py measures it); the hand-off costs ~0.1 ms.
@router.post("/search", response_model=SearchResponse)
def search(body: SearchRequest, aml: AmlService = Depends(_aml)) -> Response:
    return Response(search_answer(body, aml), media_type="application/json")


def search_answer(body: SearchRequest, aml: AmlService) -> bytes:
    """The Search's 200 body (this route's and the fast lane's)."""
    items = aml.search(_parts(body.query), body.user_id, body.top_k, body.options)
    # Rendered directly (the shape is `SearchResponse`, which documents it): validating up to
    # top_k items through pydantic again on the way out cost more than the search itself; and by
    # orjson, not json: 100 hits were ~0.4 ms of `json.dumps`, a tenth of a small user's search.
    data = []
    for i in items:
        item = {"id": i.id, "content": i.content, "score": i.score, "created_at": i.created_at}
        if i.images:
            item["images"] = list(i.images)
        if i.parts:
            item["parts"] = list(i.parts)
        data.append(item)
    return orjson.dumps({"data": data})


class DeleteUserResponse(Wire):
    user_id: str
    deleted: dict[str, int] = Field(description="rows deleted, per database:table")
    scrubbed: list[dict[str, Any]] = Field(description="each database rewritten so the old bytes are gone")


def _users(request: Request) -> AmlUsers:
    return request.app.state.services.aml_users


# `:path`: a user_id may hold "/" (sent as %2F, which the server decodes before routing).
@router.delete("/users/{user_id:path}", response_model=DeleteUserResponse)
def delete_user(user_id: str, users: AmlUsers = Depends(_users)) -> dict[str, Any]:
    """Every row of `user_id` (messages, index rows, idempotency records, facts, jobs, failure
    records) deleted from every store, and the databases scrubbed. Idempotent."""
    return users.delete(user_id)
