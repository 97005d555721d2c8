"""The step-cost model's hardware terms fitted from a probe ledger: the fit recovers terms that
generated the cells (memory- and compute-bound ones both in the grid), its step is the step-cost
model's baseline step, a preset's peaks carry over, bad ledgers are one line, and the committed
CPU probe ledger fits."""

from __future__ import annotations

import json

import numpy as np
import pytest

from specnb import paths
from specnb.models.hardware import Hardware, StepCostError, load_hardware
from specnb.models.probefit import answer_basis, fit_probe, probe_arrays, probe_step_s, read_probe
from specnb.models.stepcost import NGRAM, TargetModel, step_terms

SHAPE = {"name": "dense-1b", "hidden_size": 2048, "num_hidden_layers": 16, "num_attention_heads": 32,
         "num_key_value_heads": 8, "head_dim": 64, "intermediate_size": 8192, "vocab_size": 128256}
PARAMS = 1.24e9


def ledger(hw: Hardware, noise: float = 0.0, **shape) -> dict:
    rng = np.random.default_rng(0)
    doc = {"kind": "probe", "dtype": "bfloat16", "params": PARAMS, "shape": {**SHAPE, **shape},
           "device": {"name": "Test GPU", "memory_bytes": 80 * 2**30}, "started_at": "2026-12-05T00:00:00+00:00",
           "cells": [{"b": b, "q": q, "L": L, "median_ms": 1.0} for b in (1, 4, 16, 64, 256) for q in (1, 4, 8)
                     for L in (1024, 8192)]}
    a = probe_arrays(doc)
    t = probe_step_s(hw, PARAMS * 2, PARAMS, a["b"], a["q"], a["kv_bytes"]) * np.exp(noise * rng.standard_normal(a["b"].size))
    for c, s in zip(doc["cells"], t, strict=True):
        c["median_ms"] = 1e3 * s
    return doc


TRUE = Hardware("truth", bandwidth_bytes_s=2.4e12, flop_s=6.5e14, step_overhead_s=3e-4)


def test_the_fit_recovers_the_terms_that_made_the_cells():
    fit = fit_probe(ledger(TRUE, noise=0.02))
    hw = fit.hardware
    assert hw.bandwidth_bytes_s == pytest.approx(TRUE.bandwidth_bytes_s, rel=0.05)
    assert hw.flop_s == pytest.approx(TRUE.flop_s, rel=0.05)
    assert hw.step_overhead_s == pytest.approx(TRUE.step_overhead_s, rel=0.25)
    assert fit.rms_log_error < 0.04 and fit.unidentified() == [] and fit.n == 30
    assert "step-time probe <dict> (Test GPU, dense-1b bfloat16, 30 cells, 2026-12-05)" == hw.source
    assert hw.memory_bytes == 80 * 2**30


def test_a_grid_that_never_leaves_the_memory_floor_says_flops_are_undetermined():
    doc = ledger(TRUE)
    doc["cells"] = [c for c in doc["cells"] if c["b"] * c["q"] <= 4]
    assert "flop_s" in fit_probe(doc).unidentified()


def test_the_probe_step_is_the_step_cost_models_decode_step():
    """q = 1 and no drafter: the step-cost model's baseline step at context L + 1 (prompt L + 1,
    no output share) is the probe cell's priced step."""
    target = TargetModel("t", PARAMS, 2 * PARAMS, 2 * 16 * 8 * 64 * 2)
    a = probe_arrays(ledger(TRUE))
    one = a["q"] == 1
    ours = probe_step_s(TRUE, 2 * PARAMS, PARAMS, a["b"][one], a["q"][one], a["kv_bytes"][one])
    n = int(one.sum())
    theirs = step_terms(TRUE, target, NGRAM, batch=a["b"][one], prompt=a["L"][one] + 1, prefill=np.zeros(n),
                        output=np.full(n, 1e-9), k=np.zeros(n), tau=np.ones(n), q=np.zeros(n),
                        spec=np.zeros(n, bool), sharpness=None).step_s
    np.testing.assert_allclose(ours, theirs, rtol=1e-6)


def test_a_sliding_window_layer_reads_its_window_only():
    full = probe_arrays(ledger(TRUE))
    local = probe_arrays(ledger(TRUE, sliding_window=512, sliding_window_pattern=4))
    long = full["L"] == 8192
    assert np.all(local["kv_bytes"][long] < full["kv_bytes"][long] / 3)  # 12 of 16 layers read 512 tokens


def test_a_preset_of_the_same_device_keeps_its_memory_and_its_peaks_ratios():
    h100 = load_hardware("h100-sxm")
    hw = fit_probe(ledger(TRUE), like=h100).hardware
    assert hw.memory_bytes == h100.memory_bytes and hw.name == "h100-sxm (probe)"
    fp8 = hw.for_dtype("fp8")
    assert fp8.flop_s / hw.flop_s == pytest.approx(h100.peaks_flop_s["fp8"] / h100.peaks_flop_s["bf16"])


def test_bad_probe_ledgers_are_one_line(tmp_path):
    with pytest.raises(StepCostError, match="mixture of experts"):
        fit_probe(ledger(TRUE, num_experts=8))
    doc = ledger(TRUE)
    doc["cells"] = doc["cells"][:3]
    with pytest.raises(StepCostError, match="cannot fit 3 terms"):
        fit_probe(doc)
    with pytest.raises(StepCostError, match="no measured cell"):
        fit_probe({**doc, "cells": []})
    (tmp_path / "a.json").write_text(json.dumps(ledger(TRUE)))
    (tmp_path / "b.json").write_text(json.dumps(ledger(TRUE)))
    with pytest.raises(StepCostError, match="2 probe ledgers in the folder"):
        read_probe(tmp_path)
    (tmp_path / "c.json").write_text("{}")
    with pytest.raises(StepCostError, match="not a step-time probe ledger"):
        read_probe(tmp_path / "c.json")
    with pytest.raises(StepCostError, match="No such file"):
        read_probe(tmp_path / "missing.json")


def test_the_committed_cpu_probe_fits():
    (path,) = sorted((paths.ROOT / "ledgers" / "probe").glob("amd-epyc/*/smollm2-135m.json"))[:1]
    fit = fit_probe(path)
    assert np.isfinite(fit.rms_log_error) and fit.hardware.bandwidth_bytes_s > 0
    assert "smollm2-135m bfloat16" in fit.hardware.source and str(path) in fit.summary() + fit.path


def test_the_answer_says_where_its_step_costs_come_from():
    fit = fit_probe(ledger(TRUE))
    assert answer_basis("spec-sheet", None, "published-fit") == (
        "hardware from a spec sheet's peaks (no server reaches them); speculative costs from the published step "
        "model (fitted to ledgers/published)")
    assert answer_basis("spec-sheet", fit, None).startswith("hardware fitted to a step-time probe of this device "
                                                           "(step-time probe <dict> (Test GPU")
    assert "a preset measured here" in answer_basis("measured", None, "my sweep of 2026-12-01")
    assert answer_basis("measured", None, "my sweep of 2026-12-01").endswith("speculative costs from my sweep of 2026-12-01")
