"""A remember request is never lost: a run that leaves it unrecorded failed, is retried, and after
`ATTEMPTS` failed runs the request is written to the daily note as the person said it, marked as
unprocessed.

A model may answer "no update" to "please remember …", time out, or keep producing unusable
answers. The conversation then stays pending (its watermark does not move) and a retry is
scheduled after `RETRY_DELAYS_MS`; when the retries are used up the words themselves are kept, so
that nothing the person asked to keep depends on the model answering well.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from mateclaw_mem.memory.extraction import rules
from mateclaw_mem.memory.extraction.checks import already_known
from mateclaw_mem.memory.extraction.runs import ExtractionRunLog, RunOutcome
from mateclaw_mem.redaction import redact

if TYPE_CHECKING:
    from mateclaw_mem.workspace.store import WorkspaceStore

ATTEMPTS = 3  # runs, this one included
RETRY_DELAYS_MS = (30_000, 120_000)  # before the 2nd and the 3rd run
TITLE = "Unprocessed remember request"
ERROR_KIND = "remember_unprocessed"


def failed_in_a_row(runs: ExtractionRunLog, agent: str, owner: str | None) -> int:
    """Failed runs of this bucket since its last successful one ("nothing new" skips don't count, nor
    do runs a stop cut short: the daemon cancels the model calls still running at its stop, and a
    remember request must not be given up on because the daemon was restarted three times)."""
    n = 0
    for row in runs.recent(lambda ms: None, agent=agent, owner=owner or "", limit=ATTEMPTS + 5):
        if row["outcome"] == "error" and row["error_kind"] == "cancelled":
            continue
        if row["outcome"] == "error":
            n += 1
        elif row["outcome"] != "skipped":
            break
    return n


def requests_in(texts: list[str]) -> list[str]:
    return [t for t in texts if rules.is_explicit_remember(t)]


def unrecorded(store: WorkspaceStore, agent: str, owner: str | None, requests: list[str]) -> list[str]:
    """The requests whose words are not yet in PROFILE.md, MEMORY.md or today's note."""
    texts = [store.read(agent, rel, owner=owner).body for rel in ("PROFILE.md", "MEMORY.md", store.daily_rel())]
    return [r for r in requests if not already_known(r, texts)]


def handle_failure(store: WorkspaceStore, runs: ExtractionRunLog, out: RunOutcome, requests: list[str], *,
                   actor: str) -> None:
    """`out` failed and its batch held remember `requests`: schedule a retry, or keep the words."""
    earlier = failed_in_a_row(runs, out.agent, out.owner)
    if earlier + 1 < ATTEMPTS:
        out.retry_in_ms = RETRY_DELAYS_MS[min(earlier, len(RETRY_DELAYS_MS) - 1)]
        out.reason += f"; a remember request is waiting: retry {earlier + 2} of {ATTEMPTS} scheduled"
        return
    lines = [f"- {redact(' '.join(r.split()))}" for r in requests]
    lines.append(f"- (unprocessed: the model did not record this after {ATTEMPTS} runs; last error: "
                 f"{out.error_kind or 'unknown'})")
    res = store.append_daily(out.agent, TITLE, "\n".join(lines), actor=actor, owner=out.owner, batch=out.run_id)
    out.outcome = "updated"
    out.files_changed = [res.rel]
    out.error_kind = ERROR_KIND
    out.reason = (f"the model failed {ATTEMPTS} times on a remember request; written to {res.rel} as said, "
                  "marked unprocessed")
