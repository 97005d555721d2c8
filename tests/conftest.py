"""Shared test set-up: integration tests are marked and need the CPU default model."""

from __future__ import annotations

import pytest

from specnb import paths

DEFAULT_MODEL = paths.MODELS / "SmolLM2-135M-Instruct"


def pytest_collection_modifyitems(config, items):
    for item in items:
        if "tests/integration/" in str(item.fspath).replace("\\", "/"):
            item.add_marker(pytest.mark.integration)
