"""Listening sockets for the daemon: which addresses are loopback, and binding in the main thread."""

from __future__ import annotations

import ipaddress
import socket
import threading
import time
from typing import Any

from mateclaw_mem.errors import ConfigError


def is_loopback(host: str) -> bool:
    """True for addresses only this machine can reach; anything else needs an API key."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False  # a host name other than localhost may resolve to anything


def require_key_beyond_loopback(host: str, has_key: bool, key_env: str) -> None:
    """Refuse to listen beyond this machine without an API key (both daemons, full and --aml-only)."""
    if not has_key and not is_loopback(host):
        raise ConfigError(
            f"refusing to listen on {host}: any address other than loopback needs an API key. "
            f"Put the key in the environment variable {key_env} (setting server.api-key-env), "
            "or bind to 127.0.0.1"
        )


def connect_url(host: str, url: str) -> str:
    """Where a client on this machine reaches a daemon bound to `host` and listening at `url`: a
    wildcard bind is reached on loopback ("" while not listening)."""
    if not url:
        return ""
    near = {"0.0.0.0": "127.0.0.1", "::": "::1", "": "127.0.0.1"}.get(host, host)
    near = f"[{near}]" if ":" in near else near
    return f"http://{near}:{url.rsplit(':', 1)[1]}"


def bind(host: str, port: int) -> socket.socket:
    """Bind here, in the main thread, so "address in use" is a clear error rather than a dead thread."""
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except socket.gaierror as exc:
        raise ConfigError(f"cannot bind to {host}:{port}: {exc.strerror}") from None
    family, _, _, _, addr = infos[0]
    # IPPROTO_TCP spelled out: asyncio turns Nagle off (TCP_NODELAY) only on accepted sockets whose
    # proto says TCP, and a socket made with proto 0 left every response waiting ~40 ms for the
    # client's delayed ACK (uvloop sets it regardless, which hid this where uvloop is installed).
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    try:
        sock.bind(addr)
    except OSError as exc:
        sock.close()
        raise ConfigError(f"cannot listen on {host}:{port}: {exc.strerror} (another process uses the port?)") from None
    sock.set_inheritable(True)
    return sock


def serve_in_thread(server: Any, sock: socket.socket, host: str, timeout: float) -> tuple[threading.Thread, str]:
    """A uvicorn `server` serving `sock` in a thread, once it has started; (the thread, its URL).
    A thread, not the main thread: signals stay with the daemon, so one handler stops everything in order."""
    bound_port = sock.getsockname()[1]
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, name="http", daemon=True)
    thread.start()
    # uvicorn exposes start-up only as a flag; this short wait happens once, at start.
    deadline = time.monotonic() + timeout
    while thread.is_alive() and not server.started and time.monotonic() < deadline:
        thread.join(0.005)
    if not server.started:
        server.should_exit = True
        raise ConfigError(f"the HTTP API did not start on {host}:{bound_port}; see the log above")
    shown = f"[{host}]" if ":" in host else host
    return thread, f"http://{shown}:{bound_port}"
