"""Learning memory over HTTP, against a real uvicorn server and a real HTTP client."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.support.server import serve_api

A = "/api/v1/agents/default"


@pytest.fixture
def client(tmp_path: Path) -> Iterator[httpx.Client]:
    yield from serve_api(tmp_path / "ws", mcp=False)


def reason(r: httpx.Response) -> str:
    return r.json()["detail"]["reason"]


def test_memory_get_patch_and_errors(client: httpx.Client) -> None:
    r = client.get(f"{A}/memory")
    assert r.status_code == 200 and r.json()["strategies"] == [] and r.json()["limits"]["strategies"] == 10
    r = client.patch(f"{A}/memory", json={"stats": "12 runs", "add_strategy": "Read twice",
                                          "categories": {"puzzles": "draw it"}})
    assert r.status_code == 200, r.text
    body = r.json()
    assert (body["stats"], body["strategies"], body["categories"]) == ("12 runs", ["Read twice"], {"puzzles": "draw it"})
    assert client.get(f"{A}/memory").json()["sha"] == body["sha"]
    r = client.patch(f"{A}/memory", json={"strategies": [f"s{i}" for i in range(11)]})
    assert r.status_code == 400 and "cap is 10" in reason(r)
    r = client.patch(f"{A}/memory", json={"strategy": "typo"})
    assert r.status_code == 422 and "strategy" in reason(r)
    assert client.get("/api/v1/agents/ghost/memory").status_code == 404
    r = client.get(f"{A}/memory/tasks/NOT_A_SLUG")
    assert r.status_code == 400 and "invalid task slug" in reason(r)


def test_results_tasks_reflect_and_context(client: httpx.Client) -> None:
    entered = client.post(f"{A}/tasks/sum-two/enter", json={})
    assert entered.status_code == 200 and "No attempts recorded yet." in entered.json()["context"]
    run_id = entered.json()["run_id"]
    r = client.post(f"{A}/tasks/sum-two/results",
                    json={"score": 870, "breakdown": {"accuracy": 500, "speed": 370}, "run_id": run_id})
    assert r.status_code == 200, r.text
    out = r.json()
    assert out["memoryless"] is False and out["run"]["run_id"] == run_id
    assert out["task"]["attempt_count"] == 1 and out["task"]["best_score"] == 870
    assert client.post(f"{A}/tasks/sum-two/results", json={"score": 1, "run_id": run_id}).status_code == 409
    r = client.post(f"{A}/tasks/sum-two/results", json={"score": "high"})
    assert r.status_code == 422 and "score" in reason(r)

    r = client.patch(f"{A}/memory/tasks/sum-two", json={"notes": "carry the one", "add_strategy": "check sums"})
    assert r.status_code == 200 and r.json()["notes"] == "carry the one" and r.json()["strategies"] == ["check sums"]
    r = client.patch(f"{A}/memory/tasks/sum-two", json={"notes": "x" * 2001})
    assert r.status_code == 400 and "limit is 2000" in reason(r)
    task = client.get(f"{A}/memory/tasks/sum-two").json()
    assert task["best_score_breakdown"] == {"accuracy": 500, "speed": 370} and task["score_trend"] == "stable"
    assert client.get(f"{A}/memory/tasks/never-seen").status_code == 404

    r = client.post(f"{A}/tasks/sum-two/reflect", json={"lesson": "Check the carry.", "run_id": run_id})
    assert r.status_code == 200 and r.json()["reflection"]["task"] == "sum-two"
    listing = client.get(f"{A}/memory/tasks").json()["tasks"]
    assert [(t["task"], t["attempt_count"], t["runs"]) for t in listing] == [("sum-two", 1, 1)]
    context = client.post(f"{A}/tasks/sum-two/enter").json()["context"]  # a body is optional
    for needle in ("Check the carry.", "carry the one", "check sums", "Best score: 870", "Median score: 870"):
        assert needle in context


def test_memoryless_end_to_end(client: httpx.Client) -> None:
    client.patch(f"{A}/memory", json={"add_strategy": "SECRET-STRATEGY"})
    client.post(f"{A}/tasks/maze/results", json={"score": 400})
    client.post(f"{A}/tasks/maze/reflect", json={"lesson": "SECRET-LESSON"})
    files_before = client.get(f"{A}/memory/tasks/maze").json()["sha"], client.get(f"{A}/memory").json()["sha"]

    r = client.post(f"{A}/tasks/maze/enter", json={"memoryless": True})
    ctx = r.json()
    assert ctx["memoryless"] is True and ctx["memory"] is None and ctx["task_memory"] is None
    assert "SECRET" not in r.text and "Best score" not in ctx["context"] and "Attempts" not in ctx["context"]
    r = client.post(f"{A}/tasks/maze/reflect", json={"lesson": "leak", "run_id": ctx["run_id"]})
    assert r.status_code == 400 and "memoryless" in reason(r)
    r = client.post(f"{A}/tasks/maze/results", json={"score": 90, "completed": False, "run_id": ctx["run_id"]})
    assert r.status_code == 200 and r.json()["memoryless"] is True and r.json()["task"] is None
    assert r.json()["run"]["memoryless"] is True

    files_after = client.get(f"{A}/memory/tasks/maze").json()["sha"], client.get(f"{A}/memory").json()["sha"]
    assert files_after == files_before
    runs = client.get(f"{A}/tasks/maze/results").json()["runs"]
    assert [(r["score"], r["memoryless"]) for r in runs] == [(90, True), (400, False)]
    (maze,) = client.get(f"{A}/memory/tasks").json()["tasks"]
    assert (maze["attempt_count"], maze["runs"], maze["memoryless_runs"]) == (1, 2, 1)
    analytics = client.post(f"{A}/tasks/maze/enter", json={"memoryless": False}).json()["analytics"]
    assert analytics["memoryless_runs"] == 1 and analytics["with_memory"]["median_score"] == 400


def test_eight_concurrent_results_over_http(client: httpx.Client) -> None:
    barrier = threading.Barrier(8)
    statuses: list[int] = []

    def post(score: int) -> None:
        with httpx.Client(base_url=str(client.base_url), timeout=60) as c:
            barrier.wait()
            statuses.append(c.post(f"{A}/tasks/race/results", json={"score": score}).status_code)

    threads = [threading.Thread(target=post, args=(s,)) for s in range(100, 900, 100)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert statuses == [200] * 8
    task = client.get(f"{A}/memory/tasks/race").json()
    assert task["attempt_count"] == 8 and task["best_score"] == 800 and task["avg_score"] == 450


def test_harness_lineage_over_http(client: httpx.Client) -> None:
    first = client.get(f"{A}/harness-lineage").json()
    assert len(first["versions"]) == 1 and first["currentHash"] == first["versions"][0]["hash"]
    soul = client.services.store.path("default", "SOUL.md")  # type: ignore[attr-defined]
    soul.write_text(soul.read_text(encoding="utf-8") + "\nA hand edit.\n", encoding="utf-8")
    second = client.get(f"{A}/harness-lineage").json()
    assert len(second["versions"]) == 2 and second["currentHash"] != first["currentHash"]
    r = client.post(f"{A}/harness-lineage", json={"label": "edited by hand"})
    assert r.status_code == 200 and r.json()["hash"] == second["currentHash"]
    r = client.patch(f"{A}/harness-lineage/{first['currentHash'][:12]}", json={"label": "seed"})
    assert r.status_code == 200 and r.json()["hash"] == first["currentHash"]
    labels = [(v["label"]) for v in client.get(f"{A}/harness-lineage").json()["versions"]]
    assert labels == ["seed", "edited by hand"]
    r = client.patch(f"{A}/harness-lineage/{'0' * 64}", json={"label": "x"})
    assert r.status_code == 404 and "no harness version" in reason(r)


def test_auth_applies(tmp_path: Path) -> None:
    for keyed in serve_api(tmp_path / "ws", api_key="k-123", mcp=False):
        assert keyed.get(f"{A}/memory").status_code == 401
        assert keyed.get(f"{A}/memory", headers={"X-Api-Key": "k-123"}).status_code == 200


# -- the other faces: MCP (real stdio server) and CLI ------------------------------------------------------


def test_mcp_learning_tools(tmp_path: Path) -> None:
    import json
    import sys

    import anyio
    from mcp import Client, StdioServerParameters

    from mateclaw_mem.cli.main import main as cli

    ws = tmp_path / "ws"
    assert cli(["--workspace", str(ws), "init"]) == 0  # reading never creates a workspace: init does
    params = StdioServerParameters(command=sys.executable, cwd=str(tmp_path),
                                   args=["-m", "mateclaw_mem.cli.main", "mcp", "--workspace", str(ws),
                                         "--tools", "learning"])

    def data(result) -> dict:
        assert not result.is_error, result.content
        return json.loads("".join(c.text for c in result.content if getattr(c, "type", "") == "text"))

    async def main() -> dict:
        async with Client(params, read_timeout_seconds=60) as c:
            tools = {t.name: t for t in (await c.list_tools()).tools}
            assert tools["learning_memory"].annotations.read_only_hint is True
            assert tools["record_task_result"].annotations.read_only_hint is False
            run = data(await c.call_tool("enter_task", {"task": "maze", "memoryless": True}))
            refused = await c.call_tool("reflect", {"task": "maze", "lesson": "x", "run_id": run["run_id"]})
            result = data(await c.call_tool("record_task_result", {"task": "maze", "score": 7, "run_id": run["run_id"]}))
            data(await c.call_tool("reflect", {"task": "maze", "lesson": "look left"}))
            too_high = await c.call_tool("record_task_result", {"task": "maze", "score": 1500})
            no_run = await c.call_tool("record_task_result", {"task": "maze", "score": 5, "run_id": "nosuchrun"})
            return {"run": run, "refused": refused, "result": result, "too_high": too_high, "no_run": no_run,
                    "memory": data(await c.call_tool("learning_memory", {})),
                    "lineage": data(await c.call_tool("harness_lineage", {}))}

    out = anyio.run(main)
    assert out["run"]["memoryless"] is True and out["result"]["task"] is None
    assert out["refused"].is_error and "memoryless" in out["refused"].content[0].text
    assert [r["text"] for r in out["memory"]["reflections"]] == ["look left"]
    assert out["lineage"]["currentHash"]
    assert out["too_high"].is_error and "1000" in out["too_high"].content[0].text
    assert out["no_run"].is_error and "nosuchrun" in out["no_run"].content[0].text


def test_cli_learn_commands(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture) -> None:
    import json

    from mateclaw_mem.cli.main import main
    from tests.support.isolation import no_config_here

    no_config_here(monkeypatch, tmp_path)  # from tmp_path, on tmp_path/workspace, no settings file

    def run(*args: str) -> tuple[int, str, str]:
        code = main(list(args))
        out, err = capsys.readouterr()
        return code, out, err

    assert run("init")[0] == 0
    code, out, _ = run("learn", "result", "default", "maze", "640", "--part", "speed=40", "--part", "accuracy=600")
    assert code == 0 and "1 attempts, best 640" in out
    assert run("learn", "result", "default", "maze", "700")[0] == 0
    assert run("learn", "strategy", "default", "add", "Hug the left wall", "--task", "maze")[0] == 0
    assert run("learn", "set", "default", "--stats", "two runs", "--category", "puzzles", "draw a map")[0] == 0
    assert run("learn", "reflect", "default", "maze", "Dead ends repeat")[0] == 0
    code, out, err = run("learn", "enter", "default", "maze")
    assert code == 0 and err.startswith("run ") and "Hug the left wall" in out and "Dead ends repeat" in out
    code, out, _ = run("learn", "task", "default", "maze", "--json")
    assert json.loads(out)["score_trend"] == "improving" and json.loads(out)["best_score_breakdown"] == {}
    code, out, _ = run("learn", "task", "default", "--json")
    assert [t["task"] for t in json.loads(out)] == ["maze"]
    code, out, _ = run("learn", "lineage", "default", "--label", "v1")
    assert code == 0 and "labelled 'v1'" in out
    code, _, err = run("learn", "result", "default", "Maze!", "1")
    assert code == 2 and "invalid task slug" in err
    code, _, err = run("learn", "reflect", "default", "maze", "x", "--run", "nope")
    assert code == 3 and "no task run" in err


def test_results_out_of_range_or_for_unknown_runs_over_http(client: httpx.Client) -> None:
    r = client.post(f"{A}/tasks/maze/results", json={"score": 1500})
    assert r.status_code == 422 and "less than or equal to 1000" in reason(r)
    r = client.post(f"{A}/tasks/maze/results", json={"score": 10, "breakdown": {"speed": -1}})
    assert r.status_code == 422 and "greater than or equal to 0" in reason(r)
    r = client.post(f"{A}/tasks/maze/results", json={"score": 10, "run_id": "nosuchrun"})
    assert r.status_code == 404 and "no task run 'nosuchrun'" in reason(r)
    run_id = client.post(f"{A}/tasks/maze/enter").json()["run_id"]
    r = client.post(f"{A}/tasks/maze/results", json={"score": 10})  # completes the one open run
    assert r.status_code == 200 and r.json()["run"]["run_id"] == run_id
    assert client.get(f"{A}/tasks/maze/results").json()["runs"][0]["completed"] is True


def test_cli_enter_prints_its_run_and_result_completes_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:

    from mateclaw_mem.cli.main import main
    from tests.support.isolation import no_config_here

    no_config_here(monkeypatch, tmp_path)  # from tmp_path, on tmp_path/workspace, no settings file

    def run(*args: str) -> tuple[int, str, str]:
        code = main(["--workspace", str(tmp_path / "ws"), *args])
        out, err = capsys.readouterr()
        return code, out, err

    assert run("init")[0] == 0
    code, out, err = run("learn", "enter", "default", "maze")
    first, blank, *context = out.split("\n")
    assert code == 0 and first.startswith("run ") and blank == "" and context[0] == "# TASK.md — maze"
    run_id = first.split()[1]
    assert f"--run {run_id}" in err  # stderr says what to do with it
    code, out, _ = run("learn", "result", "default", "maze", "640")
    assert code == 0 and f"recorded run {run_id}: 1 attempts" in out
    code, out, _ = run("learn", "task", "default", "maze", "--runs")
    assert out.splitlines() == [out.splitlines()[0]] and "completed" in out and run_id[:12] in out

    code, _, err = run("learn", "result", "default", "maze", "5", "--run", "nosuchrun")
    assert code == 3 and "nosuchrun" in err
    code, _, err = run("learn", "result", "default", "maze", "1001")
    assert code == 2 and "out of range: scores are 0-1000" in err
    a = run("learn", "enter", "default", "maze")[1].split()[1]
    b = run("learn", "enter", "default", "maze")[1].split()[1]
    code, _, err = run("learn", "result", "default", "maze", "5")
    assert code == 2 and a in err and b in err and "say which one" in err
    code, out, _ = run("learn", "task", "default", "maze", "--json")
    assert '"attempt_count": 1' in out  # neither refused result counted
