"""The calculator notebook runs under papermill with its (CPU) defaults and saves its figures."""

from __future__ import annotations

import json

import nbformat
import pytest

from specnb import paths
from specnb.notebooks.runner import execute, notebook_parameters, read_params
from tests.hang import guard

SOURCE = paths.ROOT / "notebooks" / "07_calculator.py"
GPU = paths.ROOT / "notebooks" / "params" / "gpu" / "calculator.yaml"
# three notebook runs, 56-85 s on two busy cores (make test's first pass, 2026-12-07): handed out early
pytestmark = pytest.mark.long(85)
DEMO = [paths.ROOT / "ledgers/cpu-demo/20261129-cpu-demo", paths.ROOT / "ledgers/concurrency/cpu/20261129-cpu-demo"]
FORMULA_FIGURES = ["calculator-acceptance-length", "calculator-best-k", "calculator-amdahl",
                   "calculator-kv-sessions", "calculator-stepcost"]


def _outputs(path) -> str:
    """The printed text and the displayed Markdown of every code cell."""
    nb = nbformat.read(path, as_version=4)
    return "\n".join(o.get("text", "") + o.get("data", {}).get("text/markdown", "")
                     for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", []))


def test_parameter_files_name_only_notebook_parameters():
    params = notebook_parameters(SOURCE)
    assert params["interactive"] is None and params["figures_dir"] == "figures"
    assert read_params(GPU, SOURCE)["interactive"] is False  # refuses unknown keys; papermill never draws sliders


@pytest.mark.timeout(guard("notebook"))
def test_notebook_draws_and_saves_every_figure(tmp_path):
    folder = next((p for p in DEMO if p.is_dir()), None)
    assert folder is not None, "the committed demo ledgers are missing from this checkout"
    out = execute(SOURCE, tmp_path / "out.ipynb", {"figures_dir": str(tmp_path), "ledgers": str(folder),
                                                   "fit_resamples": 3})
    for fig_id in [*FORMULA_FIGURES, "calculator-stepcost-vs-measured", "calculator-published-fit"]:
        for ext in ("svg", "png", "json"):
            assert (tmp_path / f"{fig_id}.{ext}").stat().st_size > 0, f"{fig_id}.{ext}"
        side = json.loads((tmp_path / f"{fig_id}.json").read_text())
        assert side["notebook"] == "07_calculator"
    measured = json.loads((tmp_path / "calculator-stepcost-vs-measured.json").read_text())
    assert measured["source_files"] > 0 and len(measured["sources"]) == 1
    assert json.loads((tmp_path / "calculator-best-k.json").read_text())["sources"] == []
    text = _outputs(out)
    assert "baseline fit: n=16" in text and "note: no ledgers" not in text
    published = json.loads((tmp_path / "calculator-published-fit.json").read_text())
    assert published["source_files"] >= 3  # drawn from the published ledgers it fitted
    assert "fitted to" in text and "rms log error" in text
    assert "This answer's basis: hardware from a preset measured here; speculative costs as drafter_*_ms" in text


def test_published_fit_figure_has_a_panel_per_source():
    import pandas as pd

    from specnb.figures.calculator import published_fit_figure

    rows = []
    for src, axis in (("a", "concurrency"), ("b", "num_speculative_tokens")):
        for x in (1, 2, 4):
            rows.append({"ledger_id": src, "condition": f"{src} curve", "axis": axis,
                         "concurrency": x if axis == "concurrency" else 1, "k": x if axis != "concurrency" else 3,
                         "value": 1.5 / x, "predicted": 1.4 / x, "inferred": x == 2})
    loso = pd.DataFrame(rows)
    summary = pd.DataFrame({"ledger_id": ["a", "b"], "median_factor": [1.07, 1.07], "same_side_share": [1.0, 1.0]})
    fig = published_fit_figure(loso, summary)
    axes = fig.get_axes()
    assert len(axes) == 2 and axes[1].get_xlabel().startswith("K") and "median off x1.07" in axes[0].get_title()


@pytest.mark.timeout(guard("notebook"))
def test_missing_ledgers_are_a_note_not_a_crash_and_a_probe_grounds_the_hardware(tmp_path):
    """Run once for two things: no ledgers is a note; a probe ledger (the committed CPU one) replaces
    the preset's hardware terms and the answer says so."""
    probe = sorted((paths.ROOT / "ledgers" / "probe").glob("amd-epyc/*/smollm2-135m.json"))[0]
    out = execute(SOURCE, tmp_path / "out.ipynb",
                  {"figures_dir": str(tmp_path), "ledgers": str(tmp_path / "moved-away"), "fit_resamples": 3,
                   "probe": str(probe.parent)})
    for fig_id in FORMULA_FIGURES:
        assert (tmp_path / f"{fig_id}.png").exists()
    assert not (tmp_path / "calculator-stepcost-vs-measured.png").exists()
    text = _outputs(out)
    assert "note: no ledgers at" in text
    assert "hardware from the probe: " in text and "fitted to 48 probe cells" in text
    assert "This answer's basis: hardware fitted to a step-time probe of this device (step-time probe " in text
    assert f"{probe} (AMD EPYC, smollm2-135m bfloat16, 48 cells" in text


def test_sliders_only_when_asked_or_in_a_jupyter_server_kernel(monkeypatch):
    from specnb.figures.calculator import interactive_mode

    assert interactive_mode(True) is True and interactive_mode(False) is False
    monkeypatch.setenv("JPY_SESSION_NAME", "x.ipynb")
    assert interactive_mode(None) is False  # no kernel here (papermill's kernel has no session name either)


@pytest.mark.timeout(guard("notebook"))
def test_the_heads_costs_are_learned_from_its_profile_and_its_crossing_lies_where_the_engine_put_it(tmp_path):
    """notebooks/params/eagle3/calculator.yaml: the committed head's drafting terms refitted to its
    committed step anatomy; with its measured free-form acceptance the predicted crossing lies
    between the levels where the committed drafter run shows it paying (c=1) and losing (c=4)."""
    import re

    from specnb.notebooks.runner import execute

    out = execute(SOURCE, tmp_path / "out.ipynb", {**read_params(paths.ROOT / "notebooks/params/eagle3/calculator.yaml",
                                                                 SOURCE), "figures_dir": str(tmp_path),
                                                   "fit_resamples": 3})
    text = _outputs(out)
    assert "refitted to 6 profiled windows of eagle3-k3" in text and "drafting on 100 % of a request's steps" in text
    at = float(re.search(r"speculation pays below about \*\*c~(\d+(?:\.\d+)?)\*\*", text).group(1))
    assert 1 < at < 4, at
