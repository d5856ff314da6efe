from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from mateclaw_mem.cron import parse_cron
from mateclaw_mem.errors import ConfigError
from mateclaw_mem.settings import load_settings

REPO_CONFIG = Path(__file__).resolve().parents[1] / "config" / "mateclaw.yaml"


@pytest.fixture(autouse=True)
def _clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    import os

    for key in [k for k in os.environ if k.startswith("MATECLAW_")]:
        monkeypatch.delenv(key)


def test_shipped_config_documents_the_seed_defaults() -> None:
    s = load_settings(REPO_CONFIG)
    m = s.mate.memory
    assert (m.auto_summarize_enabled, m.min_messages_for_summarize, m.min_user_message_length) == (True, 4, 10)
    assert (m.cooldown_minutes, m.max_transcript_messages, m.summary_max_tokens) == (5, 30, 1000)
    assert (m.profile_max_chars, m.memory_md_max_chars, m.system_block_max_chars) == (4000, 8000, 4000)
    assert m.structured_consolidation_cron == "0 30 3 * * ?" and m.dream.archive_keep_days == 30
    assert m.fact.trust_half_life_days == 60 and m.provider_circuit_cooldown_seconds == 30
    w = s.mate.agent.conversation.window
    assert (w.default_max_input_tokens, w.compact_trigger_ratio, w.preserve_recent_pairs) == (128000, 0.75, 2)
    assert s.dreaming.cron == "0 0 3 * * ?" and not s.model.configured and not s.owner_isolation
    text = REPO_CONFIG.read_text()
    for key in ("auto-summarize-enabled", "skip-cron-conversations", "emergence-day-range",
                "lifecycle-mediator-enabled", "system-block-max-entries-per-type", "structured-consolidation-min-entries",
                "structured-consolidation-max-owners-per-run", "focused-enabled", "max-candidates-per-dream",
                "soul-update-interval", "projection-rebuild-cron", "contradiction-check-enabled", "forget-enabled",
                "provider-prefetch-timeout-ms", "provider-prefetch-total-budget-ms",
                "provider-circuit-failure-threshold", "summary-max-tokens: 300"):
        assert key in text, key


def test_kebab_and_snake_keys_env_override_and_precedence(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    cfg = tmp_path / "c.yaml"
    cfg.write_text("mate:\n  memory:\n    cooldown-minutes: 7\n    min_user_message_length: 3\n")
    s = load_settings(cfg)
    assert s.mate.memory.cooldown_minutes == 7 and s.mate.memory.min_user_message_length == 3
    monkeypatch.setenv("MATECLAW_MATE__MEMORY__COOLDOWN_MINUTES", "11")
    monkeypatch.setenv("MATECLAW_WORKSPACE", str(tmp_path / "ws"))
    s = load_settings(cfg)
    assert s.mate.memory.cooldown_minutes == 11 and s.workspace == tmp_path / "ws"
    monkeypatch.setenv("MATECLAW_CONFIG", str(cfg))
    assert load_settings().config_path == cfg


@pytest.mark.parametrize(
    "yaml_text,needle",
    [
        ("mate:\n  memory:\n    cooldown-minutes: soon\n", "mate.memory.cooldown-minutes"),
        ("mate:\n  memory:\n    cooldwn-minutes: 5\n", "cooldwn-minutes"),
        ("dreaming:\n  cron: '0 3 * *'\n", "dreaming.cron"),
        ("timezone: Mars/Olympus\n", "unknown timezone"),
        ("mate: [1, 2\n", "not valid YAML"),
        ("- just\n- a list\n", "mapping"),
    ],
)
def test_wrong_values_fail_naming_key_and_file(tmp_path: Path, yaml_text: str, needle: str) -> None:
    cfg = tmp_path / "bad.yaml"
    cfg.write_text(yaml_text)
    with pytest.raises(ConfigError) as err:
        load_settings(cfg)
    assert needle in err.value.message and "bad.yaml" in err.value.message


def test_missing_explicit_config_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="not found"):
        load_settings(tmp_path / "nope.yaml")


def test_quartz_and_classic_cron() -> None:
    q = parse_cron("0 30 3 * * ?").trigger_kwargs()
    assert q == {"second": "0", "minute": "30", "hour": "3", "day": "*", "month": "*", "day_of_week": "*"}
    assert parse_cron("0 0 9 ? * MON-FRI").day_of_week == "mon-fri"
    assert parse_cron("0 0 9 ? * 1").day_of_week == "sun"  # Quartz 1 = Sunday
    assert parse_cron("0 9 * * 1").day_of_week == "mon"  # classic 1 = Monday
    assert parse_cron("0 0 3 ? * 2,6").day_of_week == "mon,fri"
    with pytest.raises(ValueError, match="not supported"):
        parse_cron("0 0 3 L * ?")


def test_quartz_fields_drive_a_real_apscheduler_trigger() -> None:
    from datetime import datetime
    from zoneinfo import ZoneInfo

    from apscheduler.triggers.cron import CronTrigger

    tz = ZoneInfo("Asia/Shanghai")
    trigger = CronTrigger(timezone=tz, **parse_cron("0 30 3 * * ?").trigger_kwargs())
    nxt = trigger.get_next_fire_time(None, datetime(2026, 11, 30, 4, 0, tzinfo=tz))
    assert nxt == datetime(2026, 12, 1, 3, 30, tzinfo=tz)


@pytest.mark.parametrize(("model", "missing"), [
    ({"base-url": "http://localhost:11434/v1"}, "model.model is empty"),
    ({"model": "qwen2.5:7b"}, "model.base-url is empty"),
    ({"embedding-model": "nomic-embed-text"}, "embeddings need a server"),
])
def test_a_half_configured_model_is_a_config_error_naming_the_missing_key(tmp_path, model, missing):
    cfg = tmp_path / "mateclaw.yaml"
    cfg.write_text(yaml.safe_dump({"model": model}))
    with pytest.raises(ConfigError, match=missing):
        load_settings(cfg)


def test_the_cli_exits_6_on_a_half_configured_model_and_creates_nothing(tmp_path):
    env = {k: v for k, v in os.environ.items() if not k.startswith("MATECLAW_")}
    env["MATECLAW_MODEL__BASE_URL"] = "http://localhost:11434/v1"
    ws = tmp_path / "ws"
    proc = subprocess.run([sys.executable, "-m", "mateclaw_mem.cli.main", "--workspace", str(ws), "status"],
                          capture_output=True, text=True, env=env, cwd=tmp_path, timeout=60)
    assert proc.returncode == 6, proc.stderr
    assert "model.model is empty" in proc.stderr and "Traceback" not in proc.stderr
    assert not ws.exists()
