"""End to end: `mateclaw-mem serve` as a real subprocess — turns in, memory in the files, a hand edit
found through search, SIGTERM, restart, nothing lost."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

MEM = "/api/v1/memory/default"
WS = "/api/v1/agents/default/workspace/memory"
WAIT = 30.0  # generous upper bound for one condition on a loaded CI machine; never asserted as a time


class Daemon:
    def __init__(self, tmp_path: Path, *extra: str) -> None:
        self.tmp_path = tmp_path
        self.workspace = tmp_path / "ws"
        self.config = tmp_path / "mateclaw.yaml"
        if not self.config.exists():
            self.config.write_text("timezone: Europe/Berlin\n", encoding="utf-8")
        self.log_path = tmp_path / f"daemon-{time.monotonic_ns()}.log"
        self.extra = extra
        self.proc: subprocess.Popen[bytes] | None = None
        self.url = ""

    def cmd(self) -> list[str]:
        return [sys.executable, "-m", "mateclaw_mem.cli.main", "serve", "--workspace", str(self.workspace),
                "--config", str(self.config), "--port", "0", *self.extra]

    def env(self) -> dict[str, str]:
        return {k: v for k, v in os.environ.items() if not k.startswith("MATECLAW_")}

    def start(self) -> Daemon:
        with self.log_path.open("wb") as log:
            self.proc = subprocess.Popen(self.cmd(), cwd=self.tmp_path, env=self.env(), stdout=log,
                                         stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        # "ready" is the last line of a start: the API listens first, the background work starts after.
        wait_for(lambda: "ready; Ctrl-C" in self.log(), "the daemon to be ready", alive=self.proc)
        match = re.search(r"listening on (http://\S+)", self.log())
        assert match, self.log()
        self.url = match.group(1)
        return self

    def log(self) -> str:
        return self.log_path.read_text(encoding="utf-8", errors="replace")

    def stop(self) -> int:
        assert self.proc is not None
        self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(timeout=WAIT)
        finally:
            if self.proc.poll() is None:
                self.proc.kill()

    def client(self) -> httpx.Client:
        return httpx.Client(base_url=self.url, timeout=30)


def wait_for(check: Callable[[], Any], what: str, *, alive: subprocess.Popen[bytes] | None = None) -> Any:
    deadline = time.monotonic() + WAIT
    while True:
        value = check()
        if value:
            return value
        if alive is not None and alive.poll() is not None:
            raise AssertionError(f"the daemon exited ({alive.returncode}) while waiting for {what}")
        if time.monotonic() > deadline:
            raise AssertionError(f"gave up waiting for {what}")
        time.sleep(0.1)


def search(client: httpx.Client, q: str) -> list[dict]:
    r = client.get(f"{WS}/search", params={"q": q})
    assert r.status_code == 200, r.text
    return r.json()["hits"]


@pytest.fixture
def daemons(tmp_path: Path) -> Iterator[Callable[..., Daemon]]:
    started: list[Daemon] = []

    def make(*extra: str) -> Daemon:
        d = Daemon(tmp_path, *extra)
        started.append(d)
        return d

    yield make
    for d in started:
        if d.proc is not None and d.proc.poll() is None:
            d.proc.kill()
            d.proc.wait()


def test_serve_turns_hand_edits_sigterm_restart_nothing_lost(daemons: Callable[..., Daemon], tmp_path: Path) -> None:
    first = daemons().start()
    log = first.log()
    assert "mode: rules" in log and str((tmp_path / "ws").resolve()) in log and first.url in log
    assert "next run:" in log  # the scheduler says when it will dream next

    # A second daemon on the same workspace refuses, clearly.
    second = subprocess.run(daemons().cmd(), cwd=tmp_path, env=first.env(), capture_output=True, text=True,
                            timeout=60, stdin=subprocess.DEVNULL)
    assert second.returncode == 5 and "already running" in second.stderr

    with first.client() as c:
        r = c.post(f"{MEM}/conversations/chat-1/turns",
                   json={"user": "Remember that my cat is called Miso.", "assistant": "I will remember Miso."})
        assert r.status_code == 202, r.text
        assert r.json()["extraction"]["scheduled"] is True
        # Search covers the conversation log too (scope all): wait for a hit in a memory file.
        def in_files() -> set[str]:
            return {h["file"] for h in search(c, "Miso") if not h["file"].startswith("conversations/")}

        wait_for(in_files, "the extraction to land in the files")
        landed = in_files()
        assert landed, "extraction should have written a memory file"

        # A person edits MEMORY.md in their editor; the watcher re-indexes it.
        memory_md = tmp_path / "ws" / "default" / "MEMORY.md"
        memory_md.write_text(memory_md.read_text(encoding="utf-8") + "\n## Travel\nPlanning Zanzibar in spring.\n",
                             encoding="utf-8")
        wait_for(lambda: search(c, "Zanzibar"), "the hand edit to be searchable")

        # A turn posted right before SIGTERM: finished, or persisted and resumed after the restart.
        r = c.post(f"{MEM}/conversations/chat-1/turns",
                   json={"user": "Remember that my bike is a green Brompton.", "assistant": "Noted."})
        assert r.status_code == 202
    assert first.stop() == 0
    stopped_log = first.log()
    assert "stopped" in stopped_log and "Traceback" not in stopped_log

    again = daemons().start()
    with again.client() as c:
        assert search(c, "Zanzibar") and search(c, "Miso")
        wait_for(lambda: [h for h in search(c, "Brompton") if not h["file"].startswith("conversations/")],
                 "the turn posted before SIGTERM to be extracted")
        text = c.get(f"{WS}/file", params={"path": "MEMORY.md"}).json()["content"]
        assert "Planning Zanzibar in spring." in text  # the hand edit survived every machine write
    assert again.stop() == 0


def test_non_loopback_without_key_refuses_and_names_the_variable(daemons: Callable[..., Daemon]) -> None:
    d = daemons("--host", "0.0.0.0")
    r = subprocess.run(d.cmd(), cwd=d.tmp_path, env=d.env(), capture_output=True, text=True, timeout=60,
                       stdin=subprocess.DEVNULL)
    assert r.returncode == 6
    assert "MATECLAW_API_KEY" in r.stderr and "0.0.0.0" in r.stderr


def test_the_listening_socket_turns_nagle_off_for_every_connection() -> None:
    # asyncio disables Nagle only on accepted sockets whose proto is TCP; a listener made with
    # proto 0 left each response waiting ~40 ms for the client's delayed ACK.
    import asyncio
    import socket

    from mateclaw_mem.runtime.net import bind as _bind

    sock = _bind("127.0.0.1", 0)
    try:
        assert sock.proto == socket.IPPROTO_TCP
        assert sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY)
        seen: list[int] = []

        async def main() -> None:
            async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
                seen.append(writer.get_extra_info("socket").getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY))
                writer.close()

            server = await asyncio.start_server(handle, sock=sock)
            port = sock.getsockname()[1]
            _, writer = await asyncio.open_connection("127.0.0.1", port)
            for _ in range(100):
                if seen:
                    break
                await asyncio.sleep(0.01)
            writer.close()
            server.close()

        asyncio.run(main())
        assert seen and seen[0]
    finally:
        sock.close()
