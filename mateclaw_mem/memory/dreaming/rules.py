"""Rules-mode dreaming (no model configured): promote the claims that recur on 2+ distinct days — in
any wording (memory/dreaming/claims.py) — into a `## Recurring` section of MEMORY.md, each with a
`Source:`; one-offs stay in the daily notes. A claim a later note supersedes (a correction, a removed
value, a one-value key given another value) is never promoted; the superseding claim is, once the
subject has come up on 2+ days (the old claim's days count: the person came back to it to correct it).
What the person came back to in other words — one topic, not one claim — is promoted as a dated thread
line (memory/dreaming/topics.py).

Also the plan both modes produce (memory/dreaming/service.py plans with the model when one is configured).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from mateclaw_mem.index.tokenizer import tokenize
from mateclaw_mem.markdown import frontmatter
from mateclaw_mem.markdown.sections import Section, join, normalise_title, split_sections
from mateclaw_mem.memory.dreaming import candidates as cand
from mateclaw_mem.memory.dreaming import claims, topics

RECURRING_TITLES = ("Recurring", "反复出现")


@dataclass
class DreamPlan:
    new_text: str | None  # full MEMORY.md text to write; None = nothing to do
    reason: str
    promoted: list[str]
    kept: list[str]


def kept_facts(scored: cand.Scored, promoted: list[cand.FactCluster],
               corrected: dict[int, cand.FactCluster] | None = None, threaded: set[str] | None = None) -> list[str]:
    """Facts left in the daily notes for a later night (not promoted, not already in MEMORY.md, not
    in a topic thread promoted tonight)."""
    out = []
    for k in scored.clusters:
        if k in promoted or k.present or (threaded and threaded & set(k.phrasings)):
            continue
        days = len(k.days)
        where = f"{k.sources[0].rel} {k.sources[0].time}".rstrip()
        fix = (corrected or {}).get(id(k))
        note = f"; corrected later: {fix.text!r} ({fix.sources[0].rel})" if fix else ""
        out.append(f"{k.text} ({where}, {days} day{'s' if days != 1 else ''}{note})")
    return out


def _newest(k: cand.FactCluster) -> tuple[Any, str]:
    return (k.sources[0].day, k.sources[0].time) if k.sources else (min(k.days), "")


def corrected_later(scored: cand.Scored) -> dict[int, cand.FactCluster]:
    """Clusters a later note supersedes ("light mode, not dark mode", "actually I switched to light
    mode", `likes − coffee`, `location: Berlin → Lisbon`), by id, with the superseding cluster. A
    claim said again after it was superseded stands."""
    read = {id(k): [claims.read(p) for p in k.phrasings or [k.text]] for k in scored.clusters}
    # Only a cluster that can supersede anything is tried against the others.
    later = [k for k in scored.clusters
             if any(c.fix is not None or c.removes or c.keys & claims.SINGLE_KEYS for c in read[id(k)])]
    out: dict[int, cand.FactCluster] = {}
    for k in scored.clusters:
        for fix in later:
            if fix is not k and _newest(fix) > _newest(k) and any(
                    claims.supersedes(new, old) for new in read[id(fix)] for old in read[id(k)]):
                out[id(k)] = fix
                break
    return out


def _promote(scored: cand.Scored, topic: str | None,
             corrected: dict[int, cand.FactCluster]) -> tuple[list[cand.FactCluster], int]:
    """What rules mode promotes, best first, and how many of those supersede an older claim."""
    recurring = [k for k in cand.promotable(scored, topic=topic) if id(k) not in corrected]
    days: dict[int, set[Any]] = {}
    for old in scored.clusters:
        fix = corrected.get(id(old))
        if fix is not None:
            days.setdefault(id(fix), set(fix.days)).update(old.days)
    superseding = [k for k in scored.clusters
                   if not k.recurring and len(days.get(id(k), ())) >= 2 and not k.present
                   and id(k) not in corrected and not (topic and k.topic_match <= 0)]
    out = sorted(recurring + superseding, key=lambda k: -k.score)[:cand.MAX_PROMOTIONS]
    return out, sum(k in superseding for k in out)


def _threads(scored: cand.Scored, corrected: dict[int, cand.FactCluster], body: str,
             topic: str | None) -> list[topics.Thread]:
    """Topics the person came back to on 2+ days in other words (memory/dreaming/topics.py). A claim
    that recurred as such, one a later note corrects and its correction are the claims' business
    (promoted, or held back for a reason), and what MEMORY.md holds is never threaded."""
    facts = topics.facts_of([s.candidate for s in scored.candidates], scored.older)
    fixes = {id(k) for k in corrected.values()}
    taken = {p for k in scored.clusters if k.present or k.recurring or id(k) in corrected or id(k) in fixes
             for p in k.phrasings}
    taken |= topics.already_threaded(facts, body)
    found = topics.threads(facts, taken=taken)
    if topic:
        wanted = set(tokenize(topic))
        found = [t for t in found if wanted & set(t.terms)]
    return found


def plan_rules(snap: Any, scored: cand.Scored, now: datetime, topic: str | None, protected: set[str]) -> DreamPlan:
    # Never promote what a later note supersedes; the superseding claim is promoted once its subject
    # came up on 2 or more days.
    corrected = corrected_later(scored)
    promote, fixes = _promote(scored, topic, corrected)
    block, body = frontmatter.split(snap.text)
    found = _threads(scored, corrected, body, topic)
    threaded = {f.text for t in found for f in t.facts}
    kept = kept_facts(scored, promote, corrected, threaded)
    if not promote and not found:
        recurring = [k for k in scored.clusters if k.recurring]
        if recurring and all(k.present for k in recurring):
            reason = "every fact that recurred is already in MEMORY.md"
        elif recurring and all(k.present or id(k) in corrected for k in recurring):
            reason = "every fact that recurred is in MEMORY.md already or corrected by a later note"
        elif topic and recurring:
            reason = f"no recurring fact about {topic!r}"
        else:
            reason = "no fact recurred on 2 or more days; one-offs stay in the daily notes"
        return DreamPlan(None, reason, [], kept)
    lines = [f"- {k.text.rstrip()} {_format_source(k, now)}" for k in promote]
    lines += [f"- {topics.shown(t)} {_thread_source(t, now)}" for t in found]
    new_body = _add_recurring(body, lines, [k.text for k in promote] + [t.label for t in found], now, protected)
    reasons = []
    if promote:
        reasons.append(f"promoted {len(promote)} fact{'s' if len(promote) != 1 else ''} that recurred on 2 or more "
                       f"days" + (f" about {topic!r}" if topic else "")
                       + (f" ({fixes} correcting an earlier note)" if fixes else ""))
    if found:
        why = "; ".join(f"{t.label!r} on {len(t.days)} days in {len(t.sessions)} sessions" + _before_window(t)
                        for t in found)
        reasons.append(f"{'and ' if promote else ''}threaded {len(found)} topic{'s' if len(found) != 1 else ''} the "
                       f"person came back to in other words ({why})")
    return DreamPlan(block + new_body, "; ".join(reasons), [line.removeprefix("- ") for line in lines], kept)


def _is_zh(text: str) -> bool:
    cjk = len(re.findall(r"[\u3400-\u4dbf\u4e00-\u9fff]", text))
    return cjk > 0 and cjk * 2 >= len(re.findall(r"[A-Za-z]", text))


def _format_source(cluster: cand.FactCluster, now: datetime) -> str:
    shown = [f"{c.rel} {c.time}".strip() for c in cluster.sources[:3]]
    more = len(cluster.sources) - len(shown)
    refs = "; ".join(shown) + (f"; +{more} more" if more > 0 else "")
    return f"(Source: {refs} · dreamed {now:%Y-%m-%d})"


def _before_window(thread: topics.Thread) -> str:
    # The diary's "Looked at" lists the window; a thread's older notes were read as its evidence.
    older = list(dict.fromkeys(f.source.split(" ")[0] for f in thread.facts if not f.new))
    return f", also in {', '.join(older)} (before the window)" if older else ""


def _thread_source(thread: topics.Thread, now: datetime) -> str:
    shown = list(dict.fromkeys(f.source for f in thread.facts))
    refs = "; ".join(shown[:3]) + (f"; +{len(shown) - 3} more" if len(shown) > 3 else "")
    return f"(Source: {refs} · dreamed {now:%Y-%m-%d})"


def _add_recurring(body: str, lines: list[str], texts: list[str], now: datetime, protected: set[str]) -> str:
    """Append the promoted lines to the `## Recurring` section (created in the person's language when
    missing; a dated new section when the existing one is protected)."""
    preamble, sections = split_sections(body)
    at = next((i for i, s in enumerate(sections) if s.key in {normalise_title(t) for t in RECURRING_TITLES}), None)
    if at is not None and sections[at].key not in protected and not sections[at].pinned:
        s = sections[at]
        text = s.text.rstrip("\n") + "\n" + "\n".join(lines) + "\n\n"
        sections[at] = Section(s.title, text)
    else:
        zh = sum(_is_zh(t) for t in texts) * 2 > len(texts)
        title = RECURRING_TITLES[1] if zh else RECURRING_TITLES[0]
        if at is not None:
            title = f"{title} ({'梦中整理于' if zh else 'dreamed'} {now:%Y-%m-%d})"
        if sections and not sections[-1].text.endswith("\n\n"):
            sections[-1] = Section(sections[-1].title, sections[-1].text.rstrip("\n") + "\n\n")
        elif not sections and preamble and not preamble.endswith("\n\n"):
            preamble = preamble.rstrip("\n") + "\n\n"
        sections.append(Section(title, f"## {title}\n\n" + "\n".join(lines) + "\n"))
    return join(preamble, sections)
