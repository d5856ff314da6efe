from __future__ import annotations

import pytest

from mateclaw_mem.llm.prompts.extraction import ExtractionResult
from mateclaw_mem.memory.extraction.rules import facts_from_text, is_explicit_remember
from mateclaw_mem.memory.extraction.rules_apply import extract

PROFILE = "# PROFILE.md — about the person\n\nStable facts.\n\n## Profile\n\n"
MEMORY = "# MEMORY.md — long-term memory\n\nDecisions and projects.\n"


def kv(text: str) -> list[tuple[str, str, str]]:
    return [(f.kind, f.key, f.value) for f in facts_from_text(text) if f.op != "remove"]


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("My name is Alice Smith.", [("profile", "name", "Alice Smith")]),
        ("Call me Bob", [("profile", "name", "Bob")]),
        ("I work at Acme Corp as a data engineer.", [("profile", "employer", "Acme Corp"), ("profile", "role", "data engineer")]),
        ("I'm a senior backend engineer at Globex.", [("profile", "role", "senior backend engineer"), ("profile", "employer", "Globex")]),
        ("I live in Berlin.", [("profile", "location", "Berlin")]),
        ("My timezone is Europe/Berlin.", [("profile", "timezone", "Europe/Berlin")]),
        ("I prefer dark mode", [("profile", "prefers", "dark mode")]),
        ("I hate Java.", [("profile", "dislikes", "Java")]),
        ("I don't like meetings before 10am.", [("profile", "dislikes", "meetings before 10am")]),
        ("I use Neovim and tmux.", [("profile", "tools", "Neovim"), ("profile", "tools", "tmux")]),
        ("I live in Berlin and I like Python.", [("profile", "location", "Berlin"), ("profile", "likes", "Python")]),
        ("我叫张三。", [("profile", "name", "张三")]),
        ("我是一名前端工程师", [("profile", "role", "前端工程师")]),
        ("我在阿里巴巴工作", [("profile", "employer", "阿里巴巴")]),
        ("我在北京工作", [("profile", "location", "北京")]),
        ("我喜欢喝咖啡，不喜欢喝茶", [("profile", "dislikes", "喝茶"), ("profile", "likes", "喝咖啡")]),
        ("我用VS Code写代码", [("profile", "tools", "VS Code")]),
        ("我的时区是Asia/Shanghai", [("profile", "timezone", "Asia/Shanghai")]),
    ],
)
def test_self_statements(text: str, expected: list[tuple[str, str, str]]) -> None:
    assert kv(text) == expected


@pytest.mark.parametrize(
    ("text", "note"),
    [
        ("Remember that my sister's birthday is May 3.", "My sister's birthday is May 3"),
        ("Please note the deploy key rotates monthly.", "The deploy key rotates monthly"),
        ("Don't forget I'm allergic to nuts.", "I'm allergic to nuts"),
        ("记住我的护照下个月到期", "我的护照下个月到期"),
        ("请记下：周五前提交报告", "周五前提交报告"),
    ],
)
def test_explicit_requests(text: str, note: str) -> None:
    assert kv(text) == [("remember", "", note)]
    assert is_explicit_remember(text)


def test_explicit_request_phrased_as_a_question_still_counts() -> None:
    assert kv("Can you remember that I prefer dark mode?") == [("profile", "prefers", "dark mode")]


@pytest.mark.parametrize(
    ("text", "decision"),
    [
        ("We decided to use Postgres for the new service.", "Use Postgres for the new service"),
        ("Let's go with FastAPI.", "FastAPI"),
        ("我们决定用PostgreSQL", "用PostgreSQL"),
    ],
)
def test_decisions(text: str, decision: str) -> None:
    assert kv(text) == [("decision", "", decision)]


@pytest.mark.parametrize(
    "text",
    [
        "Do you like Python?",
        "What if I use Rust?",
        "If I lived in Paris I would learn French.",
        "Is my name Alice?",
        "I like it.",
        "My friend said I like jazz",
        "I remember the old days",
        "Nice weather today.",
        "你喜欢咖啡吗？",
        "如果我住在上海，我会天天吃小笼包",
        "我不是学生",
        "I'm not a developer",
    ],
)
def test_no_facts_from_questions_hypotheticals_or_chatter(text: str) -> None:
    assert facts_from_text(text) == []
    assert not is_explicit_remember(text)


def test_extract_writes_profile_memory_and_daily_entry() -> None:
    r = extract(
        profile=PROFILE,
        memory=MEMORY,
        messages=["Hi! My name is Alice and I work at Acme.", "Remember that the release is on Friday.",
                  "We decided to use Postgres."],
        today="2026-11-30",
    )
    assert isinstance(r, ExtractionResult) and r.should_update
    assert "## Profile\n- name: Alice\n- employer: Acme\n" in r.profile_update
    assert "## Remembered\n- The release is on Friday\n" in r.memory_update
    assert "## Decisions\n- 2026-11-30: Use Postgres\n" in r.memory_update
    assert r.daily_entry is not None and len(r.daily_entry.title) <= 30
    assert "name: Alice" in r.daily_entry.body


def test_correction_replaces_the_value_instead_of_duplicating() -> None:
    first = extract(profile=PROFILE, memory=MEMORY, messages=["I work at Acme. I live in Munich."], today="d")
    second = extract(
        profile=first.profile_update, memory=MEMORY,
        messages=["Actually, I work at Globex now.", "I live in Berlin, not Munich."], today="d",
    )
    assert "- employer: Globex" in second.profile_update
    assert "- location: Berlin" in second.profile_update
    assert "Acme" not in second.profile_update and "Munich" not in second.profile_update
    assert second.profile_update.count("employer") == 1


def test_not_x_but_y_corrects_memory_text() -> None:
    memory = MEMORY + "\n## Meetings\n- Standup is on Tuesday\n"
    r = extract(profile=PROFILE, memory=memory, messages=["Sorry, it's not Tuesday but Wednesday."], today="d")
    assert "- Standup is on Wednesday" in r.memory_update and "Tuesday" not in r.memory_update


def test_chinese_correction_and_chinese_labels() -> None:
    first = extract(profile=PROFILE, memory=MEMORY, messages=["我叫张三，我在阿里工作"], today="d")
    assert "- 姓名: 张三" in first.profile_update and "- 工作单位: 阿里" in first.profile_update
    second = extract(profile=first.profile_update, memory=MEMORY, messages=["我不是在阿里工作，而是在腾讯工作"], today="d")
    assert "- 工作单位: 腾讯" in second.profile_update and "阿里" not in second.profile_update


def test_list_values_accumulate_and_move_between_likes_and_dislikes() -> None:
    r1 = extract(profile=PROFILE, memory=MEMORY, messages=["I like Python and Go."], today="d")
    assert "- likes: Python, Go" in r1.profile_update
    r2 = extract(profile=r1.profile_update, memory=MEMORY, messages=["I don't like Go anymore."], today="d")
    assert "- likes: Python\n" in r2.profile_update and "- dislikes: Go" in r2.profile_update


def test_nothing_new_means_no_update() -> None:
    r1 = extract(profile=PROFILE, memory=MEMORY, messages=["My name is Alice."], today="d")
    r2 = extract(profile=r1.profile_update, memory=MEMORY, messages=["My name is Alice."], today="d")
    assert not r2.should_update and r2.profile_update == "" and r2.daily_entry is None
    r3 = extract(profile=PROFILE, memory=MEMORY, messages=["What time is it?", "thanks!"], today="d")
    assert not r3.should_update


def test_hand_written_profile_lines_are_kept() -> None:
    profile = "## Profile\n* Name: Alice\n- pets: a cat called Tom\n\n## Notes\nfree text\n"
    r = extract(profile=profile, memory="", messages=["Please call me Ally"], today="d")
    assert "* Name: Ally" in r.profile_update
    assert "- pets: a cat called Tom" in r.profile_update and "## Notes\nfree text\n" in r.profile_update


@pytest.mark.parametrize(
    ("text", "worth"),
    [
        ("The launch moved to May.", True),
        ("Heads up: keep that in mind.", True),
        ("I think we should refactor the parser next sprint.", True),
        ("截止日期是下周五", True),
        ("My name is Alice.", True),
        ("How do I rotate logs in journald?", False),
        ("Write a bash one-liner that finds the ten largest files.", False),
        ("thanks, that works", False),
        ("ok", False),
        ("帮我写一个脚本", False),
    ],
)
def test_triage(text: str, worth: bool) -> None:
    from mateclaw_mem.memory.extraction.triage import worth_extracting

    assert worth_extracting(text) is worth


def test_a_remember_request_keeps_every_clause() -> None:
    r = extract(profile="## Profile\n", memory="# MEMORY\n",
                      messages=["Remember that I take my tea without sugar, and my name is Lena."], today="2026-11-30")
    assert "- name: Lena" in r.profile_update
    assert "I take my tea without sugar" in r.memory_update


def test_asking_to_recall_stores_nothing() -> None:
    r = extract(profile="## Profile\n", memory="# MEMORY\n",
                      messages=["Can you remember what I said about tea?"], today="2026-11-30")
    assert not r.should_update
