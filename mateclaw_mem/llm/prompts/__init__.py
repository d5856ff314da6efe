"""One module per LLM step: its prompt builder and its pydantic response model."""


def block(title: str, text: str) -> str:
    """A titled, fenced section of a prompt (the same framing in every step)."""
    body = text.strip() or "(empty)"
    return f"<<< {title} >>>\n{body}\n<<< end >>>"
