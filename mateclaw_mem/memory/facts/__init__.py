"""Facts: small claims with a source, projected from the memory files, with trust that moves.

A fact is derived -- rebuildable from PROFILE.md, MEMORY.md and structured/ at any time -- while what
people and use did to it (feedback, confirmations, edits, uses, forgets) is an event log that
survives every rebuild (`storage.py`). Trust is computed from that log (`trust.py`), never stored,
so a rebuild can neither reset nor invent it.
"""
