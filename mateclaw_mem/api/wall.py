"""The layers an app of the daemon stands behind - the full daemon's (api/app.py) and `serve
--aml-only`'s (api/aml_only_app.py) alike, so an Add/Search client cannot tell the two apart and a
guard added here reaches both. Innermost first, as Starlette wraps them: body limits, the AML fast
lane, the read deadline, the error answer, and outside all of it the Host/Origin guard."""

from __future__ import annotations

import re
from collections import Counter
from typing import TYPE_CHECKING

from mateclaw_mem.api.aml_fast import AmlFastLane, LaneApp
from mateclaw_mem.api.body_limit import SEARCH_BODY_BYTES, BodyLimit
from mateclaw_mem.api.guards import AnswerErrors, ReadDeadline
from mateclaw_mem.api.origin_guard import HostPolicy, OriginGuard
from mateclaw_mem.index.tokenizer import MAX_QUERY_CHARS

if TYPE_CHECKING:
    from mateclaw_mem.conversations.aml import AmlService
    from mateclaw_mem.settings import Settings


def build_wall(app: LaneApp, settings: Settings, api_key: str | None, *, host: str | None,
               lane: AmlService | None, per_path: dict[str, tuple[int, str]] | None = None,
               streamed: re.Pattern[str] | None = None) -> None:
    """`lane`: the service the AML fast lane answers from (None: no fast lane; nothing is built for it).
    `per_path`/`streamed`: the app's own body limits beside the search's (BodyLimit)."""
    # A search carries a query, not a document: its body is refused before it is read or parsed
    # (parsing 1.9 MB of JSON on the event loop held /health for 100+ ms).
    # With aml.images: keep a query may hold an image to find by its hash: room for one at the cap, as base64.
    section = settings.aml
    keep = section.images == "keep"
    search_bytes = SEARCH_BODY_BYTES + (section.image_max_bytes * 4 // 3 + 1024 if keep else 0)
    search_limit = (search_bytes, f" (a search query is at most {MAX_QUERY_CHARS} characters"
                    + (", and an image at most aml.image-max-bytes)" if keep else ")"))
    server = settings.server
    app.add_middleware(BodyLimit, max_bytes=server.max_body_bytes,
                       per_path={"/v1/aml/search": search_limit, **(per_path or {})}, streamed=streamed)
    app.state.aml_fast_lane = Counter[str]()  # answered / declined, for tests and benchmarks
    if lane is not None:  # in front of all of it (api/aml_fast.py); what it declines goes through all of it
        app.lane = AmlFastLane(app.without_lane, lane, api_key, counts=app.state.aml_fast_lane,
                               limits={"/v1/aml/add": server.max_body_bytes, "/v1/aml/search": search_bytes},
                               read_timeout=server.body_read_timeout_seconds)
    # Added last = outermost: the deadline also covers BodyLimit's read of a chunked body.
    app.add_middleware(ReadDeadline, seconds=server.body_read_timeout_seconds)
    app.add_middleware(AnswerErrors)
    # Outside all of it, the fast lane included: no web page reaches the daemon (api/origin_guard.py).
    app.guard = OriginGuard(app.routed, HostPolicy(host or server.host, server.allowed_hosts,
                                                   keyed=api_key is not None))
