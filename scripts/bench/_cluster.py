"""What the cluster benches share (aml_cluster.py, aml_throughput.py, aml_locomo_cluster.py): a
throw-away PostgreSQL (the tests' own, tests/support/postgres.py), `serve --aml-only` daemons as real
processes (started, killed with SIGKILL, restarted on the same port), the CPU seconds a set of processes
used, and a round-robin HTTP proxy - a load balancer's least: each request to the next daemon."""

from __future__ import annotations

import contextlib
import http.client
import itertools
import os
import signal
import subprocess
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

from _daemon import children, start_daemon  # scripts/bench/_daemon.py (this script's folder is on sys.path)

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from tests.support.postgres import PostgresServer, PostgresUnavailable  # noqa: E402
from tests.support.server import free_port  # noqa: E402

__all__ = ["AmlDaemon", "PostgresServer", "PostgresUnavailable", "RoundRobin", "cpu_seconds", "daemons_for",
           "postgres_pids", "start_postgres"]


class AmlDaemon:
    """One `mateclaw-mem serve --aml-only` over `store` ("sqlite": its own workspace under `folder`;
    "postgresql": the database `dsn` names), on a fixed port so a restart comes back where clients look."""

    def __init__(self, folder: Path, store: str, dsn: str | None = None, *, extra_config: str = "",
                 workspace: Path | None = None, prelude: str = "") -> None:
        """`workspace`: another folder's (SQLite daemons sharing one workspace's files); `prelude`:
        Python run in the daemon's process before the CLI (a bench's module setting)."""
        self.folder = folder
        self.workspace = workspace or folder / "ws"
        self.prelude = prelude
        folder.mkdir(parents=True, exist_ok=True)
        self.config = folder / "c.yaml"
        self.config.write_text(f"timezone: UTC\naml:\n  store: {store}\n{extra_config}", encoding="utf-8")
        self.env = {k: v for k, v in os.environ.items() if not k.startswith("MATECLAW_")}
        if dsn:
            self.env["MATECLAW_PG_DSN"] = dsn
        if prelude:  # as a sitecustomize: run by the daemon and by any process it starts (its index process)
            (folder / "prelude").mkdir(exist_ok=True)
            (folder / "prelude" / "sitecustomize.py").write_text(prelude + "\n", encoding="utf-8")
            paths = [str(folder / "prelude"), *filter(None, [self.env.get("PYTHONPATH")])]
            self.env["PYTHONPATH"] = os.pathsep.join(paths)
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.proc: subprocess.Popen[bytes] | None = None
        self.starts = 0

    def start(self) -> AmlDaemon:
        self.starts += 1
        log = self.folder / f"daemon-{self.starts}.log"
        self.proc, url = start_daemon(self.command(), log, env=self.env, cwd=self.folder, until_ready=True)
        if url is None:
            raise RuntimeError(f"serve --aml-only did not start: {log.read_text(errors='replace')[-2000:]}")
        return self

    def command(self) -> list[str]:
        args = ["serve", "--aml-only", "--workspace", str(self.workspace), "--config", str(self.config),
                "--port", str(self.port)]
        return [sys.executable, "-m", "mateclaw_mem.cli.main", *args]

    def children(self) -> list[int]:
        """The daemon's child processes (its index process while one runs: aml.index-process)."""
        return children(self.proc.pid) if self.proc is not None else []

    def kill9(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait()

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.kill9()

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None


def start_postgres(script: str) -> PostgresServer | None:
    """A throw-away PostgreSQL, or None having said on stderr why none could start (the script exits 2)."""
    try:
        return PostgresServer.start()
    except PostgresUnavailable as exc:
        print(f"{script}: no PostgreSQL: {exc}", file=sys.stderr)
        return None


def daemons_for(kind: str, n: int, server: PostgresServer | None, folder: Path) -> list[AmlDaemon]:
    """`n` daemons over a fresh PostgreSQL database of `server`, or one daemon over a fresh SQLite
    workspace (SQLite has one writer: one daemon whatever `n`); not started."""
    if kind == "postgresql":
        assert server is not None
        dsn = server.create_database()
        return [AmlDaemon(folder / f"d{i}", "postgresql", dsn) for i in range(n)]
    return [AmlDaemon(folder / "d0", "sqlite")]


def cpu_seconds(pids: list[int]) -> float:
    """User + system CPU seconds the processes have used so far (gone ones count 0)."""
    tick = os.sysconf("SC_CLK_TCK")
    total = 0
    for pid in pids:
        with contextlib.suppress(OSError, IndexError, ValueError):
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
            total += int(fields[11]) + int(fields[12])
    return total / tick


def postgres_pids(server: PostgresServer) -> list[int]:
    """The postmaster and every backend it forked (by parent pid, read from /proc)."""
    root = int((server.folder / "data" / "postmaster.pid").read_text().split("\n", 1)[0])
    out = [root]
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            with contextlib.suppress(OSError, IndexError, ValueError):
                if int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1]) == root:
                    out.append(int(entry.name))
    return out


class RoundRobin:
    """An HTTP/1.1 proxy on a free loopback port sending each request to the next of `backends` (base
    URLs), keep-alive on both sides: what a load balancer in front of the daemons does, at its least."""

    def __init__(self, backends: list[str]) -> None:
        targets = [(u.split("//", 1)[1].rsplit(":", 1)[0], int(u.rsplit(":", 1)[1])) for u in backends]
        turn = itertools.cycle(range(len(targets)))
        lock = threading.Lock()
        local = threading.local()
        self.counts = [0] * len(targets)
        counts = self.counts

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: object) -> None:
                pass

            def _forward(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                with lock:
                    i = next(turn)
                    counts[i] += 1
                conns = local.__dict__.setdefault("conns", {})
                for attempt in (0, 1):  # a keep-alive connection the daemon closed meanwhile: once more
                    conn = conns.get(i) or http.client.HTTPConnection(*targets[i], timeout=120)
                    conns[i] = conn
                    try:
                        headers = {k: v for k, v in self.headers.items() if k.lower() not in ("host", "connection")}
                        conn.request(self.command, self.path, body=body or None, headers=headers)
                        resp = conn.getresponse()
                        data = resp.read()
                        break
                    except (http.client.HTTPException, OSError):
                        conn.close()
                        conns.pop(i, None)
                        if attempt:
                            self.send_error(502)
                            return
                self.send_response(resp.status)
                for key, value in resp.getheaders():
                    if key.lower() not in ("connection", "transfer-encoding", "content-length", "date", "server"):
                        self.send_header(key, value)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            do_GET = do_POST = do_DELETE = _forward

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, name="round-robin", daemon=True)

    def __enter__(self) -> RoundRobin:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()
