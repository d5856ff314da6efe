"""Derived SQLite search data (FTS5), the shared tokenizer, reconcile against disk."""
