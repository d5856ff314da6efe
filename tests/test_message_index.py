"""Per-message index: the cached per-owner view stays exact under interleaved and concurrent Adds."""

from __future__ import annotations

import threading
from pathlib import Path

from mateclaw_mem.conversations.log import ConversationLog, NewMessage
from mateclaw_mem.index.message_index import MessageIndex

TS = 1683554160000
QUERIES = ["cats names", "pottery class", "when did she go camping", "Melanie painting", "adoption agency"]
LINES = [
    "Caroline: I went to the adoption agency meeting yesterday.",
    "Melanie: That's wonderful! How did it feel?",
    "Caroline: Hopeful. What are your cats called?",
    "Melanie: Luna and Oliver!",
    "Caroline: I signed up for a pottery class last week.",
    "Melanie: I finished a painting of a sunset by the lake.",
    "Caroline: We went camping in the mountains in May.",
    "Melanie: Camping sounds great, did the kids like it?",
]


def _results(index: MessageIndex, owner: str) -> list[list[tuple[int, float]]]:
    return [[(h.id, h.score) for h in index.search("aml", owner, q, limit=20)] for q in QUERIES]


def _append(log: ConversationLog, owner: str, session: str, lines: list[str], base: int) -> None:
    log.append("aml", session, [NewMessage("user", t, TS + base + i) for i, t in enumerate(lines)],
               owner=owner, now_ms=TS)


def test_view_updated_after_each_add_ranks_exactly_like_a_fresh_one(tmp_path: Path) -> None:
    log = ConversationLog(tmp_path / "log.db")
    live = MessageIndex(tmp_path / "live.db")
    seen_changes = 0
    before = _results(live, "u1")
    for round_ in range(6):
        for s in ("s1", "s2"):
            # Two turns per chunk: the first of each chunk extends the previous chunk's tail turn.
            lines = LINES[(round_ * 2) % len(LINES) :][:2]
            _append(log, "u1", f"{s}-{round_ // 3}", lines, round_ * 10)
        _append(log, "u2", "other", ["Caroline: pottery class for u2 only"], round_)
        live.sync(log)
        now = _results(live, "u1")  # searches between Adds take the incremental path
        seen_changes += now != before
        before = now
    fresh = MessageIndex(tmp_path / "fresh.db")
    fresh.sync(log)
    assert seen_changes >= 3  # the live view really was updated along the way
    assert _results(live, "u1") == _results(fresh, "u1")
    assert _results(live, "u2") == _results(fresh, "u2")
    # Neighbour links and statistics match too, not just the top results.
    lv, fv = live._views[("aml", "u1")], fresh._view("aml", "u1")
    assert fv is not None
    assert (lv.n, lv.len_sum, lv.avg, +lv.df) == (fv.n, fv.len_sum, fv.avg, +fv.df)
    assert {i: (d.prev, d.next, d.tf, d.lens) for i, d in lv.by_id.items()} == {
        i: (d.prev, d.next, d.tf, d.lens) for i, d in fv.by_id.items()
    }
    for x in (live, fresh, log):
        x.close()


def test_concurrent_adds_and_searches_leave_the_view_exact(tmp_path: Path) -> None:
    log = ConversationLog(tmp_path / "log.db")
    live = MessageIndex(tmp_path / "live.db")
    errors: list[BaseException] = []

    def writer(w: int) -> None:
        try:
            for k in range(10):
                _append(log, "u1", f"s{w}", LINES[k % len(LINES) :][:3], w * 1000 + k * 10)
                live.sync(log)
                live.search("aml", "u1", QUERIES[k % len(QUERIES)], limit=5)
        except BaseException as exc:  # surfaced below; a thread's exception is otherwise lost
            errors.append(exc)

    threads = [threading.Thread(target=writer, args=(w,)) for w in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    fresh = MessageIndex(tmp_path / "fresh.db")
    fresh.sync(log)
    assert _results(live, "u1") == _results(fresh, "u1")
    assert live._views[("aml", "u1")].n == 4 * sum(len(LINES[k % len(LINES) :][:3]) for k in range(10))
    for x in (live, fresh, log):
        x.close()
