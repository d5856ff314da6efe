"""`/v1/aml/*`: the Agent Memory Leaderboard Add/Search contract. Parse, call AmlService, render."""

from __future__ import annotations

import json
from typing import Annotated

from fastapi import APIRouter, Depends, Request, Response
from pydantic import BaseModel, ConfigDict, Field

from mateclaw_mem.api.auth import require_api_key
from mateclaw_mem.conversations.aml import AmlMessage, AmlService
from mateclaw_mem.index.tokenizer import MAX_QUERY_CHARS


class _Body(BaseModel):
    # Strict: "5" is not a top_k and 123 is not a user_id - wrong types are a 422, not a guess.
    # Unknown keys are ignored so that the platform can add fields without breaking us.
    model_config = ConfigDict(strict=True, extra="ignore")


class MessageIn(_Body):
    role: str = Field(min_length=1)
    content: str = Field(min_length=1)
    # Upper bound: the last millisecond of year 9999 (a larger int overflows SQLite: a 500, not a 422).
    timestamp: int | None = Field(default=None, ge=0, le=253_402_300_799_999, description="unix milliseconds")


class AddRequest(_Body):
    request_id: str = Field(min_length=1)
    messages: list[MessageIn] = Field(min_length=1)
    user_id: str = Field(min_length=1)
    session_id: str = Field(min_length=1)


class AddResponse(BaseModel):
    success: bool
    request_id: str
    user_id: str
    session_id: str


class SearchRequest(_Body):
    query: str = Field(min_length=1, max_length=MAX_QUERY_CHARS, description="a question or keywords")
    user_id: str = Field(min_length=1)
    top_k: int = Field(ge=1)
    options: list[Annotated[str, Field(max_length=MAX_QUERY_CHARS)]] | None = Field(None, max_length=16)


class SearchItem(BaseModel):
    id: str
    content: str
    score: float
    created_at: str


class SearchResponse(BaseModel):
    data: list[SearchItem]


async def _aml(request: Request) -> AmlService:
    return request.app.state.services.aml  # built once, at the first request (cheap)


router = APIRouter(prefix="/v1/aml", tags=["aml"], dependencies=[Depends(require_api_key)])


# Plain `def`: the service does blocking SQLite work, so FastAPI runs these in its thread pool.
@router.post("/add", response_model=AddResponse)
def add(body: AddRequest, aml: AmlService = Depends(_aml)) -> dict[str, object]:
    return aml.add(
        body.request_id,
        body.user_id,
        body.session_id,
        [AmlMessage(m.role, m.content, m.timestamp) for m in body.messages],
    )


# Plain `def` too: ranking is pure Python, and on the event loop three clients with long queries held
# every other request (even /health) behind them. In a pool thread the GIL is handed back to the loop
# every few milliseconds (scripts/bench/event_loop.py measures it); the hand-off costs ~0.1 ms.
@router.post("/search", response_model=SearchResponse)
def search(body: SearchRequest, aml: AmlService = Depends(_aml)) -> Response:
    items = aml.search(body.query, body.user_id, body.top_k, body.options)
    # Rendered directly (the shape is `SearchResponse`, which documents it): validating up to
    # top_k items through pydantic again on the way out cost more than the search itself.
    data = [{"id": i.id, "content": i.content, "score": i.score, "created_at": i.created_at} for i in items]
    return Response(json.dumps({"data": data}, ensure_ascii=False), media_type="application/json")
