"""The calculator notebook runs under papermill with its (CPU) defaults and saves its figures."""

from __future__ import annotations

import json

import nbformat
import pytest

from specnb import paths
from specnb.notebooks.runner import execute, notebook_parameters, read_params

SOURCE = paths.ROOT / "notebooks" / "07_calculator.py"
GPU = paths.ROOT / "notebooks" / "params" / "gpu" / "calculator.yaml"
DEMO = [paths.ROOT / "ledgers/cpu-demo/20261129-cpu-demo", paths.ROOT / "ledgers/concurrency/cpu/20261129-cpu-demo"]
FORMULA_FIGURES = ["calculator-acceptance-length", "calculator-best-k", "calculator-amdahl",
                   "calculator-kv-sessions", "calculator-stepcost"]


def _outputs(path) -> str:
    nb = nbformat.read(path, as_version=4)
    return "\n".join(o.get("text", "") for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", []))


def test_parameter_files_name_only_notebook_parameters():
    params = notebook_parameters(SOURCE)
    assert params["interactive"] is None and params["figures_dir"] == "figures"
    assert read_params(GPU, SOURCE)["interactive"] is False  # refuses unknown keys; papermill never draws sliders


@pytest.mark.timeout(120)
def test_notebook_draws_and_saves_every_figure(tmp_path):
    folder = next((p for p in DEMO if p.is_dir()), None)
    assert folder is not None, "the committed demo ledgers are missing from this checkout"
    out = execute(SOURCE, tmp_path / "out.ipynb", {"figures_dir": str(tmp_path), "ledgers": str(folder)})
    for fig_id in [*FORMULA_FIGURES, "calculator-stepcost-vs-measured"]:
        for ext in ("svg", "png", "json"):
            assert (tmp_path / f"{fig_id}.{ext}").stat().st_size > 0, f"{fig_id}.{ext}"
        side = json.loads((tmp_path / f"{fig_id}.json").read_text())
        assert side["notebook"] == "07_calculator"
    measured = json.loads((tmp_path / "calculator-stepcost-vs-measured.json").read_text())
    assert measured["source_files"] > 0 and len(measured["sources"]) == 1
    assert json.loads((tmp_path / "calculator-best-k.json").read_text())["sources"] == []
    text = _outputs(out)
    assert "baseline fit: n=16" in text and "note: no ledgers" not in text


@pytest.mark.timeout(120)
def test_missing_ledgers_are_a_note_not_a_crash(tmp_path):
    out = execute(SOURCE, tmp_path / "out.ipynb",
                  {"figures_dir": str(tmp_path), "ledgers": str(tmp_path / "moved-away")})
    for fig_id in FORMULA_FIGURES:
        assert (tmp_path / f"{fig_id}.png").exists()
    assert not (tmp_path / "calculator-stepcost-vs-measured.png").exists()
    assert "note: no ledgers at" in _outputs(out)


def test_sliders_only_when_asked_or_in_a_jupyter_server_kernel(monkeypatch):
    from specnb.figures.calculator import interactive_mode

    assert interactive_mode(True) is True and interactive_mode(False) is False
    monkeypatch.setenv("JPY_SESSION_NAME", "x.ipynb")
    assert interactive_mode(None) is False  # no kernel here (papermill's kernel has no session name either)
