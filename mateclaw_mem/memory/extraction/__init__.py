"""Post-chat extraction: the service, its queue and state, input and output checks, rules mode."""
