"""One HTTP call to a provider's server with a byte cap on its answer and one deadline for all of it.

A socket timeout bounds each wait for bytes, not the call: a server that drips one byte a second
never trips it, and pinned a provider thread (and a SIGTERM) for 52 s in a measured run; an 80 MB
answer was read whole (+245 MB) before anything looked at it. Here the connection is shut from a
timer at the deadline, whatever phase the call is in (connect, headers, body), and the body is read
in pieces until the cap. Plain `http.client`: no proxy from the shell's environment is used (a
provider next to the daemon must not be routed through it) and no redirect is followed.
"""

from __future__ import annotations

import contextlib
import http.client
import socket
import threading
import time
from dataclasses import dataclass
from urllib.parse import urlsplit

_PIECE = 65536


class CallFailed(RuntimeError):
    """The call did not give a whole answer: the message says why (no server, deadline, size)."""


@dataclass(frozen=True)
class Answer:
    status: int
    body: bytes


def call(method: str, url: str, *, body: bytes | None, headers: dict[str, str], deadline: float,
         max_bytes: int) -> Answer:
    """`method url` answered by `deadline` (time.monotonic()) with at most `max_bytes` of body."""
    left = deadline - time.monotonic()
    if left <= 0:
        raise CallFailed("no time left before its deadline")
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise CallFailed(f"{url!r} is not an http(s) URL")
    conn_type = http.client.HTTPSConnection if parts.scheme == "https" else http.client.HTTPConnection
    conn = conn_type(parts.hostname, parts.port, timeout=left)
    expired = threading.Event()
    held: list[socket.socket] = []  # the connection's socket (http.client drops `conn.sock` once answered)

    def cut() -> None:  # unblocks a recv in any phase; the reading thread then sees a closed socket
        expired.set()
        for sock in held:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)

    timer = threading.Timer(left, cut)
    timer.daemon = True
    timer.start()
    path = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
    try:
        conn.connect()  # within `left` (its timeout); the timer cannot reach a socket not made yet
        held.append(conn.sock)
        if expired.is_set():
            raise CallFailed("no whole answer before its deadline")
        conn.request(method, path, body=body, headers=headers)
        resp = conn.getresponse()
        declared = resp.getheader("Content-Length")
        if declared and declared.isdigit() and int(declared) > max_bytes:
            raise CallFailed(f"its answer is {int(declared):,} bytes, over the {max_bytes:,}-byte cap")
        pieces, size = [], 0
        while True:
            piece = resp.read1(_PIECE)
            if not piece:
                break
            size += len(piece)
            if size > max_bytes:
                raise CallFailed(f"its answer passed the {max_bytes:,}-byte cap; the rest was not read")
            pieces.append(piece)
        if expired.is_set():
            raise CallFailed("no whole answer before its deadline")
        return Answer(resp.status, b"".join(pieces))
    except (OSError, http.client.HTTPException) as exc:
        if expired.is_set():
            raise CallFailed("no whole answer before its deadline") from None
        raise CallFailed(f"failed: {exc or type(exc).__name__}") from None
    finally:
        timer.cancel()
        conn.close()
