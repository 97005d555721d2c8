"""Unit tests name model ids (``some/hub-id``) they never download: preflight's check that an
id is in the Hugging Face cache when the server runs offline is tested on its own
(``test_bad_inputs.py`` restores it), so elsewhere every id counts as cached."""

from __future__ import annotations

import pytest

import specnb.sweep.preflight as preflight

REAL_IN_HUB_CACHE = preflight.in_hub_cache


@pytest.fixture(autouse=True)
def hub_ids_are_cached(monkeypatch):
    monkeypatch.setattr(preflight, "in_hub_cache", lambda repo_id, env: True)
