"""The README, walked as a newcomer would (issue 16, acceptance): its Quick start and its CLI table,
from a folder that is not the repo, with HOME in a temp folder and the workspace named by
MATECLAW_WORKSPACE. The commands are read from README.md itself, so a README that drifts from the
CLI fails here: each command's exit code and first line are checked.

Only `mcp` (stdio, waits for a client) is not run; `serve` runs for the Quick start, as `run.sh`
would start it, and is stopped with SIGTERM.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

REPO = Path(__file__).resolve().parents[1]
README = (REPO / "README.md").read_text(encoding="utf-8")
CLI = Path(sys.executable).parent / "mateclaw-mem"  # the README's .venv/bin/mateclaw-mem
README_PORT = "8765"

# What every CLI-table command must answer: allowed exit codes and a pattern for the first line of
# its output (stdout, else stderr). A command the README lists without an entry here fails the walk.
EXPECT: dict[str, tuple[set[int], str]] = {
    "init": ({0}, r"agent 'default' at .+: (created .+|already set up)$"),
    "status": ({0}, r"mode: rules$"),
    "ls": ({0}, r"(no files under memory/|(on |off)  .+  memory/\S+\.md)"),
    "cat": ({0}, r"---$"),
    "write": ({0}, r"wrote MEMORY\.md$"),
    "write-memory": ({0}, r"append into MEMORY\.md$"),
    "edit": ({0}, r"edited MEMORY\.md \(1 replacement\)$"),
    "enable": ({0}, r"MEMORY\.md enabled$"),
    "disable": ({0}, r"MEMORY\.md disabled$"),
    "sort": ({0}, r"MEMORY\.md sort_order = 10$"),
    "history": ({0}, r"v\d+ +\d{4}-\d\d-\d\dT"),
    "undo": ({0}, r"restored MEMORY\.md$"),
    "extract": ({0, 10}, r"\S"),  # the daemon may have extracted c1 already: nothing to do then
    "dream": ({0, 10}, r"dream-default-\d{8}T\d{6}: "),
    "context": ({0}, r"===== system =====$"),
    "remember": ({0}, r"added user entry 'lang'$"),
    "recall": ({0}, r"\[user\] lang: prefers green tea "),
    "forget": ({0}, r"forgot user entry 'lang'"),
    "consolidate-structured": ({0, 10}, r"structured consolidation \("),
    "search": ({0}, r" *\d+\.\d+ +\S+\.md:\d+"),
    "reindex": ({0}, r"reindexed \d+ files"),
    "export": ({0}, r"exported \d+ files of default to "),
    "import": ({0, 10}, r"import into default \(strategy skip\)$"),
    "learn": ({0}, r"stats: "),
    "model": ({6}, r"mateclaw-mem: error: no model configured"),  # the walk runs in rules mode
    "aml": ({0}, r"PASS  "),  # the Add/Search contract, checked against the walk's own daemon
    # The shipped config turns the lifecycle on: facts are projected (whether a tea fact is there yet
    # depends on the daemon's extraction of the walk's chat: none, or the facts with their trust).
    "facts": ({0, 10}, r"(no facts matching 'tea'$|\d\.\d\d  [0-9a-f]{16}  )"),
    "contradictions": ({10}, r"0 contradictions open$"),
    "card": ({10}, r"no morning card for default"),  # the walk dreams nothing worth a card
    "soul": ({10}, r"no SOUL\.md proposal for default"),  # fewer writes than soul-update-interval (20)
    "archive": ({10}, r"no month archives for default yet"),
    "doctor": ({0}, r"databases in .+\.mateclaw \(PRAGMA quick_check\):$"),
}
NOT_RUN = {"mcp": "serves stdio until its client leaves", "serve": "run by the Quick start walk",
           "import-chats": "needs a chat export: tests/test_import_chats.py runs it on each format"}
# Optional flags the walk passes too (README syntax `[--flag VALUE]`), to cover what they promise.
OPTIONAL_USED = {"--prefix", "--query", "--preview", "--out"}
# `write` and `write-memory` read stdin by default; `edit --old sugar` then finds it once.
STDIN = {"write": "# Memory\n\nTea without sugar.\n", "write-memory": "- likes oolong\n"}


def section(title: str) -> str:
    start = README.index(f"\n## {title}")
    end = README.find("\n## ", start + 1)
    return README[start:end if end != -1 else None]


def quick_start_steps() -> list[str]:
    """The Quick start's commands in reading order: the CLI and curl lines (run.sh and test.sh are
    the set-up this test runs under)."""
    text = section("Quick start")
    steps: list[tuple[int, str]] = []
    for m in re.finditer(r"`(\.venv/bin/mateclaw-mem [^`]+|curl [^`]+)`", text):
        steps.append((m.start(), m.group(1)))
    for m in re.finditer(r"```bash\n(.*?)```", text, re.S):
        for cmd in m.group(1).replace("\\\n", " ").splitlines():
            cmd = cmd.strip()
            if cmd.startswith("curl "):
                steps.append((m.start(), cmd))
    return [cmd for _, cmd in sorted(steps)]


def cli_table() -> list[str]:
    """The usage column of the table under "## The CLI"."""
    block = re.search(r"```\n(.*?)```", section("The CLI"), re.S)
    assert block, "README: the CLI table is gone"
    return [re.split(r"\s{2,}", line.strip())[0] for line in block.group(1).splitlines()
            if line.startswith("mateclaw-mem ")]


def instantiate(usage: str, fill: dict[str, str]) -> list[list[str]]:
    """`mateclaw-mem cat AGENT FILE` -> [["cat", "default", "MEMORY.md"]]; `enable|disable` gives two;
    optional groups are dropped unless their flag is in OPTIONAL_USED."""
    words = usage.split()[1:]
    out: list[str] = []
    i = 0
    while i < len(words):
        w = words[i]
        if w.startswith("["):
            group = [w]
            while not group[-1].endswith("]"):
                i += 1
                group.append(words[i])
            inner = " ".join(group).strip("[]").split()
            if inner[0] in OPTIONAL_USED:
                out += [inner[0], *(fill.get(v, v) for v in inner[1:])]
        elif w == "…":
            out += ["show", fill["AGENT"]]
        else:
            out.append(fill.get(w, w))
        i += 1
    first, rest = out[0], out[1:]
    return [[cmd, *rest] for cmd in first.split("|")]


@dataclass
class Walk:
    root: Path
    env: dict[str, str]
    ws: Path

    def cli(self, args: list[str]) -> tuple[int, str]:
        proc = subprocess.run([str(CLI), *args], cwd=self.root, env=self.env, input=STDIN.get(args[0], ""),
                              capture_output=True, text=True, timeout=120)
        assert "Traceback" not in proc.stderr, proc.stderr
        first = (proc.stdout.strip() or proc.stderr.strip()).splitlines()
        return proc.returncode, first[0] if first else ""


@pytest.fixture(scope="module")
def walk(tmp_path_factory: pytest.TempPathFactory) -> Walk:
    root = tmp_path_factory.mktemp("newcomer")  # not the repo: the current folder must not matter
    env = {k: v for k, v in os.environ.items() if not k.startswith(("MATECLAW_", "XDG_"))}
    env.update(HOME=str(root), MATECLAW_WORKSPACE=str(root / "ws"))
    return Walk(root, env, root / "ws")


@pytest.fixture(scope="module")
def daemon(walk: Walk) -> Iterator[str]:
    """`mateclaw-mem serve`, as `scripts/run.sh` execs it (any free port instead of 8765)."""
    log = (walk.root / "serve.log").open("w")
    proc = subprocess.Popen([str(CLI), "serve", "--port", "0"], cwd=walk.root, env=walk.env, stdout=log,
                            stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    pid_file = walk.ws / ".mateclaw" / "daemon.json"
    deadline = time.monotonic() + 60
    while not pid_file.exists() and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)
    assert pid_file.exists(), (walk.root / "serve.log").read_text()
    url = json.loads(pid_file.read_text(encoding="utf-8"))["url"]
    try:
        yield url
    finally:
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=60) == 0, (walk.root / "serve.log").read_text()
        log.close()
        assert not pid_file.exists()


def curl(command: str, url: str) -> httpx.Response:
    """Run a README curl line against the daemon (parsed: -X, -H, -d; the README's port replaced)."""
    words = shlex.split(command)[1:]
    method, headers, body, target = "GET", {}, None, ""
    i = 0
    while i < len(words):
        w = words[i]
        if w == "-X":
            method, i = words[i + 1], i + 1
        elif w == "-H":
            key, _, value = words[i + 1].partition(":")
            headers[key.strip()], i = value.strip(), i + 1
        elif w == "-d":
            body, i = words[i + 1], i + 1
        elif not w.startswith("-"):
            target = w
        i += 1
    assert re.match(rf"(http://)?(localhost|127\.0\.0\.1):{README_PORT}/", target), target
    path = "/" + target.split(f":{README_PORT}/", 1)[1]
    return httpx.request(method, url + path, headers=headers, content=body, timeout=30)


def test_the_quick_start_works_from_another_folder(walk: Walk, daemon: str) -> None:
    steps = quick_start_steps()
    assert any("status" in s for s in steps) and any("/health" in s for s in steps), steps
    for step in steps:
        if step.startswith("curl "):
            r = curl(step, daemon)
            assert r.status_code in (200, 202), (step, r.status_code, r.text)
            if "/health" in step:
                assert r.json()["status"] == "ok"
            if "/turns" in step:
                # "find it a moment later under ## Remembered in workspace/default/MEMORY.md"
                memory = walk.ws / "default" / "MEMORY.md"
                deadline = time.monotonic() + 30
                while "without sugar" not in memory.read_text(encoding="utf-8") and time.monotonic() < deadline:
                    time.sleep(0.05)
                assert "## Remembered" in memory.read_text(encoding="utf-8")
            continue
        args = shlex.split(step)[1:]
        code, first = walk.cli(args)
        expected_codes, pattern = EXPECT[args[0]]
        assert code in expected_codes and re.match(pattern, first), (step, code, first)
        if args[0] == "status":
            out = subprocess.run([str(CLI), *args], cwd=walk.root, env=walk.env, capture_output=True, text=True,
                                 timeout=60).stdout
            assert f"workspace: {walk.ws}  (from MATECLAW_WORKSPACE)" in out
            assert re.search(r"^daemon: running \(pid \d+, http://127\.0\.0\.1:\d+, since ", out, re.M), out


def test_every_command_of_the_cli_table_works_from_another_folder(walk: Walk, daemon: str) -> None:
    fill = {"AGENT": "default", "FILE": "MEMORY.md", "CONVERSATION": "c1", "TYPE": "user", "KEY": "lang",
            "TEXT": "prefers green tea", "QUERY": "tea", "Q": "tea", "N": "10", "S": "append", "X": "sugar",
            "Y": "honey", "FILE.zip|DIR": str(walk.root / "export.zip"), "PATH": str(walk.root / "export.zip"),
            "URL": daemon}
    usages = cli_table()
    assert len(usages) >= 20, usages
    ran: set[str] = set()
    for usage in usages:
        name = usage.split()[1]
        if name in NOT_RUN:
            continue
        for args in instantiate(usage, fill):
            assert args[0] in EXPECT, f"README lists `{usage}`: add what it answers to EXPECT"
            code, first = walk.cli(args)
            expected_codes, pattern = EXPECT[args[0]]
            assert code in expected_codes and re.match(pattern, first), (usage, args, code, first)
            ran.add(args[0])
    assert ran == set(EXPECT), f"EXPECT names commands the README no longer lists: {set(EXPECT) - ran}"
    # Nothing landed in the current folder or the home folder but what was asked for.
    assert sorted(p.name for p in walk.root.iterdir()) == ["export.zip", "serve.log", "ws"]
