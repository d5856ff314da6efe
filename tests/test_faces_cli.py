"""The CLI face, command by command: every command a user can type at `mateclaw-mem` is run at least
once, as a real subprocess on a real workspace, and each case checks the exit code and what the
command printed or left on disk.

One parametrised case per command group. The template workspace (seeded agent, a few days of daily
notes, one logged conversation) is built once per module and copied for each case, so cases are
independent of each other and of their order. `test_every_command_has_a_case` reads the real parser:
a command added without a case here fails it.

One process per group: a case's commands run one after another in one `tests/support/cli_runner.py`
process (the CLI's real `main`, each command with its own stdin, stdout, stderr, environment and exit
code), so Python and the imports are paid once per group, not once per command (55 processes took about
a quarter of the suite). That one process runs a whole group also proves that a command leaves nothing
behind (an open database, a changed environment) that the next one trips on. What only a fresh process
shows stays a fresh process: `serve`, the MCP stdio server, `--help` / `--version` / no command, and
`status` finding its workspace through MATECLAW_WORKSPACE.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
import urllib.request
import zipfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from mateclaw_mem.cli.main import build_parser

CLI = (sys.executable, "-m", "mateclaw_mem.cli.main")
AGENT = "default"
CHAT = "chat-1"
# Recurring on two days (a dream promotes it); the one-off stays in the daily notes.
RECURRING = "Project Atlas deadline: December 15"
NOTES = [
    (3, "Planning", f"- {RECURRING}\n- The user prefers dark mode in editors"),
    (2, "Standup", f"- {RECURRING}\n- Fixed a typo in the README"),
    (1, "Tools", "- The user prefers dark mode in editors"),
]
# Enough machine-written feedback entries for the structured consolidation to take the bucket on
# (its minimum is 8), one pair of them near-duplicates that the rules merge.
FEEDBACK = [
    ("tone", "Prefers short answers."),
    ("examples", "Likes concrete code examples."),
    ("language", "Prefers answers in German."),
    ("lang-pref", "prefers answers in German"),
    ("units", "Uses metric units."),
    ("dates", "Writes dates as YYYY-MM-DD."),
    ("emoji", "Dislikes emoji in answers."),
    ("tests", "Wants a test with every fix."),
]


def _clean_env(**extra: str) -> dict[str, str]:
    # The module-scoped template is built before the autouse scrub runs; build every env explicitly.
    env = {k: v for k, v in os.environ.items() if not k.startswith("MATECLAW_")}
    env.update(extra)
    return env


def _command_of(args: tuple[str, ...]) -> str:
    """`learn result default maze 7` -> `learn result`; `model check` stays; `ls --json` -> `ls`."""
    words = [a for a in args if not a.startswith("-")]
    if not words:
        return ""
    return f"{words[0]} {words[1]}" if words[0] in ("learn", "model", "facts", "aml") and len(words) > 1 else words[0]


RUNNER = Path(__file__).parent / "support" / "cli_runner.py"


@dataclass
class Shell:
    """`mateclaw-mem` started in `root` (no ./config there) on `root/workspace`: each command in the
    group's one runner process, or in a fresh process of its own with `fresh=True`."""

    root: Path
    invoked: set[str] = field(default_factory=set)
    runner: subprocess.Popen[str] | None = None

    @property
    def ws(self) -> Path:
        return self.root / "workspace"

    def argv(self, args: tuple[str, ...], workspace_flag: bool) -> list[str]:
        self.invoked.add(_command_of(args))
        return [*CLI, *args, *(("--workspace", str(self.ws)) if workspace_flag else ())]

    def __call__(self, *args: str, stdin: str | None = None, expect: int = 0, env: dict[str, str] | None = None,
                 workspace_flag: bool = True, fresh: bool = False) -> tuple[str, str]:
        argv = self.argv(args, workspace_flag)
        if fresh:
            proc = subprocess.run(argv, cwd=self.root, env=_clean_env(**(env or {})),
                                  input=stdin, stdin=None if stdin is not None else subprocess.DEVNULL,
                                  capture_output=True, text=True, timeout=120)
            rc, out, err = proc.returncode, proc.stdout, proc.stderr
        else:
            rc, out, err = self._in_runner(argv[len(CLI):], stdin, env or {})
        assert rc == expect, (args, rc, out[-2000:], err[-2000:])
        assert "Traceback" not in err, err
        return out, err

    def _in_runner(self, argv: list[str], stdin: str | None, env: dict[str, str]) -> tuple[int, str, str]:
        if self.runner is None:
            self.runner = subprocess.Popen([sys.executable, str(RUNNER)], cwd=self.root, env=_clean_env(),
                                           stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        assert self.runner.stdin is not None and self.runner.stdout is not None
        self.runner.stdin.write(json.dumps({"argv": argv, "stdin": stdin, "env": env}) + "\n")
        self.runner.stdin.flush()
        line = self.runner.stdout.readline()
        assert line, f"the CLI runner exited ({self.runner.poll()}) running {argv}"
        answer = json.loads(line)
        return int(answer["rc"]), str(answer["stdout"]), str(answer["stderr"])

    def close(self) -> None:
        if self.runner is not None:
            assert self.runner.stdin is not None
            self.runner.stdin.close()  # the runner's loop ends at the end of its input
            try:
                self.runner.wait(timeout=30)
            finally:
                if self.runner.poll() is None:
                    self.runner.kill()
                    self.runner.wait()

    def json(self, *args: str, expect: int = 0, **kw: Any) -> Any:
        out, _ = self(*args, "--json", expect=expect, **kw)
        return json.loads(out)

    def popen(self, *args: str, **kw: Any) -> subprocess.Popen[str]:
        return subprocess.Popen(self.argv(args, True), cwd=self.root, env=_clean_env(), text=True, **kw)

    def text(self, rel: str, agent: str = AGENT) -> str:
        return (self.ws / agent / rel).read_text(encoding="utf-8")


@pytest.fixture(scope="module")
def template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A workspace as a few days of use leave it. Built in-process through the real services: no
    command logs a conversation, and the notes must be dated on earlier days."""
    from mateclaw_mem.conversations.log import NewMessage
    from mateclaw_mem.runtime.services import Services
    from mateclaw_mem.settings import load_settings

    root = tmp_path_factory.mktemp("faces-cli")
    cfg = root / "empty.yaml"  # built-in defaults, like the subprocesses (no ./config in their cwd)
    cfg.write_text("{}\n", encoding="utf-8")
    with pytest.MonkeyPatch.context() as mp:
        for key in [k for k in os.environ if k.startswith("MATECLAW_")]:
            mp.delenv(key)
        services = Services(load_settings(cfg, root / "workspace"))
        try:
            services.store.ensure_agent(AGENT)
            now = services.clock.now()
            for days, title, body in NOTES:
                services.store.append_daily(AGENT, title, body, actor="extraction", when=now - timedelta(days=days))
            for key, text in FEEDBACK:
                services.structured.remember(AGENT, "feedback", key, text, actor="api")
            services.log.append(AGENT, CHAT, [
                NewMessage("user", "Hello there, how are you doing today?"),
                NewMessage("assistant", "Fine, thanks. How can I help?"),
                NewMessage("user", "My name is Alice and I live in Berlin."),
                NewMessage("assistant", "Nice to meet you, Alice."),
            ], now_ms=int(time.time() * 1000))
        finally:
            services.close()  # checkpoints SQLite, so a plain copy of the folder is a whole workspace
    return root


@pytest.fixture
def shell(template: Path, tmp_path: Path) -> Iterator[Shell]:
    shutil.copytree(template / "workspace", tmp_path / "workspace")
    sh = Shell(tmp_path)
    yield sh
    sh.close()


# -- the cases: one per command group ----------------------------------------------------------------------


@dataclass(frozen=True)
class Case:
    name: str
    covers: frozenset[str]
    run: Callable[[Shell], None]


CASES: list[Case] = []


def case(*covers: str) -> Callable[[Callable[[Shell], None]], Callable[[Shell], None]]:
    def add(fn: Callable[[Shell], None]) -> Callable[[Shell], None]:
        CASES.append(Case(fn.__name__, frozenset(covers), fn))
        return fn

    return add


@case("init")
def init(sh: Shell) -> None:
    data = sh.json("init", "helper")
    assert data["agent"] == "helper"
    assert set(data["created"]) == {"AGENTS.md", "SOUL.md", "PROFILE.md", "MEMORY.md"}
    assert (sh.ws / "helper" / "MEMORY.md").read_text(encoding="utf-8").startswith("---\n")
    out, _ = sh("init", "helper")
    assert "already set up" in out


@case("status")
def status(sh: Shell) -> None:
    # The workspace from the environment, as service files and cron jobs set it.
    data = sh.json("status", env={"MATECLAW_WORKSPACE": str(sh.ws)}, workspace_flag=False, fresh=True)
    assert data["mode"] == "rules"
    assert Path(data["workspace"]).resolve() == sh.ws.resolve()
    files = {f["file"] for f in data["agents"][AGENT]["files"]}
    assert {"AGENTS.md", "SOUL.md", "PROFILE.md", "MEMORY.md"} <= files
    out, _ = sh("status", AGENT)
    assert out.startswith("mode: rules") and "MEMORY.md" in out and "dreaming:" in out


@case("serve", "aml check", "aml status", "aml export", "aml import")
def serve(sh: Shell) -> None:
    proc = sh.popen("serve", "--host", "127.0.0.1", "--port", "0", stderr=subprocess.PIPE,
                    stdin=subprocess.DEVNULL)
    assert proc.stderr is not None
    try:
        log = ""
        while "ready" not in log:
            line = proc.stderr.readline()
            if not line:
                break
            log += line
        assert "ready" in log, log
        url = re.search(r"listening on (http://\S+)", log)
        assert url, log
        with urllib.request.urlopen(f"{url.group(1)}/health", timeout=30) as r:
            assert r.status == 200
        # The Add/Search contract, checked against the daemon just started.
        out, _ = sh("aml", "check", url.group(1))
        assert "PASS" in out and "FAIL" not in out, out
        # An Add's turns move to another workspace whole (exported while the daemon runs).
        body = {"request_id": "r1", "user_id": "u1", "session_id": "s1",
                "messages": [{"role": "user", "content": "the lantern is in the shed"}]}
        add = urllib.request.Request(f"{url.group(1)}/v1/aml/add", json.dumps(body).encode(),
                                     {"Content-Type": "application/json"})
        with urllib.request.urlopen(add, timeout=30) as r:
            assert json.loads(r.read())["success"] is True
        held = sh.json("aml", "status")
        assert (held["backend"], held["messages"], held["users"]) == ("sqlite", 1, 1), held
        dump = sh.root / "aml.jsonl.gz"
        sh("aml", "export", str(dump))
        other = sh.root / "other"
        sh("aml", "import", str(dump), "--workspace", str(other), workspace_flag=False)
        moved = sh.json("aml", "status", "--workspace", str(other), workspace_flag=False)
        assert (moved["messages"], moved["users"]) == (held["messages"], held["users"]), (moved, held)
        sh("aml", "import", str(dump), "--workspace", str(other), workspace_flag=False, expect=4)  # not empty
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=60) == 0
        assert "stopped" in proc.stderr.read()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


@case("ls", "cat", "write", "edit", "enable", "disable", "sort", "history", "undo")
def files(sh: Shell) -> None:
    listed = [r["file"] for r in sh.json("ls", AGENT)]
    assert listed[:4] == ["AGENTS.md", "SOUL.md", "PROFILE.md", "MEMORY.md"]
    assert any(f.startswith("memory/") for f in listed)  # the template's daily notes
    out, _ = sh("write", AGENT, "notes/trip.md", stdin="# Trip\n- pack boots\n")
    assert "wrote notes/trip.md" in out
    snap = sh.json("cat", AGENT, "notes/trip.md")
    assert snap["content"].startswith("---\nenabled: false\n") and "- pack boots" in snap["content"]
    out, _ = sh("cat", AGENT, "notes/trip.md")
    assert out == snap["content"]
    out, _ = sh("edit", AGENT, "notes/trip.md", "--old", "boots", "--new", "hiking boots")
    assert "(1 replacement)" in out and "hiking boots" in sh.text("notes/trip.md")
    sh("write", AGENT, "notes/trip.md", "--text", "lost", "--expect", snap["sha"], expect=4)  # stale hash
    sh("enable", AGENT, "notes/trip.md")
    sh("sort", AGENT, "notes/trip.md", "7")
    row = next(r for r in sh.json("ls", AGENT, "--prefix", "notes/") if r["file"] == "notes/trip.md")
    assert row["enabled"] is True and row["sort_order"] == 7
    sh("disable", AGENT, "notes/trip.md")
    assert "enabled: false" in sh.text("notes/trip.md")
    versions = sh.json("history", AGENT, "notes/trip.md")
    assert len(versions) == 5 and {v["actor"] for v in versions} == {"person"}  # write, edit, enable, sort, disable
    out, _ = sh("undo", AGENT, "notes/trip.md")
    assert "restored notes/trip.md" in out
    restored = sh.text("notes/trip.md")
    assert "enabled: true" in restored and "sort_order: 7" in restored and "hiking boots" in restored


@case("write-memory")
def write_memory(sh: Shell) -> None:
    rel = "notes/merge.md"
    out, _ = sh("write-memory", AGENT, rel, "--strategy", "upsert_kv", "--section", "Facts", "--key", "coffee",
                "--text", "oat flat white")
    assert "upsert_kv into notes/merge.md (## Facts)" in out
    sh("write-memory", AGENT, rel, "--strategy", "append", "--section", "Plans", stdin="ski in March\n")
    sh("write-memory", AGENT, rel, "--strategy", "upsert_kv", "--section", "Facts", "--text", "coffee: espresso")
    done = sh.json("write-memory", AGENT, rel, "--strategy", "replace_section", "--section", "Plans",
                   "--text", "hike in May")
    assert done["strategy"] == "replace_section" and done["changed"] is True
    # Sections the merges added are one blank line apart; the key was replaced in place.
    assert sh.text(rel).endswith("---\n## Facts\n- coffee: espresso\n\n## Plans\nhike in May\n")
    _, err = sh("write-memory", AGENT, rel, "--strategy", "append", "--key", "x", "--text", "y", expect=2)
    assert "a key applies to upsert_kv only" in err
    sh("write-memory", AGENT, rel, "--strategy", "shuffle", "--text", "y", expect=2)  # argparse names the choices
    assert {v["actor"] for v in sh.json("history", AGENT, rel)} == {"person"}
    sh("write-memory", AGENT, rel, "--strategy", "overwrite", "--text", "only this")
    assert sh.text(rel) == "---\nenabled: false\n---\nonly this\n"  # the frontmatter stays


@case("reindex", "search")
def search(sh: Shell) -> None:
    sh("write", AGENT, "notes/pets.md", "--text", "# Pets\nThe cat is called Marmalade.\n")
    report = sh.json("reindex")
    assert report["files"] >= 6  # four seeded files, the daily notes, the new one
    assert sh.json("reindex", AGENT)["agent"] == AGENT
    result = sh.json("search", "Marmalade", "--agent", AGENT)
    assert any(h["file"] == "notes/pets.md" for h in result["hits"]), result
    out, _ = sh("search", "Marmalade", "--scope", "files")
    assert "notes/pets.md" in out and "Marmalade" in out
    out, _ = sh("search", "xylophonequartz", expect=10)
    assert "no matches" in out


@case("context", "remember", "recall", "forget", "consolidate-structured")
def prompt(sh: Shell) -> None:
    out, _ = sh("remember", AGENT, "user", "coffee", "Drinks a flat white, no sugar")
    assert "added user entry 'coffee'" in out
    assert "flat white" in sh.text("structured/user.md")
    sh("remember", AGENT, "user", "coffee-order", "Drinks a flat white without sugar")
    recalled = sh.json("recall", AGENT, "user", "coffee")
    assert [(r["key"], r["text"]) for r in recalled] == [("coffee", "Drinks a flat white, no sugar")], recalled
    built = sh.json("context", AGENT, "--query", "what coffee do I drink?")
    prompt_text = json.dumps(built, ensure_ascii=False)
    assert "--- MEMORY.md ---" in prompt_text and "flat white" in prompt_text
    out, _ = sh("context", AGENT, "--memoryless")
    assert "(memoryless)" in out and "flat white" not in out
    report = sh.json("consolidate-structured", AGENT)
    assert [(b["type"], b["status"], b["before"], b["after"]) for b in report["buckets"]] == [
        ("feedback", "updated", 8, 7)], report
    assert sh.text("structured/feedback.md").count("answers in German") == 1
    sh("consolidate-structured", AGENT, expect=10)  # nothing changed since: nothing to do
    out, _ = sh("forget", AGENT, "user", "coffee")
    assert "forgot user entry 'coffee'" in out
    assert "Drinks a flat white, no sugar" not in sh.text("structured/user.md")
    _, err = sh("recall", AGENT, "user", "coffee", expect=3)
    assert "no structured entry with key 'coffee'" in err
    out, _ = sh("recall", AGENT, "project")
    assert out == "no structured entries\n"


@case("model check")
def model_check(sh: Shell) -> None:
    from tests.support.model_server import Answer, ModelServer

    _, err = sh("model", "check", expect=6)  # rules mode: nothing to check, and it says so
    assert "no model configured" in err
    with ModelServer(default="OK") as server:
        cfg = sh.root / "model.yaml"
        cfg.write_text(f"model:\n  base-url: {server.base_url}\n  model: test-model\n", encoding="utf-8")
        out, _ = sh("model", "check", env={"MATECLAW_CONFIG": str(cfg)})
        assert "test-model: answering" in out
        server.default = Answer(status=503, error_message="loading model")
        out, _ = sh("model", "check", expect=7, env={"MATECLAW_CONFIG": str(cfg)})
        assert "not answering" in out and "loading model" in out


@case("extract")
def extract(sh: Shell) -> None:
    data = sh.json("extract", AGENT, CHAT)
    assert "PROFILE.md" in data["files_changed"], data
    assert "Alice" in sh.text("PROFILE.md")
    _, err = sh("extract", AGENT, "no-such-chat", expect=3)
    assert "no logged messages" in err


@case("contradictions")
def contradictions(sh: Shell) -> None:
    cfg = sh.root / "facts.yaml"
    cfg.write_text("mate:\n  memory:\n    fact:\n      projection-enabled: true\n      contradiction-check-enabled: true\n",
                   encoding="utf-8")
    flags = ("--config", str(cfg))
    (sh.ws / AGENT / "PROFILE.md").write_text(sh.text("PROFILE.md") + "\n## Where\n- timezone: Europe/Berlin\n",
                                              encoding="utf-8")
    (sh.ws / AGENT / "MEMORY.md").write_text(sh.text("MEMORY.md") + "\n## Travel\n- timezone: Asia/Shanghai\n",
                                             encoding="utf-8")
    listed = sh.json("contradictions", AGENT, *flags)["contradictions"]
    assert len(listed) == 1 and listed[0]["kind"] == "same_key", listed
    pid = listed[0]["id"]
    sh("contradictions", AGENT, "resolve", pid, "merge", *flags, expect=2)  # MERGE needs --text
    out, _ = sh("contradictions", AGENT, "resolve", pid, "keep_a", *flags)
    lost, kept = listed[0]["b"], listed[0]["a"]
    assert "KEEP_A" in out and lost["text"] not in sh.text(lost["file"]) and kept["text"] in sh.text(kept["file"])
    sh("contradictions", AGENT, "resolve", pid, "IGNORE", *flags, expect=4)  # already resolved
    sh("contradictions", AGENT, *flags, expect=10)  # none open


@case("import-chats")
def import_chats(sh: Shell) -> None:
    export = sh.ws.parent / "chats.jsonl"
    export.write_text(
        '{"role": "user", "content": "I moved to Porto last spring.", "timestamp": "2024-03-02T10:00:00Z",'
        ' "conversation": "c-porto"}\n'
        '{"role": "assistant", "content": "Porto is lovely!", "timestamp": "2024-03-02T10:00:05Z",'
        ' "conversation": "c-porto"}\n', encoding="utf-8")
    out, _ = sh("import-chats", str(export), "--agent", AGENT, "--dry-run")
    assert "1 conversation" in out and "2 messages" in out, out
    sh("import-chats", str(export), "--agent", AGENT)
    sh("import-chats", str(export), "--agent", AGENT, expect=10)  # a second run adds nothing


@case("dream")
def dream(sh: Shell) -> None:
    before = sh.text("MEMORY.md")
    preview = sh.json("dream", "--preview")
    assert preview["status"] == "preview" and RECURRING in preview["diff"], preview
    assert sh.text("MEMORY.md") == before  # a preview writes nothing
    out, _ = sh("dream", AGENT)
    assert RECURRING in sh.text("MEMORY.md") and "Fixed a typo" not in sh.text("MEMORY.md")
    run = re.search(r"mateclaw-mem undo \S+ --run (\S+)", out)
    assert run, out
    assert "Dreaming" in sh.text("DREAMS.md")
    sh("undo", AGENT, "--run", run.group(1))
    assert sh.text("MEMORY.md") == before


@case("card", "soul")
def card_and_soul(sh: Shell) -> None:
    sh("card", AGENT, expect=10)  # no dream yet: nothing waits
    sh("dream", AGENT)
    out, _ = sh("card", AGENT)
    assert f"promoted: {RECURRING}" in out, out
    sh("card", AGENT, "--seen")
    sh("card", AGENT, expect=10)
    sh("soul", AGENT, expect=10)  # soul-update-interval is 0: never a proposal


@case("learn show", "learn set", "learn strategy", "learn task", "learn result", "learn reflect", "learn enter",
      "learn lineage")
def learn(sh: Shell) -> None:
    sh("learn", "set", AGENT, "--stats", "3 runs so far", "--category", "maze", "walls are mostly left")
    sh("learn", "strategy", AGENT, "add", "Hug the left wall")
    out, _ = sh("learn", "strategy", AGENT, "add", "Check dead ends twice", "--task", "maze")
    assert "task maze strategies (1/10)" in out
    context, err = sh("learn", "enter", AGENT, "maze")
    run = re.match(r"run (\S+)", err)
    assert run and "Check dead ends twice" in context, (context, err)
    out, _ = sh("learn", "result", AGENT, "maze", "640", "--part", "speed=40", "--run", run.group(1))
    assert "1 attempts, best 640" in out
    sh("learn", "reflect", AGENT, "maze", "Look for the exit sign first")
    mem = sh.json("learn", "show")
    assert mem["stats"] == "3 runs so far" and mem["strategies"] == ["Hug the left wall"]
    assert [r["text"] for r in mem["reflections"]] == ["Look for the exit sign first"]
    out, _ = sh("learn", "task", AGENT)
    assert out.startswith("maze") and "attempts    1" in out
    sh("learn", "task", AGENT, "maze", "--notes", "the exit is usually north")
    task = sh.json("learn", "task", AGENT, "maze")
    assert task["best_score"] == 640 and task["notes"] == "the exit is usually north"
    runs = sh.json("learn", "task", AGENT, "maze", "--runs")
    assert [r["run_id"] for r in runs] == [run.group(1)]
    out, _ = sh("learn", "strategy", AGENT, "rm", "1")
    assert "global strategies (0/10)" in out
    lineage = sh.json("learn", "lineage", AGENT)
    assert lineage["currentHash"] and lineage["versions"]
    out, _ = sh("learn", "lineage", AGENT, "--label", "baseline")
    assert f"{lineage['currentHash'][:12]} labelled 'baseline'" in out


@case("export", "import")
def transfer(sh: Shell) -> None:
    archive = sh.root / "backup.zip"
    data = sh.json("export", AGENT, "--out", str(archive))
    daily = next(p.relative_to(sh.ws / AGENT).as_posix() for p in (sh.ws / AGENT / "memory").glob("*.md"))
    exported = {f["path"] for f in data["files"]}
    assert {"MEMORY.md", daily} <= exported, data
    # A seed snapshot: structured entries travel only with `snapshot-extras: [structured]`.
    assert "structured/feedback.md" in {s["path"] for s in data["skipped"]}, data
    with zipfile.ZipFile(archive) as z:
        names = z.namelist()
    assert all(any(n.endswith(path) for n in names) for path in exported), names
    sh("init", "copy")
    plan = sh.json("import", str(archive), "--agent", "copy", "--dry-run")
    assert plan["dry_run"] is True and plan["counts"].get("create", 0) >= 1, plan
    assert not (sh.ws / "copy" / daily).exists()
    report = sh.json("import", str(archive), "--agent", "copy")
    assert report["run"] and report["counts"]["create"] >= 1, report
    # Byte for byte but for `enabled` / `sort_order`, which the target decides (a snapshot leaves them out).
    from mateclaw_mem.workspace.snapshot_rules import strip_target_keys

    assert strip_target_keys(sh.text(daily, agent="copy")) == strip_target_keys(sh.text(daily))
    sh("import", str(archive), "--agent", "copy", expect=10)  # everything already there


@case("mcp")
def mcp(sh: Shell) -> None:
    import anyio
    from mcp import Client, StdioServerParameters

    params = StdioServerParameters(command=CLI[0], args=sh.argv(("mcp", "--agent", AGENT, "--tools", "all"), True)[1:],
                                   cwd=str(sh.root), env=_clean_env())

    async def session() -> tuple[Any, set[str]]:
        async with Client(params, read_timeout_seconds=60) as client:
            return client.server_info, {t.name for t in (await client.list_tools()).tools}

    info, tools = anyio.run(session)
    assert info is not None and info.name == "mateclaw-mem (default)"  # the agent served is named
    assert {"view", "search_memory", "remember", "learning_memory"} <= tools


@case("doctor")
def doctor(sh: Shell) -> None:
    state = sh.ws / ".mateclaw"
    sh("reindex")  # the search index exists before it is damaged
    (state / "index.db").write_bytes(b"not a database " * 300)
    out, _ = sh("doctor")
    assert "DAMAGED: file is not a database" in out and "rebuilt index.db" in out, out
    assert list(state.glob("index.db.damaged-*"))  # set aside, never deleted
    out, _ = sh("doctor")
    assert "DAMAGED" not in out  # the rebuilt one is sound


@case("archive")
def archive(sh: Shell) -> None:
    note = sh.ws / AGENT / "memory" / "2020-01-15.md"
    note.write_bytes(b"# 2020-01-15\r\n\n## 10:00 Old\n- archived walrus note")
    sh("archive", AGENT, expect=10)  # nothing archived yet
    assert sh.json("archive", AGENT, "roll")["daily_notes_archived"] == ["memory/2020-01-15.md"]
    assert not note.exists()
    out, _ = sh("archive", AGENT)
    assert out.startswith("2020-01  1 note(s) (days 15..15, 1 entries)")
    _, err = sh("archive", AGENT, "restore", "2020-13", expect=2)
    assert "not a month" in err
    out, _ = sh("archive", AGENT, "restore", "2020-01")
    assert out.startswith("restored 2020-01: 1 file(s)") and "undo with: mateclaw-mem undo" in out
    assert note.read_bytes() == b"# 2020-01-15\r\n\n## 10:00 Old\n- archived walrus note"
    sh("archive", AGENT, "restore", "2020-01", expect=3)  # gone once restored


@case("facts list", "facts show", "facts feedback", "facts confirm", "facts edit", "facts rebuild")
def facts(sh: Shell) -> None:
    (off := sh.root / "off.yaml").write_text("{}\n", encoding="utf-8")  # the checkout's config turns facts on
    _, err = sh("facts", "list", AGENT, "--config", str(off), expect=4)  # built-in defaults: off, naming the key
    assert "mate.memory.fact.projection-enabled" in err
    cfg = sh.root / "facts.yaml"
    cfg.write_text("mate:\n  memory:\n    fact:\n      projection-enabled: true\n", encoding="utf-8")
    on = ("--config", str(cfg))
    assert sh.json("facts", "rebuild", *on)["facts"] >= len(FEEDBACK)  # the template's entries, projected
    found = sh.json("facts", "list", AGENT, "--query", "German", *on)["facts"]
    german = next(f for f in found if f["key"] == "language")
    out, _ = sh("facts", "feedback", AGENT, german["id"], "unhelpful", "--note", "wrong language", *on)
    assert out.startswith("unhelpful noted; trust now 0.30")
    assert sh.json("facts", "confirm", AGENT, german["id"], *on)["last_confirmed"]
    shown = sh.json("facts", "show", AGENT, german["id"], *on)
    assert [h["kind"] for h in shown["history"]] == ["confirm", "unhelpful"]
    out, _ = sh("facts", "edit", AGENT, german["id"], "Prefers answers in English.", *on)
    assert out.startswith("edited structured/feedback.md")
    assert "Prefers answers in English." in sh.text("structured/feedback.md")
    sh("facts", "show", AGENT, "0123456789abcdef", *on, expect=3)
    sh("facts", "list", AGENT, "--query", "zebra", *on, expect=10)


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_command_group(case: Case, shell: Shell) -> None:
    case.run(shell)
    assert case.covers <= shell.invoked, f"{case.name} did not run {sorted(case.covers - shell.invoked)}"


# -- the parser itself ----------------------------------------------------------------------------------------


def parser_commands(parser: Any = None, prefix: str = "") -> Iterator[str]:
    """Every command path the parser accepts: `init`, ..., `learn show`, ..."""
    import argparse

    parser = parser or build_parser()
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                nested = list(parser_commands(sub, f"{prefix}{name} "))
                yield from nested or [f"{prefix}{name}"]


def test_every_command_has_a_case() -> None:
    commands = set(parser_commands())
    covered = set().union(*(c.covers for c in CASES))
    assert len(commands) > 20  # the parser was really read
    assert commands - covered == set(), "commands no case runs"
    assert covered - commands == set(), "cases name commands the parser does not have"


def test_help_version_and_no_command(tmp_path: Path) -> None:
    sh = Shell(tmp_path)
    out, _ = sh("--help", workspace_flag=False, fresh=True)
    for command in {c.split()[0] for c in parser_commands()}:
        assert re.search(rf"^\s+{re.escape(command)}\s", out, re.M), command
    out, _ = sh("--version", workspace_flag=False, fresh=True)
    assert re.fullmatch(r"mateclaw-mem \S+\n", out)
    out, _ = sh(expect=2, workspace_flag=False, fresh=True)
    assert "usage: mateclaw-mem" in out
    assert not (tmp_path / "workspace").exists()  # neither of them touched a workspace


@pytest.fixture(scope="module")
def shell_variable() -> Iterator[str]:
    # Set before any function-scoped fixture runs, as a developer's shell would have it.
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("MATECLAW_FACES_PROBE", "from the shell")
        yield "MATECLAW_FACES_PROBE"


def test_the_shell_environment_is_scrubbed_for_every_test(shell_variable: str,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    assert shell_variable not in os.environ  # conftest's autouse fixture removed it
    monkeypatch.setenv("MATECLAW_WORKSPACE", "set by the test")  # a test may still set its own
    assert os.environ["MATECLAW_WORKSPACE"] == "set by the test"
