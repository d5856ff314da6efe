"""Contradictions between facts: deterministic detection on every projection (`detect.py`), the
inbox table in facts.db (`inbox.py`), and the service that judges pairs with the model and resolves
them by changing the files (`service.py`)."""
