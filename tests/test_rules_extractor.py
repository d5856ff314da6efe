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


# -- issue 16.6: time phrases, a person's fuller value, corrections in place, secrets -------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("I moved to Berlin last year.", [("profile", "location", "Berlin")]),
        ("I moved to Berlin in 2019.", [("profile", "location", "Berlin")]),
        ("I have lived in Berlin since 2019.", [("profile", "location", "Berlin")]),
        ("I moved to Lisbon two years ago.", [("profile", "location", "Lisbon")]),
        ("I live in New York these days.", [("profile", "location", "New York")]),
        ("I work at Acme since March.", [("profile", "employer", "Acme")]),
        ("我去年搬到了柏林", [("profile", "location", "柏林")]),
        ("去年我搬到了柏林。", [("profile", "location", "柏林")]),
        ("我住在北京三年了", [("profile", "location", "北京")]),
        ("我从2019年起住在上海", [("profile", "location", "上海")]),
        ("我叫王刚", [("profile", "name", "王刚")]),  # a name ending in 刚 is not a time word
    ],
)
def test_time_phrases_are_not_part_of_values(text: str, expected: list[tuple[str, str, str]]) -> None:
    assert kv(text) == expected


@pytest.mark.parametrize(
    ("profile", "message"),
    [
        ("## Profile\n- name: Alex Kim\n", "Hi, my name is Alex."),
        ("## Profile\n- location: Berlin Mitte\n", "I live in Berlin."),
        ("## 个人资料\n- 所在地: 北京市朝阳区\n", "我住在北京"),
    ],
)
def test_a_shorter_reading_never_replaces_a_fuller_value(profile: str, message: str) -> None:
    r = extract(profile=profile, memory=MEMORY, messages=[message], today="d")
    assert not r.should_update and r.profile_update == ""


def test_a_correction_may_shorten_a_value() -> None:
    r = extract(profile="## Profile\n- name: Alex Kim\n", memory=MEMORY, messages=["My name is Alex, not Alex Kim."],
                today="d")
    assert "- name: Alex\n" in r.profile_update and "Kim" not in r.profile_update


@pytest.mark.parametrize(
    ("profile", "message", "line", "gone"),
    [
        ("# PROFILE.md\n\n## About me\n- name: Sam\n- pets: a cat\n", "My name is Samuel, not Sam.",
         "## About me\n- name: Samuel\n- pets: a cat\n", "- name: Sam\n"),
        ("# PROFILE.md\n\n- name: Sam\n", "My name is Samuel, not Sam.", "# PROFILE.md\n\n- name: Samuel\n",
         "- name: Sam\n"),
        ("## Profile\n- location: Munich\n", "Not Munich but Berlin: I live in Berlin.", "- location: Berlin\n",
         "Munich"),
        ("## 关于我\n- 姓名: 张三\n", "我叫张三丰，不是张三", "## 关于我\n- 姓名: 张三丰\n", "- 姓名: 张三\n"),
        ("## 关于我\n- 所在地: 上海\n", "我不是住在上海，是住在北京", "## 关于我\n- 所在地: 北京\n", "上海"),
    ],
)
def test_corrections_replace_in_place_whatever_the_headings(profile: str, message: str, line: str, gone: str) -> None:
    r = extract(profile=profile, memory=MEMORY, messages=[message], today="d")
    assert line in r.profile_update, r.profile_update
    assert gone not in r.profile_update
    assert r.profile_update.count("## ") == profile.count("## ")  # no second profile heading


def test_a_new_key_joins_the_section_that_holds_the_profile() -> None:
    r = extract(profile="# PROFILE.md\n\n## About me\n- name: Sam\n", memory=MEMORY,
                messages=["I live in Berlin."], today="d")
    assert "## About me\n- name: Sam\n- location: Berlin\n" in r.profile_update
    assert "## Profile" not in r.profile_update


@pytest.mark.parametrize(
    "message",
    [
        "Remember my API key sk-proj-abcdefghijklmnopqrstuvwx1234.",
        "Remember my API key [REDACTED:api_key].",  # as the conversation log hands it over
        "记住我的令牌 [REDACTED:github_token]",
        "Please note the db password [REDACTED]",
    ],
)
def test_a_secret_is_never_written_as_memory(message: str) -> None:
    r = extract(profile=PROFILE, memory=MEMORY, messages=[message], today="d")
    assert not r.should_update and r.memory_update == "" and r.daily_entry is None
    assert "secret" in r.reason


def test_the_rest_of_a_message_with_a_secret_is_kept() -> None:
    r = extract(profile=PROFILE, memory=MEMORY,
                messages=["Remember that my token is [REDACTED:github_token], and my name is Lena."], today="d")
    assert "- name: Lena" in r.profile_update and r.memory_update == ""
    assert "REDACTED" not in r.daily_entry.title + r.daily_entry.body


# -- issue 16.10: daily-note headings are cut at a word ------------------------------------------------


def test_daily_heading_is_cut_at_a_word_boundary() -> None:
    r = extract(profile=PROFILE, memory=MEMORY, messages=["Remember that I take my tea without sugar."], today="d")
    assert r.daily_entry is not None and r.daily_entry.title == "Remembered: I take my tea…"


@pytest.mark.parametrize(
    ("title", "short"),
    [
        ("Remembered: I take my tea without sugar", "Remembered: I take my tea…"),
        ("Correction: name: Alex Kim → Alexander", "Correction: name: Alex Kim…"),
        ("Remembered: Supercalifragilisticexpialidocious", "Remembered: Supercalifragilis…"),  # one long word
        ("记住：周五之前要交季度报告还有下周一的会议也别忘了还有很多很多事情", "记住：周五之前要交季度报告还有下周一的会议也别忘了还有很多…"),
        ("Short title", "Short title"),
    ],
)
def test_shorten_title(title: str, short: str) -> None:
    from mateclaw_mem.llm.prompts.extraction import TITLE_MAX, DailyEntry, shorten_title

    assert shorten_title(title, TITLE_MAX) == short and len(short) <= TITLE_MAX
    assert DailyEntry(title=title).title == short  # model mode cuts the same way


def test_through_the_store_a_hand_written_profile_is_corrected_in_place_and_kept_when_restated(
    tmp_path, clock
) -> None:
    """Real store and service: the person's own file (typed in an editor, no `## Profile`) takes the
    person's correction in place, and a shorter restatement leaves the person's value alone."""
    from mateclaw_mem.conversations.log import ConversationLog
    from mateclaw_mem.memory.extraction.service import ExtractionService
    from mateclaw_mem.settings import load_settings
    from mateclaw_mem.workspace.store import WorkspaceStore

    cfg = tmp_path / "mateclaw.yaml"
    cfg.write_text("timezone: Europe/Berlin\n", encoding="utf-8")
    settings = load_settings(cfg, tmp_path / "workspace")
    store = WorkspaceStore.from_settings(settings, clock)
    store.ensure_agent("default")
    log = ConversationLog(settings.state_dir / "log.db")
    svc = ExtractionService(settings, store, log, clock=clock, timers=False)
    try:
        path = store.read("default", "PROFILE.md").path
        path.write_text("# PROFILE.md\n\n## About me\n- name: Sam\n- full name: Sam Okafor\n", encoding="utf-8")
        svc.record_turn("default", "c1", "My name is Samuel, not Sam.", "Noted.")
        assert svc.extract_now("default", "c1").files_changed[0] == "PROFILE.md"
        body = store.read("default", "PROFILE.md").body
        assert "## About me\n- name: Samuel\n" in body and body.count("## ") == 1
        svc.record_turn("default", "c2", "Hi again, my name is Samuel.", "Hi Samuel.")
        assert svc.extract_now("default", "c2").outcome == "no_change"
        path.write_text(path.read_text(encoding="utf-8").replace("- name: Samuel", "- name: Samuel Okafor"),
                        encoding="utf-8")
        svc.record_turn("default", "c3", "Hello, my name is Samuel.", "Hello.")
        assert svc.extract_now("default", "c3").outcome == "no_change"
        assert "- name: Samuel Okafor\n" in store.read("default", "PROFILE.md").body
    finally:
        svc.shutdown()
        log.close()
