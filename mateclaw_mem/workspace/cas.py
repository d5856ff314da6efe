"""The machine writers' compare-and-swap loop: read, compute, write with the hash read, and on a
conflict (a person saved meanwhile) start over on their version.

    result = retry_on_conflict(attempt, retries=2)

`attempt(n)` (n = 0 first, 1.. on a retry) does the whole read → compute → `store.write(...,
expected_sha=snapshot.sha)`; it must read again every time, so each retry plans on what the person
saved. After `retries` retries the last ConflictError propagates and the caller says what was kept.
Any other error propagates at once: only a conflict is worth planning again for.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TypeVar

from mateclaw_mem.errors import ConflictError

log = logging.getLogger(__name__)
T = TypeVar("T")


def retry_on_conflict(attempt: Callable[[int], T], *, retries: int) -> T:
    """`attempt(n)` for n = 0, 1, ... until it returns; at most `retries` retries after a conflict."""
    n = 0
    while True:
        try:
            return attempt(n)
        except ConflictError as exc:
            if n >= retries:
                raise
            log.info("compare-and-swap conflict (attempt %d of %d), planning again: %s", n + 1, retries + 1,
                     exc.message)
            n += 1
