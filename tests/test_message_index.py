"""Per-message index: the on-disk index stays exact under interleaved and concurrent Adds."""

from __future__ import annotations

import threading
from dataclasses import replace
from pathlib import Path

import pytest

from mateclaw_mem.conversations.log import ConversationLog, NewMessage
from mateclaw_mem.index.messages.fields import split_speaker
from mateclaw_mem.index.messages.index import MessageIndex
from mateclaw_mem.index.messages.ranking import Ranking
from mateclaw_mem.index.tokenizer import tokenize
from tests.support.disk_reference import disk_state, disk_view, reference_state, reference_view

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
    # The tables hold what a view parsed from scratch holds: statistics, every posting (old parses
    # replaced, not kept), lengths, features and links, written Add by Add.
    assert disk_state(live, "aml", "u1") == disk_state(fresh, "aml", "u1") == reference_state(
        reference_view(fresh, "aml", "u1"))
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
    assert disk_state(live, "aml", "u1").n == 4 * sum(len(LINES[k % len(LINES) :][:3]) for k in range(10))
    for x in (live, fresh, log):
        x.close()


def test_a_write_through_another_connection_is_seen_by_the_next_search(tmp_path: Path) -> None:
    # The view skips its freshness query while nothing was committed; a commit by another
    # connection (another process's index) must still reach the next search.
    log = ConversationLog(tmp_path / "log.db")
    reader = MessageIndex(tmp_path / "messages.db")
    writer = MessageIndex(tmp_path / "messages.db")
    _append(log, "u1", "s1", LINES[:2], 0)
    reader.sync(log)
    assert reader.search("aml", "u1", "pottery class", limit=5) == []
    _append(log, "u1", "s1", LINES[4:5], 10)
    writer.sync(log)
    hits = reader.search("aml", "u1", "pottery class", limit=5)
    assert [h.content for h in hits][:1] == [LINES[4]]
    for x in (reader, writer, log):
        x.close()


def _index_of(tmp_path: Path, lines: list[str], owner: str = "u1") -> tuple[ConversationLog, MessageIndex]:
    log = ConversationLog(tmp_path / "log.db")
    index = MessageIndex(tmp_path / "messages.db")
    _append(log, owner, "s1", lines, 0)
    index.sync(log)
    return log, index


def test_a_category_word_finds_a_turn_that_only_names_a_member(tmp_path: Path) -> None:
    log, index = _index_of(tmp_path, [
        "Caroline: My turtles love basking in the sun.",
        "Melanie: I bought a new lamp for the living room.",
        "Caroline: The weather was nice today.",
    ])
    hits = index.search("aml", "u1", "What pets does Caroline have?", limit=5)
    assert hits and hits[0].content == "Caroline: My turtles love basking in the sun."
    # ...but a turn with the question's own word still comes first.
    _append(log, "u1", "s2", ["Melanie: Pets make a home happier."], 10)
    index.sync(log)
    hits = index.search("aml", "u1", "pets", limit=2)
    assert [h.content for h in hits] == ["Melanie: Pets make a home happier.",
                                         "Caroline: My turtles love basking in the sun."]
    for x in (index, log):
        x.close()


def test_a_numbered_label_is_no_speaker_and_its_words_still_search(tmp_path: Path) -> None:
    # "Day 5:" opens a note, it names nobody: read as a speaker, its words were dropped from every
    # question that used them (a speaker's name is no search term), so "day 5" found any day.
    assert split_speaker("Day 5: walked to the lake") == (None, "Day 5: walked to the lake")
    assert split_speaker("2023-05-01: dentist") == (None, "2023-05-01: dentist")
    assert split_speaker("Caroline: hi")[0] == "Caroline" and split_speaker("jo_92: hi")[0] == "jo_92"
    log, index = _index_of(tmp_path, [f"Day {i}: I walked the dog to the lake and met Sam." for i in range(1, 9)])
    hits = index.search("aml", "u1", "Where did I walk the dog on day 5?", limit=3)
    assert hits and hits[0].content.startswith("Day 5:"), [h.content for h in hits]
    for x in (index, log):
        x.close()


def test_an_answer_that_ends_with_a_question_is_not_penalised_like_a_question(tmp_path: Path) -> None:
    # "Oscar, my guinea pig, ..." answers even though it ends by asking back; the all-or-nothing
    # rule ("last") penalised it exactly like the pure question, the default ("share") does not.
    ratios = {}
    for mode in ("last", "share"):
        log = ConversationLog(tmp_path / f"{mode}-log.db")
        index = MessageIndex(tmp_path / f"{mode}.db", replace(Ranking(), question_mode=mode))
        log.append("aml", "s1", [NewMessage("user", "Melanie: Is your guinea pig at home?", TS)], owner="u1", now_ms=TS)
        log.append("aml", "s2", [NewMessage("user", "Caroline: Oscar, my guinea pig, stays at home with me. How are"
                                 " yours?", TS)], owner="u1", now_ms=TS)
        index.sync(log)
        scores = {h.content.split(":")[0]: h.score for h in index.search("aml", "u1", "guinea pig at home", limit=5)}
        ratios[mode] = scores["Caroline"] / scores["Melanie"]
        for x in (index, log):
            x.close()
    assert Ranking().question_mode == "share"
    assert ratios["share"] > 1.4 * ratios["last"]


def test_with_few_matches_the_results_are_padded_with_surrounding_turns(tmp_path: Path) -> None:
    lines = [f"Caroline: filler line number {k}" for k in range(6)]
    lines[3] = "Caroline: I adopted a hamster named Biscuit."
    log, index = _index_of(tmp_path, lines)
    hits = index.search("aml", "u1", "Biscuit", limit=5)
    assert hits[0].content == lines[3]
    # The turns around the only match follow it, scored below it and in descending order.
    assert {h.content for h in hits[1:]} == {lines[1], lines[2], lines[4], lines[5]}
    assert [h.score for h in hits] == sorted((h.score for h in hits), reverse=True)
    assert len(index.search("aml", "u1", "Biscuit", limit=2)) == 2
    for x in (index, log):
        x.close()


def test_a_speakers_follow_up_across_the_others_reaction_inherits_from_its_thread(tmp_path: Path) -> None:
    # "How does Jon feel about ...?" is answered by Jon's "Excited ..." two turns after the turn that
    # names the studio; it shares no word with the question. It rises above a turn that only shares
    # "feel", but never above the turn it inherits from.
    session = [
        "Jon: The opening night of my dance studio is tomorrow.",
        "Gina: Wow! Are you nervous?",
        "Jon: Excited, and ready to give it my best.",
    ]
    other = ["Gina: I feel like a walk in the park.", "Jon: Sure, sounds nice."]
    query = "How does Jon feel about the opening night of his dance studio?"
    order = {}
    for name, ranking in (("thread", Ranking()), ("none", replace(Ranking(), thread_weight=0.0))):
        log = ConversationLog(tmp_path / f"{name}-log.db")
        index = MessageIndex(tmp_path / f"{name}.db", ranking)
        _append(log, "u1", "s1", session, 0)
        _append(log, "u1", "s2", other, 100)
        index.sync(log)
        order[name] = [h.content for h in index.search("aml", "u1", query, limit=10)]
        for x in (index, log):
            x.close()
    for name, got in order.items():
        assert got[0] == session[0], name
    assert order["thread"].index(session[2]) < order["thread"].index(other[0])
    assert order["none"].index(session[2]) > order["none"].index(other[0])


def test_a_reaction_repeating_a_statement_counts_less_but_an_answer_repeating_a_question_does_not(
    tmp_path: Path,
) -> None:
    session = [
        "Jon: I finally opened my own dance studio downtown last week, it was a long road.",
        "Gina: Wow, your own dance studio! So cool.",
        "Gina: How is the clothing store going?",
        "Jon: The clothing store is going fine.",
    ]
    scores = {}
    for name, ranking in (("echo", Ranking()), ("none", replace(Ranking(), echo_penalty=0.0))):
        log = ConversationLog(tmp_path / f"{name}-log.db")
        index = MessageIndex(tmp_path / f"{name}.db", ranking)
        _append(log, "u1", "s1", session, 0)
        index.sync(log)
        dance = {h.content: h.score for h in index.search("aml", "u1", "dance studio", limit=4)}
        store = {h.content: h.score for h in index.search("aml", "u1", "clothing store going", limit=4)}
        scores[name] = (dance[session[1]] / dance[session[0]], store[session[3]] / store[session[2]])
        for x in (index, log):
            x.close()
    # Gina's reaction repeats Jon's statement: it loses ground against it...
    assert scores["echo"][0] < 0.9 * scores["none"][0]
    # ...while Jon's answer repeating Gina's question keeps its standing against the question.
    assert scores["echo"][1] == pytest.approx(scores["none"][1], rel=0.01)


def test_a_long_history_is_pruned_to_the_best_word_matches_without_changing_the_top(tmp_path: Path) -> None:
    lines = [f"Caroline: we talked about the weather again, day {k}" for k in range(60)]
    lines[17] = "Caroline: the pottery class about glazes was the best part of the weather talk"
    lines[41] = "Caroline: my pottery teacher loves glazes"
    got = {}
    for cap in (0, 10):
        log = ConversationLog(tmp_path / f"{cap}-log.db")
        index = MessageIndex(tmp_path / f"{cap}.db", replace(Ranking(), max_candidates=cap))
        _append(log, "u1", "s1", lines, 0)
        index.sync(log)
        got[cap] = [h.content for h in index.search("aml", "u1", "pottery glazes weather", limit=60)]
        for x in (index, log):
            x.close()
    assert got[0][:2] == got[10][:2]
    assert set(got[0][:2]) == {lines[17], lines[41]}


def test_cached_term_scores_survive_an_add_that_does_not_touch_them_and_stay_exact(tmp_path: Path) -> None:
    log = ConversationLog(tmp_path / "log.db")
    live = MessageIndex(tmp_path / "live.db")
    _append(log, "u1", "s1", [f"Caroline: day {k} of the pottery class, glazes and kilns" for k in range(300)], 0)
    live.sync(log)
    live.search("aml", "u1", "pottery glazes", limit=10)  # reads the terms' postings into the cache
    live.search("aml", "u1", "day 7", limit=10)
    okey = disk_view(live, "aml", "u1").okey
    seven, pottery = live.cache.get(("t", okey, "7")), live.cache.get(("t", okey, tokenize("pottery")[0]))
    assert seven is not None and pottery is not None
    _append(log, "u1", "s1", ["Melanie: pottery glazes are lovely"], 1000)
    live.sync(log)
    # The Add's postings went into one delta row (messages/delta.py): the terms' cached segments,
    # touched or not, stay as they were, and a search reads the new row beside them...
    assert live.cache.get(("t", okey, "7")) is seven
    assert live.cache.get(("t", okey, tokenize("pottery")[0])) is pottery
    got = live.search("aml", "u1", "pottery glazes", limit=20)
    fresh = MessageIndex(tmp_path / "fresh.db")
    fresh.sync(log)
    # ...and the touched terms score exactly what a fresh index scores.
    assert [(h.id, h.score) for h in got] == [(h.id, h.score) for h in fresh.search("aml", "u1", "pottery glazes", limit=20)]
    assert "Melanie: pottery glazes are lovely" in [h.content for h in got]  # the new turn is scored
    for x in (live, fresh, log):
        x.close()


def test_a_rebuild_is_built_aside_so_searches_elsewhere_never_see_it_half_done(tmp_path: Path) -> None:
    log = ConversationLog(tmp_path / "log.db")
    lines = [f"Caroline: filler number {k} about the weather" for k in range(1500)]
    lines[1234] = "Caroline: my pottery class starts on Monday"
    _append(log, "u1", "s1", lines, 0)
    builder = MessageIndex(tmp_path / "messages.db")  # e.g. `mateclaw-mem reindex`
    reader = MessageIndex(tmp_path / "messages.db")  # e.g. the daemon, another connection
    builder.sync(log)
    want = [h.content for h in reader.search("aml", "u1", "pottery class", limit=5)]
    assert want[0] == lines[1234]
    seen: list[list[str]] = []
    errors: list[BaseException] = []
    done = threading.Event()

    def search_meanwhile() -> None:
        # A pause between searches, as between requests: a tight CPU loop would starve the
        # builder thread of the GIL after every SQLite call it makes.
        while not done.wait(0.002):
            try:
                seen.append([h.content for h in reader.search("aml", "u1", "pottery class", limit=5)])
            except BaseException as exc:  # any error is the failure being tested
                errors.append(exc)

    t = threading.Thread(target=search_meanwhile)
    t.start()
    try:
        # A turn logged while the rebuild runs is in the rebuilt index too.
        _append(log, "u1", "s2", ["Melanie: the pottery class was fun"], 5000)
        built = builder.rebuild(log, batch=50)
    finally:
        done.set()
        t.join()
    assert not errors
    assert built == 1501 and len(seen) > 1
    assert all(got and got[0] in (lines[1234], "Melanie: the pottery class was fun") for got in seen)
    after = [h.content for h in reader.search("aml", "u1", "pottery class", limit=5)]
    assert "Melanie: the pottery class was fun" in after
    assert builder.watermark() == log.since(0, limit=10_000)[-1].id
    for x in (builder, reader, log):
        x.close()


def test_a_rewrite_by_another_process_reaches_a_view_cached_here(tmp_path: Path) -> None:
    # A `mateclaw-mem forget` run from the shell rewrites the daemon's index file: the daemon's
    # cached view must not go on returning the forgotten words.
    log = ConversationLog(tmp_path / "log.db")
    _append(log, "u1", "s1", ["Caroline: my locker code is zebra", "Melanie: noted"], 0)
    daemon = MessageIndex(tmp_path / "messages.db")
    daemon.sync(log)
    assert daemon.search("aml", "u1", "zebra", limit=3)[0].content.endswith("zebra")
    shell = MessageIndex(tmp_path / "messages.db")
    first = min(h.id for h in shell.search("aml", "u1", "zebra", limit=3))
    # As a forget runs: the log's text first (the index reads each turn's text from it), then the index.
    changes = log.rewrite("aml", "u1", lambda t: t.replace("zebra", "[forgotten]"))["messages"]
    assert changes == {first: "Caroline: my locker code is [forgotten]"}
    assert shell.rewrite("aml", "u1", changes) == 1
    shell.close()
    assert all("zebra" not in h.content for h in daemon.search("aml", "u1", "locker zebra", limit=3))
    daemon.close()
    log.close()


