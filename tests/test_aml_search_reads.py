"""A search reads what it needs of the on-disk message index in a few statements, however many terms
and documents it touches: its terms' postings (its words, their lexicon relatives, the feedback's
terms) a statement per step, not per term; the feedback's bodies and their terms' frequencies in one
each; the padding's neighbours at once. A small owner's cold search was ~100 statements, most a
single term's row - the fixed cost that made it slower than one FTS5 match (issue 36, spread
traffic). The answers are the same as read term by term (test_aml_disk_index.py holds the ranking
to the in-memory view); here, what the reads cost."""

from __future__ import annotations

import random
from collections import Counter
from pathlib import Path

from mateclaw_mem.conversations.log import ConversationLog, NewMessage
from mateclaw_mem.index.messages.index import MessageIndex
from tests.support.disk_reference import WORDS, random_line

TS = 1683554160000


def _index(tmp_path: Path) -> tuple[ConversationLog, MessageIndex]:
    rng = random.Random(36)
    log = ConversationLog(tmp_path / "log.db")
    index = MessageIndex(tmp_path / "messages.db")
    for k in range(40):
        lines = [random_line(rng) for _ in range(8)]
        log.append("aml", f"c{k % 5}", [NewMessage("user", t, TS + 1000 * k + i) for i, t in enumerate(lines)],
                   owner="ana", now_ms=TS)
    index.sync(log)
    return log, index


def _statements(index: MessageIndex, query: str, limit: int) -> tuple[Counter[str], int, int]:
    """(statements the search ran, by the table they read first; distinct terms it read; hits)."""
    seen: Counter[str] = Counter()

    def traced(sql: str) -> None:
        for table in ("postings", "pfeat", "docs"):
            if f"FROM {table}" in sql or f"JOIN {table}" in sql:
                seen[table] += 1
                break

    index.cache.clear()  # cold: every term and row read from disk
    conn = index._storage._conn
    conn.set_trace_callback(traced)
    try:
        hits = index.search("aml", "ana", query, limit=limit)
    finally:
        conn.set_trace_callback(None)
    terms = {k[2] for k in index.cache._d if k[0] == "t"}
    return seen, len(terms), len(hits)


def test_a_cold_search_reads_its_many_terms_in_a_few_statements(tmp_path: Path) -> None:
    log, index = _index(tmp_path)
    try:
        query = "When did " + " ".join(WORDS[:12]) + "?"
        seen, terms, hits = _statements(index, query, 100)
        assert hits == 100
        # Its words, their relatives and two feedback passes per ranking (head and tail) are dozens of
        # terms; read one statement each, as before, the postings statements alone were as many.
        assert terms >= 30
        assert seen["postings"] <= 12, seen
    finally:
        index.close()
        log.close()


def test_the_padding_reads_the_neighbours_of_a_rare_match_at_once(tmp_path: Path) -> None:
    log, index = _index(tmp_path)
    try:
        rng = random.Random(9)
        for k in range(5):  # a rare word in the middle of each conversation
            lines = [random_line(rng), random_line(rng), "the zeppelin landed", random_line(rng), random_line(rng)]
            log.append("aml", f"c{k}", [NewMessage("user", t, TS + 10**6 + 10 * k + i) for i, t in enumerate(lines)],
                       owner="ana", now_ms=TS)
        index.sync(log)
        # Five turns match: the answer is padded with the surroundings of the best hits (two turns
        # either side), whose rows were read one statement per neighbour.
        seen, _, hits = _statements(index, "zeppelin", 100)
        assert hits >= 5 + 15
        assert seen["pfeat"] <= 6, seen
    finally:
        index.close()
        log.close()
