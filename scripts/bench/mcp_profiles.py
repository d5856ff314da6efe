#!/usr/bin/env python3
"""What each MCP tool profile costs the model (prints a table; the one in README's MCP section).

    .venv/bin/python scripts/bench/mcp_profiles.py [--config config/mateclaw.yaml]

A client sends the server's whole tool list (names, descriptions, JSON schemas, annotations) to the
model with every request. This lists the tools of each profile (mcp/profiles.py) through the real
MCP SDK client on a temp workspace, with the given config (the shipped one turns every feature on,
so `all` is every tool), and prints the tools, the bytes of the list as compact JSON and the tokens
as chars/4 -- a rough figure; a model's own tokenizer differs by a few tens of percent.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

import anyio
from mcp import Client

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from mateclaw_mem.mcp.profiles import PROFILES  # noqa: E402
from mateclaw_mem.mcp.server import build_server  # noqa: E402
from mateclaw_mem.runtime.services import Services  # noqa: E402
from mateclaw_mem.settings import load_settings  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--config", type=Path, default=REPO / "config" / "mateclaw.yaml")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        services = Services(load_settings(args.config, Path(tmp) / "ws"))
        try:
            services.store.ensure_agent("default")

            async def listed(profile: str) -> list[dict[str, object]]:
                async with Client(build_server(services, "default", profile)) as mcp:
                    tools = (await mcp.list_tools()).tools
                return [t.model_dump(mode="json", by_alias=True, exclude_none=True) for t in tools]

            print("| profile | tools | JSON bytes | ≈ tokens (chars/4) |")
            print("|---|---:|---:|---:|")
            for profile in PROFILES:
                tools = anyio.run(listed, profile)
                size = len(json.dumps(tools, separators=(",", ":"), ensure_ascii=False))
                print(f"| {profile} | {len(tools)} | {size:,} | {size // 4:,} |")
        finally:
            services.close()
    return 0


if __name__ == "__main__":
    from _load import load_average  # scripts/bench/_load.py (this script's folder is on sys.path)
    rc = main()
    print(load_average())
    sys.exit(rc)
