"""`/ui/login` and `/ui/logout`: the API key exchanged once for a session cookie.

The key is compared in constant time and never stored in the browser; a wrong key is a 403 page
that says so. `next` only ever redirects inside `/ui/` (no open redirect).
"""

from __future__ import annotations

from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response

from mateclaw_mem.api.ui.web import COOKIE, UiRoute, env, key_matches, sessions_of, set_session_cookie

router = APIRouter(prefix="/ui", route_class=UiRoute, include_in_schema=False)


def _safe_next(target: str | None) -> str:
    return target if target and target.startswith("/ui/") and not target.startswith("//") else "/ui/"


def _login_page(next_url: str, error: str = "", status: int = 200) -> HTMLResponse:
    body = env.get_template("login.html").render(next=next_url, error=error, page=None, flash=None, csrf="",
                                                 agents=[], isolation=False, owners=[])
    return HTMLResponse(body, status_code=status)


@router.get("/login")
async def login_form(request: Request, next: str = "/ui/") -> Response:
    if not request.app.state.services.api_key:
        return RedirectResponse(_safe_next(next), status_code=303)
    return _login_page(_safe_next(next))


@router.post("/login")
async def login(request: Request) -> Response:
    expected = request.app.state.services.api_key
    form = await request.form()
    next_url = _safe_next(str(form.get("next") or ""))
    if not expected:
        return RedirectResponse(next_url, status_code=303)
    if not key_matches(str(form.get("key") or ""), expected):
        return _login_page(next_url, "That is not this daemon's API key.", status=403)
    sid, _ = sessions_of(request).new()
    response = RedirectResponse(next_url, status_code=303)
    set_session_cookie(response, sid)
    return response


@router.post("/logout")
async def logout(request: Request) -> Response:
    sessions = sessions_of(request)
    session = sessions.get(request.cookies.get(COOKIE))
    form = await request.form()
    if session is not None and key_matches(str(form.get("csrf") or ""), session.csrf):
        sessions.drop(request.cookies.get(COOKIE))
    response = RedirectResponse("/ui/login", status_code=303)
    response.delete_cookie(COOKIE, path="/ui")
    return response
