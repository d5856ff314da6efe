"""The morning card (`services.morning_card`): last night's report for one owner, and what the
person does with it.

    card = MorningCard(runs, clock, facts=lambda: services.facts, soul=lambda: services.soul,
                       forget=lambda: getattr(services, "forget", None))
    card.card(agent, owner)            # the latest UNSEEN report (+ the pending SOUL.md proposal), or None
    card.seen(agent, owner)            # mark it (and every older unseen one) seen
    card.confirm / edit / forget(agent, owner, fact_id, ...)
    card.card_pointer(agent, owner)    # one line for the first context of the day, or None

Owner isolation: a report belongs to the (agent, owner) it was dreamed for; a fact action goes
through `services.facts`, which never serves another owner's fact. `forget` calls
`services.forget.forget_fact` when that service exists, else answers a ConflictError (HTTP 409).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from mateclaw_mem.errors import ConflictError, NotFoundError

if TYPE_CHECKING:
    from mateclaw_mem.clock import Clock
    from mateclaw_mem.memory.dreaming.runs import DreamRunLog

Getter = Callable[[], Any]


def report_fact_ids(report: dict[str, Any]) -> set[str]:
    facts = report.get("facts") or {}
    ids = {p["fact_id"] for p in report.get("promoted", []) if p.get("fact_id")}
    ids |= {f["id"] for f in facts.get("added", [])} | {f["id"] for f in facts.get("superseded", [])}
    return ids


class MorningCard:
    def __init__(self, runs: DreamRunLog, clock: Clock, *, facts: Getter | None = None, soul: Getter | None = None,
                 forget: Getter | None = None) -> None:
        self.runs = runs
        self.clock = clock
        self._facts = facts
        self._soul = soul
        self._forget = forget

    def card(self, agent: str, owner: str | None = None) -> dict[str, Any] | None:
        report = self.runs.latest_report(agent, owner, unseen=True)
        soul = self._soul() if self._soul else None
        proposal = soul.card(agent, owner) if soul is not None else None
        if report is None and proposal is None:
            return None
        facts = self._facts_on(agent, owner, report) if report else []
        return {"agent": agent, "owner": owner, "report": report, "facts": facts, "soul_proposal": proposal}

    def _facts_on(self, agent: str, owner: str | None, report: dict[str, Any]) -> list[dict[str, Any]]:
        """The promoted facts as they are now (trust, uses), for the card's Confirm / Edit / Forget."""
        facts = self._facts() if self._facts else None
        if facts is None or not facts.enabled:
            return []
        out = []
        for fid in sorted(report_fact_ids(report)):
            try:
                out.append(facts.get(agent, owner, fid).to_dict())
            except NotFoundError:
                continue  # edited or forgotten since the night: no longer a fact to act on
        return out

    def seen(self, agent: str, owner: str | None = None) -> dict[str, Any]:
        latest = self.runs.latest_report(agent, owner, unseen=True)
        if latest is None:
            return {"agent": agent, "owner": owner, "marked": 0, "run_id": None}
        marked = self.runs.mark_seen(agent, owner, self.clock.now().isoformat(timespec="seconds"),
                                     upto=latest["at"])
        return {"agent": agent, "owner": owner, "marked": marked, "run_id": latest["run_id"]}

    def card_pointer(self, agent: str, owner: str | None = None) -> str | None:
        """One line for the first context of the day when a card waits, else None."""
        report = self.runs.latest_report(agent, owner, unseen=True)
        soul = self._soul() if self._soul else None
        proposal = soul.card(agent, owner) if soul is not None else None
        if report is None and proposal is None:
            return None
        parts = []
        if report is not None:
            n = len(report.get("promoted", []))
            parts.append(f"last night's dream ({report['status'].replace('_', ' ')}, {n} promoted)")
        if proposal is not None:
            parts.append("a SOUL.md proposal")
        return (f"Morning card waiting: {' and '.join(parts)} — GET /api/v1/memory/{agent}/dream/morning-card "
                f"or `mateclaw-mem card {agent}`.")

    # -- the person's answers ----------------------------------------------------------------------

    def _fact_service(self, agent: str, owner: str | None, fid: str) -> Any:
        facts = self._facts() if self._facts else None
        if facts is None or not facts.enabled:
            raise ConflictError("fact projection is off (mate.memory.fact.projection-enabled: false); "
                                "turn it on to confirm, edit or forget facts from the card")
        for_owner = self.runs.latest_report(agent, owner)
        if for_owner is None:
            raise NotFoundError(f"no dream report for agent {agent!r}" + (f" (owner {owner})" if owner else ""))
        facts.get(agent, owner, fid)  # NotFoundError for a fact of another owner, or none
        return facts

    def confirm(self, agent: str, owner: str | None, fid: str) -> dict[str, Any]:
        return self._fact_service(agent, owner, fid).confirm(agent, owner, fid).to_dict()

    def edit(self, agent: str, owner: str | None, fid: str, text: str) -> dict[str, Any]:
        return self._fact_service(agent, owner, fid).edit(agent, owner, fid, text, actor="person").to_dict()

    def forget(self, agent: str, owner: str | None, fid: str) -> dict[str, Any]:
        self._fact_service(agent, owner, fid)
        if self._forget is None:
            raise ConflictError("forget not available: this card was built without the forget service")
        # ForgetService refuses with the key named when `fact.forget-enabled` is off.
        return self._forget().forget_fact(agent, owner, fid, actor="person").to_dict()
