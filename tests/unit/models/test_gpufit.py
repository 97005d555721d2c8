"""The GPU fit of the step-cost model: known terms come back from synthetic curves, held-out
sources are scored as predicted, and the committed published curves fit."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pandas as pd
import pytest

from specnb.ledger.published import published_curves
from specnb.models import gpufit
from specnb.models.gpufit import GpuTerms
from specnb.models.hardware import StepCostError, hardware_presets, load_hardware
from specnb.models.stepcost import Drafter, TargetModel, step_terms

PRESETS = hardware_presets()
KNOWN = GpuTerms(compute_efficiency=0.6, spec_step_frac=0.25, draft_pass_frac=0.05, per_token_frac=1.5)


def _curve(ledger_id: str, condition: str, preset: str, params_b: float, *, axis: str = "concurrency",
           concurrency=(1, 4, 16, 64, 128), ks=(3,), tau: float = 2.4, kind: str = "eagle",
           prompt: float = 512.0) -> pd.DataFrame:
    rows = []
    for c in concurrency:
        for k in ks:
            rows.append({"ledger_id": ledger_id, "publisher": "synthetic", "source_url": "https://example.org",
                         "condition": condition, "ratio_type": "aggregate_throughput", "axis": axis,
                         "hardware_preset": preset, "gpus": 1, "compute_dtype": "bf16", "target": "t",
                         "target_params_b": params_b, "target_layers": 32, "target_kv_heads": 8,
                         "target_head_dim": 128, "weight_bytes_per_param": 2.0, "kv_bytes_per_value": 2.0,
                         "drafter": kind, "drafter_kind": kind, "drafter_params_b": 0.0, "prompt_tokens": prompt,
                         "output_tokens": 256.0, "k": k, "tokens_per_step": tau + 0.1 * (k - 3),
                         "concurrency": c, "value": np.nan, "inferred": False, "curve_inferred": ""})
    return pd.DataFrame(rows)


def _synthetic(terms: GpuTerms = KNOWN) -> pd.DataFrame:
    pts = pd.concat([
        _curve("a", "8b h100", "h100-sxm", 8.0),
        _curve("a", "8b h100 long", "h100-sxm", 8.0, prompt=4096.0, tau=2.1),
        _curve("b", "27b b200", "b200", 27.0, kind="block", tau=2.2),
        _curve("c", "8b k sweep", "h100-sxm", 8.0, axis="num_speculative_tokens", concurrency=(1,), ks=(2, 3, 4, 5, 6, 7)),
        _curve("c", "8b k sweep c8", "h100-sxm", 8.0, axis="num_speculative_tokens", concurrency=(8,), ks=(2, 4, 7)),
    ], ignore_index=True)
    pts["value"] = gpufit.predict_speedups(pts, PRESETS, terms).to_numpy()
    return pts


def test_the_spec_sheet_terms_are_the_plain_model():
    hw, t = load_hardware("h100-sxm"), TargetModel.dense("8b", 8e9, layers=32, kv_heads=8, head_dim=128)
    d = Drafter("eagle")
    hw2, d2 = GpuTerms().apply(hw, t, d)
    assert hw2 == hw and d2 == d


def test_terms_in_seconds_scale_with_the_weight_read_and_token_compute():
    hw, t = load_hardware("h100-sxm"), TargetModel.dense("8b", 8e9, layers=32, kv_heads=8, head_dim=128)
    s = KNOWN.seconds(hw, t)
    read = t.weight_bytes / hw.bandwidth_bytes_s
    assert s["step_overhead_s"] == pytest.approx(0.25 * read)
    assert s["per_pass_s"] == pytest.approx(0.05 * read)
    assert s["per_token_s"] == pytest.approx(1.5 * 2 * t.params / (0.6 * hw.flop_s))


def test_a_drafting_pass_is_paid_k_times_by_a_sequential_drafter_once_by_a_block_drafter():
    hw, t = load_hardware("h100-sxm"), TargetModel.dense("8b", 8e9, layers=32, kv_heads=8, head_dim=128)
    one = np.ones(1)
    kw = dict(batch=one, prompt=0 * one, prefill=0 * one, output=256 * one, k=5 * one, tau=2 * one, q=one,
              spec=np.ones(1, bool), sharpness=None)
    for parallel, passes in ((False, 5), (True, 1)):
        d0 = Drafter("d", parallel=parallel)
        base = step_terms(hw, t, d0, **kw).drafting_s[0]
        with_pass = step_terms(hw, t, replace(d0, per_pass_s=1e-3), **kw).drafting_s[0]
        assert with_pass - base == pytest.approx(passes * 1e-3)
    with pytest.raises(StepCostError, match="per_pass_s"):
        Drafter("d", per_pass_s=-1.0)


def test_all_curves_in_one_call_give_each_curve_what_it_gives_alone():
    """The fit stacks every curve into one step_terms call; each point must get exactly what its
    curve's own hardware, target and drafter give through the scalar path (mixed drafter kinds:
    sized and unsized, sequential and block)."""
    pts = pd.concat([_synthetic(), _curve("d", "8b draft model", "h100-sxm", 8.0, kind="draft")], ignore_index=True)
    pts.loc[pts["ledger_id"] == "d", "drafter_params_b"] = 0.5
    stacked = gpufit.predict_speedups(pts, PRESETS, KNOWN)
    for c in gpufit.curve_models(pts, PRESETS):
        hw, d = KNOWN.apply(c.hw, c.target, c.drafter)
        kw = {k: v for k, v in c.arrays.items()}
        base = step_terms(hw, c.target, d, tau=np.ones_like(c.tau), spec=np.zeros(c.tau.size, bool), **kw)
        spec = step_terms(hw, c.target, d, tau=c.tau, spec=np.ones(c.tau.size, bool), **kw)
        assert np.array_equal(stacked.loc[c.index].to_numpy(), spec.tok_s / base.tok_s), c.condition
    assert {c.drafter.parallel for c in gpufit.curve_models(pts, PRESETS)} == {True, False}
    assert {c.drafter.params > 0 for c in gpufit.curve_models(pts, PRESETS)} == {True, False}


def test_known_terms_are_recovered_from_synthetic_curves():
    fit = gpufit.fit_gpu_terms(_synthetic(), PRESETS)
    for term in gpufit.DEFAULT_TERMS:
        assert getattr(fit.terms, term) == pytest.approx(getattr(KNOWN, term), rel=0.05), term
    assert fit.rms_log_error < 1e-3
    assert fit.points["predicted"].to_numpy() == pytest.approx(fit.points["value"].to_numpy(), rel=1e-3)


def test_held_out_synthetic_sources_are_predicted():
    loso = gpufit.leave_one_source_out(_synthetic(), PRESETS)
    summary = gpufit.loso_summary(loso).set_index("ledger_id")
    assert list(summary.index) == ["a", "b", "c"]
    assert (summary["median_abs_log_error"] < 0.02).all() and (summary["same_side_share"] == 1.0).all()
    levels = gpufit.loso_levels(loso)
    assert {"c=1", "c=128", "K=2", "K=7"} <= set(levels["level"])


def test_bootstrap_spread_and_what_is_not_pinned():
    pts = _synthetic()
    fit = gpufit.fit_gpu_terms(pts, PRESETS)
    samples = gpufit.bootstrap_terms(pts, PRESETS, fit, n=3, seed=1)
    assert len(samples) == 3 and list(samples.columns) == list(fit.free)
    summary = gpufit.term_summary(fit, samples).set_index("term")
    assert summary["pinned"].all()  # exact synthetic curves: every resample gives the same terms
    loose = pd.DataFrame({t: [0.01, 1.0, 100.0] for t in fit.free})
    assert not gpufit.term_summary(fit, loose)["pinned"].any()


def test_bad_input_is_refused_in_one_line():
    pts = _synthetic()
    with pytest.raises(StepCostError, match="lacks"):
        gpufit.fit_gpu_terms(pts.drop(columns=["k"]), PRESETS)
    with pytest.raises(StepCostError, match="unknown hardware preset"):
        gpufit.fit_gpu_terms(pts.assign(hardware_preset="nope"), PRESETS)
    with pytest.raises(StepCostError, match="cannot fit"):
        gpufit.fit_gpu_terms(pts, PRESETS, ("colour",))
    with pytest.raises(StepCostError, match="two or more sources"):
        gpufit.leave_one_source_out(pts[pts["ledger_id"] == "a"], PRESETS)


def test_the_published_curves_fit_better_than_the_spec_sheet():
    pts = published_curves()
    plain = gpufit.predict_speedups(pts, PRESETS, GpuTerms())
    fit = gpufit.fit_gpu_terms(pts, PRESETS)
    plain_err = np.sqrt(np.mean(np.log(plain / pts["value"]) ** 2))
    assert fit.rms_log_error < plain_err
    # the spec-sheet model is too kind where speculation stops paying: the fit is not
    assert (plain > pts["value"]).mean() > 0.8
    assert 0 < fit.terms.spec_step_frac and 0 < fit.terms.compute_efficiency


def test_the_published_fit_is_held_against_a_measured_sweep():
    from specnb import paths
    from specnb.analysis import speedup_table
    from specnb.ledger import load_ledgers
    from specnb.models.calibration import workload_acceptance

    folder = paths.ROOT / "ledgers/concurrency/cpu/20261129-cpu-demo"
    assert folder.is_dir(), "the committed demo ledgers are missing from this checkout"
    df = load_ledgers(folder)
    table, acc = speedup_table(df), workload_acceptance(df)
    target = TargetModel.dense("smollm2", 0.1345e9, layers=30, kv_heads=3, head_dim=64)
    gap = gpufit.published_fit_gap(table, acc, load_hardware("cpu-demo"), target, Drafter("ngram"), KNOWN)
    assert len(gap) == len(table) and np.isfinite(gap["log_error"]).all()
    assert gap["log_error"].to_numpy() == pytest.approx(np.log(gap["predicted"] / gap["measured"]).to_numpy())
    none = gpufit.published_fit_gap(table, acc, load_hardware("cpu-demo"), target, Drafter("ngram"), GpuTerms())
    assert (none["predicted"] >= gap["predicted"]).all()  # the fitted costs only slow the speculative arm
    with pytest.raises(StepCostError, match="speedup table lacks"):
        gpufit.published_fit_gap(table.drop(columns=["speedup"]), acc, load_hardware("cpu-demo"), target,
                                 Drafter("ngram"), KNOWN)


def test_only_a_gpu_sweep_is_held_against_the_published_fit_and_the_gap_reads_in_one_line():
    cpu = pd.DataFrame({"machine": ["AMD EPYC, 2 CPUs (AVX2), no GPU"] * 2})
    gpu = pd.DataFrame({"machine": ["Intel Xeon, 64 CPUs, 1 x NVIDIA H200 (driver 570.1)"] * 2})
    assert not gpufit.measured_on_gpu(cpu) and gpufit.measured_on_gpu(gpu)
    assert not gpufit.measured_on_gpu(pd.concat([cpu, gpu]))  # a mixed folder is not one GPU's answer
    assert not gpufit.measured_on_gpu(pd.DataFrame())
    gap = pd.DataFrame({"arm": ["k3", "k3"], "workload": ["chat", "chat"], "concurrency": [1, 64],
                        "measured": [1.5, 0.8], "predicted": [1.8, 1.1], "log_error": np.log([1.8 / 1.5, 1.1 / 0.8]),
                        "same_side": [True, False]})
    line = gpufit.gap_line(gap)
    assert "kinder than measured" in line and "c=64" in line and "50 %" in line
    assert f"{np.exp(np.median(np.abs(gap['log_error']))):.2f}" in line
    assert "no point" in gpufit.gap_line(gap.iloc[:0])
