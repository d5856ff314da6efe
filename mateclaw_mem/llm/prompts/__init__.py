"""One module per LLM step: its prompt builder and its pydantic response model."""
