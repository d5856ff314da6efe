"""Learning memory across tasks: global and per-task memory, run log, harness lineage."""
