"""Pytest fixtures for the scripted model server. Import them in tests/conftest.py:

    from tests.support.fixtures import model_server, model_settings_overrides  # noqa: F401
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from tests.support.model_server import ModelServer


@pytest.fixture
def model_server() -> Iterator[ModelServer]:
    """A started ModelServer on a free loopback port; stopped after the test."""
    with ModelServer() as server:
        yield server


@pytest.fixture
def model_settings_overrides(model_server: ModelServer) -> dict[str, Any]:
    """`load_settings(overrides=...)` values pointing the model section at `model_server`,
    with a short timeout and retries so failure tests stay quick."""
    return {
        "model": {
            "base_url": model_server.base_url,
            "model": "test-model",
            "timeout_seconds": 2,
            "max_retries": 2,
        }
    }
