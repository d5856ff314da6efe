"""Token estimates for prompt budgets, without a tokenizer dependency.

The rule (documented, deterministic, the same one the test model server reports as usage):
- CJK characters (Han, Kana, Hangul) ≈ 1 token each;
- every other character ≈ 1/4 token (4 characters per token, rounded up per text);
- each chat message costs MESSAGE_OVERHEAD tokens for its role and separators, and a request
  REQUEST_OVERHEAD more for the reply primer.

Why not a real tokenizer: budgets here decide *when* to compress, with a 25% margin below the
window; a BPE tokenizer would be exact for one model family only, and tiktoken's data download
does not belong in a desktop daemon's start-up. The estimate errs high on code and low on rare
scripts; stage 2 of the window defense handles the model disagreeing.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import Any

MESSAGE_OVERHEAD = 4
REQUEST_OVERHEAD = 2

_CJK = re.compile(
    "[\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7af\uf900-\ufaff\U00020000-\U0002ffff]"
)


def estimate_tokens(text: str) -> int:
    if not text:
        return 0
    if text.isascii():  # the common case: skip the CJK scan
        return -(-len(text) // 4)
    cjk = len(_CJK.findall(text))
    return cjk + -(-(len(text) - cjk) // 4)


def message_tokens(message: Mapping[str, Any]) -> int:
    content = message.get("content")
    if isinstance(content, list):  # content parts
        content = " ".join(str(p.get("text", "")) for p in content if isinstance(p, dict))
    return estimate_tokens(str(content or "")) + MESSAGE_OVERHEAD


def messages_tokens(messages: Iterable[Mapping[str, Any]]) -> int:
    """What a chat request of these messages is estimated to cost as prompt tokens."""
    return sum(message_tokens(m) for m in messages) + REQUEST_OVERHEAD
