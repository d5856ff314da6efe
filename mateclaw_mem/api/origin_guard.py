"""No web page reaches the daemon: one ASGI guard in front of every HTTP face (API, AML fast lane,
Memory Browser, /docs, MCP).

The default daemon listens on loopback with no API key, so "only this machine can connect" is the
whole of its access control. A browser on this machine breaks that two ways, and both were
measured against the daemon before this guard:

- DNS rebinding: a page at `attacker.example` re-points its own name at 127.0.0.1 and then reads
  the daemon as its own origin (`GET .../workspace/memory/file`, `.../export` answered 200). The
  browser still sends `Host: attacker.example`, so a name that is not one of ours is answered 421
  (Misdirected Request) before anything else runs.
- Cross-site writes: a page may send a POST anywhere without asking (a form, or `fetch` in
  `no-cors` mode with `text/plain` or `multipart/form-data`); it cannot read the answer, but the
  write happens (a snapshot import, a dream). Browsers mark such requests with `Sec-Fetch-Site`
  and `Origin`, which a page cannot forge, so a request that changes something and says it comes
  from another page is answered 403. Clients that are not browsers (curl, SDKs, the CLI) send
  neither header and pass.

Our names: loopback (`localhost`, `*.localhost`, loopback addresses), the bind address, and
`server.allowed-hosts`. Listening on every interface (0.0.0.0, ::) with an API key, any name is
accepted: the machine may be reached under names the daemon cannot know, and the key, which a page
on another site does not have, already guards everything a name could reach (the daemon refuses to
listen there without one). The MCP SDK's own Host check is switched off (api/mcp_http.py) so that
this is the one check, with one answer, for every face.
"""

from __future__ import annotations

import ipaddress
import logging
from collections.abc import Iterable
from urllib.parse import urlsplit

from starlette.types import ASGIApp, Receive, Scope, Send

from mateclaw_mem.api.errors import error_response

log = logging.getLogger(__name__)

SETTING = "server.allowed-hosts"
# Methods that change nothing here; any other method is a write.
SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})
# `Sec-Fetch-Site` values that mean another page started the request (a page on another port of the
# same host is "same-site": another page all the same).
OTHER_PAGE = frozenset({"cross-site", "same-site"})
WILDCARD_BINDS = frozenset({"0.0.0.0", "::", ""})
_LOOPBACK_NAMES = frozenset({"localhost", "127.0.0.1", "::1"})
_DEFAULT_PORTS = {"http": 80, "https": 443}


def split_authority(value: str) -> tuple[str, int | None]:
    """A Host header (or an entry of server.allowed-hosts) as (name, port): lowercased, without
    brackets or a trailing dot. A port that is not a number is no port: the name decides anyway."""
    value = value.strip().lower()
    port = ""
    if value.startswith("["):  # [v6] or [v6]:port
        end = value.find("]")
        name, rest = (value[1:end], value[end + 1:]) if end > 0 else (value, "")
        port = rest[1:] if rest.startswith(":") else ""
    elif value.count(":") == 1:
        name, port = value.split(":", 1)
    else:  # a name without a port, or an unbracketed v6 address
        name = value
    return name.rstrip("."), int(port) if port.isdigit() else None


def is_loopback_name(name: str) -> bool:
    """Names only this machine answers: browsers resolve `localhost` and `*.localhost` to loopback
    themselves (RFC 6761), whatever DNS says."""
    if name in _LOOPBACK_NAMES or name.endswith(".localhost"):
        return True
    try:
        return ipaddress.ip_address(name).is_loopback
    except ValueError:
        return False


class HostPolicy:
    """Which `Host` names are this daemon's, and which `Origin`s are its own pages."""

    def __init__(self, bind_host: str, allowed_hosts: Iterable[str], *, keyed: bool) -> None:
        bind = split_authority(bind_host)[0]
        self.bind_host = bind_host
        self.listed = frozenset(name for name, _ in map(split_authority, allowed_hosts) if name)
        self.names = self.listed | ({bind} if bind not in WILDCARD_BINDS else set())
        # All interfaces and a key: the key guards every name (the module's docstring says why).
        self.any_name = keyed and bind in WILDCARD_BINDS

    def host_allowed(self, name: str) -> bool:
        return self.any_name or name in self.names or is_loopback_name(name)

    def origin_allowed(self, origin: str, host: tuple[str, int | None] | None) -> bool:
        """The page's own origin (the same name and port as `Host`), or a name listed in
        server.allowed-hosts (a front end such as a reverse proxy). `null` (a sandboxed frame, a
        file:// page) and another port of the same host are other pages."""
        try:
            parts = urlsplit(origin.strip())
            name, port = (parts.hostname or "").rstrip("."), parts.port
        except ValueError:  # a port that is no number: not an origin we could have sent
            return False
        if not name or parts.scheme not in _DEFAULT_PORTS:
            return False
        if name in self.listed:
            return True
        if host is None:
            return False
        default = _DEFAULT_PORTS[parts.scheme]  # browsers leave a default port out of both headers
        return name == host[0] and (port or default) == (host[1] or default)

    def host_refusal(self, name: str) -> str:
        name_of_bind = split_authority(self.bind_host)[0]
        bind = "" if name_of_bind in WILDCARD_BINDS or is_loopback_name(name_of_bind) else f", {self.bind_host}"
        return (f"host {name!r} is not an address this daemon serves (localhost, loopback addresses{bind}, "
                f"or a name in {SETTING}); a web page that re-points its own name at this machine (DNS "
                f"rebinding) arrives this way. If you reach the daemon under this name, add it to {SETTING}")


class OriginGuard:
    """The guard itself: 421 for a name that is not ours, 403 for a request another page started
    that would change something (or read something other than by opening a page)."""

    def __init__(self, app: ASGIApp, policy: HostPolicy) -> None:
        self.app = app
        self.policy = policy

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        # Only "http": the app serves no WebSocket, and lifespan has no headers.
        reason = self._refusal(scope) if scope["type"] == "http" else None
        if reason is None:
            await self.app(scope, receive, send)
            return
        status, text = reason
        log.info("refused %s %s: %s", scope["method"], scope["path"], text)
        await error_response(status, text)(scope, receive, send)

    def _refusal(self, scope: Scope) -> tuple[int, str] | None:
        host = origin = site = mode = None
        for key, value in scope["headers"]:  # one pass over the raw headers: this runs for every AML Add
            if key == b"host":
                host = value.decode("latin-1")
            elif key == b"origin":
                origin = value.decode("latin-1")
            elif key == b"sec-fetch-site":
                site = value.decode("latin-1").strip().lower()
            elif key == b"sec-fetch-mode":
                mode = value.decode("latin-1").strip().lower()
        authority = split_authority(host) if host is not None else None
        # No Host at all is no browser (every browser sends one): nothing to rebind.
        if authority is not None and not self.policy.host_allowed(authority[0]):
            return 421, self.policy.host_refusal(authority[0])
        method = scope["method"]
        if method in SAFE_METHODS:
            # Opening a page from a link is how a person gets to the Memory Browser; anything else
            # another page fetches from here it has no business with (and could not read anyway).
            if site in OTHER_PAGE and mode != "navigate":
                return 403, (f"refused a {method} that another web page started (Sec-Fetch-Site: {site}); "
                             "open the daemon's pages directly")
            return None
        if site in OTHER_PAGE:
            return 403, (f"refused a {method} that another web page started (Sec-Fetch-Site: {site}): "
                         "no web page may change this daemon's memory; clients that are not browsers send "
                         "no Sec-Fetch-Site or Origin and are not affected")
        if origin is not None and not self.policy.origin_allowed(origin, authority):
            return 403, (f"refused a {method} from another web page (Origin: {origin}): no web page may change "
                         f"this daemon's memory; a front end that serves its pages under another name goes "
                         f"in {SETTING}")
        return None
