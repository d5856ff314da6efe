"""The only code that touches memory files: safe paths, atomic CAS writes, locks, history, seeds."""
