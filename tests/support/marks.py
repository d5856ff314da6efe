"""Which tests carry which pytest mark, in one table (tests/conftest.py applies it at collection).

    scripts/test.sh -m "not slow"                  # the quick subset
    scripts/test.sh -m "not slow and not browser"  # ... without chromium either
    scripts/test.sh -m slow                        # only the long ones

A key is a test file, or a file and a test function (`file.py::test_name`, every parametrisation of
it). `slow`: seconds of its own on a 2-core machine (most of the suite takes milliseconds);
`subprocess`: starts `mateclaw-mem` or another program as a real process; `browser`: drives chromium;
`soak`: repeats to catch a rare race. `TIMEOUTS` gives the known long ones more than pytest-timeout's
default (pyproject.toml): a guard against a hang, never a measurement.
tests/test_marks.py fails on a key that names no test, so the table cannot rot silently.
"""

from __future__ import annotations

MARKS: dict[str, tuple[str, ...]] = {
    # Daemons started, killed and restarted as real processes.
    "test_daemon_restarts.py": ("slow", "subprocess", "soak"),
    "test_daemon_e2e.py::test_serve_turns_hand_edits_sigterm_restart_nothing_lost": ("slow", "subprocess"),
    "test_daemon_e2e.py::test_non_loopback_without_key_refuses_and_names_the_variable": ("subprocess",),
    "test_daemon_model_mode.py": ("slow", "subprocess"),
    "test_daemon_gc.py": ("subprocess",),
    "test_malloc_tuning.py": ("subprocess",),  # a fresh interpreter sets its allocator
    "test_log_memory.py": ("subprocess",),  # SQLite's memory, counted in a fresh interpreter
    "test_index_page_cache.py": ("slow", "subprocess"),
    "test_aml_durability.py::test_kill_9_right_after_the_200_loses_no_acknowledged_add": ("slow", "subprocess"),
    "test_aml_durability.py::test_kill_9_while_the_index_is_behind_the_log_loses_nothing": ("slow", "subprocess"),
    "test_aml_read_your_writes.py::test_each_add_is_found_by_the_next_search_one_client": ("slow",),
    "test_aml_read_your_writes.py::test_concurrent_clients_find_their_own_and_each_others_acknowledged_adds": ("slow",),
    "test_import_chats.py::test_an_import_killed_with_sigkill_mid_way_is_completed_by_the_next_run_without_duplicates":
        ("slow", "subprocess"),
    "test_damaged_databases.py::test_the_start_sets_a_damaged_database_aside_and_comes_up": ("subprocess",),
    "test_damaged_databases.py::test_a_new_log_continues_the_ids_of_the_damaged_one": ("subprocess",),
    "test_damaged_databases.py::test_the_real_daemon_reports_what_was_set_aside": ("subprocess",),
    "test_workspace_location.py::test_serve_on_a_busy_port_fails_before_it_touches_the_workspace": ("subprocess",),
    "test_workspace_location.py::test_without_a_daemon_status_says_so_and_ignores_a_stale_pid_file": ("subprocess",),
    "test_workspace_location.py::test_a_second_serve_on_the_daemons_port_is_told_the_daemon_runs": ("subprocess",),
    "test_status_daemon.py": ("subprocess",),
    "test_pg_support.py": ("subprocess",),
    "test_aml_index_process.py": ("subprocess",),  # the index process is a real child (two tests: real daemons)
    "test_aml_index_process.py::test_the_daemon_indexes_a_stream_of_adds_in_a_child_and_ends_it_on_stop":
        ("slow", "subprocess"),
    "test_aml_index_process.py::test_index_process_false_keeps_the_indexing_in_the_daemon": ("slow", "subprocess"),
    "test_aml_only.py": ("slow", "subprocess"),  # serve --aml-only as real processes, the full daemon beside it
    "test_aml_only_pg.py": ("slow", "subprocess"),  # ... over a real PostgreSQL, stopped and restarted under it
    "test_aml_transfer_pg.py": ("subprocess",),  # a real PostgreSQL  # a real PostgreSQL (initdb, pg_ctl), and children killed with SIGKILL
    "test_hostile_files.py": ("slow", "subprocess"),  # megabyte memory files through the real daemon
    "test_half_operations.py": ("slow", "subprocess"),  # each operation killed with SIGKILL, then restarted
    # The CLI and the README run as a user runs them.
    "test_faces_cli.py::test_command_group": ("slow", "subprocess"),
    "test_faces_cli.py::test_help_version_and_no_command": ("subprocess",),
    "test_readme_walk.py": ("slow", "subprocess"),
    "test_cli.py::test_help_lists_commands": ("subprocess",),
    "test_cli.py::test_serve_starts_seeds_logs_mode_and_stops_on_sigterm": ("slow", "subprocess"),
    "test_cli.py::test_cat_opens_no_database_and_starts_no_thread": ("subprocess",),
    "test_cli.py::test_help_alone_prints_from_stubs_exactly_what_every_parser_prints": ("subprocess",),
    "test_settings.py::test_the_cli_exits_6_on_a_half_configured_model_and_creates_nothing": ("subprocess",),
    "test_forget.py::test_cli_forget": ("subprocess",),
    "test_forget_receipt.py::test_cli_forget_receipt": ("subprocess",),
    "test_service_files.py": ("subprocess",),
    "test_setup_script.py": ("subprocess",),
    "test_store.py::test_killing_a_writer_never_leaves_a_torn_file": ("subprocess",),
    "test_store.py::test_lock_holds_across_processes": ("subprocess",),
    "test_watcher.py::test_a_file_written_by_another_process_becomes_searchable": ("subprocess",),
    # MCP over stdio: the server is a real child process.
    "test_faces_mcp.py": ("subprocess",),
    "test_mcp.py": ("subprocess",),
    "test_mcp_start_errors.py": ("subprocess",),
    "test_mcp_profiles.py::test_stdio_serves_core_by_default_and_the_profile_asked_for": ("subprocess",),
    "test_learning_api.py::test_mcp_learning_tools": ("subprocess",),
    "test_run_log_lines.py::test_http_mcp_calls_log_nothing_at_info_from_the_sdk": ("subprocess",),
    "test_secrets_everywhere.py::test_mcp_search_memory_returns_no_secret": ("subprocess",),
    # Other programs: the Node SDK (npm installs it), chromium.
    "test_chat_proxy_clients.py::test_the_openai_node_sdk_streams_through_the_daemon": ("slow", "subprocess"),
    "test_ui_browser.py": ("slow", "browser"),
    "test_ui_browser_tools.py": ("slow", "browser"),
    "test_ui_features_off.py": ("slow", "browser"),
    "test_ui_home.py": ("slow", "browser"),
    "test_origin_guard_browser.py": ("slow", "browser"),
    "test_docs_offline.py::test_docs_pages_render_in_a_real_browser_with_every_other_host_unreachable":
        ("slow", "browser"),
    "test_ui_security.py::test_the_browser_is_not_loaded_until_a_page_is_asked_for": ("subprocess",),
    # The bench's smoke test: bench scripts as processes.
    "test_bench_smoke.py": ("slow", "subprocess", "bench"),
}

# Seconds, for tests that may rightly take longer than the default on a loaded machine.
TIMEOUTS: dict[str, int] = {
    "test_hostile_files.py::test_an_oversized_file_is_indexed_and_shown_in_parts_and_no_machine_writes_it": 900,
    "test_daemon_restarts.py": 900,  # six daemon starts, each bounded by its own guard
    "test_readme_walk.py": 600,  # every command of README's CLI table as a process
    "test_chat_proxy_clients.py::test_the_openai_node_sdk_streams_through_the_daemon": 600,  # npm installs the SDK
    "test_bench_smoke.py": 600,
}


def keys_of(nodeid: str) -> tuple[str, str]:
    """`tests/test_x.py::test_y[case]` -> ("test_x.py", "test_x.py::test_y")."""
    path, _, rest = nodeid.partition("::")
    file = path.rsplit("/", 1)[-1]
    return file, f"{file}::{rest.split('[', 1)[0]}"
