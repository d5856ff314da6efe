"""OpenAI-compatible model client, rules engine and one prompt module per step."""
