"""mateclaw-mem: local Markdown memory for AI assistants."""

__version__ = "0.1.0"
