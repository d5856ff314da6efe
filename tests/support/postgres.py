"""A real, throw-away PostgreSQL server for tests and benchmarks (issue 40).

    with PostgresServer.start() as pg:          # initdb in a temp folder, a free port, started
        dsn = pg.create_database()              # a fresh, empty database: its DSN
        ...                                      # the server is stopped and its folder removed on exit

The server binaries (`initdb`, `pg_ctl`) are found on PATH or under Debian's
`/usr/lib/postgresql/<version>/bin` (the newest). initdb refuses to run as root, so as root the
cluster and the server run as the `postgres` user (`runuser -u postgres --`), in a folder handed to
it; otherwise they run as we are. `fsync=off`: a test server's data never outlives the run.

No orphan server outlives the process that started it, even one killed with SIGKILL: a small
watchdog process (`python postgres.py watch OWNER_PID FOLDER`, in its own session so a Ctrl-C of the
test run does not kill it first) stops the server and removes its folder once the owner is gone; and
every start sweeps folders whose owner (pid and start time, in `owner`) is no longer alive.

`PostgresUnavailable` says, in words, why no server could be started (no binaries, no `postgres`
user, initdb or start failed with its log's tail); tests skip with that message (tests/conftest.py's
`pg_server`/`pg_dsn`/`pg_database`), CI fails instead when `CI_REQUIRE_POSTGRES=1`.
"""

from __future__ import annotations

import contextlib
import glob
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

PREFIX = "mateclaw-pg-"
SUPERUSER = "postgres"
RUN_AS = "postgres"  # the system user the server runs as when we are root
START_TIMEOUT_S = 60


class PostgresUnavailable(RuntimeError):
    """No PostgreSQL server could be started here; the message names why."""


def find_bin_dir(path: str | None = None, debian: str = "/usr/lib/postgresql/*/bin") -> Path:
    """The folder holding initdb and pg_ctl: PATH first, then Debian's newest version folder."""
    on_path = shutil.which("initdb", path=path)
    if on_path and shutil.which("pg_ctl", path=path):
        return Path(os.path.realpath(on_path)).parent
    candidates = sorted(
        (Path(p) for p in glob.glob(debian) if (Path(p) / "initdb").exists()),
        key=lambda p: _version_key(p.parent.name),
    )
    if not candidates:
        raise PostgresUnavailable(
            "no PostgreSQL server binaries (initdb, pg_ctl) on PATH or under /usr/lib/postgresql/*/bin "
            "(Debian: apt-get install postgresql)"
        )
    return candidates[-1]


def _version_key(name: str) -> tuple[int, ...]:
    return tuple(int(x) for x in name.split(".") if x.isdigit()) or (0,)


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _start_time(pid: int) -> str | None:
    """The process's start time in clock ticks since boot (field 22 of /proc/PID/stat): with the pid,
    it names one process, so a recycled pid is not taken for the owner still running."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return stat.rsplit(")", 1)[1].split()[19]


def _alive(pid: int, start: str | None) -> bool:
    current = _start_time(pid)
    return current is not None and (start is None or current == start)


def _postmaster_pid(folder: Path) -> int | None:
    try:
        return int((folder / "data" / "postmaster.pid").read_text().split("\n", 1)[0])
    except (OSError, ValueError):
        return None


def _stop_folder(folder: Path, *, timeout: float = 15.0) -> None:
    """Stops the server whose data lives under `folder` (SIGQUIT: an immediate shutdown, no data kept
    matters) and removes the folder. Works from root or the server's user, without pg_ctl."""
    pid = _postmaster_pid(folder)
    if pid is not None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signal.SIGQUIT)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and _start_time(pid) is not None:
            time.sleep(0.05)
        if _start_time(pid) is not None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)
    shutil.rmtree(folder, ignore_errors=True)


def sweep_orphans() -> list[Path]:
    """Stops and removes every server folder whose owner process is gone (a crashed test run whose
    watchdog was killed too). Folders of live owners (other runs on this machine) are left alone."""
    swept: list[Path] = []
    for folder in Path(tempfile.gettempdir()).glob(PREFIX + "*"):
        try:
            pid_text, _, start = (folder / "owner").read_text().strip().partition(" ")
            pid = int(pid_text)
        except (OSError, ValueError):
            # No owner file: a folder whose start never got that far, older than a minute.
            with contextlib.suppress(OSError):
                if time.time() - folder.stat().st_mtime > 60:
                    _stop_folder(folder)
                    swept.append(folder)
            continue
        if not _alive(pid, start or None):
            _stop_folder(folder)
            swept.append(folder)
    return swept


@dataclass
class PostgresServer:
    """One running server: its folder, port, unix socket folder; `dsn()` and `create_database()`."""

    folder: Path
    port: int
    bin_dir: Path
    watchdog: subprocess.Popen[bytes] | None = None
    databases: list[str] = field(default_factory=list)

    @property
    def socket_dir(self) -> Path:
        return self.folder / "sock"

    @property
    def log_path(self) -> Path:
        return self.folder / "server.log"

    @classmethod
    def start(cls, *, max_connections: int = 300, settings: dict[str, str] | None = None) -> PostgresServer:
        bin_dir = find_bin_dir()
        as_root = os.geteuid() == 0
        if as_root:
            try:
                import pwd

                entry = pwd.getpwnam(RUN_AS)
            except KeyError:
                raise PostgresUnavailable(
                    f"running as root and there is no {RUN_AS!r} user to run initdb and the server as "
                    "(initdb refuses root; Debian's postgresql package creates that user)"
                ) from None
            if shutil.which("runuser") is None:
                raise PostgresUnavailable("running as root and `runuser` is missing (util-linux)")
        sweep_orphans()
        folder = Path(tempfile.mkdtemp(prefix=PREFIX))
        try:
            (folder / "owner").write_text(f"{os.getpid()} {_start_time(os.getpid()) or ''}\n")
            (folder / "sock").mkdir()
            if as_root:
                os.chmod(folder, 0o755)
                for path in (folder, folder / "sock"):
                    os.chown(path, entry.pw_uid, entry.pw_gid)
            server = cls(folder=folder, port=_free_port(), bin_dir=bin_dir)
            server.watchdog = _spawn_watchdog(folder)
            server._initdb()
            server._configure(max_connections, settings or {})
            server._start_server()
            return server
        except BaseException:
            _stop_folder(folder)
            raise

    def _run(self, *argv: str, timeout: float = START_TIMEOUT_S) -> subprocess.CompletedProcess[str]:
        cmd = list(argv)
        if os.geteuid() == 0:
            cmd = ["runuser", "-u", RUN_AS, "--", *cmd]
        return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, cwd=self.folder, check=False)

    def _initdb(self) -> None:
        done = self._run(
            str(self.bin_dir / "initdb"), "-D", str(self.folder / "data"), "-U", SUPERUSER,
            "--auth=trust", "--encoding=UTF8", "--locale=C", "--no-sync",
        )
        if done.returncode != 0:
            raise PostgresUnavailable(f"initdb failed (exit {done.returncode}): {_tail(done.stderr or done.stdout)}")

    def _configure(self, max_connections: int, extra: dict[str, str]) -> None:
        conf = {
            "listen_addresses": "'127.0.0.1'",
            "port": str(self.port),
            "unix_socket_directories": f"'{self.socket_dir}'",
            "max_connections": str(max_connections),
            # A test server's data never outlives the run: durability off, speed on.
            "fsync": "off",
            "synchronous_commit": "off",
            "full_page_writes": "off",
            "shared_buffers": "128MB",
            "log_min_messages": "warning",
            **extra,
        }
        with (self.folder / "data" / "postgresql.conf").open("a", encoding="utf-8") as f:
            f.write("\n# tests/support/postgres.py\n")
            f.writelines(f"{k} = {v}\n" for k, v in conf.items())

    def _start_server(self) -> None:
        done = self._run(
            str(self.bin_dir / "pg_ctl"), "-D", str(self.folder / "data"), "-l", str(self.log_path),
            "-w", "-t", str(START_TIMEOUT_S), "start",
        )
        if done.returncode != 0:
            log = self.log_path.read_text(errors="replace") if self.log_path.exists() else ""
            raise PostgresUnavailable(
                f"pg_ctl start failed (exit {done.returncode}): {_tail(done.stderr or done.stdout)} {_tail(log)}"
            )

    def dsn(self, dbname: str = "postgres", *, unix: bool = False) -> str:
        """A libpq connection string (TCP on loopback; `unix=True`: the socket folder)."""
        host = str(self.socket_dir) if unix else "127.0.0.1"
        return f"host={host} port={self.port} user={SUPERUSER} dbname={dbname}"

    def create_database(self, name: str | None = None) -> str:
        """A fresh, empty database; its DSN. Dropped by `drop_database` or with the server."""
        import psycopg

        name = name or f"t_{uuid.uuid4().hex[:16]}"
        with psycopg.connect(self.dsn(), autocommit=True) as conn:
            # FILE_COPY: a plain copy of the small template, faster than WAL logging it with fsync off.
            conn.execute(f'CREATE DATABASE "{name}" STRATEGY FILE_COPY')
        self.databases.append(name)
        return self.dsn(name)

    def drop_database(self, name: str) -> None:
        import psycopg

        with psycopg.connect(self.dsn(), autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        if name in self.databases:
            self.databases.remove(name)

    def running(self) -> bool:
        pid = _postmaster_pid(self.folder)
        return pid is not None and _start_time(pid) is not None

    def stop_server(self) -> None:
        """Stops the server, keeping its data (a test of a lost database; `restart_server` brings it
        back on the same port)."""
        done = self._run(str(self.bin_dir / "pg_ctl"), "-D", str(self.folder / "data"), "-m", "fast", "-w", "stop")
        if done.returncode != 0 and self.running():
            raise RuntimeError(f"pg_ctl stop failed: {_tail(done.stderr or done.stdout)}")

    def restart_server(self) -> None:
        self._start_server()

    def stop(self) -> None:
        """Stops the server and removes its folder (the watchdog with it)."""
        _stop_folder(self.folder)
        if self.watchdog is not None:
            with contextlib.suppress(ProcessLookupError):
                self.watchdog.kill()
            self.watchdog.wait(timeout=10)
            self.watchdog = None

    def __enter__(self) -> PostgresServer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def _tail(text: str, chars: int = 600) -> str:
    text = " ".join(text.split())
    return text[-chars:] if text else "(no output)"


def _spawn_watchdog(folder: Path) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [sys.executable, "-I", os.path.abspath(__file__), "watch", str(os.getpid()), str(folder)],
        stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        start_new_session=True, close_fds=True,
    )


def _watch(owner: int, folder: Path) -> None:
    """Waits for the owner to go, then stops its server (the owner stopping it first is fine too)."""
    start = _start_time(owner)
    while _alive(owner, start) and folder.exists():
        time.sleep(0.5)
    if folder.exists():
        _stop_folder(folder)


@contextlib.contextmanager
def postgres_server(**kwargs: object) -> Iterator[PostgresServer]:
    server = PostgresServer.start(**kwargs)  # type: ignore[arg-type]
    try:
        yield server
    finally:
        server.stop()


if __name__ == "__main__" and len(sys.argv) == 4 and sys.argv[1] == "watch":
    _watch(int(sys.argv[2]), Path(sys.argv[3]))
