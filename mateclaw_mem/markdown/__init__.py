"""Pure text functions over Markdown memory files. Imports nothing else from mateclaw_mem."""
