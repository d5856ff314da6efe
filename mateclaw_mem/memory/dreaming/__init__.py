"""Dreaming: the nightly consolidation into MEMORY.md — service, candidates, gates, rules mode, runs,
diary, rotation."""
