"""Drive a running daemon with real MCP clients and check that every read and write reaches the agent
it was meant for. Run by `scripts/bench/mcp_clients.sh`, which starts the daemon with two agents.

Clients: the MCP Python SDK over streamable HTTP (`/agents/<agent>/mcp`, `/mcp`) and over stdio
(`mateclaw-mem mcp --agent <agent>`), and the official MCP Inspector CLI over HTTP (`npx`; skipped
with a message when npx is missing). For each client and agent: write a marker file through that
agent, read it back through the same agent, and make sure the other agent does not have it.

    python scripts/bench/mcp_clients.py --url http://127.0.0.1:PORT --workspace WS [--no-inspector]

Exit status: 0 when every check holds, 1 on any mismatch.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
import httpx
from mcp import Client, StdioServerParameters

AGENTS = ("default", "work")
INSPECTOR = ("npx", "-y", "@modelcontextprotocol/inspector", "--cli")


@dataclass
class Row:
    client: str
    transport: str
    agent: str
    checks: dict[str, bool | None]  # None = not checked by this client
    note: str = ""

    @property
    def ok(self) -> bool:
        return all(v is not False for v in self.checks.values())


def _other(agent: str) -> str:
    return AGENTS[1] if agent == AGENTS[0] else AGENTS[0]


def _marker(client: str, agent: str) -> tuple[str, str]:
    slug = client.lower().replace(" ", "-")
    return f"notes/marker-{slug}-{agent}.md", f"marker {slug} written through {agent}\n"


# -- the Python SDK -------------------------------------------------------------------------------------


async def _sdk_round(open_client: Callable[[str], Any], label: str) -> list[Row]:
    rows = []
    for agent in AGENTS:
        path, text = _marker(label, agent)
        async with open_client(agent) as mcp:
            name = mcp.server_info.name if mcp.server_info else ""
            named = agent in name and f"agent {agent!r}" in (mcp.instructions or "")
            wrote = await mcp.call_tool("write_workspace_memory_file", {"path": path, "content": text})
            back = await mcp.call_tool("read_workspace_memory_file", {"path": path})
        async with open_client(_other(agent)) as other:
            elsewhere = await other.call_tool("read_workspace_memory_file", {"path": path})
        content = (back.structured_content or {}).get("content", "")
        rows.append(Row(label, "", agent, {
            "named": named, "write": not wrote.is_error, "read back": text.strip() in content,
            "other clean": bool(elsewhere.is_error)}, note=name))
    return rows


def sdk_http(url: str) -> list[Row]:
    def open_client(agent: str) -> Any:
        return Client(f"{url}/agents/{agent}/mcp")

    rows = anyio.run(_sdk_round, open_client, "SDK http")
    for r in rows:
        r.transport = "http /agents/<a>/mcp"

    async def default_path() -> Row:  # `/mcp` is the default agent
        path, text = _marker("SDK http", "default")
        async with Client(f"{url}/mcp") as mcp:
            name = mcp.server_info.name if mcp.server_info else ""
            back = await mcp.call_tool("read_workspace_memory_file", {"path": path})
            work_path, _ = _marker("SDK http", "work")
            work = await mcp.call_tool("read_workspace_memory_file", {"path": work_path})
        return Row("SDK http", "http /mcp", "default", {
            "named": "(default)" in name, "write": None,
            "read back": text.strip() in (back.structured_content or {}).get("content", ""),
            "other clean": bool(work.is_error)}, note=name)

    return [*rows, anyio.run(default_path)]


def sdk_stdio(python: str, workspace: str, config: str) -> list[Row]:
    def open_client(agent: str) -> Any:
        return Client(StdioServerParameters(
            command=python, args=["-m", "mateclaw_mem.cli.main", "mcp", "--workspace", workspace, "--config", config,
                                  "--agent", agent]), read_timeout_seconds=60)

    rows = anyio.run(_sdk_round, open_client, "SDK stdio")
    for r in rows:
        r.transport = "stdio mcp --agent <a>"
    return rows


# -- the MCP Inspector CLI ------------------------------------------------------------------------------


def _inspector(url: str, tool: str, **args: str) -> tuple[bool, str]:
    cmd = [*INSPECTOR, url, "--transport", "http", "--method", "tools/call", "--tool-name", tool]
    for key, value in args.items():
        cmd += ["--tool-arg", f"{key}={value}"]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300, stdin=subprocess.DEVNULL)
    if proc.returncode != 0:
        return False, (proc.stderr or proc.stdout).strip()[-300:]
    try:
        answer = json.loads(proc.stdout)
    except ValueError:
        return False, proc.stdout.strip()[-300:]
    text = "".join(c.get("text", "") for c in answer.get("content", []))
    return not answer.get("isError", False), text


def inspector(url: str) -> list[Row]:
    rows = []
    for agent in AGENTS:
        path, text = _marker("Inspector", agent)
        endpoint = f"{url}/agents/{agent}/mcp"
        wrote, why = _inspector(endpoint, "write_workspace_memory_file", path=path, content=text.strip())
        read_ok, back = _inspector(endpoint, "read_workspace_memory_file", path=path)
        other_ok, _ = _inspector(f"{url}/agents/{_other(agent)}/mcp", "read_workspace_memory_file", path=path)
        rows.append(Row("Inspector CLI", "http /agents/<a>/mcp", agent, {
            "named": None, "write": wrote, "read back": read_ok and text.strip() in back,
            "other clean": not other_ok}, note="" if wrote else why[:80]))
    return rows


# -- files on disk and the old path ---------------------------------------------------------------------


def on_disk(workspace: Path, rows: list[Row]) -> list[Row]:
    """What the clients wrote, checked on disk: each marker in its agent's folder and nowhere else."""
    out = []
    for label in sorted({r.client for r in rows if r.checks.get("write")}):
        for agent in AGENTS:
            path, _ = _marker(label.replace("Inspector CLI", "Inspector"), agent)
            out.append(Row(f"disk ({label})", "files", agent, {
                "named": None, "write": None, "read back": (workspace / agent / path).is_file(),
                "other clean": not (workspace / _other(agent) / path).exists()}))
    return out


def old_path(url: str) -> Row:
    r = httpx.post(f"{url}/mcp/agents/work", json={"jsonrpc": "2.0", "id": 1, "method": "tools/list"},
                   headers={"accept": "application/json, text/event-stream"})
    moved = r.status_code == 404 and "/agents/work/mcp" in r.text
    return Row("raw HTTP", "old /mcp/agents/work", "work", {"named": None, "write": None, "read back": None,
                                                              "other clean": moved}, note=f"HTTP {r.status_code}")


def table(rows: list[Row]) -> str:
    cols = ["client", "transport", "agent", "named", "write", "read back", "other clean", "result", "note"]

    def mark(v: bool | None) -> str:
        return "-" if v is None else ("ok" if v else "FAIL")

    lines = [[r.client, r.transport, r.agent, *(mark(r.checks[c]) for c in cols[3:7]),
              "ok" if r.ok else "MISMATCH", r.note] for r in rows]
    widths = [max(len(c), *(len(x[i]) for x in lines)) for i, c in enumerate(cols)]
    fmt = "  ".join(f"{{:<{w}}}" for w in widths)
    return "\n".join([fmt.format(*cols), fmt.format(*("-" * w for w in widths)), *(fmt.format(*x) for x in lines)])


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--url", required=True, help="the daemon, e.g. http://127.0.0.1:8765")
    ap.add_argument("--workspace", required=True)
    ap.add_argument("--config", required=True, help="the settings file the daemon uses")
    ap.add_argument("--python", default=sys.executable)
    ap.add_argument("--no-inspector", action="store_true")
    a = ap.parse_args()
    rows = sdk_http(a.url) + sdk_stdio(a.python, a.workspace, a.config)
    if a.no_inspector:
        print("MCP Inspector: skipped (--no-inspector)")
    elif shutil.which("npx") is None:
        print("MCP Inspector: skipped (npx not found; install Node.js to include the official Inspector CLI)")
    else:
        rows += inspector(a.url)
    rows += on_disk(Path(a.workspace), rows)
    rows.append(old_path(a.url))
    print(table(rows))
    bad = [r for r in rows if not r.ok]
    print(f"\n{len(rows) - len(bad)}/{len(rows)} rows ok" + (f"; {len(bad)} MISMATCH" if bad else ""))
    return 1 if bad else 0


if __name__ == "__main__":
    from _load import load_average  # scripts/bench/_load.py (this script's folder is on sys.path)
    rc = main()
    print(load_average())
    sys.exit(rc)
