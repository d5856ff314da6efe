"""The docs say what the code does (issue 38.5): no working key called "not supported yet", GLOBAL
memory described, the snapshot roles the seed has and we lack named, and no doc pointing at a file
that is not in the repository."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
DOCS = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
LINK = re.compile(r"\]\(([^)#\s]+)(?:#[^)]*)?\)")  # [text](target)
RELATIVE = re.compile(r"`(\.\./[^`\s]+\.md)`")  # a `../file.md` written as code


def text(path: Path) -> str:
    return path.read_text(encoding="utf-8")


def test_no_doc_calls_a_working_key_not_supported() -> None:
    for doc in DOCS:
        assert "not supported yet" not in text(doc).lower(), doc.name


def test_the_manual_describes_global_memory() -> None:
    page = text(REPO / "docs" / "configuration.md")
    paragraph = page[page.index("**GLOBAL memory**"):].split("\n\n", 1)[0]
    assert "`global/`" in paragraph and "every agent" in paragraph


def test_seed_differences_name_the_absent_snapshot_roles() -> None:
    assert re.search(r"Viewer / Member", text(REPO / "docs" / "seed-differences.md"))


@pytest.mark.parametrize("doc", DOCS, ids=[d.name for d in DOCS])
def test_every_relative_reference_is_a_file_of_this_repository(doc: Path) -> None:
    body = text(doc)
    targets = [t for t in LINK.findall(body) if not re.match(r"[a-z]+:", t)] + RELATIVE.findall(body)
    for target in targets:
        resolved = (doc.parent / target).resolve()
        assert resolved.is_relative_to(REPO) and resolved.exists(), f"{doc.name}: {target}"
