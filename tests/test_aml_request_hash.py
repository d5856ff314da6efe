"""An Add's body hash (what tells a retry of a request_id from a conflicting reuse) is the SHA-256 of the
same bytes whatever encodes them: orjson now, `json.dumps(ensure_ascii=False, separators=(",", ":"))`
before. A hash that changed would turn the retry of a request sent before an upgrade into a 409."""

from __future__ import annotations

import hashlib
import json
import random
from datetime import UTC, datetime
from pathlib import Path

import pytest

from mateclaw_mem.clock import ManualClock
from mateclaw_mem.conversations.aml import AmlService, _body_hash, _Normalised
from mateclaw_mem.conversations.aml_records import AmlMessage
from mateclaw_mem.conversations.log import ConversationLog
from mateclaw_mem.conversations.parts import ImageRef
from mateclaw_mem.errors import InvalidInputError
from mateclaw_mem.index.messages.index import MessageIndex


def _text(rng: random.Random) -> str:
    """Any Unicode scalar values: ASCII and its controls, the BMP on both sides of the surrogates, the
    astral planes."""
    spans = ((0, 0x7F), (0x80, 0x7FF), (0x800, 0xD7FF), (0xE000, 0xFFFF), (0x10000, 0x10FFFF))
    return "".join(chr(rng.randint(*rng.choice(spans))) for _ in range(rng.randint(0, 24)))


def _before(user_id: str, session_id: str, messages: list[_Normalised]) -> str:
    """The hash as every earlier version computed it."""
    canon = json.dumps({"user_id": user_id, "session_id": session_id, "messages": [
        [m.role, m.text, m.ts_ms, *([[i.as_dict() for i in m.images]] if m.images else [])] for m in messages]},
        ensure_ascii=False, separators=(",", ":"))
    return hashlib.sha256(canon.encode()).hexdigest()


def test_the_body_hash_is_the_one_earlier_versions_stored() -> None:
    rng = random.Random(36)
    for _ in range(5_000):
        messages = [_Normalised(_text(rng), _text(rng), rng.choice((None, 0, rng.randint(0, 2**53))),
                                tuple(ImageRef(url=_text(rng) or None, sha256=_text(rng) or None,
                                               bytes=rng.choice((None, rng.randint(0, 10**9))))
                                      for _ in range(rng.choice((0, 0, 0, 1, 2)))))
                    for _ in range(rng.randint(1, 4))]
        user, session = _text(rng), _text(rng)
        assert _body_hash(user, session, messages) == _before(user, session, messages)


def test_a_lone_surrogate_is_refused_by_name_and_nothing_is_logged(tmp_path: Path) -> None:
    log = ConversationLog(tmp_path / "log.db")
    svc = AmlService(log, MessageIndex(tmp_path / "messages.db", log_db=tmp_path / "log.db"),
                     ManualClock(datetime(2024, 1, 1, tzinfo=UTC)))
    with pytest.raises(InvalidInputError, match="lone surrogate"):
        svc.add("r1", "u", "s", [AmlMessage("user", "half a pair: \ud800")])
    assert log.since(0) == []
    assert svc.add("r1", "u", "s", [AmlMessage("user", "a whole one: \U0001f600")])["success"] is True
