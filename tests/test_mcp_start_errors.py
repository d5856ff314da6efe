"""`mateclaw-mem mcp` that cannot start (issue 38.9): with a wrong config path an app such as Claude
Desktop showed only "Connection closed". The reason is now the answer to the client's `initialize`
(what the app shows) and is printed on stderr (the app's log) before the process exits with its code.
Driven by the real MCP SDK client over stdio."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import anyio
from mcp import StdioServerParameters
from mcp.client.session import ClientSession
from mcp.client.stdio import stdio_client


def _initialize(tmp_path: Path, env: dict[str, str], *args: str) -> tuple[str, str]:
    params = StdioServerParameters(command=sys.executable, args=["-m", "mateclaw_mem.cli.main", "mcp", *args],
                                   cwd=str(tmp_path), env=env)
    log = tmp_path / "stderr.log"

    async def run() -> str:
        with log.open("w", encoding="utf-8") as errlog:
            async with stdio_client(params, errlog=errlog) as (read, write), ClientSession(read, write) as session:
                try:
                    await session.initialize()
                except Exception as exc:  # the SDK's MCPError carrying the server's answer
                    return str(exc)
        return "initialized"

    answer = anyio.run(run)
    return answer, log.read_text(encoding="utf-8")


def test_a_wrong_config_path_is_the_answer_to_initialize_and_on_stderr(tmp_path: Path) -> None:
    wrong = tmp_path / "nowhere" / "mateclaw.yaml"
    answer, stderr = _initialize(tmp_path, {"MATECLAW_CONFIG": str(wrong)})
    assert "cannot start" in answer and str(wrong) in answer and "config file not found" in answer, answer
    assert str(wrong) in stderr and "config file not found" in stderr, stderr


def test_an_agent_never_created_names_how_to_create_it(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    (empty := tmp_path / "empty.yaml").write_text("", encoding="utf-8")
    subprocess.run([sys.executable, "-m", "mateclaw_mem.cli.main", "init", "--workspace", str(ws),
                    "--config", str(empty)], cwd=tmp_path, check=True, capture_output=True, timeout=120)
    answer, stderr = _initialize(tmp_path, {}, "--workspace", str(ws), "--config", str(empty), "--agent", "ghost")
    assert "'ghost'" in answer and "init" in answer, answer
    assert "'ghost'" in stderr


def test_without_a_client_it_exits_with_the_code_and_writes_nothing_on_stdout(tmp_path: Path) -> None:
    r = subprocess.run([sys.executable, "-m", "mateclaw_mem.cli.main", "mcp"], cwd=tmp_path, capture_output=True,
                       text=True, timeout=60, stdin=subprocess.DEVNULL,
                       env={"MATECLAW_CONFIG": str(tmp_path / "missing.yaml")})
    assert r.returncode == 6 and "config file not found" in r.stderr and r.stdout == ""
