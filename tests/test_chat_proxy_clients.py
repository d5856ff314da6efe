"""Real clients other than the Python SDK through the chat proxy (issue 37): LangChain's `ChatOpenAI`
and the `openai` Node SDK, streaming, each pointed at a real daemon whose upstream is the scripted
OpenAI-compatible server. Each checks that memory reached the upstream and the answer came back whole.

The Node test needs `node` and `npm` (CI installs them; .ci/run) and installs the `openai` package once
into a cache folder; without them it is skipped with the reason."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from mateclaw_mem.api.app import create_app
from mateclaw_mem.memory.proxy.service import MEMORY_HEADING
from tests.support.model_server import ModelServer
from tests.support.server import ApiServer, daemon_services

NODE_CACHE = Path(__file__).resolve().parent / ".node-openai"  # git-ignored: the SDK installed once


@pytest.fixture
def daemon(tmp_path: Path) -> Iterator[tuple[Any, ApiServer, ModelServer]]:
    with ModelServer(default="Porto it is.", model="llama-local") as upstream:
        services = daemon_services(tmp_path / "ws", proxy={"upstream": {"base-url": upstream.base_url}})
        services.seed_agents()
        services.build()
        services.store.write("default", "PROFILE.md", "# Profile\n\n- location: Porto\n",
                             expected_sha=services.store.read("default", "PROFILE.md").sha, actor="person")
        server = ApiServer(create_app(services, mcp=False)).start()
        try:
            yield services, server, upstream
        finally:
            server.stop()
            services.close()


def _sent(upstream: ModelServer) -> list[dict[str, Any]]:
    return [r for r in upstream.requests if r.path.endswith("/chat/completions")][-1].messages


def test_langchain_chat_openai_pointed_at_the_daemon(daemon) -> None:
    langchain_openai = pytest.importorskip("langchain_openai")
    _, server, upstream = daemon
    llm = langchain_openai.ChatOpenAI(base_url=server.url + "/v1", api_key="unused", model="llama-local",
                                      max_retries=0)
    assert llm.invoke("Where do I live?").content == "Porto it is."
    assert "".join(str(c.content) for c in llm.stream("And again?")) == "Porto it is."
    system = _sent(upstream)[0]["content"]
    assert MEMORY_HEADING in system and "location: Porto" in system


def _node_sdk() -> Path | None:
    if shutil.which("node") is None or shutil.which("npm") is None:
        return None
    if not (NODE_CACHE / "node_modules" / "openai").is_dir():
        NODE_CACHE.mkdir(exist_ok=True)
        done = subprocess.run(["npm", "install", "--silent", "--no-audit", "--no-fund", "--prefix", str(NODE_CACHE),
                               "openai@4"], capture_output=True, text=True, timeout=300)
        if done.returncode != 0:
            return None
    return NODE_CACHE


def test_the_openai_node_sdk_streams_through_the_daemon(daemon, tmp_path: Path) -> None:
    cache = _node_sdk()
    if cache is None:
        pytest.skip("node/npm missing or the openai npm package could not be installed (CI installs both)")
    _, server, upstream = daemon
    script = tmp_path / "chat.cjs"  # CommonJS: `require` honours NODE_PATH (ES modules would not)
    script.write_text(
        "const OpenAI = require('openai');\n"
        "(async () => {\n"
        f"  const client = new OpenAI({{ baseURL: {json.dumps(server.url + '/v1')}, apiKey: 'unused', maxRetries: 0 }});\n"
        "  const stream = await client.chat.completions.create({ model: 'llama-local', stream: true,\n"
        "    stream_options: { include_usage: true }, messages: [{ role: 'user', content: 'Where do I live?' }] });\n"
        "  let text = ''; let usage = null;\n"
        "  for await (const chunk of stream) { text += chunk.choices[0]?.delta?.content ?? '';"
        " if (chunk.usage) usage = chunk.usage; }\n"
        "  console.log(JSON.stringify({ text, usage }));\n"
        "})().catch((e) => { console.error(e); process.exit(1); });\n", encoding="utf-8")
    out = subprocess.run(["node", str(script)], capture_output=True, text=True, timeout=60,
                         env={"NODE_PATH": str(cache / "node_modules"), "PATH": os.environ["PATH"]},
                         cwd=cache)
    assert out.returncode == 0, out.stderr
    got = json.loads(out.stdout.strip().splitlines()[-1])
    assert got["text"] == "Porto it is." and got["usage"]["total_tokens"] > 0
    assert "location: Porto" in _sent(upstream)[0]["content"]
