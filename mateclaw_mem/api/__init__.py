"""HTTP face (FastAPI): parse, call a service, render."""
