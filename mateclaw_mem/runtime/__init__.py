"""Composition root: builds services from Settings; the daemon's threads live here."""
