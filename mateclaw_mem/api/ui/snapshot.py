"""`/ui/snapshot…`: export the agent's memory as a zip, import one with a preview first, undo an import.

The download is a UI route (the session cookie authenticates it, as every page) over the same
`transfer.export_stream` as the API. An upload is staged in a temp file held by the session, the
preview is `transfer.import_` with `dry_run=True` shown through the API's own create / update / skip
mapping (`api/snapshots.import_out`) with a unified diff per file it would change, and "Apply"
imports that same staged file as one undoable run: what the person saw is what is written, and the
staged file is gone once applied or replaced.
"""

from __future__ import annotations

import shutil
import tempfile
import zipfile
from pathlib import Path

from fastapi import APIRouter, Depends, Request
from fastapi.responses import Response, StreamingResponse
from starlette.concurrency import run_in_threadpool
from starlette.datastructures import UploadFile

from mateclaw_mem.api.snapshots import import_out
from mateclaw_mem.api.ui.view import diff_lines, unified
from mateclaw_mem.api.ui.web import Page, UiRoute, form_of, page
from mateclaw_mem.errors import InvalidInputError, NotFoundError
from mateclaw_mem.workspace.snapshot_records import STRATEGIES, WRITES, ImportReport

router = APIRouter(prefix="/ui", route_class=UiRoute, include_in_schema=False)


@router.get("/snapshot")
def snapshot(p: Page = Depends(page)) -> Response:
    return p.render("snapshot.html", strategies=STRATEGIES, plan=None, strategy="skip")


@router.get("/snapshot/export")
async def export(p: Page = Depends(page)) -> Response:
    result, chunks = await run_in_threadpool(p.services.transfer.export_stream, p.agent, owner=p.owner)
    return StreamingResponse(chunks, media_type="application/zip",
                             headers={"Content-Disposition": f'attachment; filename="{result.out.name}"'})


def _drop_staged(p: Page) -> None:
    if p.session.staged is not None:
        shutil.rmtree(p.session.staged.parent, ignore_errors=True)
        p.session.staged = None


def _strategy(value: str) -> str:
    if value not in STRATEGIES:
        raise InvalidInputError(f"unknown strategy {value!r}; use one of {', '.join(STRATEGIES)}")
    return value


def _diffs(p: Page, report: ImportReport) -> list[dict[str, object]]:
    """What each written file would become, against the file now: sizes alone hid what an import changes."""
    out: list[dict[str, object]] = []
    for item in report.items:
        if item.action not in WRITES or not item.rel or item.source in p.services.transfer.sidecars:
            continue
        now = p.services.store.read(p.agent, item.rel, owner=item.owner).text
        out.append({"file": item.rel, "owner": item.owner,
                    "rows": diff_lines(unified(now, item.planned, item.rel, a="now", b="imported"))})
    return out


@router.post("/snapshot/preview")
async def preview(request: Request, p: Page = Depends(page)) -> Response:
    form = await request.form()
    await form_of(request, p)  # the CSRF check (the form is parsed once and cached by Starlette)
    strategy = _strategy(str(form.get("strategy") or "skip"))
    upload = form.get("file")
    if not isinstance(upload, UploadFile) or not upload.filename:
        raise InvalidInputError("choose a snapshot .zip (an export) to upload")
    _drop_staged(p)
    folder = Path(tempfile.mkdtemp(prefix="mateclaw-ui-import-"))
    path = folder / "upload.zip"
    with open(path, "wb") as out:
        shutil.copyfileobj(upload.file, out, 256 * 1024)
    if not zipfile.is_zipfile(path):
        shutil.rmtree(folder, ignore_errors=True)
        raise InvalidInputError(f"{upload.filename} is not a zip archive: upload a snapshot exported here")
    p.session.staged = path
    report = await run_in_threadpool(p.services.transfer.import_, path, agent=p.agent, owner=p.owner,
                                     strategy=strategy, dry_run=True)
    diffs = await run_in_threadpool(_diffs, p, report)
    return p.render("snapshot.html", strategies=STRATEGIES, plan=import_out(report), strategy=strategy,
                    upload_name=upload.filename, diffs=diffs)


@router.post("/snapshot/apply")
async def apply(request: Request, p: Page = Depends(page)) -> Response:
    form = await form_of(request, p)
    strategy = _strategy(form.get("strategy", "skip"))
    path = p.session.staged
    if path is None or not path.is_file():
        raise NotFoundError("no uploaded snapshot is waiting: upload it again and check the preview")
    try:
        report = await run_in_threadpool(p.services.transfer.import_, path, agent=p.agent, owner=p.owner,
                                         strategy=strategy, dry_run=False)
    finally:
        _drop_staged(p)
    plan = import_out(report)
    if plan.run is None:
        p.flash("Nothing to import: every file was skipped or already identical.")
    else:
        p.flash(f"Imported as run {plan.run}: " + ", ".join(f"{n} {k}" for k, n in sorted(plan.counts.items()))
                + ".", run=plan.run)
    return p.redirect("snapshot")
