"""Structured entries (`structured/*.md`) and their consolidation."""
