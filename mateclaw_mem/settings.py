"""One settings model: YAML file (kebab-case keys as the seed writes them) + environment overrides.

Precedence (highest first): environment (`MATECLAW_…`, nested with `__`), the YAML file, defaults.
`MATECLAW_WORKSPACE` and `MATECLAW_CONFIG` are the names scripts, cron and service files rely on.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator
from pydantic_settings import BaseSettings, PydanticBaseSettingsSource, SettingsConfigDict

from mateclaw_mem.errors import ConfigError

DEFAULT_CONFIG = Path("config/mateclaw.yaml")
DEFAULT_WORKSPACE = Path("workspace")


def _kebab_to_snake(data: Any) -> Any:
    """Accept the seed's kebab-case keys as written (`cooldown-minutes` == `cooldown_minutes`)."""
    if isinstance(data, dict):
        return {(k.replace("-", "_") if isinstance(k, str) else k): v for k, v in data.items()}
    return data


class Section(BaseModel):
    # Unknown keys are typos more often than not: fail at start and name them.
    model_config = ConfigDict(extra="forbid", validate_assignment=True)

    @model_validator(mode="before")
    @classmethod
    def _normalise_keys(cls, data: Any) -> Any:
        return _kebab_to_snake(data)


def _check_cron(value: str) -> str:
    from mateclaw_mem.cron import parse_cron

    parse_cron(value)  # raises ValueError naming the field
    return value


class DreamSettings(Section):
    focused_enabled: bool = True
    archive_enabled: bool = True
    archive_keep_days: int = Field(30, ge=0)
    max_candidates_per_dream: int = Field(100, ge=1)


class FactSettings(Section):
    projection_enabled: bool = False
    projection_rebuild_cron: str = "0 0 4 * * ?"
    contradiction_check_enabled: bool = False
    trust_half_life_days: int = Field(60, ge=1)
    forget_enabled: bool = False

    _cron = field_validator("projection_rebuild_cron")(_check_cron)


class MemorySettings(Section):
    """`mate.memory.*` — names and defaults as the seed documents them."""

    auto_summarize_enabled: bool = True
    min_messages_for_summarize: int = Field(4, ge=0)
    min_user_message_length: int = Field(10, ge=0)
    skip_cron_conversations: bool = True
    summary_max_tokens: int = Field(1000, ge=1)
    max_transcript_messages: int = Field(30, ge=1)
    cooldown_minutes: float = Field(5, ge=0)
    emergence_enabled: bool = True
    emergence_day_range: int = Field(7, ge=1)
    lifecycle_mediator_enabled: bool = True
    system_block_max_chars: int = Field(4000, ge=0)
    system_block_max_entries_per_type: int = Field(40, ge=0)
    structured_consolidation_enabled: bool = True
    structured_consolidation_min_entries: int = Field(8, ge=1)
    structured_consolidation_cron: str = "0 30 3 * * ?"
    structured_consolidation_max_owners_per_run: int = Field(50, ge=0)  # 0 = unlimited
    profile_max_chars: int = Field(4000, ge=0)
    memory_md_max_chars: int = Field(8000, ge=0)
    soul_update_interval: int = Field(20, ge=0)
    provider_prefetch_timeout_ms: int = Field(1500, ge=0)  # 0 = unlimited
    provider_prefetch_total_budget_ms: int = Field(2500, ge=0)  # 0 = unlimited
    provider_circuit_failure_threshold: int = Field(3, ge=1)
    provider_circuit_cooldown_seconds: int = Field(30, ge=0)
    provider_prefetch_max_chars: int = Field(2000, ge=0)  # the RECALLED MEMORY block; 0 = no prefetch
    dream: DreamSettings = DreamSettings()
    fact: FactSettings = FactSettings()

    _cron = field_validator("structured_consolidation_cron")(_check_cron)


class WindowSettings(Section):
    """`mate.agent.conversation.window.*`."""

    default_max_input_tokens: int = Field(128000, ge=256)
    compact_trigger_ratio: float = Field(0.75, gt=0, le=1)
    preserve_recent_pairs: int = Field(2, ge=0)
    summary_max_tokens: int = Field(300, ge=1)


class ConversationSettings(Section):
    window: WindowSettings = WindowSettings()


class AgentSettings(Section):
    conversation: ConversationSettings = ConversationSettings()


class MateSettings(Section):
    memory: MemorySettings = MemorySettings()
    agent: AgentSettings = AgentSettings()


class DreamingSettings(Section):
    """Nightly schedule. Quartz (6–7 fields, `?`) or classic 5-field cron."""

    cron: str = "0 0 3 * * ?"
    archive_rotation_cron: str = "0 45 3 * * ?"
    catch_up: bool = True
    diary_max_chars: int = Field(20000, ge=0)

    _cron = field_validator("cron", "archive_rotation_cron")(_check_cron)


class ModelSettings(Section):
    """Any OpenAI-compatible server (OpenAI, Ollama, LM Studio, vLLM, llama.cpp). Empty = rules mode."""

    base_url: str = ""
    model: str = ""
    api_key_env: str = "OPENAI_API_KEY"
    timeout_seconds: float = Field(60, gt=0)
    max_retries: int = Field(2, ge=0, le=10)
    json_mode: Literal["auto", "json_object", "off"] = "auto"
    temperature: float = Field(0.2, ge=0, le=2)
    embedding_model: str = ""

    @model_validator(mode="after")
    def _complete_or_empty(self) -> ModelSettings:
        # Half a model configuration would otherwise run rules mode without a word: the person
        # meant a model, so name the key that is missing instead.
        if self.base_url and not self.model:
            raise ValueError("model.base-url is set but model.model is empty: name the model to use (or clear base-url "
                             "for rules mode)")
        if self.model and not self.base_url:
            raise ValueError("model.model is set but model.base-url is empty: give the server's URL, e.g. "
                             "http://localhost:11434/v1 (or clear model for rules mode)")
        if self.embedding_model and not self.base_url:
            raise ValueError("model.embedding-model is set but model.base-url is empty: embeddings need a server")
        return self

    @property
    def configured(self) -> bool:
        return bool(self.base_url and self.model)

    def api_key(self) -> str:
        # Local servers accept any key; the openai client insists on a non-empty one.
        return os.environ.get(self.api_key_env, "") or "not-needed"


class ServerSettings(Section):
    host: str = "127.0.0.1"
    port: int = Field(8765, ge=0, le=65535)
    api_key_env: str = "MATECLAW_API_KEY"
    max_body_bytes: int = Field(2_000_000, ge=1024)
    # A request body must be complete this long after the request arrived (408 otherwise); 0 = off.
    body_read_timeout_seconds: float = Field(30.0, ge=0)


class SearchSettings(Section):
    file_weights: dict[str, float] = {
        "MEMORY.md": 1.0,
        "daily": 0.7,
        "PROFILE.md": 0.5,
        "AGENTS.md": 0.3,
        "SOUL.md": 0.3,
        "structured": 0.9,
        "archive": 0.4,
    }
    daily_recency_half_life_days: float = Field(14, gt=0)
    reconcile_interval_seconds: int = Field(300, ge=10)
    watch: bool = True


class HistorySettings(Section):
    keep_versions: int = Field(50, ge=1)


class Settings(BaseSettings):
    model_config = SettingsConfigDict(
        env_prefix="MATECLAW_", env_nested_delimiter="__", extra="forbid", validate_assignment=True
    )

    workspace: Path = DEFAULT_WORKSPACE
    timezone: str = ""  # "" = the machine's local zone
    default_agent: str = "default"
    owner_isolation: bool = False
    aml_agent: str = "aml"
    mate: MateSettings = MateSettings()
    dreaming: DreamingSettings = DreamingSettings()
    model: ModelSettings = ModelSettings()
    server: ServerSettings = ServerSettings()
    search: SearchSettings = SearchSettings()
    history: HistorySettings = HistorySettings()

    # Set by load_settings; not a config key.
    config_path: Path | None = Field(default=None, exclude=True)

    @model_validator(mode="before")
    @classmethod
    def _normalise_keys(cls, data: Any) -> Any:
        return _kebab_to_snake(data)

    @field_validator("timezone")
    @classmethod
    def _check_tz(cls, value: str) -> str:
        if value:
            from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

            try:
                ZoneInfo(value)
            except (ZoneInfoNotFoundError, ValueError) as exc:
                raise ValueError(f"unknown timezone {value!r} (use an IANA name such as Europe/Berlin)") from exc
        return value

    @property
    def state_dir(self) -> Path:
        return self.workspace / ".mateclaw"

    # The SQLite files (db.py says what goes where); table owners take their path from here.
    @property
    def log_db(self) -> Path:
        """Logs: conversations, runs, model usage, retrievals."""
        return self.state_dir / "log.db"

    @property
    def state_db(self) -> Path:
        """Bookkeeping: cooldowns, watermarks, schedules, lineage."""
        return self.state_dir / "state.db"

    @property
    def index_db(self) -> Path:
        """Derived, rebuildable: the memory files' chunks (and the file search's copy of the log)."""
        return self.state_dir / "index.db"

    @property
    def messages_db(self) -> Path:
        """Derived, rebuildable: the Add/Search message index."""
        return self.state_dir / "messages.db"

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        # YAML comes in through init kwargs (load_settings); env wins over it.
        return (env_settings, init_settings)


def _merge(base: dict[str, Any], extra: dict[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for key, value in extra.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = _merge(out[key], value)
        else:
            out[key] = value
    return out


def _deep_snake(data: Any) -> Any:
    if isinstance(data, dict):
        return {(k.replace("-", "_") if isinstance(k, str) else k): _deep_snake(v) for k, v in data.items()}
    return data


def _format_loc(loc: tuple[Any, ...]) -> str:
    return ".".join(str(part).replace("_", "-") for part in loc) or "(top level)"


def load_settings(
    config: str | Path | None = None,
    workspace: str | Path | None = None,
    overrides: dict[str, Any] | None = None,
) -> Settings:
    """Build Settings from a YAML file, the environment and explicit overrides.

    `config` None -> `$MATECLAW_CONFIG`, else `config/mateclaw.yaml` if it exists, else defaults.
    An explicitly named file that is missing is an error; so is any invalid value, named by key and file.
    """
    import yaml

    explicit = config is not None or bool(os.environ.get("MATECLAW_CONFIG"))
    path = Path(config or os.environ.get("MATECLAW_CONFIG") or DEFAULT_CONFIG).expanduser()
    data: dict[str, Any] = {}
    if path.exists():
        try:
            loaded = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
        except yaml.YAMLError as exc:
            raise ConfigError(f"{path}: not valid YAML: {exc}") from exc
        except OSError as exc:
            raise ConfigError(f"{path}: cannot read: {exc.strerror}") from exc
        if not isinstance(loaded, dict):
            raise ConfigError(f"{path}: expected a mapping of keys at the top level")
        data = _deep_snake(loaded)
    elif explicit:
        raise ConfigError(f"{path}: config file not found")
    if overrides:
        data = _merge(data, _deep_snake(overrides))
    try:
        settings = Settings(**data)
        if workspace is not None:
            settings.workspace = Path(workspace)
    except ValidationError as exc:
        problems = "; ".join(f"{_format_loc(e['loc'])}: {e['msg'].removeprefix('Value error, ')}" for e in exc.errors())
        source = str(path) if path.exists() else "defaults/environment"
        raise ConfigError(f"invalid configuration ({source}): {problems}") from None
    settings.workspace = settings.workspace.expanduser()
    settings.config_path = path if path.exists() else None
    return settings
