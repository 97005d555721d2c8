"""Every notebook under papermill in analysis mode (``measure = False``) on the committed
ledgers: no server, so these run in ``make test-unit``."""

from __future__ import annotations

from pathlib import Path

import pytest

from specnb.notebooks.runner import execute, notebook_parameters
from tests.integration.test_notebooks import NOTEBOOKS, _axis, _check_figures, _errors


@pytest.mark.parametrize("nb", NOTEBOOKS, ids=lambda p: Path(p).stem)
def test_analysis_mode_on_committed_ledgers(nb, tmp_path):
    params = {"figures_dir": str(tmp_path / "fig")} if "figures_dir" in notebook_parameters(nb) else {}
    out = execute(nb, tmp_path / "out.ipynb", params)
    assert _errors(out) == []
    sidecars = _check_figures(tmp_path / "fig") if params else []
    if _axis(nb) != "index":
        assert sidecars, "an axis notebook must save at least one figure"
        measured = [s for s in sidecars if any(src.startswith(f"ledgers/{_axis(nb)}/") for src in s["sources"])]
        if _axis(nb) != "calculator":
            assert measured, "at least one figure must be drawn from this axis' committed ledgers"


