"""The MCP face, tool family by tool family: every registered tool is called at least once by a real
MCP client (the SDK's) talking to `mateclaw-mem mcp` over stdio, and each case checks the answers and
what the calls left on disk.

One server process for the module (starting one costs more than all the calls); each case works on
its own files, keys and tasks, so the cases do not depend on each other or on their order.
`test_every_tool_has_a_case` lists the server's tools: a tool added without a case here fails it.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from anyio.from_thread import BlockingPortal, start_blocking_portal
from mcp import Client, StdioServerParameters

from mateclaw_mem.mcp.features import TOOL_FEATURES

AGENT = "default"


@dataclass
class Session:
    """A connected client; `called` records which tools a case really called."""

    portal: BlockingPortal
    client: Client
    ws: Path
    called: set[str] = field(default_factory=set)

    def call(self, name: str, args: dict[str, Any] | None = None) -> Any:
        self.called.add(name)
        return self.portal.call(self.client.call_tool, name, args or {})

    def ok(self, name: str, args: dict[str, Any] | None = None) -> Any:
        """The tool's answer (structured content; a bare list or string comes wrapped as {"result": ...})."""
        result = self.call(name, args)
        assert not result.is_error, (name, text(result))
        data = result.structured_content
        assert data is not None, (name, text(result))
        return data["result"] if set(data) == {"result"} else data

    def error(self, name: str, args: dict[str, Any] | None = None) -> str:
        result = self.call(name, args)
        assert result.is_error, (name, text(result))
        return text(result)

    def file(self, rel: str) -> Path:
        return self.ws / AGENT / rel


def text(result: Any) -> str:
    return "\n".join(c.text for c in result.content if getattr(c, "type", "") == "text")


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Session]:
    root = tmp_path_factory.mktemp("faces-mcp")
    ws = root / "workspace"
    # An empty config file and an environment without MATECLAW_*: built-in defaults on this workspace (the
    # checkout's config/mateclaw.yaml, found otherwise, turns the lifecycle features on).
    env = {k: v for k, v in os.environ.items() if not k.startswith("MATECLAW_")}
    (empty := root / "empty.yaml").write_text("", encoding="utf-8")
    # `mcp` serves an agent that exists: `init` creates it (and the workspace) first.
    subprocess.run([sys.executable, "-m", "mateclaw_mem.cli.main", "init", AGENT, "--workspace", str(ws),
                    "--config", str(empty)], cwd=root, env=env, check=True, capture_output=True, timeout=120)
    params = StdioServerParameters(
        command=sys.executable, cwd=str(root), env=env,
        args=["-m", "mateclaw_mem.cli.main", "mcp", "--workspace", str(ws), "--config", str(empty), "--agent", AGENT,
              "--tools", "all"],
    )
    # A portal keeps one event loop (and so one connected client) alive across the module's tests.
    with start_blocking_portal() as portal, \
            portal.wrap_async_context_manager(Client(params, read_timeout_seconds=60)) as client:
        yield Session(portal, client, ws)


@pytest.fixture
def mcp(server: Session) -> Session:
    server.called = set()
    return server


# -- the cases: one per tool family ------------------------------------------------------------------------


@dataclass(frozen=True)
class Case:
    name: str
    covers: frozenset[str]
    run: Callable[[Session], None]


CASES: list[Case] = []


def case(*covers: str) -> Callable[[Callable[[Session], None]], Callable[[Session], None]]:
    def add(fn: Callable[[Session], None]) -> Callable[[Session], None]:
        CASES.append(Case(fn.__name__, frozenset(covers), fn))
        return fn

    return add


@case("list_workspace_memory_files", "read_workspace_memory_file", "write_workspace_memory_file",
      "edit_workspace_memory_file")
def workspace_files(mcp: Session) -> None:
    rel = "notes/faces-workspace.md"
    listing = mcp.ok("list_workspace_memory_files")
    listed = [f["filename"] for f in listing["files"]]  # the seed's names: agentId, count, filename, fileSize
    assert listed[:4] == ["AGENTS.md", "SOUL.md", "PROFILE.md", "MEMORY.md"]
    assert listing["agentId"] == AGENT and listing["count"] == len(listed)
    memory = listing["files"][3]
    assert memory["fileSize"] == mcp.file("MEMORY.md").stat().st_size == memory["size"] and memory["path"] == "MEMORY.md"
    wrote = mcp.ok("write_workspace_memory_file", {"path": rel, "content": "## Work\nships the beta in June\n"})
    assert wrote["changed"] is True and wrote["filename"] == rel and wrote["agentId"] == AGENT
    read = mcp.ok("read_workspace_memory_file", {"path": rel})
    assert read["sha"] == wrote["sha"] and "ships the beta in June" in read["content"]
    assert read["enabled"] is False and read["filename"] == rel and read["fileSize"] == mcp.file(rel).stat().st_size
    assert mcp.ok("read_workspace_memory_file", {"path": "MEMORY.md"})["enabled"] is True
    edited = mcp.ok("edit_workspace_memory_file", {"path": rel, "old_text": "June", "new_text": "July"})
    assert edited["replacements"] == 1 and edited["filename"] == rel
    stale = mcp.error("write_workspace_memory_file", {"path": rel, "content": "lost", "expected_sha": read["sha"]})
    assert "changed since it was read" in stale
    assert "ships the beta in July" in mcp.file(rel).read_text(encoding="utf-8")
    row = next(f for f in mcp.ok("list_workspace_memory_files", {"prefix": "notes/"})["files"] if f["filename"] == rel)
    assert row["enabled"] is False  # a machine's new file stays out of the always-on prompt


@case("write_memory")
def write_memory(mcp: Session) -> None:
    rel = "notes/faces-merge.md"
    first = mcp.ok("write_memory", {"path": rel, "strategy": "upsert_kv", "section": "Facts", "key": "tea",
                                    "content": "sencha"})
    assert first["strategy"] == "upsert_kv" and first["filename"] == rel and first["changed"] is True
    mcp.ok("write_memory", {"path": rel, "strategy": "append", "section": "Plans", "content": "ski in March"})
    mcp.ok("write_memory", {"path": rel, "strategy": "upsert_kv", "section": "Facts", "content": "tea: matcha"})
    mcp.ok("write_memory", {"path": rel, "strategy": "replace_section", "content": "## Plans\nhike in May\n"})
    body = mcp.file(rel).read_text(encoding="utf-8")
    assert body.endswith("---\n## Facts\n- tea: matcha\n\n## Plans\nhike in May\n"), body
    refused = mcp.error("write_memory", {"path": rel, "strategy": "overwrite", "section": "Plans", "content": "x"})
    assert "section does not apply" in refused
    mcp.ok("write_memory", {"path": rel, "strategy": "overwrite", "content": "fresh start"})
    assert mcp.file(rel).read_text(encoding="utf-8") == "---\nenabled: false\n---\nfresh start\n"


@case("view", "create", "str_replace", "insert", "delete", "rename")
def file_commands(mcp: Session) -> None:
    mcp.ok("create", {"path": "/memories/faces-cmd/plans.md", "file_text": "# Plans\nski\n"})
    mcp.ok("str_replace", {"path": "/memories/faces-cmd/plans.md", "old_str": "ski", "new_str": "ski in March"})
    numbered = mcp.ok("view", {"path": "/memories/faces-cmd/plans.md"})
    title = next(int(line.split("\t")[0]) for line in numbered.splitlines() if line.endswith("\t# Plans"))
    mcp.ok("insert", {"path": "/memories/faces-cmd/plans.md", "insert_line": title, "insert_text": "hike in May"})
    viewed = mcp.ok("view", {"path": "/memories/faces-cmd/plans.md"})
    assert f"{title + 1}\thike in May" in viewed and f"{title + 2}\tski in March" in viewed, viewed
    mcp.ok("rename", {"old_path": "/memories/faces-cmd/plans.md", "new_path": "/memories/faces-cmd/trips.md"})
    assert "/memories/faces-cmd/trips.md" in mcp.ok("view", {"path": "/memories/faces-cmd"})
    assert not mcp.file("faces-cmd/plans.md").exists()
    assert "ski in March" in mcp.file("faces-cmd/trips.md").read_text(encoding="utf-8")
    mcp.ok("delete", {"path": "/memories/faces-cmd/trips.md"})
    assert not mcp.file("faces-cmd/trips.md").exists()
    assert "does not exist" in mcp.error("view", {"path": "/memories/faces-cmd/trips.md"})


@case("search_memory")
def search(mcp: Session) -> None:
    mcp.ok("create", {"path": "/memories/faces-search.md", "file_text": "# Pets\nThe cat is called Marmalade.\n"})
    found = mcp.ok("search_memory", {"query": "Marmalade"})
    assert any(h["file"] == "faces-search.md" for h in found["hits"]), found
    assert mcp.ok("search_memory", {"query": "xylophonequartz", "scope": "files"})["hits"] == []


@case("remember", "recall", "forget")
def structured(mcp: Session) -> None:
    made = mcp.ok("remember", {"type": "reference", "key": "faces-tea", "text": "Likes sencha"})
    assert made == {"type": "reference", "key": "faces-tea", "created": True, "changed": True}
    assert "Likes sencha" in mcp.file("structured/reference.md").read_text(encoding="utf-8")
    assert [e["text"] for e in mcp.ok("recall", {"key": "faces-tea"})] == ["Likes sencha"]
    assert "faces-tea" in [e["key"] for e in mcp.ok("recall", {"type": "reference"})]
    assert mcp.ok("forget", {"type": "reference", "key": "faces-tea"})["key"] == "faces-tea"
    assert "Likes sencha" not in mcp.file("structured/reference.md").read_text(encoding="utf-8")
    assert "faces-tea" in mcp.error("recall", {"key": "faces-tea"})


@case("learning_memory", "update_learning_memory")
def learning_memory(mcp: Session) -> None:
    mcp.ok("update_learning_memory", {"stats": "faces: 3 runs so far", "add_strategy": "Hug the left wall",
                                      "categories": {"faces-maze": "walls are mostly left"}})
    mem = mcp.ok("learning_memory")
    assert mem["stats"] == "faces: 3 runs so far" and "Hug the left wall" in mem["strategies"]
    assert mem["categories"]["faces-maze"] == "walls are mostly left"
    assert "faces: 3 runs so far" in mcp.file("learning/LEARNING.md").read_text(encoding="utf-8")
    after = mcp.ok("update_learning_memory", {"remove_strategy": "Hug the left wall"})
    assert "Hug the left wall" not in after["strategies"]


@case("enter_task", "record_task_result", "reflect", "task_memory", "update_task_memory", "list_task_memories",
      "task_runs")
def tasks(mcp: Session) -> None:
    task = "faces-maze"
    mcp.ok("update_task_memory", {"task": task, "notes": "the exit is usually north",
                                  "add_strategy": "Check dead ends twice"})
    entered = mcp.ok("enter_task", {"task": task})
    assert entered["run_id"] and "Check dead ends twice" in entered["context"], entered
    recorded = mcp.ok("record_task_result", {"task": task, "score": 7, "breakdown": {"speed": 3},
                                             "run_id": entered["run_id"]})
    assert recorded["task"]["attempt_count"] == 1 and recorded["task"]["best_score"] == 7
    mcp.ok("reflect", {"task": task, "lesson": "Look for the exit sign first", "run_id": entered["run_id"]})
    memoryless = mcp.ok("enter_task", {"task": task, "memoryless": True})
    assert "Check dead ends twice" not in memoryless["context"]
    refused = mcp.error("reflect", {"task": task, "lesson": "x", "run_id": memoryless["run_id"]})
    assert "memoryless" in refused
    memory = mcp.ok("task_memory", {"task": task})
    assert memory["notes"] == "the exit is usually north" and memory["strategies"] == ["Check dead ends twice"]
    assert task in [t["task"] for t in mcp.ok("list_task_memories")["tasks"]]
    runs = mcp.ok("task_runs", {"task": task})["runs"]
    assert {r["run_id"]: r["memoryless"] for r in runs} == {entered["run_id"]: False, memoryless["run_id"]: True}
    task_file = next((mcp.ws / AGENT).glob(f"**/{task}.md"))  # task memory is a file a person can read
    assert "the exit is usually north" in task_file.read_text(encoding="utf-8")


@case("harness_lineage", "label_harness_version")
def lineage(mcp: Session) -> None:
    first = mcp.ok("harness_lineage")
    assert first["currentHash"] in [v["hash"] for v in first["versions"]]
    labelled = mcp.ok("label_harness_version", {"label": "faces-baseline"})
    assert labelled["hash"] == first["currentHash"] and labelled["label"] == "faces-baseline"
    again = mcp.ok("harness_lineage")
    assert {v["hash"]: v["label"] for v in again["versions"]}[first["currentHash"]] == "faces-baseline"


@case("memory_facts", "memory_feedback", "memory_confirm")
def facts(mcp: Session) -> None:
    # Built-in defaults: fact projection is off, and each tool says so naming the key (the tools with the
    # layer on: tests/test_facts_faces.py).
    for name, args in (("memory_facts", {}), ("memory_feedback", {"fact_id": "0123456789abcdef", "feedback": "HELPFUL"}),
                       ("memory_confirm", {"fact_id": "0123456789abcdef"})):
        assert "mate.memory.fact.projection-enabled" in mcp.error(name, args)


@case("memory_contradictions", "memory_resolve_contradiction")
def contradictions(mcp: Session) -> None:
    # Built-in defaults: fact projection is off, and both tools say so naming the key (the tools with the
    # layer on: tests/test_contradictions.py).
    for name, args in (("memory_contradictions", {}),
                       ("memory_resolve_contradiction", {"id": "0" * 20, "action": "IGNORE"})):
        assert "mate.memory.fact.projection-enabled" in mcp.error(name, args)


@case("memory_forget")
def forget(mcp: Session) -> None:
    # Built-in defaults: forget is off, and the tool says so naming the key (with it on: tests/test_forget.py).
    msg = mcp.error("memory_forget", {"text": "I take my tea without sugar"})
    assert "mate.memory.fact.forget-enabled" in msg and "Traceback" not in msg


@case("morning_card", "morning_card_seen", "morning_card_fact", "soul_proposal")
def morning_card(mcp: Session) -> None:
    # No dream has run in this workspace: nothing waits, and a fact the card never showed is refused.
    assert mcp.ok("morning_card")["card"] is None
    assert mcp.ok("morning_card_seen") is not None
    assert "Traceback" not in mcp.error("morning_card_fact", {"action": "confirm", "fact_id": "0123456789abcdef"})
    assert mcp.ok("soul_proposal")["proposal"] is None


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_tool_family(case: Case, mcp: Session) -> None:
    case.run(mcp)
    assert case.covers <= mcp.called, f"{case.name} did not call {sorted(case.covers - mcp.called)}"


def test_every_tool_has_a_case(server: Session) -> None:
    listed = server.portal.call(server.client.list_tools)
    tools = {t.name for t in listed.tools}
    covered = set().union(*(c.covers for c in CASES))
    assert len(tools) > 20  # the server's tools were really listed
    assert tools - covered == set(), "tools no case calls"
    # With the built-in defaults the lifecycle features are off: their tools are not listed (a call still
    # answers, naming the key: the facts, contradictions and forget cases).
    assert covered - tools == set(TOOL_FEATURES), "cases name tools the server does not have"


def test_a_tool_error_is_readable_and_the_session_survives(server: Session) -> None:
    # Not a family: the shape every family's refusals share, and proof the process keeps serving.
    msg = server.error("read_workspace_memory_file", {"path": "../../etc/passwd"})
    assert "'..'" in msg and "Traceback" not in msg
    assert "MEMORY.md" in [f["filename"] for f in server.ok("list_workspace_memory_files")["files"]]  # answering
