"""The one registry of every store that can hold a person's words, and how a forget reaches each.

Each entry: a name, what it holds, how to forget in it, the tables it answers for and the databases
its forget changes. `ForgetService` (memory/forget/) runs them in this order and scrubs every
database they changed; `NO_WORDS` lists each table that holds none of a person's words, with why.
tests/test_forget_census.py opens every database a daemon makes on a fresh workspace after the main
features ran and fails on any table with a text column that is in neither list: a new table that
can hold words cannot ship without a decision here.

Order matters where one store is read to reach another: the facts are looked up before the files
are cut (the projection drops a fact once its line is gone), the log before its derived copies,
the history last (a cut writes new copies of what it cut).

Not here, with why: the memory files' derived rows in `index.db` and `facts.db` are re-made by the
writes of "memory files" (the store's listeners) - registered below so the census and the checks
see them; the embeddings in both index files are floats keyed by a text hash (no words; see the
docs/prompt.md, Forget, for what that leaves); `provenance/` keeps hashes of lines, never lines.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from mateclaw_mem.memory.forget.holder import Cut, Holder
from mateclaw_mem.memory.forget.rows import TableRule, forget_rows, rows_left

if TYPE_CHECKING:
    from pathlib import Path

    from mateclaw_mem.memory.forget.service import ForgetService
    from mateclaw_mem.providers.registry import ProviderRegistry

# -- the tables reached by rules (memory/forget/rows.py) ---------------------------------------------

ATTACHMENTS = (TableRule("log.db", "messages", "id", ("attachments",), "json", "log"),)
FACT_NOTES = (TableRule("facts.db", "fact_events", "seq", ("note",), "cut", "files"),)
RETRIEVALS = (  # the asker's words, filed under the owner of the file they hit: every owner of the agent
    TableRule("log.db", "retrievals", "id", ("query", "title"), "cut", "agent"),)
TURNS = (TableRule("log.db", "context_turns", "id", ("memory",), "json", "log"),)
DREAMS = (TableRule("log.db", "dream_reports", "run_id", ("report",), "json", "files"),
          TableRule("log.db", "dream_runs", "run_id", ("reason", "topic"), "cut", "files"))
# Cut, not deleted: a pair being resolved right now (KEEP_A/KEEP_B forget the other side) is closed
# by its resolution after this forget; an open pair goes at the next detection anyway.
CONTRADICTIONS = (TableRule("facts.db", "contradictions", "id", ("text_a", "text_b", "reason", "verdict_reason"),
                            "cut", "files"),)
SOUL = (TableRule("state.db", "soul_proposals", "id", ("text", "diff", "reason"), "cut", "files"),)
RUNS = (  # error text and model reasons can quote what was said
    TableRule("log.db", "extraction_runs", "id", ("reason", "error"), "cut", "log"),
    TableRule("log.db", "aml_fact_jobs", "id", ("error",), "cut", "log"),
    TableRule("log.db", "task_runs", "run_id", ("task", "breakdown"), "cut", "agent"),
    TableRule("log.db", "llm_usage", "id", ("error",), "cut", "all"),
    TableRule("log.db", "model_step_failures", "id", ("reason",), "cut", "all"),
    TableRule("log.db", "model_probes", "id", ("error",), "cut", "all"),
    TableRule("state.db", "schedule_jobs", "job", ("last_outcome", "last_error"), "cut", "all"))
# Derived rows re-made by the writes of other holders: checked, never written here.
SEARCH_ROWS = (TableRule("index.db", "chunks", "id", ("text", "title"), "cut", "files"),
               TableRule("index.db", "chunks", "id", ("text", "title"), "cut", "log"))
FACT_ROWS = (TableRule("facts.db", "facts", "id", ("text",), "cut", "files"),)

NO_WORDS = {
    "log.db:requests": "AML Add idempotency: request id, body hash and an answer of ids only",
    "log.db:chat_imports": "which imported conversations were handed over: ids and a content hash",
    "log.db:meta": "markers and counts of one-time migrations",
    "log.db:attachment_blobs": "AML images' bytes (aml.images: keep) by message and SHA-256: no text; deleted"
                               " with their user (DELETE /v1/aml/users/{id}, retention)",
    "state.db:extraction_buckets": "extraction cooldowns: agent, owner, times",
    "state.db:extraction_pending": "extraction queue: conversation ids",
    "state.db:extraction_watermarks": "extraction progress: conversation ids and message ids",
    "state.db:harness_versions": "system-prompt versions by hash, with a person's label",
    "state.db:soul_counters": "memory writes counted per owner",
    "state.db:structured_consolidation_buckets": "consolidation bookkeeping: types and hashes",
    "state.db:structured_consolidation_cursor": "consolidation progress: an owner key",
    "index.db:files": "paths, sizes and hashes of the indexed files",
    "index.db:meta": "the tokenizer version and watermarks",
    "index.db:chunk_scopes": "which scopes hold chunks (agent, owner, kind)",
    "index.db:vectors": "embeddings: floats keyed by a chunk's text hash",
    "index.db:fts_vocab": "a view over index.db:fts, stores nothing",
    "messages.db:meta": "the tokenizer version, watermarks and generation",
    "messages.db:vectors": "embeddings: floats keyed by a turn's text hash",
    "messages.db:powners": "per-owner statistics of the Add/Search index: agent, owner key, counts and length sums",
    "forget.db:tombstones": "fingerprints (sha256) of forgotten claims, never their words",
    "forget.db:purges": "scheduled history purges: fingerprints and times",
    "*:sqlite_sequence": "SQLite's AUTOINCREMENT counters",
}


def holders(state: Path, forget: ForgetService, *, facts_on: Callable[[], bool],
            providers: Callable[[], ProviderRegistry]) -> list[Holder]:
    """Every store, in the order a forget reaches them (`state`: the workspace's database folder;
    `facts_on` and `providers` are asked when a forget runs, so listing the holders builds neither)."""
    p = forget.places

    def facts(cut: Cut) -> dict[str, Any]:
        out = p.facts_events(cut)
        out["notes"] = sum(forget_rows(state, FACT_NOTES, cut).values())
        return out

    def conversation(cut: Cut) -> dict[str, Any]:
        out = p.conversation(cut)
        out["attachments"] = sum(forget_rows(state, ATTACHMENTS, cut).values())
        out["removed"] += out["attachments"]
        return out

    return [
        Holder("facts", "claims projected from the memory files, and notes on their events", facts,
               tables=("facts.db:facts", "facts.db:facts_fts", "facts.db:fact_events"), databases=("facts.db",)),
        Holder("memory files", "always-on files, structured entries, daily notes, DREAMS.md, archives (and "
               "GLOBAL memory for the workspace's person)", p.files, databases=("index.db", "facts.db")),
        Holder("month archives", "daily notes and diary entries inside memory/archive/YYYY-MM.md.gz", p.archives,
               databases=("index.db", "facts.db")),
        Holder("conversation log", "every message and AML fact as said, with AML Search's and search's copies",
               conversation, tables=("log.db:messages", "log.db:aml_facts", "messages.db:docs",
                                     # the Add/Search index's postings, rebuilt from the rewritten log rows
                                     "messages.db:postings", "messages.db:pdelta", "messages.db:pspeakers",
                                     "messages.db:pfeat"),
               databases=("log.db", "messages.db", "index.db")),
        Holder("search index", "chunks of the memory files and the log (re-made by the writes above: checked)",
               _check(state, SEARCH_ROWS, "chunks"), tables=("index.db:chunks", "index.db:fts")),
        Holder("fact projection", "facts.db rows re-made from the files (checked while projection is on)",
               _check(state, FACT_ROWS, "facts", when=facts_on)),
        _rules(state, "retrieval log", "the query of every search and the titles it hit", RETRIEVALS),
        _rules(state, "turn records", "what each prompt carried: ids, hashes, structured-entry keys", TURNS),
        _rules(state, "dream runs and reports", "each night's report (the morning card) and run reasons", DREAMS),
        _rules(state, "contradiction inbox", "pairs of claims that disagree, and the judge's reasons",
               CONTRADICTIONS),
        _rules(state, "SOUL.md proposals", "proposed SOUL.md texts and diffs waiting for a person", SOUL),
        _rules(state, "run records", "extraction, AML fact, task and model-call runs: reasons and errors", RUNS),
        Holder("providers", "memory providers with their own store (Mem0): through each one's `forget`",
               _providers(providers)),
        Holder("history", "previous versions of every memory file (purged now, or after the undo window)", p.history),
    ]


def _rules(state: Path, name: str, holds: str, rules: tuple[TableRule, ...]) -> Holder:
    def run(cut: Cut) -> dict[str, Any]:
        changed = forget_rows(state, rules, cut)
        return {"removed": sum(changed.values()), "tables": {k: v for k, v in changed.items() if v}}

    return Holder(name, holds, run, tables=tuple(dict.fromkeys(r.name for r in rules)),
                  databases=tuple(dict.fromkeys(r.db for r in rules)))


def _check(state: Path, rules: tuple[TableRule, ...], what: str,
           when: Callable[[], bool] = lambda: True) -> Callable[[Cut], dict[str, Any]]:
    def run(cut: Cut) -> dict[str, Any]:
        if not when():
            return {"removed": 0, "note": "not kept up to date while off"}
        left = rows_left(state, rules, cut)
        if left:  # the writes above should have re-made them; a pending forget runs again
            raise RuntimeError(f"{sum(left.values())} {what} row(s) still hold the claim: {', '.join(left)}")
        return {"removed": 0, "left": 0}

    return run


def _providers(registry: Callable[[], ProviderRegistry]) -> Callable[[Cut], dict[str, Any]]:
    def run(cut: Cut) -> dict[str, Any]:
        out: dict[str, Any] = {"removed": 0}
        failed = []
        # The registry has no fan-out of its own for this (as it has `sync_turn`): each provider that
        # keeps a store answers `forget(agent, owner, holds)`.
        for state in getattr(registry(), "_states", {}).values():
            provider = state.provider
            fn = getattr(provider, "forget", None)
            if not callable(fn):
                continue
            try:
                answer = fn(cut.agent, cut.owner, cut.holds_loosely)
            except Exception as exc:  # the others still forget; this one is named and retried
                failed.append(f"{provider.name}: {exc}")
                continue
            out[provider.name] = answer
            out["removed"] += int(answer.get("removed") or 0)
        if failed:
            raise RuntimeError("; ".join(failed))
        return out

    return run
