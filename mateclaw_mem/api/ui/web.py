"""The Memory Browser's foundation: templates, sessions, CSRF, the page's agent/owner, errors as pages.

Server-rendered with Jinja2 (autoescape on, and every `{{ }}` value passed through `redact` by the
environment's `finalize`, so no template can forget either). Sessions live in this process: with an
API key configured, `/ui/login` exchanges the key for a random session id in an HttpOnly,
SameSite=Strict cookie; without one, a session is issued on the first page (the CSRF token needs
somewhere to live). Every POST carries the session's CSRF token as a form field. A restart logs
everyone out, which a local daemon can afford.
"""

from __future__ import annotations

import functools
import hmac
import logging
import secrets
import threading
from collections import OrderedDict
from collections.abc import Callable, Coroutine
from dataclasses import dataclass, field
from importlib.resources import files
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

from fastapi import Request, Response
from fastapi.exceptions import RequestValidationError
from fastapi.responses import HTMLResponse, RedirectResponse
from fastapi.routing import APIRoute
from jinja2 import Environment, FileSystemLoader, select_autoescape

from mateclaw_mem.api.errors import STATUS_BY_CODE
from mateclaw_mem.api.ui.lines import FileLines
from mateclaw_mem.errors import MateclawError
from mateclaw_mem.redaction import redact
from mateclaw_mem.runtime.services import Services
from mateclaw_mem.workspace.walk import normalise_owner

log = logging.getLogger(__name__)
COOKIE = "mateclaw_ui"
MAX_SESSIONS = 1000  # oldest dropped first: a bounded table, whatever a client does
# No inline script or style anywhere; every asset is this daemon's; nothing may frame the pages.
CONTENT_SECURITY_POLICY = "; ".join([
    "default-src 'none'",
    "script-src 'self'",
    "style-src 'self'",
    "img-src 'self'",
    "connect-src 'self'",
    "form-action 'self'",
    "base-uri 'none'",
    "frame-ancestors 'none'",
])
_TEMPLATES = files("mateclaw_mem.api.ui").joinpath("templates")


@functools.lru_cache(maxsize=16384)
def _redacted(text: str) -> str:
    return redact(text)


def _finalize(value: Any) -> Any:
    # Every value a template prints, redacted: a secret that reached a file is never shown. Cached:
    # a facts table prints each fact's text several times (cell, labels, editor), and the patterns
    # are most of a page's render time otherwise.
    return _redacted(value) if isinstance(value, str) else ("" if value is None else value)


env = Environment(loader=FileSystemLoader(str(_TEMPLATES)), autoescape=select_autoescape(default=True),
                  finalize=_finalize, trim_blocks=True, lstrip_blocks=True)


@dataclass
class Session:
    csrf: str
    flash: dict[str, Any] | None = None
    staged: Path | None = None  # an uploaded snapshot between its preview and "Apply" (ui/snapshot.py)


class Sessions:
    def __init__(self) -> None:
        self._rows: OrderedDict[str, Session] = OrderedDict()
        self._lock = threading.Lock()

    def new(self) -> tuple[str, Session]:
        sid, session = secrets.token_urlsafe(32), Session(csrf=secrets.token_urlsafe(32))
        with self._lock:
            self._rows[sid] = session
            while len(self._rows) > MAX_SESSIONS:
                self._rows.popitem(last=False)
        return sid, session

    def get(self, sid: str | None) -> Session | None:
        if not sid:
            return None
        with self._lock:
            return self._rows.get(sid)

    def drop(self, sid: str | None) -> None:
        with self._lock:
            self._rows.pop(sid or "", None)


class LoginNeeded(Exception):
    pass


class CsrfFailed(Exception):
    pass


@dataclass
class Page:
    """Who is asking and about what: the session, the agent and (isolation on) the owner."""

    request: Request
    services: Services
    session: Session
    agent: str
    owner: str | None
    new_sid: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    def url(self, where: str, /, **params: Any) -> str:
        """A /ui/ link that keeps the agent and owner picked."""
        query = {"agent": self.agent, **({"owner": self.owner} if self.owner else {}), **params}
        return f"/ui/{where}?{urlencode({k: v for k, v in query.items() if v not in (None, '')})}"

    def flash(self, message: str, **details: Any) -> None:
        self.session.flash = {"message": message, **details}

    def redirect(self, where: str, /, **params: Any) -> RedirectResponse:
        # 303: the browser (and htmx) follows a form POST with a GET, so a reload never re-posts.
        return self._cookie(RedirectResponse(self.url(where, **params), status_code=303))

    def render(self, template: str, status: int = 200, **values: Any) -> HTMLResponse:
        services = self.services
        isolation = services.settings.owner_isolation
        context = {
            "page": self, "csrf": self.session.csrf, "agent": self.agent, "owner": self.owner,
            "agents": services.store.agents(), "isolation": isolation,
            "owners": services.store.owners(self.agent) if isolation else [],
            "keyed": bool(services.api_key), "flash": self.session.flash,
            "file_line": FileLines(services.store, self.agent, self.owner), **values,
        }
        self.session.flash = None
        body = env.get_template(template).render(**context)
        return self._cookie(HTMLResponse(body, status_code=status))

    def _cookie(self, response: Response) -> Response:
        if self.new_sid is not None:
            set_session_cookie(response, self.new_sid)
        return response


def set_session_cookie(response: Response, sid: str) -> None:
    response.set_cookie(COOKIE, sid, httponly=True, samesite="strict", path="/ui")


def key_matches(presented: str, expected: str) -> bool:
    return hmac.compare_digest(presented.encode("utf-8"), expected.encode("utf-8"))


def sessions_of(request: Request) -> Sessions:
    state = request.app.state
    if not hasattr(state, "ui_sessions"):
        state.ui_sessions = Sessions()
    return state.ui_sessions


async def page(request: Request) -> Page:
    """Dependency of every page: a session (login first when a key is configured), the agent
    (`?agent=`, default the configured one) and the owner (`?owner=`, only with isolation on)."""
    services: Services = request.app.state.services
    sessions = sessions_of(request)
    sid = request.cookies.get(COOKIE)
    session, new_sid = sessions.get(sid), None
    if session is None:
        if services.api_key:
            raise LoginNeeded
        new_sid, session = sessions.new()
    agents = services.store.agents()
    agent = request.query_params.get("agent") or services.settings.default_agent
    if agent not in agents:
        raise _UnknownAgent(f"no agent {agent!r}: pick one of {', '.join(agents)}")
    owner = normalise_owner(request.query_params.get("owner")) if services.settings.owner_isolation else None
    return Page(request, services, session, agent, owner, new_sid)


class _UnknownAgent(MateclawError):
    code = "not_found"


async def form_of(request: Request, p: Page) -> dict[str, str]:
    """The POSTed form, refused unless it carries this session's CSRF token."""
    form = await request.form()
    values = {k: v for k, v in form.items() if isinstance(v, str)}
    if not key_matches(values.get("csrf", ""), p.session.csrf):
        raise CsrfFailed
    return values


def error_page(request: Request, status: int, title: str, message: str) -> HTMLResponse:
    body = env.get_template("error.html").render(title=title, message=message, status=status, page=None,
                                                  agents=[], flash=None, csrf="", isolation=False, owners=[])
    return HTMLResponse(body, status_code=status)


Handler = Callable[[Request], Coroutine[Any, Any, Response]]


class UiRoute(APIRoute):
    """Every failure of a page is a page: the service's message with its status, never JSON or a trace."""

    def get_route_handler(self) -> Handler:
        inner = super().get_route_handler()

        async def handler(request: Request) -> Response:
            try:
                response = await inner(request)
            except LoginNeeded:
                target = request.url.path + (f"?{request.url.query}" if request.url.query else "")
                response = RedirectResponse(f"/ui/login?{urlencode({'next': target})}", status_code=303)
            except CsrfFailed:
                response = error_page(request, 403, "Form expired",
                                      "This form's security token does not match your session (it expired or "
                                      "came from another site). Go back, reload the page and try again.")
            except RequestValidationError as exc:
                first = exc.errors()[0] if exc.errors() else {}
                where = ".".join(str(p) for p in first.get("loc", ()))
                response = error_page(request, 422, "Invalid request", f"{where}: {first.get('msg', 'invalid')}")
            except MateclawError as exc:
                status = STATUS_BY_CODE.get(exc.code, 500)
                response = error_page(request, status, exc.code.replace("_", " ").capitalize(), exc.message)
            except Exception:  # a bug: the page says so, the log has the trace
                log.exception("Memory Browser page %s failed", request.url.path)
                response = error_page(request, 500, "Internal error",
                                      "This page failed; the daemon's log has the details.")
            response.headers["Content-Security-Policy"] = CONTENT_SECURITY_POLICY
            response.headers["X-Content-Type-Options"] = "nosniff"
            response.headers["Referrer-Policy"] = "same-origin"
            response.headers.setdefault("Cache-Control", "no-store")
            return response

        return handler
