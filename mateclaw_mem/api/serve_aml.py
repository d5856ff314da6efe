"""Stop-gap launcher for the HTTP face until `mateclaw-mem serve` lands in `cli/`.

    python -m mateclaw_mem.api.serve_aml --workspace DIR --port N [--api-key-env VAR]

Scripts wait for it by polling `GET /health`.
"""

from __future__ import annotations

import argparse
import sys

import uvicorn

from mateclaw_mem.api.app import create_app
from mateclaw_mem.errors import MateclawError
from mateclaw_mem.runtime.services import Services
from mateclaw_mem.settings import load_settings


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m mateclaw_mem.api.serve_aml", description=__doc__)
    ap.add_argument("--workspace", required=True, help="workspace root (state goes to DIR/.mateclaw)")
    ap.add_argument("--host", default=None, help="bind address (default: settings, 127.0.0.1)")
    ap.add_argument("--port", type=int, default=None, help="port (default: settings, 8765)")
    ap.add_argument("--config", default=None, help="mateclaw.yaml (default: $MATECLAW_CONFIG or config/)")
    ap.add_argument("--api-key-env", default=None, help="environment variable holding the API key")
    args = ap.parse_args(argv)
    server: dict[str, object] = {}
    if args.host:
        server["host"] = args.host
    if args.port is not None:
        server["port"] = args.port
    if args.api_key_env:
        server["api_key_env"] = args.api_key_env
    try:
        settings = load_settings(args.config, workspace=args.workspace, overrides={"server": server})
        services = Services(settings)
        _ = services.aml  # open the log and catch the index up before accepting requests
    except MateclawError as exc:
        print(f"error: {exc.message}", file=sys.stderr)
        return 2
    app = create_app(services)
    config = uvicorn.Config(
        app, host=settings.server.host, port=settings.server.port, log_level="warning", access_log=False
    )
    srv = uvicorn.Server(config)
    print(
        f"listening on http://{settings.server.host}:{settings.server.port}"
        f" (auth {'on' if services.api_key else 'off'})",
        flush=True,
    )
    try:
        srv.run()
    finally:
        services.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
