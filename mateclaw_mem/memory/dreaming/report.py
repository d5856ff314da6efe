"""The nightly report: what one dream looked at, weighed and changed, as one JSON-able dict.

Built by the dreaming service for every run that is not a preview, stored with the run (runs.py,
`dream_reports`), rendered into its DREAMS.md entry (diary.py) and shown as the morning card
(card.py). Facts added / superseded / removed come from diffing the claims of MEMORY.md before and
after the run (memory/facts/projection.claims), so the report names the same fact ids that
`services.facts` serves, and Confirm / Edit / Forget on the card act on them.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import asdict, is_dataclass
from typing import TYPE_CHECKING, Any

from mateclaw_mem.markdown import frontmatter
from mateclaw_mem.markdown.edits import line_key
from mateclaw_mem.memory.facts.projection import Claim, claims, fact_id

if TYPE_CHECKING:
    from mateclaw_mem.memory.dreaming.outcome import DreamOutcome

log = logging.getLogger(__name__)

MEMORY_REL = "MEMORY.md"
DIFF_LINES = 60  # of the MEMORY.md diff in a DREAMS.md entry (the stored report keeps it whole)
LIST_LIMIT = 20
ContradictionsHook = Callable[[str, "str | None"], list[Any]]


def build_report(out: DreamOutcome, before_text: str, after_text: str,
                 contradictions: ContradictionsHook | None = None) -> dict[str, Any]:
    agent, owner = out.agent, out.owner
    before = {fact_id(agent, owner, c): c for c in claims(MEMORY_REL, frontmatter.body(before_text))}
    after = {fact_id(agent, owner, c): c for c in claims(MEMORY_REL, frontmatter.body(after_text))}
    added = [_fact(i, c) for i, c in after.items() if i not in before]
    superseded = [{"id": i, "section": c.section, "old": before[i].text, "new": c.text}
                  for i, c in after.items() if i in before and before[i].text != c.text]
    removed = [_fact(i, c) for i, c in before.items() if i not in after]
    new_claims = [(i, after[i]) for i in after if i not in before or before[i].text != after[i].text]
    landed = out.status == "done"
    promoted_reason = out.reason or "promoted"
    promoted, rejected = [], []
    for text in out.promoted:
        item = {"text": text, "fact_id": _match(text, new_claims) if landed else None}
        if landed:
            promoted.append({**item, "reason": promoted_reason})
        else:  # planned but not written: a safety gate (or a failure) stopped it
            rejected.append({**item, "reason": out.reason or out.status})
    rejected += [{"text": d, "fact_id": None, "reason": "removed by the rewrite" + (
        f"; archived to {', '.join(out.archived)}" if out.archived and landed else "; MEMORY.md left unchanged")}
        for d in out.dropped]
    kept_why = ("seen on fewer than 2 days so far; stays in the daily notes for a later night"
                if out.mode == "rules" else "the model left it in the daily notes for now")
    return {
        "run_id": out.run_id, "agent": agent, "owner": owner, "at": out.started_at, "status": out.status,
        "mode": out.mode, "trigger": out.trigger, "topic": out.topic, "reason": out.reason,
        "looked_at": {"daily_notes": list(out.looked_at), "sections": out.sections,
                      "memory_chars": len(frontmatter.body(before_text))},
        "candidates": list(out.candidates),
        "promoted": promoted,
        "kept": [{"text": k, "reason": kept_why} for k in out.kept],
        "rejected": rejected,
        "facts": {"added": added, "superseded": superseded, "removed": removed},
        "contradictions": _contradictions(contradictions, agent, owner),
        "memory_diff": out.diff,
        "archived": list(out.archived),
    }


def _fact(fid: str, c: Claim) -> dict[str, Any]:
    return {"id": fid, "section": c.section, "text": c.text}


def _match(text: str, new_claims: list[tuple[str, Claim]]) -> str | None:
    """The fact id of the claim a promoted text became (rules mode appends a Source note to it)."""
    want = line_key(text)
    for fid, c in new_claims:
        have = line_key(c.text)
        if want and (want in have or have in want):
            return fid
    return None


def _contradictions(hook: ContradictionsHook | None, agent: str, owner: str | None) -> list[dict[str, Any]]:
    if hook is None:
        return []
    try:
        return [asdict(c) if is_dataclass(c) and not isinstance(c, type) else dict(c) for c in hook(agent, owner)]
    except Exception:  # the report is a record of the night; a broken inbox must not lose it
        log.exception("contradictions unavailable for the report of %s", agent)
        return []


def _line(text: Any) -> str:
    # An entry line must never open a new `##` section of the diary.
    return " ".join(str(text).split()).lstrip("#").strip()


def render_lines(report: dict[str, Any] | None) -> list[str]:
    """The report's parts a DREAMS.md entry does not already show (facts, rejections, contradictions,
    the diff), as markdown lines under `###` headings."""
    if not report:
        return []
    lines: list[str] = []
    facts = report.get("facts") or {}
    rows = ([f"- added `{f['id']}`: {_line(f['text'])}" for f in facts.get("added", [])]
            + [f"- superseded `{f['id']}`: {_line(f['old'])} → {_line(f['new'])}" for f in facts.get("superseded", [])]
            + [f"- removed `{f['id']}`: {_line(f['text'])}" for f in facts.get("removed", [])])
    if rows:
        lines += ["", "### Facts", *rows[:LIST_LIMIT]]
        if len(rows) > LIST_LIMIT:
            lines.append(f"- … and {len(rows) - LIST_LIMIT} more")
    if report.get("rejected"):
        lines += ["", "### Rejected"]
        lines += [f"- {_line(r['text'])} — {_line(r['reason'])}" for r in report["rejected"][:LIST_LIMIT]]
    found = report.get("contradictions") or []
    lines += ["", f"### Contradictions ({len(found)})"] if found else []
    lines += [f"- {_line(c.get('summary') or c.get('text') or c)}" for c in found[:LIST_LIMIT]]
    diff = (report.get("memory_diff") or "").splitlines()
    if diff:
        shown = diff[:DIFF_LINES]
        title = "MEMORY.md diff" + ("" if report.get("status") == "done" else " (not applied)")
        lines += ["", f"### {title}", "", "```diff", *shown, "```"]
        if len(diff) > DIFF_LINES:
            lines.append(f"(… {len(diff) - DIFF_LINES} more diff lines in the run's report)")
    return lines
