"""Learning memory: trends, caps, atomic concurrent results, hand edits, memoryless isolation."""

from __future__ import annotations

import threading
from datetime import datetime

import pytest

from mateclaw_mem.errors import ConflictError, InvalidInputError, NotFoundError
from mateclaw_mem.markdown import frontmatter
from mateclaw_mem.markdown import learning as md
from mateclaw_mem.memory.learning.service import (
    ARCHIVE_REL,
    LEARNING_REL,
    MAX_NOTES_CHARS,
    MAX_REFLECTIONS,
    MAX_STRATEGIES,
    score_trend,
)
from mateclaw_mem.runtime.services import Services
from tests.conftest import TZ

AGENT = "default"


@pytest.fixture
def learning(services: Services):
    services.store.ensure_agent(AGENT)
    return services.learning


def meta_of(services: Services, rel: str) -> dict:
    return frontmatter.parse(services.store.read(AGENT, rel).text).meta


# -- trend -------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("scores", "trend"),
    [
        ([], "stable"),  # fewer than 2
        ([700], "stable"),  # fewer than 2
        ([100, 900], "improving"),  # two scores, each higher
        ([900, 100], "declining"),
        ([500, 500], "stable"),  # equal: not higher, not lower, within 50
        ([500, 500, 500], "stable"),
        ([600, 550, 600], "stable"),  # exactly 50 apart counts as within 50
        ([600, 549, 600], "volatile"),  # 51 apart, not monotonic
        ([550, 600, 600], "stable"),  # a tie breaks "each higher"
        ([100, 110, 120], "improving"),  # monotonic wins over "within 50" (documented precedence)
        ([120, 110, 100], "declining"),
        ([100, 300, 200], "volatile"),  # mixed
        ([300, 100, 200], "volatile"),
        ([100, 150, 125], "stable"),  # mixed but within 50
        ([0, 1000, 900, 950], "volatile"),  # only the last 3 count
        ([1000, 0, 10, 20], "improving"),
    ],
)
def test_score_trend(scores: list[float], trend: str) -> None:
    assert score_trend(scores) == trend


def test_recording_results_updates_every_number(services: Services, learning, clock) -> None:
    first = learning.record_result(AGENT, "sum-two", 600, {"accuracy": 500, "speed": 100}, actor="test")
    assert first.task is not None and first.task.score_trend == "stable" and first.task.attempt_count == 1
    learning.record_result(AGENT, "sum-two", 550, {"accuracy": 450, "speed": 100}, actor="test")
    out = learning.record_result(AGENT, "sum-two", 600, {"accuracy": 540, "speed": 60}, actor="test")
    t = out.task
    assert t is not None
    assert (t.attempt_count, t.best_score, t.recent_scores, t.score_trend) == (3, 600, [600, 550, 600], "stable")
    assert t.avg_score == pytest.approx(583.3333, abs=1e-3)
    # An equal score is not better: the first best breakdown stays.
    assert t.best_score_breakdown == {"accuracy": 500, "speed": 100}
    out = learning.record_result(AGENT, "sum-two", 601, {"accuracy": 601}, actor="test")
    assert out.task.recent_scores == [550, 600, 601] and out.task.score_trend == "improving"
    assert out.task.best_score == 601 and out.task.best_score_breakdown == {"accuracy": 601}
    # The numbers are in the file's frontmatter, where a person reads them.
    meta = meta_of(services, "tasks/sum-two.md")
    assert meta["attempt_count"] == 4 and meta["score_trend"] == "improving"
    assert meta["recent_scores"] == [550, 600, 601] and meta["best_score_breakdown"] == {"accuracy": 601}


def test_bad_scores_and_slugs_are_named(learning) -> None:
    for slug in ("../x", "BAD", "a/b", "", "-x", "x.", "a..b", "x" * 65):
        with pytest.raises(InvalidInputError, match="invalid task slug"):
            learning.record_result(AGENT, slug, 1, actor="test")
    for score in ("10", True, float("nan"), float("inf"), None):
        with pytest.raises(InvalidInputError, match="score must be"):
            learning.record_result(AGENT, "t", score, actor="test")
    with pytest.raises(InvalidInputError, match=r"breakdown\['a'\] must be a number"):
        learning.record_result(AGENT, "t", 1, {"a": "x"}, actor="test")
    with pytest.raises(NotFoundError, match="agent 'ghost'"):
        learning.record_result("ghost", "t", 1, actor="test")
    with pytest.raises(NotFoundError, match="no memory of task 't'"):
        learning.task_memory(AGENT, "t")


# -- caps ----------------------------------------------------------------------------------------------


def test_strategy_cap_is_a_clear_error_global_and_per_task(services: Services, learning) -> None:
    for i in range(MAX_STRATEGIES):
        learning.add_strategy(AGENT, f"strategy {i}", actor="test")
        learning.add_strategy(AGENT, f"task strategy {i}", task="maze", actor="test")
    with pytest.raises(InvalidInputError, match="cap is 10"):
        learning.add_strategy(AGENT, "one too many", actor="test")
    with pytest.raises(InvalidInputError, match="cap is 10"):
        learning.add_strategy(AGENT, "one too many", task="maze", actor="test")
    with pytest.raises(InvalidInputError, match="11 strategies; the cap is 10"):
        learning.update_memory(AGENT, strategies=[f"s{i}" for i in range(11)], actor="test")
    # Adding one that is already there is idempotent, even at the cap.
    assert len(learning.add_strategy(AGENT, "STRATEGY 3", actor="test").strategies) == MAX_STRATEGIES
    assert len(learning.memory(AGENT).strategies) == MAX_STRATEGIES
    after = learning.remove_strategy(AGENT, 1, actor="test")
    assert after.strategies[0] == "strategy 1" and len(after.strategies) == 9
    assert learning.remove_strategy(AGENT, "task strategy 9", task="maze", actor="test").strategies[-1] == (
        "task strategy 8"
    )
    with pytest.raises(NotFoundError, match="no strategy number 42"):
        learning.remove_strategy(AGENT, 42, actor="test")
    assert meta_of(services, LEARNING_REL)["strategies"] == 9


def test_text_caps(learning) -> None:
    learning.update_task(AGENT, "maze", notes="n" * MAX_NOTES_CHARS, actor="test")
    with pytest.raises(InvalidInputError, match="notes is 2001 characters; the limit is 2000"):
        learning.update_task(AGENT, "maze", notes="n" * (MAX_NOTES_CHARS + 1), actor="test")
    assert learning.task_memory(AGENT, "maze").notes == "n" * MAX_NOTES_CHARS
    with pytest.raises(InvalidInputError, match="stats summary is 2001 characters"):
        learning.update_memory(AGENT, stats="s" * 2001, actor="test")
    with pytest.raises(InvalidInputError, match="category 'coding' notes is 2001"):
        learning.set_category(AGENT, "coding", "c" * 2001, actor="test")
    with pytest.raises(InvalidInputError, match="reflection is 1001 characters"):
        learning.reflect(AGENT, "maze", "r" * 1001, actor="test")
    with pytest.raises(InvalidInputError, match="strategy is 501 characters"):
        learning.add_strategy(AGENT, "x" * 501, actor="test")


def test_reflections_keep_newest_20_and_archive_the_rest(services: Services, learning, clock) -> None:
    clock.set(datetime(2026, 10, 31, 23, 0, tzinfo=TZ))
    learning.reflect(AGENT, "maze", "oldest lesson", actor="test")
    learning.reflect(AGENT, "maze", "second lesson", actor="test")
    clock.set(datetime(2026, 11, 30, 9, 0, tzinfo=TZ))
    for i in range(MAX_REFLECTIONS - 2):
        learning.reflect(AGENT, "maze", f"lesson {i}", actor="test")
    assert len(learning.memory(AGENT).reflections) == MAX_REFLECTIONS
    out = learning.reflect(AGENT, "sum-two", "newest lesson", actor="test")
    assert out.reflections_kept == MAX_REFLECTIONS and out.archived == [ARCHIVE_REL.format(month="2026-10")]
    out = learning.reflect(AGENT, None, "general lesson", actor="test")
    mem = learning.memory(AGENT)
    assert [r.text for r in mem.reflections[:2]] == ["general lesson", "newest lesson"]
    assert len(mem.reflections) == MAX_REFLECTIONS
    assert all("oldest" not in r.text and "second" not in r.text for r in mem.reflections)
    archive = services.store.read(AGENT, "learning/archive/reflections-2026-10.md").text
    # Nothing is lost: both moved, oldest first, with their original time and task.
    assert archive.index("### 2026-10-31 23:00 · maze\n\noldest lesson") < archive.index("second lesson")
    assert meta_of(services, LEARNING_REL)["reflections"] == MAX_REFLECTIONS


def test_a_reflection_archived_before_a_kill_is_not_archived_twice(services: Services, learning, clock) -> None:
    """The archive is written before LEARNING.md drops what it now holds: killed in between, the
    oldest reflection is in both, and the next move finds it archived already."""
    clock.set(datetime(2026, 10, 31, 23, 0, tzinfo=TZ))
    learning.reflect(AGENT, "maze", "oldest lesson", actor="test")
    clock.set(datetime(2026, 11, 30, 9, 0, tzinfo=TZ))
    for i in range(MAX_REFLECTIONS - 1):
        learning.reflect(AGENT, "maze", f"lesson {i}", actor="test")
    rel = "learning/archive/reflections-2026-10.md"
    # The state a kill between the two writes leaves: the archive holds the oldest, LEARNING.md too.
    oldest = md.Reflection("2026-10-31 23:00", "maze", "oldest lesson")
    services.store.write(AGENT, rel, md.new_archive_text("2026-10") + "\n" + md.render_archive_entries([oldest]) + "\n",
                         expected_sha="", actor="test")
    out = learning.reflect(AGENT, "maze", "newest lesson", actor="test")
    assert out.archived == [rel]
    assert all(r.text != "oldest lesson" for r in learning.memory(AGENT).reflections)
    assert services.store.read(AGENT, rel).text.count("oldest lesson") == 1


def test_reflection_headings_cannot_break_the_file(learning) -> None:
    learning.reflect(AGENT, "maze", "Lesson\n## Not a section\n# nor a title\n```\n## code stays\n```", actor="t")
    learning.add_strategy(AGENT, "a strategy", actor="t")
    mem = learning.memory(AGENT)
    assert mem.strategies == ["a strategy"]
    assert mem.reflections[0].text == "Lesson\n#### Not a section\n#### nor a title\n```\n## code stays\n```"


# -- atomic and concurrent -------------------------------------------------------------------------------


def test_eight_concurrent_results_lose_no_attempt(services: Services, settings, clock) -> None:
    services.store.ensure_agent(AGENT)
    # Two Services on one workspace: separate in-process locks, so the cross-process file lock is what
    # keeps the read-modify-writes apart for half of the writers.
    other = Services(settings, clock)
    try:
        barrier = threading.Barrier(8)
        errors: list[BaseException] = []
        scores = [100, 200, 300, 400, 500, 600, 700, 800]

        def record(svc: Services, score: int) -> None:
            try:
                barrier.wait()
                svc.learning.record_result(AGENT, "race", score, {"part": score}, actor="test")
            except BaseException as exc:  # pragma: no cover - reported below
                errors.append(exc)

        threads = [threading.Thread(target=record, args=(services if i % 2 else other, s))
                   for i, s in enumerate(scores)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert not errors
        t = services.learning.task_memory(AGENT, "race")
        assert t.attempt_count == 8
        assert t.best_score == 800 and t.best_score_breakdown == {"part": 800}
        assert t.avg_score == pytest.approx(450)
        assert len(t.recent_scores) == 3
        assert len(services.learning.run_list(AGENT, "race")) == 8
        assert len(services.store.history(AGENT, "tasks/race.md")) == 8  # one kept version per write
    finally:
        other.close()


def test_a_run_has_one_result(learning) -> None:
    ctx = learning.enter(AGENT, "maze")
    learning.record_result(AGENT, "maze", 10, run_id=ctx.run_id, actor="test")
    with pytest.raises(ConflictError, match="already has a result"):
        learning.record_result(AGENT, "maze", 20, run_id=ctx.run_id, actor="test")
    assert learning.task_memory(AGENT, "maze").attempt_count == 1  # the retry did not count twice
    with pytest.raises(InvalidInputError, match="belongs to agent 'default', task 'maze'"):
        learning.record_result(AGENT, "other", 20, run_id=learning.enter(AGENT, "maze").run_id, actor="t")


# -- hand edits --------------------------------------------------------------------------------------------


def test_hand_edits_survive_machine_writes(services: Services, learning) -> None:
    learning.add_strategy(AGENT, "first", actor="test")
    text = services.store.read(AGENT, LEARNING_REL).text
    edited = text.replace("---\n# Learning memory", "owner_note: mine  # a comment\n---\n# Learning memory")
    edited = edited.replace("## Strategies\n", "## Strategies\n\nMy intro to the list.\n") + (
        "\n## My own section\n\nWritten *by hand*.\n"
    )
    services.store.write(AGENT, LEARNING_REL, edited, expected_sha=None, actor="person")
    learning.add_strategy(AGENT, "second", actor="test")
    learning.reflect(AGENT, "maze", "lesson", actor="test")
    after = services.store.read(AGENT, LEARNING_REL).text
    assert "owner_note: mine  # a comment" in after
    assert "My intro to the list.\n\n- first\n- second" in after
    assert after.endswith("## My own section\n\nWritten *by hand*.\n")
    assert learning.memory(AGENT).strategies == ["first", "second"]


def test_pinned_section_refuses_machine_writes_but_not_a_person(services: Services, learning) -> None:
    learning.add_strategy(AGENT, "keep me", actor="test")
    text = services.store.read(AGENT, LEARNING_REL).text.replace("## Strategies\n", "## Strategies\n<!-- pin -->\n")
    services.store.write(AGENT, LEARNING_REL, text, expected_sha=None, actor="person")
    with pytest.raises(ConflictError, match="pinned"):
        learning.add_strategy(AGENT, "machine", actor="extraction")
    learning.reflect(AGENT, "maze", "other sections still change", actor="test")
    assert learning.add_strategy(AGENT, "person", actor="person").strategies == ["keep me", "person"]


def test_hand_edited_numbers_are_read_or_named(services: Services, learning) -> None:
    learning.record_result(AGENT, "maze", 100, actor="test")
    rel = "tasks/maze.md"
    text = services.store.read(AGENT, rel).text
    # A person raises the best score and writes recent_scores as a block list.
    text = text.replace("best_score: 100", "best_score: 999").replace(
        "recent_scores: [100]", "recent_scores:\n  - 100\n  - 120"
    )
    services.store.write(AGENT, rel, text, expected_sha=None, actor="person")
    t = learning.record_result(AGENT, "maze", 130, actor="test").task
    assert t.best_score == 999 and t.recent_scores == [100, 120, 130] and t.score_trend == "improving"
    assert frontmatter.parse(services.store.read(AGENT, rel).text).error is None
    bad = services.store.read(AGENT, rel).text.replace("attempt_count: 2", "attempt_count: many")
    services.store.write(AGENT, rel, bad, expected_sha=None, actor="person")
    with pytest.raises(InvalidInputError, match=r"tasks/maze\.md: frontmatter attempt_count must be a whole number"):
        learning.record_result(AGENT, "maze", 1, actor="test")


def test_parse_tolerates_hand_written_files() -> None:
    text = (
        "# Learning\n\n## stats\n\nabout 40 runs\n\n## STRATEGIES\n\n* one\n  continued\n1. two\n\n"
        "## Category Notes\n\n### puzzles\n\nthink\n\n## Reflections\n\n### my own heading\n\nfree text\n\n"
        "### 2026-01-02 03:04 · maze\n\nlesson\n"
    )
    doc = md.parse_learning(text)
    assert doc.stats == "about 40 runs"
    assert doc.strategies == ["one continued", "two"]
    assert doc.categories == [("puzzles", "think")]
    assert [(r.at, r.task, r.text) for r in doc.reflections] == [("", None, "free text"), ("2026-01-02 03:04",
                                                                                          "maze", "lesson")]


def test_categories_and_stats(learning) -> None:
    learning.update_memory(AGENT, stats="40 runs, 70% complete", categories={"Puzzles": "think first"}, actor="t")
    learning.set_category(AGENT, "puzzles", "think twice", actor="t")  # same category, any case
    learning.set_category(AGENT, "Coding", "tests first", actor="t")
    mem = learning.memory(AGENT)
    assert mem.stats == "40 runs, 70% complete"
    assert mem.categories == {"Puzzles": "think twice", "Coding": "tests first"}
    assert learning.set_category(AGENT, "PUZZLES", None, actor="t").categories == {"Coding": "tests first"}
    with pytest.raises(InvalidInputError, match="invalid category name"):
        learning.set_category(AGENT, "# x", "y", actor="t")


# -- task context and memoryless isolation ------------------------------------------------------------------


def test_enter_gives_memory_task_memory_and_analytics(learning) -> None:
    learning.update_memory(AGENT, stats="STATS-TEXT", add_strategy="GLOBAL-STRATEGY", actor="t")
    learning.update_task(AGENT, "maze", notes="TASK-NOTES", add_strategy="TASK-STRATEGY", actor="t")
    learning.reflect(AGENT, "maze", "REFLECTION-TEXT", actor="t")
    learning.record_result(AGENT, "maze", 100, {"a": 100}, actor="t")
    learning.record_result(AGENT, "maze", 300, completed=False, actor="t")
    learning.record_result(AGENT, "maze", 200, actor="t")
    ctx = learning.enter(AGENT, "maze")
    assert not ctx.memoryless and ctx.run_id
    for needle in ("STATS-TEXT", "GLOBAL-STRATEGY", "TASK-NOTES", "TASK-STRATEGY", "REFLECTION-TEXT",
                   "Attempts: 3", "Best score: 300", "Trend: volatile", "Median score: 200",
                   "Completion rate: 67% (2 of 3)"):
        assert needle in ctx.text, needle
    assert ctx.analytics.median_score == 200 and ctx.analytics.completion_rate == pytest.approx(0.6667)
    assert ctx.analytics.open_runs == 1  # this run, entered and not finished


def test_memoryless_isolation(services: Services, learning) -> None:
    learning.update_memory(AGENT, stats="STATS-TEXT", add_strategy="GLOBAL-STRATEGY", actor="t")
    learning.update_task(AGENT, "maze", notes="TASK-NOTES", actor="t")
    learning.reflect(AGENT, "maze", "REFLECTION-TEXT", actor="t")
    learning.record_result(AGENT, "maze", 500, actor="t")
    before = {rel: services.store.read(AGENT, rel).sha for rel in (LEARNING_REL, "tasks/maze.md")}

    ctx = learning.enter(AGENT, "maze", memoryless=True)
    assert ctx.memoryless and ctx.memory is None and ctx.task_memory is None and ctx.analytics is None
    for needle in ("STATS-TEXT", "GLOBAL-STRATEGY", "TASK-NOTES", "REFLECTION-TEXT", "Attempts", "Best score"):
        assert needle not in ctx.text
    with pytest.raises(InvalidInputError, match="memoryless"):
        learning.reflect(AGENT, "maze", "should not be stored", run_id=ctx.run_id, actor="t")
    with pytest.raises(InvalidInputError, match="memoryless"):
        learning.reflect(AGENT, "maze", "should not be stored", memoryless=True, actor="t")
    with pytest.raises(InvalidInputError, match="entered memoryless"):
        learning.record_result(AGENT, "maze", 10, run_id=ctx.run_id, memoryless=False, actor="t")
    out = learning.record_result(AGENT, "maze", 10, run_id=ctx.run_id, actor="t")
    assert out.memoryless and out.run.memoryless and out.task is None
    # A memoryless result without a run id is flagged the same way.
    assert learning.record_result(AGENT, "fresh", 5, memoryless=True, actor="t").task is None

    after = {rel: services.store.read(AGENT, rel).sha for rel in (LEARNING_REL, "tasks/maze.md")}
    assert after == before  # no memory file changed
    assert not services.store.read(AGENT, "tasks/fresh.md").exists
    assert "should not be stored" not in services.store.read(AGENT, LEARNING_REL).text
    runs = learning.run_list(AGENT, "maze")
    assert [r.memoryless for r in runs] == [True, False]
    listing = {t.task: t for t in learning.list_tasks(AGENT)}
    assert (listing["maze"].runs, listing["maze"].memoryless_runs, listing["maze"].attempt_count) == (2, 1, 1)
    assert listing["fresh"].has_memory is False and listing["fresh"].memoryless_runs == 1
    analytics = learning.enter(AGENT, "maze").analytics
    assert analytics.memoryless_runs == 1 and analytics.with_memory.median_score == 500
    assert analytics.memoryless.median_score == 10


# -- results: bounds, run ids, open runs; analytics across agents; the seed's lineage ---------------------


def test_scores_are_bounded_to_the_seeds_scale(learning) -> None:
    for score in (-1, 1000.5, 1500):
        with pytest.raises(InvalidInputError, match=r"score .* is out of range: scores are 0-1000"):
            learning.record_result(AGENT, "bounded", score, actor="t")
    with pytest.raises(InvalidInputError, match=r"breakdown\['speed'\] 1001 is out of range"):
        learning.record_result(AGENT, "bounded", 10, {"speed": 1001}, actor="t")
    assert learning.run_list(AGENT, "bounded") == []  # nothing was logged
    assert learning.record_result(AGENT, "bounded", 1000, {"speed": 0}, actor="t").task.best_score == 1000


def test_an_unknown_run_id_is_named_not_logged(learning) -> None:
    with pytest.raises(NotFoundError, match="no task run 'nosuchrun' for agent 'default'"):
        learning.record_result(AGENT, "maze", 5, run_id="nosuchrun", actor="t")
    assert learning.run_list(AGENT, "maze") == []


def test_a_result_without_a_run_id_completes_the_one_open_run(learning) -> None:
    ctx = learning.enter(AGENT, "maze")
    out = learning.record_result(AGENT, "maze", 640, actor="t")
    assert out.run.run_id == ctx.run_id and out.run.entered_at is not None
    assert learning.open_runs(AGENT, "maze") == [] and len(learning.run_list(AGENT, "maze")) == 1
    # Two open: the caller is told which ids to choose from, and nothing is recorded.
    first, second = learning.enter(AGENT, "maze").run_id, learning.enter(AGENT, "maze").run_id
    with pytest.raises(InvalidInputError, match=f"2 open runs of task 'maze' \\({second}, {first}\\)"):
        learning.record_result(AGENT, "maze", 1, actor="t")
    assert learning.task_memory(AGENT, "maze").attempt_count == 1
    # `memoryless` narrows the choice to runs of that kind.
    quiet = learning.enter(AGENT, "maze", memoryless=True).run_id
    assert learning.record_result(AGENT, "maze", 9, memoryless=True, actor="t").run.run_id == quiet
    # No open run of another task: a new run is logged, as before.
    assert learning.record_result(AGENT, "fresh", 3, actor="t").run.entered_at is None


def test_analytics_cover_every_agent_of_the_workspace(services: Services, learning) -> None:
    services.store.ensure_agent("rival")
    for score in (100, 200, 900):
        learning.record_result("rival", "maze", score, actor="t")
    learning.record_result(AGENT, "maze", 400, completed=False, actor="t")
    ctx = learning.enter(AGENT, "maze")
    a = ctx.analytics
    assert (a.runs, a.agents, a.median_score, a.completion_rate) == (4, 2, 300, 0.75)
    assert (a.own.runs, a.own.median_score, a.own.completion_rate) == (1, 400, 0)
    assert "Runs with a result: 4 by 2 agents" in ctx.text and "Median score: 300" in ctx.text
    assert "- Yours: 1 runs, completion rate 0%, median score 400" in ctx.text
    assert learning.enter("rival", "other").analytics.runs == 0  # per task slug


def test_the_seed_prompt_is_labelled_seed_however_lineage_first_sees_it(services: Services, learning) -> None:
    # The seed files were written before lineage listened (as `init` and `serve` do): the watcher's
    # report and a read both see files nobody edited.
    lineage = services.lineage
    lineage.on_file_changed(AGENT, None, "SOUL.md", False)
    versions = lineage.versions(AGENT)["versions"]
    assert [v["source"] for v in versions] == ["seed"]
    path = services.store.path(AGENT, "SOUL.md")
    path.write_text(path.read_text(encoding="utf-8") + "\nA person's line.\n", encoding="utf-8")
    lineage.on_file_changed(AGENT, None, "SOUL.md", False)
    assert [v["source"] for v in lineage.versions(AGENT)["versions"]] == ["seed", "hand-edit"]
