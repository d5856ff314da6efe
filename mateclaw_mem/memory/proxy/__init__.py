"""The chat proxy: memory for any OpenAI-compatible chat client, captured without it asking."""
