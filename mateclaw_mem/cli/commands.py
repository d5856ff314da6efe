"""Every command of `mateclaw-mem`: the module that registers it and the line `--help` shows for it,
in the order `--help` lists them.

The modules that register the commands read their lines from here, and `--help` alone builds one
parser with a stub per command from it instead of importing every command module and building every
parser (cli/main.py); tests/test_cli.py holds both outputs identical. Running one command builds only
its module's parsers.
"""

from __future__ import annotations

TABLE: dict[str, tuple[str, str]] = {
    "init": ("admin", "create the workspace and seed an agent's files"),
    "status": ("admin", "agents, files against budgets, last writes, runs"),
    "serve": ("admin", "run the daemon (Ctrl-C or SIGTERM stops it)"),
    "ls": ("files", "list an agent's memory files"),
    "cat": ("files", "print a memory file"),
    "write": ("files", "replace a memory file with stdin or --text"),
    "write-memory": ("files", "merge text into a memory file (append, replace_section, upsert_kv, overwrite)"),
    "edit": ("files", "find and replace text in a memory file"),
    "enable": ("files", "enable a file in the always-on prompt"),
    "disable": ("files", "disable a file in the always-on prompt"),
    "sort": ("files", "set a file's sort_order in the prompt"),
    "history": ("files", "list the kept versions of a file"),
    "undo": ("files", "restore a kept version (default: before the last change)"),
    "extract": ("extract", "extract memory from a logged conversation now"),
    "mcp": ("mcp", "serve an agent's memory over MCP (stdio)"),
    "search": ("search", "keyword search over memory files and conversations"),
    "reindex": ("search", "rebuild the search index from the files"),
    "context": ("prompt", "show the prompt an agent would get for a message"),
    "remember": ("prompt", "add or replace a structured entry (exact key)"),
    "recall": ("prompt", "show structured entries (all, one type, or one key)"),
    "consolidate-structured": ("prompt", "merge near-duplicate structured entries now (the nightly 03:30 job)"),
    "learn": ("learning", "learning memory: reflections, strategies, task scores"),
    "dream": ("dream", "consolidate recent daily notes into MEMORY.md now"),
    "archive": ("archive", "list, restore or roll the compressed month archives"),
    "export": ("transfer", "write an agent's memory files (as on disk) and a manifest to a zip or folder"),
    "import": ("transfer", "import a snapshot (the seed's files; any .md with mate.memory.snapshot-vault-import) as "
                           "one undoable run"),
    "import-chats": ("import_chats", "import chat history (ChatGPT, Claude, Open WebUI exports, JSONL) with its dates"),
    "model": ("model", "the configured model: check that it answers"),
    "aml": ("aml", "Add/Search: the contract checked (aml check URL); the store moved (aml export|import FILE)"),
    "facts": ("facts", "facts with trust: list, feedback, confirm, edit, rebuild"),
    "contradictions": ("contradictions", "the contradiction inbox: list, or resolve one pair"),
    "card": ("card", "the morning card: last night's report; confirm/edit/forget"),
    "soul": ("soul", "review the SOUL.md proposal: show, propose, apply, reject"),
    "forget": ("forget", "forget a claim everywhere (TEXT, --now) or remove a structured entry (TYPE KEY)"),
    "doctor": ("doctor", "check the databases; set a damaged one aside; --salvage FILE copies its rows back"),
}
# command -> the module (cli/<module>.py) whose register() adds it
COMMANDS: dict[str, str] = {name: module for name, (module, _) in TABLE.items()}
HELP: dict[str, str] = {name: line for name, (_, line) in TABLE.items()}
# Each module exposes register(subparsers, common_parent), called in this order.
MODULES: tuple[str, ...] = tuple(dict.fromkeys(COMMANDS.values()))
