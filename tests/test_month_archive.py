"""The compressed month archive (issue 17.8): old daily notes and diary entries roll into one
`memory/archive/YYYY-MM.md.gz` per month, stay searchable, are listed month by month and come back
byte for byte with one restore. Real files, real SQLite, a real uvicorn for the HTTP face."""

from __future__ import annotations

import gzip
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path

import httpx
import pytest

from mateclaw_mem.clock import ManualClock
from mateclaw_mem.errors import ConflictError, InvalidInputError
from mateclaw_mem.runtime.services import Services
from mateclaw_mem.settings import load_settings
from mateclaw_mem.workspace import blobs, month_archive
from tests.conftest import TZ
from tests.support.server import ApiServer

NOW = datetime(2026, 11, 30, 9, 15, tzinfo=TZ)  # keep-days 30: the cut-off is 2026-10-31
A = "default"
# Bytes a careless text round trip would change: CRLF, no final newline, a line that looks like the
# archive's own framing, non-ASCII.
TRICKY = ("# 2026-10-02\r\n\r\n## 09:00 Trip\r\n- Booked the ferry to Zanzibar, café at 7\r\n"
          "<!-- end: memory/2026-10-02.md -->\n<!-- file: memory/x.md bytes=3 sha256=" + "0" * 64 + " -->\nno newline")


def _services(tmp_path: Path, extra: str = "") -> Services:
    cfg = tmp_path / "mateclaw.yaml"
    cfg.write_text("timezone: Europe/Berlin\n" + extra, encoding="utf-8")
    svc = Services(load_settings(cfg, tmp_path / "ws"), ManualClock(NOW))
    svc.store.ensure_agent(A)
    _ = svc.file_index  # subscribed now: every write below is indexed as it lands
    return svc


@pytest.fixture
def svc(tmp_path: Path) -> Iterator[Services]:
    s = _services(tmp_path)
    yield s
    s.close()


def _note(svc: Services, day: str, text: str | None = None, owner: str | None = None) -> str:
    rel = f"memory/{day}.md"
    body = text if text is not None else f"# {day}\n\n## 10:00 Note\n- something on {day}\n"
    svc.store.write(A, rel, body, expected_sha="", actor="person", owner=owner)
    return rel


def _disk(svc: Services, rel: str, owner: str | None = None) -> Path:
    return blobs.path(svc.store, A, rel, owner) if blobs.is_binary(rel) else svc.store.path(A, rel, owner)


def test_rotation_rolls_notes_before_the_cut_off_into_one_file_per_month(svc: Services) -> None:
    for day in ("2026-09-05", "2026-10-02", "2026-10-30", "2026-10-31", "2026-11-20"):
        _note(svc, day)
    moved = svc.dreaming.rotate(A)["daily_notes_archived"]
    assert moved == ["memory/2026-09-05.md", "memory/2026-10-02.md", "memory/2026-10-30.md"]
    assert not _disk(svc, "memory/2026-10-30.md").exists()
    assert _disk(svc, "memory/2026-10-31.md").exists() and _disk(svc, "memory/2026-11-20.md").exists()
    months = month_archive.months(svc.store, A)
    assert [(m["month"], m["notes"], m["noteEntries"]) for m in months] == [
        ("2026-09", ["2026-09-05"], 1), ("2026-10", ["2026-10-02", "2026-10-30"], 2)]
    assert all(m["size"] > 0 and m["bytes"] > m["size"] / 10 and m["error"] is None for m in months)
    # One batch for the whole rotation, which undo takes back as a whole (archive removed too).
    batch = svc.store.history(A, "memory/2026-10-02.md")[-1].batch
    assert batch and batch == svc.store.history(A, "memory/archive/2026-10.md.gz")[-1].batch
    assert svc.store.history(A, "memory/archive/2026-10.md.gz")[-1].actor == "rotation"
    svc.store.undo_batch(batch)
    assert _disk(svc, "memory/2026-10-02.md").exists() and not _disk(svc, "memory/archive/2026-10.md.gz").exists()


def test_keep_days_moves_the_boundary(svc: Services) -> None:
    svc.settings.mate.memory.dream.archive_keep_days = 60  # cut-off 2026-10-01
    for day in ("2026-09-30", "2026-10-01"):
        _note(svc, day)
    assert svc.dreaming.rotate(A)["daily_notes_archived"] == ["memory/2026-09-30.md"]
    assert _disk(svc, "memory/2026-10-01.md").exists()


def test_archive_disabled_rolls_nothing(svc: Services) -> None:
    svc.settings.mate.memory.dream.archive_enabled = False
    _note(svc, "2026-09-05")
    assert svc.dreaming.rotate(A)["daily_notes_archived"] == []
    assert _disk(svc, "memory/2026-09-05.md").exists()
    assert month_archive.months(svc.store, A) == []


def test_search_finds_archived_text_with_the_archive_as_source(svc: Services) -> None:
    _note(svc, "2026-10-02", TRICKY)
    _note(svc, "2026-11-20", "# 2026-11-20\n\n## 10:00 Other\n- nothing special\n")
    assert svc.search.search("zanzibar", agent=A).hits[0].file == "memory/2026-10-02.md"
    svc.dreaming.rotate(A)
    hits = svc.search.search("zanzibar ferry", agent=A).hits
    assert [h.file for h in hits] == ["memory/archive/2026-10.md.gz"]
    assert "memory/2026-10-02.md" in hits[0].title and hits[0].kind == "archive"
    svc.file_index.rebuild()  # a full reindex reads inside it too
    assert [h.file for h in svc.search.search("zanzibar", agent=A).hits] == ["memory/archive/2026-10.md.gz"]


def test_restore_gives_the_files_back_byte_for_byte(svc: Services) -> None:
    _note(svc, "2026-10-02", TRICKY)
    _note(svc, "2026-10-09")
    original = _disk(svc, "memory/2026-10-02.md").read_bytes()
    svc.dreaming.rotate(A)
    assert not _disk(svc, "memory/2026-10-02.md").exists()
    # A person can read it with zcat: the note's words are plain in the stream.
    assert "Zanzibar, café" in gzip.decompress(_disk(svc, "memory/archive/2026-10.md.gz").read_bytes()).decode()
    done = month_archive.restore_month(svc.store, A, "2026-10")
    assert done.restored == ["memory/2026-10-02.md", "memory/2026-10-09.md"]
    assert _disk(svc, "memory/2026-10-02.md").read_bytes() == original
    assert not _disk(svc, "memory/archive/2026-10.md.gz").exists()
    assert svc.search.search("zanzibar", agent=A).hits[0].file == "memory/2026-10-02.md"
    svc.store.undo_batch(done.batch)  # the restore is one run, undone as a whole
    assert month_archive.read_month(svc.store, A, "2026-10") is not None
    assert not _disk(svc, "memory/2026-10-02.md").exists()


def test_rotation_is_idempotent_and_the_bytes_deterministic(svc: Services) -> None:
    _note(svc, "2026-10-02")
    svc.dreaming.rotate(A)
    rel = "memory/archive/2026-10.md.gz"
    first = _disk(svc, rel).read_bytes()
    versions = len(svc.store.history(A, rel))
    assert svc.dreaming.rotate(A)["daily_notes_archived"] == []
    assert _disk(svc, rel).read_bytes() == first and len(svc.store.history(A, rel)) == versions
    members = month_archive.unpack(rel, first)
    assert month_archive.pack("2026-10", dict(reversed(members.items()))) == first
    # A later note of the same month joins the same file.
    _note(svc, "2026-10-05")
    assert svc.dreaming.rotate(A)["daily_notes_archived"] == ["memory/2026-10-05.md"]
    assert month_archive.months(svc.store, A)[0]["notes"] == ["2026-10-02", "2026-10-05"]


def test_a_damaged_archive_is_reported_and_skipped(svc: Services) -> None:
    _note(svc, "2026-09-05")
    _note(svc, "2026-10-02")
    bad = _disk(svc, "memory/archive/2026-10.md.gz")
    bad.parent.mkdir(parents=True, exist_ok=True)
    bad.write_bytes(b"\x1f\x8b not really gzip")
    assert svc.dreaming.rotate(A)["daily_notes_archived"] == ["memory/2026-09-05.md"]
    assert _disk(svc, "memory/2026-10-02.md").exists()  # never rolled into what it cannot read
    assert bad.read_bytes() == b"\x1f\x8b not really gzip"
    listed = {m["month"]: m for m in month_archive.months(svc.store, A)}
    assert "damaged archive" in listed["2026-10"]["error"] and listed["2026-09"]["error"] is None
    report = svc.file_index.rebuild()
    assert any("2026-10.md.gz" in s for s in report.skipped)
    assert svc.search.search("something", agent=A).hits  # the rest of the index is whole
    with pytest.raises(InvalidInputError, match="damaged archive"):
        month_archive.restore_month(svc.store, A, "2026-10")
    # A well-formed gzip whose member no longer matches its hash is caught too.
    good = _disk(svc, "memory/archive/2026-09.md.gz").read_bytes()
    tampered = gzip.compress(gzip.decompress(good).replace(b"something", b"somethinG"), mtime=0)
    with pytest.raises(InvalidInputError, match="does not match its hash"):
        month_archive.unpack("x", tampered)


def test_restore_never_overwrites_a_newer_note_of_the_same_date(svc: Services) -> None:
    _note(svc, "2026-10-02")
    _note(svc, "2026-10-09")
    svc.dreaming.rotate(A)
    _note(svc, "2026-10-02", "# 2026-10-02\n\n## 18:00 Written later\n- a newer note\n")
    with pytest.raises(ConflictError, match=r"nothing written: memory/2026-10-02\.md"):
        month_archive.restore_month(svc.store, A, "2026-10")
    assert not _disk(svc, "memory/2026-10-09.md").exists()
    assert "a newer note" in _disk(svc, "memory/2026-10-02.md").read_text(encoding="utf-8")
    assert month_archive.read_month(svc.store, A, "2026-10") is not None


def test_old_diary_entries_roll_into_the_months_diary_archive(svc: Services) -> None:
    entries = [f"## {d} 03:00 Dreaming\n- Outcome: **done**\n- run on {d}\n" for d in
               ("2026-10-03", "2026-10-20", "2026-11-25")]
    text = "---\nenabled: false\n---\n# DREAMS.md — dreaming diary\n\n" + "\n".join(entries)
    svc.store.write(A, "DREAMS.md", text, expected_sha="", actor="dreaming")
    moved = svc.dreaming.rotate(A)["daily_notes_archived"]
    assert moved == ["DREAMS.md: 2026-10-03 03:00 Dreaming", "DREAMS.md: 2026-10-20 03:00 Dreaming"]
    diary = _disk(svc, "DREAMS.md").read_text(encoding="utf-8")
    assert "2026-11-25" in diary and "2026-10-03" not in diary
    assert month_archive.months(svc.store, A)[0]["diaryEntries"] == 2
    month_archive.restore_month(svc.store, A, "2026-10")
    restored = _disk(svc, "memory/dreams/2026-10.md").read_text(encoding="utf-8")
    assert entries[0] in restored and entries[1] in restored


def test_each_owner_rolls_into_their_own_archive(tmp_path: Path) -> None:
    svc = _services(tmp_path, "owner-isolation: true\n")
    try:
        _note(svc, "2026-10-02", "# 2026-10-02\n\n## 10:00 Alice\n- alice visited Reykjavik\n", owner="alice")
        _note(svc, "2026-10-02", "# 2026-10-02\n\n## 10:00 Bob\n- bob visited Nairobi\n", owner="bob")
        assert svc.dreaming.rotate(A, owner="alice")["daily_notes_archived"] == ["memory/2026-10-02.md"]
        assert _disk(svc, "memory/archive/2026-10.md.gz", "alice").exists()
        assert _disk(svc, "memory/2026-10-02.md", "bob").exists()
        assert month_archive.months(svc.store, A, owner="bob") == []
        assert month_archive.months(svc.store, A) == []  # nothing in the shared files either
        assert svc.search.search("reykjavik", agent=A, owner="bob").hits == []
        hit = svc.search.search("reykjavik", agent=A, owner="alice").hits[0]
        assert (hit.file, hit.owner) == ("memory/archive/2026-10.md.gz", "alice")
    finally:
        svc.close()


def test_http_lists_months_and_restores_one(svc: Services) -> None:
    from mateclaw_mem.api.app import create_app

    _note(svc, "2026-10-02", TRICKY)
    original = _disk(svc, "memory/2026-10-02.md").read_bytes()
    svc.dreaming.rotate(A)
    with ApiServer(create_app(svc, mcp=False)) as server, httpx.Client(base_url=server.url, timeout=30) as http:
        listed = http.get(f"/api/v1/memory/{A}/archive").json()
        assert [(m["month"], m["notes"]) for m in listed["months"]] == [("2026-10", ["2026-10-02"])]
        assert http.post(f"/api/v1/memory/{A}/archive/2026-13/restore").status_code == 422
        missing = http.post(f"/api/v1/memory/{A}/archive/2020-01/restore")
        assert missing.status_code == 404 and "no archive for 2020-01" in missing.json()["detail"]["reason"]
        done = http.post(f"/api/v1/memory/{A}/archive/2026-10/restore")
        assert done.status_code == 200 and done.json()["restored"] == ["memory/2026-10-02.md"]
        assert _disk(svc, "memory/2026-10-02.md").read_bytes() == original
        assert http.get(f"/api/v1/memory/{A}/archive").json()["months"] == []


def test_binary_writes_keep_history_and_refuse_a_stale_hash(svc: Services) -> None:
    rel = "memory/archive/2026-10.md.gz"
    first = blobs.write(svc.store, A, rel, b"one", expected_sha="", actor="dreaming")
    with pytest.raises(ConflictError):
        blobs.write(svc.store, A, rel, b"two", expected_sha="", actor="dreaming")
    blobs.write(svc.store, A, rel, b"two", expected_sha=first.sha, actor="dreaming")
    assert svc.store.history_store.content(svc.store.agent_key(A), rel, 2) == b"one"
    svc.store.undo(A, rel)
    assert _disk(svc, rel).read_bytes() == b"one"
