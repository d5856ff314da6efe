"""The Memory Browser at `/ui/`: server-rendered pages over the same services as the API.

`install_ui(app)` is its one line in api/app.py: static assets, the login, every page, and `/`
redirecting here. Jinja2 templates plus a vendored htmx (`hx-boost`: links and forms swap the page
without a reload) keep it one Python process with no build step; every page is a plain form
without JavaScript.
"""

from __future__ import annotations

from importlib.resources import files

from fastapi import FastAPI
from fastapi.responses import RedirectResponse
from fastapi.staticfiles import StaticFiles

from mateclaw_mem.api.mounting import mount
from mateclaw_mem.api.ui import (
    auth,
    dreams,
    facts,
    files_pages,
    health,
    home,
    inbox,
    learning,
    missing,
    search,
    snapshot,
    timeline,
)

_STATIC = files("mateclaw_mem.api.ui").joinpath("static")


class _Static(StaticFiles):
    """The assets with the pages' security headers (a script file is never sniffed as anything else)."""

    async def get_response(self, path: str, scope):  # type: ignore[no-untyped-def]
        response = await super().get_response(path, scope)
        response.headers["X-Content-Type-Options"] = "nosniff"
        response.headers["Cache-Control"] = "public, max-age=3600"
        return response


def install_ui(app: FastAPI) -> None:
    app.mount("/ui/static", _Static(directory=str(_STATIC)), name="ui-static")
    for module in (auth, home, health, facts, inbox, files_pages, dreams, search, timeline, snapshot, learning):
        mount(app, module.router)
    mount(app, missing.router)  # last: it answers only the paths no page above claims

    @app.get("/", include_in_schema=False)
    async def root() -> RedirectResponse:
        return RedirectResponse("/ui/", status_code=307)
