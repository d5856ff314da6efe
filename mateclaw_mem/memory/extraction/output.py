"""What an extraction answer (model or rules) must pass before anything is written: secret
redaction, edits applied to the bodies they name, the shrink guard on PROFILE.md / MEMORY.md; then
how a checked answer is written (`write_answer`). The repair check told to the model is `checks`."""

from __future__ import annotations

import logging
from collections.abc import Callable
from datetime import datetime
from typing import TYPE_CHECKING, Any

from mateclaw_mem.errors import MateclawError
from mateclaw_mem.llm.prompts.echo import placeholder
from mateclaw_mem.llm.prompts.edits import edits_for
from mateclaw_mem.llm.prompts.extraction import ExtractionResult
from mateclaw_mem.markdown import frontmatter
from mateclaw_mem.markdown.dates import resolve_relative
from mateclaw_mem.markdown.edits import apply_edits
from mateclaw_mem.memory.extraction import journaled
from mateclaw_mem.redaction import find_secrets, redact
from mateclaw_mem.workspace.journal import crash_point
from mateclaw_mem.workspace.records import Step

if TYPE_CHECKING:
    from mateclaw_mem.workspace.store import WorkspaceStore

log = logging.getLogger(__name__)

SHRINK_GUARD_MIN_CHARS = 400  # below this a file may be rewritten freely
DEFAULT_SECTION = {"PROFILE.md": "Profile", "MEMORY.md": "Notes"}  # where an add without a section lands


class Rejected(Exception):
    """A model answer that validated but would do damage; nothing is written."""


def sanitise(result: ExtractionResult) -> tuple[ExtractionResult, int]:
    """Redact secrets the model may have echoed; returns the clean result and how many were found."""
    found = 0
    texts: dict[str, Any] = {}
    for name in ("reason", "memory_update", "profile_update"):
        value = getattr(result, name)
        if name == "reason" and placeholder(value):  # "...", "one sentence": no reason, never a daily body
            value = ""
        n = len(find_secrets(value))
        found += n
        texts[name] = redact(value) if n else value
    daily = result.daily_entry
    if daily is not None:
        n = len(find_secrets(daily.title)) + len(find_secrets(daily.body))
        found += n
        if n:
            daily = daily.model_copy(update={"title": redact(daily.title), "body": redact(daily.body)})
    edits = []
    for op in result.edits:
        n = len(find_secrets(op.text)) + len(find_secrets(op.old)) + len(find_secrets(op.section))
        found += n
        edits.append(op.model_copy(update={"text": redact(op.text), "old": redact(op.old),
                                           "section": redact(op.section)}) if n else op)
    structured = []
    for item in result.structured:
        # The key too: it becomes a `## key` heading in structured/<type>.md.
        n = len(find_secrets(item.key)) + len(find_secrets(item.text))
        found += n
        structured.append(item.model_copy(update={"key": redact(item.key), "text": redact(item.text)}) if n else item)
    return result.model_copy(update={**texts, "daily_entry": daily, "structured": structured, "edits": edits}), found


def planned_file_updates(result: ExtractionResult, profile: Any, memory: Any) -> list[tuple[str, Any, str]]:
    """(file, snapshot read before the model ran, new body) for PROFILE.md and MEMORY.md: the file's
    edits applied to its body, else the seed's whole-body answer; only different results; raises
    Rejected for one that would shrink a file by half or more (extraction only adds and corrects)."""
    planned: list[tuple[str, Any, str]] = []
    for rel, snap, update in (("PROFILE.md", profile, result.profile_update),
                              ("MEMORY.md", memory, result.memory_update)):
        edits = edits_for(result.edits, rel)
        if edits:
            applied = apply_edits(snap.body, edits, default_section=DEFAULT_SECTION[rel])
            for i, why in applied.skipped:
                log.info("extraction edit %d on %s skipped: %s", i, rel, why)
            update = applied.body if applied.applied else ""
        new_body = frontmatter.body(update) if update.lstrip().startswith("---") else update
        if not new_body.strip() or new_body.strip() == snap.body.strip():
            continue
        old_len = len(snap.body.strip())
        if old_len > SHRINK_GUARD_MIN_CHARS and len(new_body.strip()) < old_len // 2:
            raise Rejected(
                f"{rel}: the answer would shrink it from {old_len} to {len(new_body.strip())} characters; "
                "post-chat extraction only adds and corrects"
            )
        if not new_body.endswith("\n"):
            new_body += "\n"
        planned.append((rel, snap, new_body))
    return planned


def write_answer(
    store: WorkspaceStore, agent: str, owner: str | None, run_id: str, result: ExtractionResult, profile: Any,
    memory: Any, *, actor: str, remember: Callable[..., Any] | None, guard: Any = None, when: datetime | None = None,
    watermarks: dict[str, int] | None = None,
) -> list[str]:
    """Write a sanitised answer: PROFILE.md / MEMORY.md by compare-and-swap on the snapshots the
    answer was planned on (ConflictError when a person saved since), structured entries through
    `remember`, the daily entry last. Returns the files changed. `guard` (memory/forget/guard.py):
    the owner's tombstones - no forgotten claim is written again, whatever the answer says."""
    if not result.should_update:
        return []
    planned = planned_file_updates(result, profile, memory)
    if guard:
        planned = [(rel, snap, body) for rel, snap, new in planned
                   if (body := guard.body(snap.body, new)).strip() != snap.body.strip()]
        result = result.model_copy(update={"daily_entry": guard.daily(result.daily_entry), "structured": [
            i for i in result.structured if not guard.blocks(i.key) and not guard.blocks(i.text)]})
    reason = f"extraction: {result.reason}"[:200]
    texts = [(rel, snap, frontmatter.with_body(snap.text, new_body) if snap.exists else new_body)
             for rel, snap, new_body in planned]
    said = when or store.clock.now()
    daily_body = (resolve_relative(result.daily_entry.body or result.reason, said.astimezone(store.clock.tz).date())
                  if result.daily_entry is not None else "")
    if watermarks is not None:
        # Journaled until the service moved the watermarks (memory/extraction/journaled.py).
        structured = result.structured if remember is not None else []
        daily = None
        if result.daily_entry is not None and (result.daily_entry.body.strip() or texts or structured):
            daily = {"title": " ".join(result.daily_entry.title.split()) or "Note", "body": daily_body,
                     "when": said.isoformat()}
        store.journal.begin(journaled.OP, run_id, [
            Step(agent, owner, rel, snap.sha, text.encode("utf-8"), actor, reason) for rel, snap, text in texts],
            finish={"agent": agent, "owner": owner, "run_id": run_id, "actor": actor, "watermarks": watermarks,
                    "structured": [{"type": i.type, "key": i.key, "text": i.text} for i in structured],
                    "daily": daily})
    try:
        return _write(store, agent, owner, run_id, result, texts, daily_body, actor=actor, reason=reason,
                      remember=remember, when=when)
    except Exception:
        store.journal.end(run_id)  # the run plans again, or fails with what it wrote so far, as before
        raise


def _write(store: WorkspaceStore, agent: str, owner: str | None, run_id: str, result: ExtractionResult,
           texts: list[tuple[str, Any, str]], daily_body: str, *, actor: str, reason: str,
           remember: Callable[..., Any] | None, when: datetime | None) -> list[str]:
    changed: list[str] = []
    for rel, snap, text in texts:
        res = store.write(agent, rel, text, expected_sha=snap.sha, actor=actor, owner=owner, reason=reason,
                          batch=run_id)
        if res.changed:
            changed.append(rel)
    for item in result.structured if remember is not None else []:
        try:
            out = remember(agent, item.type, item.key, item.text, actor=actor, source=f"conversation {run_id}",
                           owner=owner)
        except MateclawError as exc:  # a pinned or hand-edited entry wins; say so, keep the rest
            log.info("structured entry %s/%s not written: %s", item.type, item.key, exc.message)
            continue
        rel = f"structured/{item.type}.md"
        if getattr(out, "changed", True) and rel not in changed:
            changed.append(rel)
    if result.daily_entry is not None and (result.daily_entry.body.strip() or changed):
        # Filed under the day the turns were said; "yesterday" in them resolved against that day.
        res = store.append_daily(agent, result.daily_entry.title, daily_body, actor=actor, owner=owner, when=when,
                                 batch=run_id)
        changed.append(res.rel)
    crash_point(journaled.OP, "written")
    return changed
