"""Model-mode planning of a dream: the prompt, the checked answer, and the new MEMORY.md it means.

The answer's edits are applied to the current body by `markdown.edits.apply_edits` (nothing an edit
does not name changes); the seed's whole-body `memory_content` is accepted when no edits came. Either
way the result goes through the service's gates (loss limit, protected sections, cumulative guard).
"""

from __future__ import annotations

import logging
from datetime import datetime
from typing import Any

from mateclaw_mem.errors import ModelError
from mateclaw_mem.llm.prompts.dream import DreamResult, PromptCandidate, answer_check, build_messages, note_dates
from mateclaw_mem.llm.prompts.echo import placeholder
from mateclaw_mem.llm.prompts.edits import edits_for
from mateclaw_mem.markdown import frontmatter
from mateclaw_mem.markdown.edits import apply_edits
from mateclaw_mem.memory.dreaming import candidates as cand
from mateclaw_mem.memory.dreaming import gates
from mateclaw_mem.memory.dreaming.rules import DreamPlan, kept_facts
from mateclaw_mem.memory.dreaming.shingles import containment, shingles
from mateclaw_mem.redaction import redact

log = logging.getLogger(__name__)

MODEL_STEP = "consolidation"
DEFAULT_SECTION = "Notes"  # where an add without a section lands


def plan_model(model: Any, agent: str, topic: str | None, snap: Any, scored: cand.Scored, now: datetime,
               protected: set[str], retry_note: str) -> DreamPlan:
    prompt_candidates = [
        PromptCandidate(source=s.candidate.source, score=s.score, days=s.days, sessions=s.sessions, hits=s.hits,
                        explicit=s.explicit, text=s.candidate.text)
        for s in scored.candidates
    ]
    messages = build_messages(agent=agent, now=now.isoformat(timespec="minutes"), memory=snap.body,
                              candidates=prompt_candidates, topic=topic, retry_note=retry_note)
    check = answer_check(messages[0]["content"], note_dates([c.source for c in prompt_candidates]))
    try:
        result: DreamResult = model.chat_json(messages, DreamResult, step=MODEL_STEP, check=check)
    except ModelError as exc:
        raise ModelError(f"the model failed during the dream ({exc.kind}): {exc.message}; MEMORY.md left "
                         "unchanged", kind=exc.kind, retryable=exc.retryable) from None
    # The model's words are untrusted input: a secret it echoed (or invented) never reaches MEMORY.md,
    # its archive, the run log or DREAMS.md.
    edits = [op.model_copy(update={"text": redact(op.text), "old": redact(op.old)}) for op in result.edits]
    # A placeholder reason ("...", "one sentence") is no reason: it never reaches the diary.
    reason = "" if placeholder(result.reason) else redact(result.reason)
    result = result.model_copy(update={"memory_content": redact(result.memory_content), "reason": reason,
                                       "edits": edits})
    kept_all = kept_facts(scored, [])
    if not result.should_update:
        return DreamPlan(None, result.reason or "the model found nothing to change", [], kept_all)
    block, old_body = frontmatter.split(snap.text)
    if result.edits:
        applied = apply_edits(old_body, edits_for(result.edits, "MEMORY.md"), default_section=DEFAULT_SECTION)
        for i, why in applied.skipped:
            log.info("dream edit %d skipped: %s", i, why)
        if not applied.applied:
            return DreamPlan(None, "none of the model's edits applied: "
                             + "; ".join(why for _, why in applied.skipped[:3]), [], kept_all)
        new_body = applied.body
    else:
        new_body = result.memory_content if result.memory_content.endswith("\n") else result.memory_content + "\n"
    new_body = gates.preserve_sections(old_body, new_body, protected)
    new_lines = [shingles(line) for line in new_body.splitlines()]
    chosen = [k for k in scored.clusters if not k.present and any(
        containment(k.shingles, line) >= cand.PRESENT_CONTAINMENT for line in new_lines)]
    return DreamPlan(block + new_body, result.reason, [k.text for k in chosen], kept_facts(scored, chosen))
