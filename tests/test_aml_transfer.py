"""`mateclaw-mem aml export|import` (issue 40): the Add/Search store moved losslessly - the same search
answers (ids, text, scores, times, images) and the same replayed Add bytes after the move - and a bad
or hostile file refused naming its line, with nothing imported. SQLite to SQLite here;
tests/test_aml_transfer_pg.py moves SQLite -> PostgreSQL -> SQLite."""

from __future__ import annotations

import base64
import gzip
import io
import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from mateclaw_mem.clock import ManualClock
from mateclaw_mem.conversations.aml import AmlMessage
from mateclaw_mem.errors import ConflictError, InvalidInputError
from mateclaw_mem.runtime.aml_only import AmlNode, open_node
from mateclaw_mem.runtime.aml_store import export_to, import_from
from mateclaw_mem.settings import Settings, load_settings
from tests.support.cli_runner import run_one
from tests.test_aml_images import data_url, image, part, text

TS = 1683554160000
QUERIES = ["where did Lena move", "cat named", "what did Melanie paint", "camping by the lake", "sunset photo",
           "red kite", "birthday"]
LINES = [
    "My sister Lena moved to Porto in March", "I adopted a cat named Miso", "Melanie painted a sunset last week",
    "We went camping by the lake in June", "The red kite got stuck in the oak", "Her birthday is on the 4th",
    "Caroline: I joined the LGBTQ support group", "Melanie: my kids love the beach",
]


def store_settings(tmp_path: Path, name: str, model: dict[str, Any] | None = None, **aml: Any) -> Settings:
    folder = tmp_path / name
    folder.mkdir(parents=True, exist_ok=True)
    cfg = folder / "c.yaml"
    cfg.write_text("timezone: Europe/Berlin\n", encoding="utf-8")
    return load_settings(cfg, folder / "ws", overrides={"aml": {"images": "keep", **aml}, **(model or {})})


def clock() -> ManualClock:
    return ManualClock(datetime(2026, 11, 30, 9, 15, tzinfo=UTC))


def populate(node: AmlNode) -> list[tuple[str, str, str, list[AmlMessage]]]:
    """Three users, several sessions, a replay, images kept (bytes and a link); the Adds made."""
    adds: list[tuple[str, str, str, list[AmlMessage]]] = []
    for u in range(3):
        for n, line in enumerate(LINES):
            content: Any = f"{line} (user {u})"
            if n == 2:
                content = [text(content), part(data_url(image(f"img{u}")))]
            if n == 4:
                content = [text(content), part("https://example.com/kite.png")]
            msgs = [AmlMessage("user", content, TS + 60_000 * n), AmlMessage("assistant", f"noted {n}", TS + 60_000 * n + 1)]
            adds.append((f"r{u}-{n}", f"user-{u}", f"s{n % 3}", msgs))
    for rid, uid, sid, msgs in adds:
        node.aml.add_json(rid, uid, sid, msgs)
    node.aml.add_json(*adds[0][:3], adds[0][3])  # a replay stores nothing twice
    return adds


def answers(node: AmlNode, adds: list[tuple[str, str, str, list[AmlMessage]]]) -> dict[str, Any]:
    """Everything a client can see: every query's results for every user, every Add's replayed bytes,
    a changed body's refusal, and an image query."""
    out: dict[str, Any] = {}
    for u in range(3):
        for q in QUERIES:
            out[f"{u}:{q}"] = [(i.id, i.content, i.score, i.created_at, i.images, i.parts)
                               for i in node.aml.search(q, f"user-{u}", 10)]
        out[f"{u}:image"] = [i.id for i in node.aml.search([part(data_url(image(f"img{u}")))], f"user-{u}", 3)]
    out["replays"] = [node.aml.add_json(*a[:3], a[3]) for a in adds]
    with pytest.raises(ConflictError):
        node.aml.add_json(adds[1][0], adds[1][1], adds[1][2], [AmlMessage("user", "a changed body", TS)])
    return out


def open_store(settings: Settings) -> AmlNode:
    return open_node(settings, clock())


def test_sqlite_export_import_gives_the_same_answers(tmp_path: Path) -> None:
    source = open_store(store_settings(tmp_path, "a"))
    try:
        adds = populate(source)
        before = answers(source, adds)
        assert any(item[5] for results in before.values() if isinstance(results, list) for item in results
                   if isinstance(item, tuple)), "no kept image came back: the test would not see one lost"
    finally:
        source.close()
    dump = tmp_path / "store.jsonl.gz"
    moved = export_to(source.settings, str(dump))
    assert moved.counts["message"] == 3 * len(LINES) * 2 and moved.counts["request"] == 3 * len(LINES)
    assert moved.counts["blob"] == 3
    assert gzip.decompress(dump.read_bytes()).startswith(b'{"format":"mateclaw-aml-store"')
    target_settings = store_settings(tmp_path, "b")
    assert import_from(target_settings, str(dump)).counts == moved.counts
    target = open_store(target_settings)
    try:
        assert answers(target, adds) == before
        # New Adds continue after the imported ids.
        target.aml.add_json("new", "user-0", "s9", [AmlMessage("user", "a fresh note about kites", TS)])
        assert int(target.aml.search("fresh note kites", "user-0", 1)[0].id[1:]) > moved.counts["message"]
    finally:
        target.close()


def _dump(tmp_path: Path) -> list[str]:
    source = open_store(store_settings(tmp_path, "src"))
    try:
        populate(source)
    finally:
        source.close()
    out = tmp_path / "dump.jsonl"
    export_to(source.settings, str(out))
    return out.read_text(encoding="utf-8").splitlines()


def _empty(settings: Settings) -> bool:
    node = open_store(settings)
    try:
        return node.aml.search("Porto", "user-0", 5) == []
    finally:
        node.close()


def _mutations(lines: list[str]) -> dict[str, tuple[list[str], str]]:
    """Name -> (the file's lines, what the error must say)."""
    msg = next(i for i, line in enumerate(lines) if '"t":"message"' in line)
    blob = next(i for i, line in enumerate(lines) if '"t":"blob"' in line)
    record = json.loads(lines[msg])

    def changed(i: int, **fields: Any) -> list[str]:
        data = json.loads(lines[i])
        data.update(fields)
        return [*lines[:i], json.dumps(data), *lines[i + 1:]]

    wrong = bytearray(base64.b64decode(json.loads(lines[blob])["data"]))
    wrong[20] ^= 1
    return {
        "not json": ([*lines[:3], "{not json", *lines[4:]], "line 4: not a JSON object"),
        "unknown type": (changed(msg, t="secret"), f"line {msg + 1}: unknown record type 'secret'"),
        "missing field": ([*lines[:msg], json.dumps({k: v for k, v in record.items() if k != "role"}),
                           *lines[msg + 1:]], f"line {msg + 1}: role: Field required"),
        "wrong type": (changed(msg, id="5"), f"line {msg + 1}: id: Input should be a valid integer"),
        "extra field": (changed(msg, admin=True), f"line {msg + 1}: admin: Extra inputs are not permitted"),
        "negative id": (changed(msg, id=-3), f"line {msg + 1}: id: Input should be greater than or equal to 1"),
        "blob hash": (changed(blob, data=base64.b64encode(bytes(wrong)).decode()),
                      f"line {blob + 1}: the blob's bytes do not hash to its sha256"),
        "blob not base64": (changed(blob, data="%%%"), f"line {blob + 1}: data is not base64"),
        "duplicate id": ([*lines[:msg + 1], lines[msg], *lines[msg + 1:-1],
                          lines[-1].replace('"message":48', '"message":49')], f"line {msg + 2}: this message's id or key is taken"),
        "truncated": (lines[:-1], "ends without its end record"),
        "counts": ([*lines[:-1], lines[-1].replace('"message":48', '"message":47')], "the end record counts"),
        "after end": ([*lines, lines[msg]], f"line {len(lines) + 1}: a record after the end record"),
        "bad header": ([lines[0].replace('"version":1', '"version":2'), *lines[1:]], "line 1: version"),
        "other agent": ([lines[0].replace('"agent":"aml"', '"agent":"other"'), *lines[1:]],
                        "line 1: the file holds agent 'other'"),
        "empty": ([], "line 1: the file is empty"),
        "array": (["[1, 2]", *lines[1:]], "line 1: not a JSON object"),
    }


def test_a_bad_or_hostile_file_names_its_line_and_imports_nothing(tmp_path: Path) -> None:
    lines = _dump(tmp_path)
    assert lines[-1] == '{"t":"end","counts":{"message":48,"blob":3,"request":24}}'
    target = store_settings(tmp_path, "target")
    for name, (content, says) in _mutations(lines).items():
        path = tmp_path / f"{name}.jsonl"
        path.write_text("\n".join(content) + ("\n" if content else ""), encoding="utf-8")
        with pytest.raises(InvalidInputError) as err:
            import_from(target, str(path))
        assert says in err.value.message, (name, err.value.message)
        assert _empty(target), f"{name}: something was imported"
    # A gzip stream cut short is named too, and the whole file then imports.
    whole = gzip.compress(("\n".join(lines) + "\n").encode())
    (tmp_path / "cut.gz").write_bytes(whole[: len(whole) // 2])
    with pytest.raises(InvalidInputError, match="gzip stream is damaged or cut short"):
        import_from(target, str(tmp_path / "cut.gz"))
    assert _empty(target)
    (tmp_path / "whole.gz").write_bytes(whole)
    assert import_from(target, str(tmp_path / "whole.gz")).counts["message"] == 48
    assert not _empty(target)


def test_import_into_a_store_with_data_is_refused_and_leaves_it_alone(tmp_path: Path) -> None:
    lines = _dump(tmp_path)
    path = tmp_path / "d.jsonl"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    target = store_settings(tmp_path, "t")
    import_from(target, str(path))
    with pytest.raises(ConflictError, match="already holds 48 Add/Search message"):
        import_from(target, str(path))


def cli(*argv: str) -> tuple[int, str, str]:
    done = run_one({"argv": list(argv)})
    return int(done["rc"]), str(done["stdout"]), str(done["stderr"])  # type: ignore[call-overload]


def test_the_cli_moves_a_store_and_names_a_bad_line(tmp_path: Path) -> None:
    lines = _dump(tmp_path)
    src = ["--workspace", str(tmp_path / "src" / "ws"), "--config", str(tmp_path / "src" / "c.yaml")]
    code, out, err = cli(*src, "aml", "export", str(tmp_path / "x.jsonl"))
    assert code == 0, err
    assert "exported 48 message(s), 3 blob(s), 24 request(s)" in out
    code, out, err = cli(*src, "aml", "export", str(tmp_path / "x.jsonl"))
    assert code == 2 and "exists" in err
    (tmp_path / "bad.jsonl").write_text("\n".join([*lines[:5], "{oops", *lines[6:]]) + "\n", encoding="utf-8")
    dst = tmp_path / "dst"
    dst.mkdir()
    (dst / "c.yaml").write_text("timezone: Europe/Berlin\n", encoding="utf-8")
    to = ["--workspace", str(dst / "ws"), "--config", str(dst / "c.yaml")]
    code, out, err = cli(*to, "aml", "import", str(tmp_path / "bad.jsonl"))
    assert code == 2 and "line 6: not a JSON object" in err and "Traceback" not in err
    code, out, err = cli(*to, "--json", "aml", "import", str(tmp_path / "x.jsonl"))
    assert code == 0, err
    assert json.loads(out)["counts"] == {"message": 48, "blob": 3, "request": 24}
    code, out, err = cli(*to, "aml", "import", str(tmp_path / "x.jsonl"))
    assert code == 4 and "already holds 48" in err
    code, out, err = cli(*to, "--json", "aml", "status")
    assert code == 0, err
    report = json.loads(out)
    assert (report["backend"], report["messages"], report["users"]) == ("sqlite", 48, 3)


def test_a_line_past_the_limit_is_named_without_reading_it_whole() -> None:
    from mateclaw_mem.conversations.aml_transfer import read_lines

    raw = io.BufferedReader(io.BytesIO(b'{"a": 1}\n' + b"x" * 5000 + b"\n{}\n"))
    lines = read_lines(raw, max_line=1000)
    assert next(lines) == (1, b'{"a": 1}\n')
    with pytest.raises(InvalidInputError, match="line 2: longer than 1000 bytes"):
        next(lines)


def test_export_to_stdout_and_import_from_stdin(tmp_path: Path) -> None:
    _dump(tmp_path)
    src = ["--workspace", str(tmp_path / "src" / "ws"), "--config", str(tmp_path / "src" / "c.yaml")]
    code, out, err = cli(*src, "aml", "export", "-")
    assert code == 0 and out.startswith('{"format":"mateclaw-aml-store"') and out.endswith("}\n"), err
    dst = tmp_path / "dst"
    dst.mkdir()
    (dst / "c.yaml").write_text("timezone: Europe/Berlin\n", encoding="utf-8")
    done = run_one({"argv": ["--workspace", str(dst / "ws"), "--config", str(dst / "c.yaml"), "aml", "import", "-"],
                    "stdin": out})
    assert done["rc"] == 0, done
    assert "imported 48 message(s), 3 blob(s), 24 request(s)" in str(done["stdout"])
