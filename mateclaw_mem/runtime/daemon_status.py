"""`status` answered by the workspace's running daemon, without building any service here.

Building the report in a fresh process costs most of half a second on a big workspace (the settings
model, every service the report reads, a walk of the workspace), while the daemon has all of it
open. So `mateclaw-mem status` first finds the workspace the way `load_settings` would
(`locations`; of the settings file only `workspace:` and `server.api-key-env`, unvalidated), reads
`.mateclaw/daemon.json` and asks that daemon for the report (`GET /api/v1/status`). Anything short
of a full answer from that very daemon - none running, no HTTP, an older daemon without the route,
a key it refuses, a timeout, a pid that does not match - returns None and the caller builds the
report itself, which also gives every error its usual message and exit code.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlsplit

from mateclaw_mem.runtime import pidfile

STATUS_PATH = "/api/v1/status"
TIMEOUT = 2.0  # seconds; a little longer than /health's: the daemon reads every agent's files for this
DEFAULT_KEY_ENV = "MATECLAW_API_KEY"  # settings.ServerSettings.api_key_env's default


def from_daemon(config: str | None, workspace: str | None, agent: str | None) -> dict[str, Any] | None:
    """The daemon's `status` report for the workspace these options name, or None (see above)."""
    located = _locate(config, workspace)
    if located is None:
        return None
    ws, ws_source, key_env = located
    record, _ = pidfile.live_record(ws / ".mateclaw")
    if record is None or record.url is None:
        return None
    target = STATUS_PATH + (f"?agent={quote(agent, safe='')}" if agent else "")
    data = _get_json(record.url, target, _auth(key_env))
    daemon = data.get("daemon") if isinstance(data, dict) else None
    if not isinstance(daemon, dict) or daemon.get("pid") != record.pid:
        return None  # another process answers on that port
    if data.get("workspace") != str(ws.resolve()):
        return None  # a record that came from another workspace (a copied .mateclaw/): not ours
    # How this command found the workspace is this command's to say; all else is the daemon's view.
    data["workspace_source"] = ws_source
    return data


def _get_json(base: str, target: str, headers: dict[str, str]) -> Any:
    """GET `target` from the daemon at `base` (http://host:port): its JSON body on a 200, else None.

    One HTTP/1.1 request on a plain socket: http.client and urllib.request would cost more to import
    (~15-20 ms, a tenth of this command) than the request itself, and loopback needs no proxy."""
    import socket

    parts = urlsplit(base)
    if parts.scheme != "http" or parts.hostname is None or parts.port is None:
        return None
    host = f"[{parts.hostname}]" if ":" in parts.hostname else parts.hostname
    lines = [f"GET {target} HTTP/1.1", f"Host: {host}:{parts.port}", "Connection: close",
             *(f"{k}: {v}" for k, v in headers.items())]
    chunks: list[bytes] = []
    try:
        # An ASCII host as bytes: getaddrinfo encodes a str with the "idna" codec, whose import
        # (stringprep, unicodedata) is ~3 ms of this command.
        name: str | bytes = parts.hostname.encode("ascii") if parts.hostname.isascii() else parts.hostname
        with socket.create_connection((name, parts.port), timeout=TIMEOUT) as conn:
            conn.sendall(("\r\n".join(lines) + "\r\n\r\n").encode("latin-1"))
            while chunk := conn.recv(65536):
                chunks.append(chunk)
        head, _, body = b"".join(chunks).partition(b"\r\n\r\n")
        status_line, *fields = head.decode("latin-1").split("\r\n")
        names = {name.strip().lower(): value.strip() for name, _, value in (f.partition(":") for f in fields)}
        # Anything but a plain 200 (401, 404 from an older daemon, 500): the local report says why.
        if status_line.split(" ")[1:2] != ["200"] or "chunked" in names.get("transfer-encoding", ""):
            return None
        if names.get("content-length", str(len(body))) != str(len(body)):
            return None  # cut short
        return json.loads(body.decode("utf-8"))
    except (OSError, ValueError, UnicodeError):
        return None


def _locate(config: str | None, workspace: str | None) -> tuple[Path, str, str] | None:
    """(workspace, where it came from, the API key's variable name) as `load_settings` would
    choose them, or None when the settings file cannot be read (the full path reports that)."""
    from mateclaw_mem.locations import WORKSPACE_ENV, choose_config, choose_workspace

    choice = choose_config(config)
    path = choice.path if choice.path is not None and choice.path.is_file() else None
    if path is None and choice.explicit:
        return None  # a named file that is missing: the full path says so (exit 6)
    data: dict[str, Any] = {}
    key_env = os.environ.get("MATECLAW_SERVER__API_KEY_ENV")
    try:
        text = path.read_text(encoding="utf-8") if path is not None else ""
    except (OSError, UnicodeDecodeError):
        return None
    named = (workspace is not None and str(workspace)) or os.environ.get(WORKSPACE_ENV)
    # YAML only when the file may hold what is needed here (~20 ms to import, ~15 more to parse in
    # pure Python: a third of this command).
    if text and (not named or (not key_env and _may_name_a_set_key(text))):
        import yaml

        try:
            loaded = yaml.load(text, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader)) or {}
        except yaml.YAMLError:
            return None
        if not isinstance(loaded, dict):
            return None
        data = loaded
    ws, source = choose_workspace(workspace, path, data.get("workspace"))
    server = data.get("server") if isinstance(data.get("server"), dict) else {}
    key_env = key_env or server.get("api-key-env") or server.get("api_key_env") or DEFAULT_KEY_ENV
    return ws, source, str(key_env)


def _may_name_a_set_key(text: str) -> bool:
    """Whether an `api-key-env` of the file could name a variable that holds a key here. Each is read
    off its line (`api-key-env: NAME  # comment`, quoted or not): when none of them, nor the default,
    is set, no key would be sent whichever one YAML picks, so there is nothing to parse the file for.
    Any other spelling (flow style, an alias, a block scalar, escapes) is left to YAML."""
    if "api-key-env" not in text and "api_key_env" not in text:
        return False
    if DEFAULT_KEY_ENV in os.environ:
        return True
    import re  # argparse has loaded it already

    values = re.findall(r"^[ \t]*api[-_]key[-_]env[ \t]*:(.*)$", text, re.MULTILINE)
    if len(values) != text.count("api-key-env") + text.count("api_key_env"):
        return True
    for raw in values:
        value = re.sub(r"(?:^|[ \t])#.*$", "", raw).strip()
        if len(value) >= 2 and value[0] == value[-1] and value[0] in "'\"":
            value = value[1:-1]
        if not value or value[0] in "&*!|>[{'\"%@`" or "\\" in value or value in os.environ:
            return True
    return False


def _auth(key_env: str) -> dict[str, str]:
    key = os.environ.get(key_env)
    return {"Authorization": f"Bearer {key}"} if key else {}
