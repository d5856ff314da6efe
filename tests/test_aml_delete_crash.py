"""An Add/Search user's delete killed between its stores (issue 35's "no half operations" and "a
forget leaves no byte behind", conversations/aml_users.py): a real process deleting the user, killed
with SIGKILL at each step (MATECLAW_MEM_CRASH_AT=aml-delete:<point>), leaves the half state the point
says, and the next start (`doctor`) - or a running daemon's heartbeat - finishes it: no row and no
byte of the user's words anywhere in the workspace, the other user's words (the positive control)
still there and still found."""

from __future__ import annotations

import json
import signal
from datetime import UTC, datetime
from pathlib import Path

import pytest

from mateclaw_mem.clock import ManualClock
from mateclaw_mem.conversations.aml import AmlMessage
from mateclaw_mem.runtime.services import Services
from mateclaw_mem.settings import load_settings
from tests.support import half_ops
from tests.support.half_ops import AML_CONTROL, AML_DELETE, SCENARIOS, aml_bytes, cli, journal_left, restart

N = 6
# (crash point, what the disk shows right after the kill): the message index first, then the file
# index's copies (none since issue 36: the same as after the first), the log last, then each file scrubbed.
POINTS = [("begin", "before"), ("rows:messages", "half"), ("rows:index", "half"), ("rows:log", "half"),
          ("scrub:1", "half"), ("end", "after")]


def _search(folder: Path, user: str, query: str) -> list[str]:
    svc = half_ops.services_as_configured(folder)
    try:
        return [hit.content for hit in svc.aml.search(query, user, 5)]
    finally:
        svc.close()


@pytest.mark.parametrize(("point", "right_after"), POINTS, ids=[p for p, _ in POINTS])
def test_a_delete_killed_between_its_stores_is_finished_at_the_next_start(tmp_path: Path, point: str,
                                                                          right_after: str) -> None:
    scenario = SCENARIOS["aml-delete"]
    args = scenario.prepare(tmp_path, N)
    assert aml_bytes(tmp_path)["victim"] and aml_bytes(tmp_path)["other"]  # the scan sees both before
    killed = cli(tmp_path, *args, crash_at=f"aml-delete:{point}", module=AML_DELETE)
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    kind, detail = scenario.state(tmp_path, N)
    assert kind == right_after, detail
    assert journal_left(tmp_path), "the kill left no journal"

    done = restart(tmp_path)
    assert done.returncode == 0, done.stderr
    assert "Traceback" not in done.stderr
    finished = json.loads(done.stdout)["finished_now"]
    assert [(e["operation"], e["outcome"]) for e in finished] == [("aml-delete", "completed")]
    assert "victim" not in json.dumps(finished)  # the report names no user
    kind, detail = scenario.state(tmp_path, N)
    assert kind == "after", detail
    found = aml_bytes(tmp_path)
    assert found["victim"] == found["victim_word"] == 0 and found["other"] > 0, found  # every byte; control
    assert journal_left(tmp_path) == []
    assert _search(tmp_path, "victim", "marmalade harbour") == []
    assert any(AML_CONTROL in c for c in _search(tmp_path, "other", "teapot lighthouse"))

    status = json.loads(cli(tmp_path, "status", "--json").stdout)
    recovered = status["interrupted_operations"]["recovered"]
    assert recovered[0]["operation"] == "aml-delete" and "scrubbed" in recovered[0]["how"]


def test_retention_killed_mid_way_is_finished_by_the_running_daemons_heartbeat(tmp_path: Path) -> None:
    """The hourly retention (here as its own process) killed after the message index, before the log:
    the daemon running beside it finishes the delete on its next heartbeat, without a restart."""
    half_ops.services(tmp_path).close()  # the workspace and its config
    config = tmp_path / "mateclaw.yaml"
    config.write_text(config.read_text(encoding="utf-8") + "aml:\n  retention-days: 30\n", encoding="utf-8")
    settings = load_settings(config, tmp_path / "workspace")
    svc = Services(settings, clock=ManualClock(datetime(2026, 1, 1, tzinfo=UTC)))
    try:
        for i in range(N):  # long ago: past the 30 days by the system clock of the process below
            svc.aml.add(f"r{i}", "victim", "s", [AmlMessage("user", half_ops.aml_said(i), 1683554160000 + i)])
    finally:
        svc.close()
    daemon = Services(settings)
    try:
        daemon.aml.add("r0", "other", "s", [AmlMessage("user", half_ops.aml_said(0, AML_CONTROL), 1683554160000)])
        daemon.build()
        killed = cli(tmp_path, "expire", crash_at="aml-delete:rows:messages", module=AML_DELETE)
        assert killed.returncode == -signal.SIGKILL, killed.stderr
        assert SCENARIOS["aml-delete"].state(tmp_path, N)[0] == "half"
        beat = dict(daemon.scheduler.tick_all())
        assert beat.get("interrupted_operations") == "1 finished", beat
        kind, detail = SCENARIOS["aml-delete"].state(tmp_path, N)
        assert kind == "after", detail
        found = aml_bytes(tmp_path)
        assert found["victim"] == found["victim_word"] == 0 and found["other"] > 0, found
        assert journal_left(tmp_path) == []
    finally:
        daemon.close()


def test_serve_aml_only_finishes_an_interrupted_delete_before_its_first_request(tmp_path: Path) -> None:
    """`serve --aml-only` has no workspace store and no runtime/recovery.py: over SQLite it finishes
    the AML deletes the journal holds at its start (and leaves any other operation's journal alone)."""
    from tests.test_aml_only import AmlOnly

    scenario = SCENARIOS["aml-delete"]
    args = scenario.prepare(tmp_path, N)
    killed = cli(tmp_path, *args, crash_at="aml-delete:rows:log", module=AML_DELETE)
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    assert scenario.state(tmp_path, N)[0] == "half"
    other_op = tmp_path / "workspace" / ".mateclaw" / "journal" / "import-000000000000"
    other_op.mkdir()  # another operation's journal (its process gone): not serve --aml-only's to finish
    (other_op / "intent.json").write_text(json.dumps({"id": other_op.name, "op": "import", "batch": "b",
                                                      "steps": [], "finish": {}}), encoding="utf-8")
    daemon = AmlOnly(tmp_path)
    daemon.workspace = tmp_path / "workspace"
    daemon.start()
    try:
        with daemon.client() as client:
            r = client.post("/v1/aml/search", json={"query": "marmalade harbour", "user_id": "victim", "top_k": 5})
            assert r.status_code == 200 and r.json()["data"] == [], r.text
    finally:
        assert daemon.stop() == 0
    kind, detail = scenario.state(tmp_path, N)
    assert kind == "after", detail
    found = aml_bytes(tmp_path)
    assert found["victim"] == found["victim_word"] == 0 and found["other"] > 0, found
    assert journal_left(tmp_path) == ["import-000000000000"]
    assert "interrupted aml-delete" in daemon.log() and "Traceback" not in daemon.log()
