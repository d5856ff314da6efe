"""`/ui/files…`: the agent's files (enabled, sort order, size against the ceiling), a rendered view,
an editor that saves with compare-and-swap, history with a unified diff, and undo.

A save sends the sha the editor was opened on; `store.write(expected_sha=...)` refuses it with a
ConflictError when the file changed meanwhile (a person's editor, a machine writer): the page then
shows both versions side by side and keeps the typed text; nothing is overwritten. Saving again from
that page is a deliberate choice made against the version now on disk.

With owner isolation on, `scope=team` addresses the agent's shared files and otherwise the picked
owner's; a path into `owners/` is refused, so no page reaches another owner's folder.
"""

from __future__ import annotations

from dataclasses import replace

from fastapi import APIRouter, Depends, Request
from fastapi.responses import Response

from mateclaw_mem.api.ui.view import diff_lines, render_markdown, side_by_side, unified
from mateclaw_mem.api.ui.web import Page, UiRoute, form_of, page
from mateclaw_mem.errors import ConflictError, InvalidInputError, NotFoundError
from mateclaw_mem.markdown.sections import PIN_MARK, join, normalise_title, split_sections
from mateclaw_mem.workspace import oversized

router = APIRouter(prefix="/ui", route_class=UiRoute, include_in_schema=False)
MAX_EDIT_CHARS = 2_000_000
MAX_SECTIONS_LISTED = 300  # the view's pin list (a file of 100,000 headings made one form each)


def _target(p: Page, path: str | None) -> tuple[str, str | None, str]:
    """(rel, owner of the file, scope) for `?path=&scope=`."""
    rel = (path or "").strip()
    if not rel:
        raise InvalidInputError("no file named: add ?path=MEMORY.md")
    if p.services.settings.owner_isolation and rel.replace("\\", "/").lstrip("/").split("/")[0] == "owners":
        raise NotFoundError(f"{rel} is not a file of this agent (owners' files are reached by picking the owner)")
    team = p.request.query_params.get("scope") == "team" or p.owner is None
    return rel, None if team else p.owner, "team" if team else "personal"


def _rows(p: Page, owner: str | None, scope: str) -> list[dict[str, object]]:
    rows = []
    for f in p.services.store.list_files(p.agent, owner=owner):
        if scope == "team" and p.services.settings.owner_isolation and f.rel.startswith("owners/"):
            continue
        rows.append({"f": f, "scope": scope})
    return rows


@router.get("/files")
def files(p: Page = Depends(page)) -> Response:
    groups = []
    if p.owner is not None:
        groups.append((f"Personal ({p.owner})", _rows(p, p.owner, "personal")))
    groups.append(("Shared" if p.owner is not None else "Files", _rows(p, None, "team")))
    return p.render("files.html", groups=groups)


@router.get("/files/view")
def view(path: str = "", part: int = 1, p: Page = Depends(page)) -> Response:
    rel, owner, scope = _target(p, path)
    snap = p.services.store.read(p.agent, rel, owner=owner)
    if not snap.exists:
        raise NotFoundError(f"{rel} does not exist")
    # An oversized file is shown a part at a time (its whole view was 55 MB of HTML at 3 MB).
    limit = p.services.store.file_max_bytes
    size = oversized.size_over(snap.text, limit)
    shown = oversized.part(snap.text, min(limit, oversized.PART_CHARS) if size else 0, part if size else 1)
    sections = split_sections(shown.text)[1]
    return p.render("file_view.html", rel=rel, scope=scope, html=render_markdown(shown.text, shown.first_line),
                    sha=snap.sha, sections=sections[:MAX_SECTIONS_LISTED],
                    more_sections=len(sections) - MAX_SECTIONS_LISTED,
                    part=shown, warning=oversized.describe(rel, size, limit) if size else "")


@router.post("/files/pin")
async def pin(request: Request, path: str = "", p: Page = Depends(page)) -> Response:
    """Pin a `##` section (ceilings and merges leave it alone): the mark goes under its heading, written
    against the sha the page showed, so a file changed meanwhile is a conflict, not a lost edit."""
    form = await form_of(request, p)
    rel, owner, scope = _target(p, path)
    title = form.get("section", "")
    snap = p.services.store.read(p.agent, rel, owner=owner)
    preamble, sections = split_sections(snap.text)
    at = next((i for i, s in enumerate(sections) if s.key == normalise_title(title)), None)
    if at is None:
        raise NotFoundError(f"{rel} has no section ## {title}")
    if sections[at].pinned:
        p.flash(f"## {sections[at].title} is already pinned.")
        return p.redirect("files/view", path=rel, scope=scope)
    heading, _, rest = sections[at].text.partition("\n")
    sections[at] = replace(sections[at], text=f"{heading}\n{PIN_MARK}\n{rest}")
    p.services.store.write(p.agent, rel, join(preamble, sections), expected_sha=form.get("sha", ""),
                           actor="person", owner=owner, reason=f"pinned ## {sections[at].title} in the Memory Browser")
    p.flash(f"Pinned ## {sections[at].title}: ceilings and merges now leave it as it is.")
    return p.redirect("files/view", path=rel, scope=scope)


@router.get("/files/edit")
def edit(path: str = "", p: Page = Depends(page)) -> Response:
    rel, owner, scope = _target(p, path)
    snap = p.services.store.read(p.agent, rel, owner=owner)
    return p.render("file_edit.html", rel=rel, scope=scope, text=snap.text, sha=snap.sha, conflict=None)


@router.post("/files/save")
async def save(request: Request, path: str = "", p: Page = Depends(page)) -> Response:
    form = await form_of(request, p)
    rel, owner, scope = _target(p, path)
    text = form.get("text", "").replace("\r\n", "\n")
    if len(text) > MAX_EDIT_CHARS:
        raise InvalidInputError(f"the text is {len(text)} characters; the editor saves at most {MAX_EDIT_CHARS}")
    store = p.services.store
    try:
        result = store.write(p.agent, rel, text, expected_sha=form.get("sha", ""), actor="person", owner=owner,
                             reason="edited in the Memory Browser")
    except ConflictError as exc:
        now = store.read(p.agent, rel, owner=owner)
        return p.render("file_edit.html", status=409, rel=rel, scope=scope, text=text, sha=now.sha,
                        conflict={"message": exc.message, "disk": now.text,
                                  "diff": diff_lines(unified(now.text, text, rel, a="on disk", b="yours"))})
    p.flash(f"Saved {rel}." if result.changed else f"{rel} was already exactly this; nothing to save.")
    return p.redirect("files/view", path=rel, scope=scope)


@router.get("/files/history")
def history(path: str = "", diff: str = "unified", p: Page = Depends(page)) -> Response:
    rel, owner, scope = _target(p, path)
    store = p.services.store
    versions = store.history(p.agent, rel, owner=owner)
    key = store.agent_key(p.agent, owner)
    current = store.read(p.agent, rel, owner=owner).text
    rows, after = [], current
    if diff not in ("unified", "split"):
        raise InvalidInputError(f"unknown diff view {diff!r}: use diff=unified or diff=split (side by side)")
    split = diff == "split"
    # Newest first; each version is the content a change replaced, so its diff runs to what came next.
    for v in reversed(versions):
        before = store.history_store.content(key, rel, v.version).decode("utf-8", "replace") if v.existed else ""
        rows.append({"v": v, "diff": diff_lines(unified(before, after, rel, a=f"v{v.version}", b="next"))
                     if not split else None, "sides": side_by_side(before, after) if split else None})
        after = before
    return p.render("file_history.html", rel=rel, scope=scope, rows=rows, split=split)


@router.post("/files/undo")
async def undo(request: Request, path: str = "", p: Page = Depends(page)) -> Response:
    form = await form_of(request, p)
    rel, owner, scope = _target(p, path)
    version = form.get("version", "")
    if not version.isdigit():
        raise InvalidInputError("undo needs a version number from the history")
    p.services.store.undo(p.agent, rel, owner=owner, version=int(version), actor="person")
    p.flash(f"Restored {rel} to version {version} (this undo is itself in the history).")
    return p.redirect("files/history", path=rel, scope=scope)


@router.post("/files/undo-run")
async def undo_run(request: Request, p: Page = Depends(page)) -> Response:
    form = await form_of(request, p)
    batch = form.get("batch", "").strip()
    if not batch:
        raise InvalidInputError("undo of a run needs its batch id")
    store = p.services.store
    allowed = {store.agent_key(p.agent, None), store.agent_key(p.agent, p.owner)}
    touched = store.history_store.batch(batch)
    if not touched or any(v.key not in allowed for v in touched):
        raise NotFoundError(f"no run {batch!r} for agent {p.agent!r}" + (f" (owner {p.owner})" if p.owner else ""))
    results = store.undo_batch(batch, actor="person")
    p.flash(f"Undid run {batch}: {len(results)} file(s) restored.")
    return p.redirect("files")
