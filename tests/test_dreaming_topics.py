"""Rules dreaming threads the topics a person comes back to in other words (issue 34.5,
memory/dreaming/topics.py): "I'm reading a fantasy book…" and, weeks later, "I'm more into reading and
fantasy novels" become one dated line; "I'm gonna keep pushing for them" / "We'll keep pushing each
other" never do. Measured on a labelled set of real pairs from the LoCoMo dev replay."""

from __future__ import annotations

import json
from datetime import date, datetime, timedelta
from pathlib import Path

from mateclaw_mem.memory.dreaming import claims, topics
from mateclaw_mem.memory.dreaming.shingles import idf_weights, similarity
from mateclaw_mem.runtime.services import Services
from tests.conftest import TZ

PAIRS = Path(__file__).parent / "data" / "dream_topic_pairs.json"
AGENT = "default"
NIGHT = datetime(2026, 12, 1, 3, 0, tzinfo=TZ)


def _conversations() -> list[tuple[list[topics.Fact], dict[tuple[int, int], int]]]:
    out = []
    for conv in json.loads(PAIRS.read_text(encoding="utf-8"))["conversations"]:
        facts = [topics.Fact(text, date.fromisoformat(day), session, "", True) for day, session, text in conv["facts"]]
        out.append((facts, {(i, j): label for i, j, label in conv["pairs"]}))
    return out


def _score(predict) -> tuple[float, float, int]:
    tp = fp = fn = 0
    for facts, labels in _conversations():
        p = predict(facts)
        for (i, j), label in labels.items():
            hit = p(i, j)
            tp += hit and label
            fp += hit and not label
            fn += label and not hit
    return tp / max(1, tp + fp), tp / max(1, tp + fn), tp + fp


def test_the_labelled_pairs_separate_topics_from_platitudes(capsys) -> None:
    precision, recall, linked = _score(topics.linked)
    with capsys.disabled():
        print(f"\ntopic pairs: linked {linked}, precision {precision:.3f}, recall {recall:.3f}")
    assert precision >= 0.85 and recall >= 0.55, (precision, recall)
    # Every pair the linker joins was labelled: the precision above is over all of them.
    for facts, labels in _conversations():
        pair = topics.linked(facts)
        for i in range(len(facts)):
            for j in range(i + 1, len(facts)):
                if facts[i].day != facts[j].day and pair(i, j):
                    assert (i, j) in labels, (facts[i].text, facts[j].text)


def test_word_overlap_cannot_tell_them_apart() -> None:
    # Why topics: at every threshold a rephrasing shares as many words as a platitude does.
    def overlap(threshold: float):
        def predict(facts: list[topics.Fact]):
            read = [claims.read(f.text) for f in facts]
            weights = idf_weights(r.words for r in read)
            return lambda i, j: similarity(read[i].words, read[j].words, weights) >= threshold
        return predict

    for threshold in (0.2, 0.25, 0.3, 0.35):
        precision, _, linked = _score(overlap(threshold))
        assert linked and precision < 0.4, (threshold, precision)


def test_topic_terms_are_the_things_talked_about() -> None:
    assert set(topics.topic_terms("I'm reading a fantasy book that really captivates me")) == {"fantasi", "book"}
    assert set(topics.topic_terms("I'm more into reading and fantasy novels")) == {"read", "fantasi", "novel"}
    assert topics.topic_terms("I'm gonna keep pushing for them.") == {}
    assert topics.topic_terms("We can definitely make a difference!") == {}
    assert topics.topic_terms("We're like a family - always supporting each other.") == {}
    # Their own kids and other people's are two topics; a modifier is nobody's.
    assert set(topics.topic_terms("My kids are so excited about summer break!")) == {"kid+", "summer", "break"}
    assert set(topics.topic_terms("We organized a toy drive for kids in need.")) == {"toy", "drive", "kid"}
    assert set(topics.topic_terms("I'm still searching for a place to open my dance studio")) == {"danc", "studio+"}
    assert "harri" in topics.topic_terms("I just got back from the coolest Harry Potter party")


def _fact(text: str, days_ago: int, session: str = "s", new: bool = True) -> topics.Fact:
    return topics.Fact(text, date(2026, 12, 1) - timedelta(days=days_ago), f"{session}{days_ago}", "", new)


def test_platitudes_one_offs_and_contradictions_make_no_thread() -> None:
    facts = [
        _fact("I'm gonna keep pushing for them.", 20), _fact("We'll keep pushing each other and staying motivated.", 1),
        _fact("We can definitely make a difference!", 12), _fact("We're making a difference and we'll keep it up!", 2),
        _fact("I won't quit on my dreams.", 9), _fact("I won't quit, no matter what.", 3),
        # The same topic twice on one day is one day.
        _fact("I went to a pottery class", 4, "a"), _fact("The pottery class was messy but fun", 4, "b"),
        # A value swapped in place is a contradiction to resolve, not a thread.
        _fact("The deadline of Project Atlas is December 15", 12), _fact("The deadline of Project Atlas is December 20", 1),
    ]
    assert topics.threads(facts) == []
    # A topic of the older notes alone was looked at on an earlier night.
    old = [_fact("I'm reading a fantasy book", 20, new=False), _fact("I love fantasy novels", 12, new=False)]
    assert topics.threads(old) == []
    assert [t.label for t in topics.threads([*old[:1], _fact("I love fantasy novels", 2)])] == ["Fantasy"]


def note(services: Services, days_ago: int, body: str, *, hour: int = 10, title: str = "Chat") -> None:
    when = (NIGHT - timedelta(days=days_ago)).replace(hour=hour)
    services.store.append_daily(AGENT, title, body, actor="extraction", when=when)


def test_a_topic_that_comes_back_weeks_later_is_one_dated_line(services: Services, clock) -> None:
    note(services, 20, "- I'm reading a fantasy book that really captivates me.\n- I'm gonna keep pushing for them.")
    note(services, 12, "- We'll keep pushing each other and staying motivated.\n- I went to a pottery class.")
    note(services, 2, "- I'm more into reading and fantasy novels.\n- We can definitely make a difference!")
    clock.set(NIGHT)
    out = services.dreaming.dream(AGENT)
    assert out.status == "done", out.reason
    memory = services.store.read(AGENT, "MEMORY.md").text
    [line] = [x for x in memory.splitlines() if x.startswith("- ")]
    assert line.startswith('- Fantasy (2026-11-11, 2026-11-29): "I\'m more into reading and fantasy novels"'), line
    assert "(Source: memory/2026-11-29.md 10:00; memory/2026-11-11.md 10:00 · dreamed 2026-12-01)" in line
    for never in ("pushing", "pottery", "difference"):
        assert never not in memory
    # The diary says why: which topic, on how many days and sessions.
    diary = services.store.read(AGENT, "DREAMS.md").text
    assert "threaded 1 topic the person came back to in other words" in out.reason
    assert "on 2 days in 2 sessions, also in memory/2026-11-11.md (before the window)" in diary
    # The next night there is nothing new: the thread is not promoted again.
    clock.set(NIGHT + timedelta(days=1))
    again = services.dreaming.dream(AGENT)
    assert again.status == "nothing_to_do", again.promoted
    assert services.store.read(AGENT, "MEMORY.md").text == memory


def test_a_focused_dream_threads_only_its_topic(services: Services, clock) -> None:
    note(services, 15, "- I'm reading a fantasy book that really captivates me.\n- My dance studio opened.")
    note(services, 1, "- I'm more into reading and fantasy novels.\n- I'm hosting a dance competition next month.")
    clock.set(NIGHT)
    out = services.dreaming.dream(AGENT, topic="dance")
    assert out.status == "done", out.reason
    assert len(out.promoted) == 1 and out.promoted[0].startswith("Dance"), out.promoted


def test_older_notes_alone_leave_the_night_quiet(services: Services, clock) -> None:
    # The 30 days before the window are evidence for a topic said tonight, never something to look at:
    # with no note in the window the night stays out of DREAMS.md but for its weekly line.
    note(services, 20, "- I'm reading a fantasy book that really captivates me.")
    note(services, 12, "- I'm more into reading and fantasy novels.")
    for day in range(3):
        clock.set(NIGHT + timedelta(days=day))
        out = services.dreaming.dream(AGENT, trigger="schedule")
        assert out.status == "nothing_to_do" and not out.promoted, out.reason
    diary = services.store.read(AGENT, "DREAMS.md").text
    assert diary.count(" Dreaming") == 1 and "no daily notes" in diary and "fantasy" not in diary
    assert "Fantasy" not in services.store.read(AGENT, "MEMORY.md").text


def test_a_thread_is_labelled_as_the_person_said_it() -> None:
    found = topics.threads([_fact("I ran a charity race for mental health", 15, new=False),
                            _fact("I'm still looking into counseling and mental health jobs", 1)])
    assert [t.label for t in found] == ["Mental health"]
    assert topics.shown(found[0]) == ('Mental health (2026-11-16, 2026-11-30): "I\'m still looking into counseling '
                                      'and mental health jobs"')
