"""Imports of existing chat history (ChatGPT, Claude, Open WebUI exports, plain JSONL) into the log.

    records.py     what a parsed export is; the limits; the error that names file and record
    chatgpt.py claude.py openwebui.py jsonl.py    one parser per format: raw JSON -> conversations
    source.py      reading a file or an upload (size limit, zip), detecting the format
    estimate.py    what extraction the import will cause in model mode (calls, tokens)
    ledger.py      which conversations were imported and handed to extraction (log.db `chat_imports`)
    service.py     the import itself: validate all, append chunk by chunk, trigger extraction, dream

A whole file is parsed and checked before its first row is written, so a malformed export leaves
nothing half-imported; the writes are idempotent, so a second run adds nothing and a killed one
continues where it stopped. docs/importing-chats.md is the user's page.
"""
