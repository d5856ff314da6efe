"""Memory providers: sources of extra memory prefetched for a prompt (search hits, earlier
conversations), each behind a deadline and a circuit breaker (`registry.py`)."""
