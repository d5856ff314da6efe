from __future__ import annotations

import pytest

from mateclaw_mem.errors import InvalidInputError
from mateclaw_mem.markdown import frontmatter, merge
from mateclaw_mem.markdown.ceilings import apply_ceiling, strip_marker
from mateclaw_mem.markdown.sections import join, preserve_pinned, split_sections

HAND = "---\n# my own comment\nenabled: true\nsort_order: 3   # keep\nmood: \"sunny\"\ntags: [a, b]\n---\n# Body\r\n\r\nexact  bytes\u00a0kept\n"


def test_frontmatter_round_trips_unknown_keys_and_body_bytes() -> None:
    parsed = frontmatter.parse(HAND)
    assert parsed.meta["mood"] == "sunny" and parsed.meta["tags"] == ["a", "b"]
    out = frontmatter.set_keys(HAND, {"enabled": False})
    assert out.replace("enabled: false", "enabled: true") == HAND
    assert frontmatter.body(out) == frontmatter.body(HAND)
    added = frontmatter.set_keys(HAND, {"new_key": 7})
    assert "new_key: 7\n---\n" in added and "# my own comment" in added and "sort_order: 3   # keep" in added


def test_broken_frontmatter_is_reported_not_raised() -> None:
    parsed = frontmatter.parse("---\nenabled: [unclosed\n---\nbody\n")
    assert parsed.error and "not valid YAML" in parsed.error
    assert parsed.body == "body\n"


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("---\n- a\n- b\n---\nbody\n", "not a mapping"),
        ("---\nupdated: 2026-02-30\n---\nbody\n", "cannot be read: day is out of range"),
        ("---\nrun: !!python/object/apply:os.system [echo pwned]\n---\nbody\n", "not valid YAML (line 2)"),
        ("---\n\tenabled: true\n---\nbody\n", "not valid YAML (line 2)"),
    ],
)
def test_every_kind_of_bad_frontmatter_is_a_message_and_keeps_the_body(text: str, message: str) -> None:
    parsed = frontmatter.parse(text)
    assert parsed.error and message in parsed.error
    assert parsed.meta == {} and parsed.body == "body\n" and parsed.block + parsed.body == text


def test_frontmatter_reading_keeps_every_byte_the_library_would_strip() -> None:
    # python-frontmatter's own loads() strips the text; we give it only the block's inside.
    text = "---\r\nenabled: false\r\nsort_order: 2\r\n...\r\n\r\n  indented first line\r\n\r\n"
    parsed = frontmatter.parse(text)
    assert parsed.error is None and parsed.meta == {"enabled": False, "sort_order": 2}
    assert parsed.body == "\r\n  indented first line\r\n\r\n"
    assert frontmatter.parse("---\n---\nbody").meta == {}
    assert frontmatter.parse("no block\n---\nk: v\n---\n").meta == {}


def test_sections_split_and_join_exactly() -> None:
    text = "# T\nintro\n## A\na\n```\n## not a heading\n```\n### deeper\n## B\nb"
    pre, secs = split_sections(text)
    assert pre == "# T\nintro\n"
    assert [s.title for s in secs] == ["A", "B"]
    assert join(pre, secs) == text


def _body(n_sections: int, size: int) -> str:
    return "# Memory\n\n" + "".join(f"## S{i}\n" + ("word " * (size // 5)).strip() + "\n\n" for i in range(n_sections))


def test_ceiling_keeps_head_and_returns_the_tail() -> None:
    body = _body(10, 1000)
    res = apply_ceiling(body, 4000, "memory/archive/MEMORY-2026-11-30.md")
    assert len(res.body) <= 4000
    assert res.body.startswith("# Memory\n\n## S0\n")
    assert "## S9" not in res.body and "## S9" in res.cut
    kept_titles = [s.title for s in split_sections(res.body)[1]]
    assert kept_titles == [f"S{i}" for i in range(len(kept_titles))]
    # Nothing lost: kept + cut hold every section.
    for i in range(10):
        assert (f"## S{i}\n" in res.body) != (f"## S{i}\n" in res.cut)
    assert res.body.count("[mateclaw]") == 1


def test_ceiling_marker_never_stacks() -> None:
    first = apply_ceiling(_body(10, 1000), 4000, "a.md")
    second = apply_ceiling(first.body + "## More\n" + "x " * 2000 + "\n", 4000, "a.md")
    assert second.body.count("[mateclaw]") == 1
    assert strip_marker(second.body).count("[mateclaw]") == 0


def test_first_section_alone_over_the_cap_is_cut_at_a_line_boundary() -> None:
    lines = "".join(f"line number {i} with some words\n" for i in range(400))
    body = "## Huge\n" + lines
    res = apply_ceiling(body, 2000, "a.md")
    assert len(res.body) <= 2000 and res.truncated
    kept = strip_marker(res.body)
    assert kept.endswith("words\n")  # ended on a whole line, not mid-word
    assert kept + res.cut == body


def test_pinned_sections_survive_ceiling_and_rewrite() -> None:
    body = "## A\n" + "a " * 1500 + "\n## Pinned\n<!-- pin -->\nkeep me exactly\n## C\n" + "c " * 1500 + "\n"
    res = apply_ceiling(body, 2500, "a.md")
    assert "## Pinned\n<!-- pin -->\nkeep me exactly\n" in res.body
    rewritten = preserve_pinned(body, "## A\nshort\n## C\nchanged\n")
    assert "## Pinned\n<!-- pin -->\nkeep me exactly\n" in rewritten
    assert rewritten.index("## A") < rewritten.index("## Pinned") < rewritten.index("## C")
    changed = preserve_pinned(body, "## Pinned\nmachine changed this\n")
    assert "keep me exactly" in changed and "machine changed this" not in changed


def test_merge_strategies() -> None:
    body = "# Profile\n\n## Facts\n- name: Ada\n- 城市: 北京\n\n## Other\nx\n"
    out = merge.upsert_kv(body, "Name: Grace\n城市: 上海\nrole: engineer", section="facts")
    assert "- name: Grace" in out and "- 城市: 上海" in out and "- role: engineer" in out
    assert out.count("name:") == 1 and "## Other\nx\n" in out
    replaced = merge.replace_section(body, "## OTHER  \nnew text\n")
    assert "new text" in replaced and "\nx\n" not in replaced and "## Facts" in replaced
    added = merge.replace_section(body, "brand new", section="Plans")
    assert added.endswith("## Plans\nbrand new\n")
    assert merge.append("a\n", "b").endswith("a\n\nb\n")
    assert merge.overwrite(body, "only") == "only\n"
    with pytest.raises(InvalidInputError, match="unknown merge strategy"):
        merge.apply("shuffle", body, "x")
    with pytest.raises(InvalidInputError, match="key: value"):
        merge.upsert_kv(body, "no pairs here")


def test_merges_leave_one_blank_line_between_sections() -> None:
    from mateclaw_mem.cli.files import STRATEGIES as CLI_STRATEGIES

    assert CLI_STRATEGIES == merge.STRATEGIES  # the CLI spells them without importing the package
    body = "# Memory\n\n## A\n- x: 1\n\n## B\ntext\n"
    added = merge.apply("upsert_kv", body, "k: v", "C")
    assert added == "# Memory\n\n## A\n- x: 1\n\n## B\ntext\n\n## C\n- k: v\n"
    # Into a section that a blank line separates from the next: the new line joins the section.
    assert merge.apply("upsert_kv", body, "k: v", "A") == "# Memory\n\n## A\n- x: 1\n- k: v\n\n## B\ntext\n"
    assert merge.apply("append", body, "more", "A") == "# Memory\n\n## A\n- x: 1\n\nmore\n\n## B\ntext\n"
    assert merge.apply("upsert_kv", "# T\n", "k: v", "A") == "# T\n\n## A\n- k: v\n"
