"""Lifecycle services: context, extraction, dreaming, structured entries, learning memory, status."""
