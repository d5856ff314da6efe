"""The line each command shows in `mateclaw-mem --help`, in the order it lists them.

Kept here, not in the modules that register the commands (they read it from here): `--help`
alone then builds one parser with a stub per command instead of importing every command module
and building every parser (cli/main.py); tests/test_cli.py holds both outputs identical.
"""

from __future__ import annotations

HELP: dict[str, str] = {
    "init": "create the workspace and seed an agent's files",
    "status": "agents, files against budgets, last writes, runs",
    "serve": "run the daemon (Ctrl-C or SIGTERM stops it)",
    "ls": "list an agent's memory files",
    "cat": "print a memory file",
    "write": "replace a memory file with stdin or --text",
    "write-memory": "merge text into a memory file (append, replace_section, upsert_kv, overwrite)",
    "edit": "find and replace text in a memory file",
    "enable": "enable a file in the always-on prompt",
    "disable": "disable a file in the always-on prompt",
    "sort": "set a file's sort_order in the prompt",
    "history": "list the kept versions of a file",
    "undo": "restore a kept version (default: before the last change)",
    "extract": "extract memory from a logged conversation now",
    "mcp": "serve an agent's memory over MCP (stdio)",
    "search": "keyword search over memory files and conversations",
    "reindex": "rebuild the search index from the files",
    "context": "show the prompt an agent would get for a message",
    "remember": "add or replace a structured entry (exact key)",
    "recall": "show structured entries (all, one type, or one key)",
    "consolidate-structured": "merge near-duplicate structured entries now (the nightly 03:30 job)",
    "learn": "learning memory: reflections, strategies, task scores",
    "dream": "consolidate recent daily notes into MEMORY.md now",
    "archive": "list, restore or roll the compressed month archives",
    "export": "write an agent's memory files (as on disk) and a manifest to a zip or folder",
    "import": "import a snapshot (the seed's files; any .md with mate.memory.snapshot-vault-import) "
              "as one undoable run",
    "model": "the configured model: check that it answers",
    "facts": "facts with trust: list, feedback, confirm, edit, rebuild",
    "contradictions": "the contradiction inbox: list, or resolve one pair",
    "card": "the morning card: last night's report; confirm/edit/forget",
    "soul": "review the SOUL.md proposal: show, propose, apply, reject",
    "forget": "forget a claim everywhere (TEXT, --now) or remove a structured entry (TYPE KEY)",
}
