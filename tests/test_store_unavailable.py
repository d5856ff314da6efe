"""A store whose database cannot be reached (errors.StoreUnavailableError) is a 503 with the reason on
HTTP (the routes and the AML fast lane share `response_for`), a tool error with the reason on MCP, and
exit 8 on the CLI; the settings that choose the store refuse what they cannot mean.
The end-to-end halves (a real PostgreSQL stopped under a running daemon) are in tests/test_aml_only.py."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from mcp.server.mcpserver.exceptions import ToolError

from mateclaw_mem.api.errors import ERROR_RESPONSES, response_for
from mateclaw_mem.cli.main import EXIT_BY_CODE, EXIT_UNAVAILABLE
from mateclaw_mem.errors import ConfigError, StoreUnavailableError
from mateclaw_mem.mcp.common import call
from mateclaw_mem.settings import load_settings

REASON = "PostgreSQL at 127.0.0.1:5432 cannot be reached: connection refused (MATECLAW_PG_DSN)"


def _raise() -> None:
    raise StoreUnavailableError(REASON)


def test_http_answers_503_with_the_reason_and_a_retry_after() -> None:
    resp = response_for(StoreUnavailableError(REASON))
    assert resp.status_code == 503
    assert json.loads(bytes(resp.body)) == {"detail": {"reason": REASON}}
    assert resp.headers["retry-after"] == "1"
    assert 503 in ERROR_RESPONSES


def test_mcp_gives_the_reason_as_a_tool_error() -> None:
    with pytest.raises(ToolError, match="cannot be reached: connection refused"):
        call(_raise)


def test_the_cli_exit_code_is_its_own() -> None:
    assert EXIT_BY_CODE[StoreUnavailableError.code] == EXIT_UNAVAILABLE == 8
    assert "`8` the store's database cannot be reached" in (Path(__file__).parent.parent / "README.md").read_text()


@pytest.mark.parametrize(("yaml", "named"), [
    ("aml:\n  store: mysql\n", "aml.store"),
    ("aml:\n  postgres-dsn-env: 'not a name'\n", "aml.postgres_dsn_env"),
])
def test_store_settings_refuse_what_they_cannot_mean(tmp_path: Path, yaml: str, named: str) -> None:
    cfg = tmp_path / "c.yaml"
    cfg.write_text(yaml, encoding="utf-8")
    with pytest.raises(ConfigError) as err:
        load_settings(cfg, tmp_path / "ws")
    assert named.replace("_", "-") in err.value.message.replace("_", "-")


def test_store_settings_defaults_and_kebab_case(tmp_path: Path) -> None:
    assert load_settings(None, tmp_path / "ws").aml.store == "sqlite"
    cfg = tmp_path / "c.yaml"
    cfg.write_text("aml:\n  store: postgresql\n  postgres-dsn-env: MY_PG\n", encoding="utf-8")
    aml = load_settings(cfg, tmp_path / "ws").aml
    assert (aml.store, aml.postgres_dsn_env) == ("postgresql", "MY_PG")
