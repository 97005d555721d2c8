"""Sweep unit tests name model ids (``some/hub-id``) they never download: preflight's check that
an id is in the Hugging Face cache when the server runs offline is its own test
(``test_preflight.py``), so here every id counts as cached."""

from __future__ import annotations

import pytest


@pytest.fixture(autouse=True)
def hub_ids_are_cached(monkeypatch):
    import specnb.sweep.preflight as preflight

    monkeypatch.setattr(preflight, "_in_hub_cache", lambda repo_id, env: True)
