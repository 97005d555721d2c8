"""The GPU fit of the step-cost model: known terms come back from synthetic curves, held-out
sources are scored as predicted with a band checked out of sample, each drafter is costed as it
runs, the engine terms come from the published step-time model, and the committed curves fit."""

from __future__ import annotations

import math
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
KNOWN = GpuTerms(bandwidth_efficiency=0.8, compute_efficiency=0.6, step_ms=1.2, spec_step_ms=1.5, draft_pass_ms=0.4)


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


def test_terms_are_milliseconds_and_shares_of_the_peaks():
    hw, t = load_hardware("h100-sxm"), TargetModel.dense("8b", 8e9, layers=32, kv_heads=8, head_dim=128)
    hw2, d2 = KNOWN.apply(hw, t, Drafter("eagle"))
    assert hw2.bandwidth_bytes_s == pytest.approx(0.8 * hw.bandwidth_bytes_s)
    assert hw2.flop_s == pytest.approx(0.6 * hw.flop_s)
    assert hw2.step_overhead_s == pytest.approx(1.2e-3)
    assert d2.step_overhead_s == pytest.approx(1.5e-3) and d2.per_pass_s == pytest.approx(0.4e-3)
    assert KNOWN.seconds(hw, t) == pytest.approx({"engine_step_s": 1.2e-3, "step_overhead_s": 1.5e-3, "per_pass_s": 0.4e-3})


def test_each_drafter_is_costed_as_it_runs():
    """n-gram makes no pass on the device whatever its K; an EAGLE head reads one target layer per
    pass, K passes; a draft model its own weights per pass; an MTP or block drafter one pass."""
    hw = load_hardware("h100-sxm")
    t = TargetModel.dense("8b", 8e9, layers=32, kv_heads=8, head_dim=128)
    one = np.ones(1)
    kw = dict(batch=one, prompt=0 * one, prefill=0 * one, output=256 * one, tau=2 * one, q=one,
              spec=np.ones(1, bool), sharpness=None)

    def drafting(d, k):
        return step_terms(hw, t, replace(d, per_pass_s=1e-3), k=k * one, **kw).drafting_s[0]

    ngram = gpufit.drafter_for("ngram", t, layers=32)
    assert ngram.host and drafting(ngram, 3) == drafting(ngram, 7) == 0.0
    eagle = gpufit.drafter_for("eagle", t, layers=32)
    assert eagle.params == pytest.approx(t.params / 32) and eagle.kv_bytes_per_token == pytest.approx(t.kv_bytes_per_token / 32)
    layer_read = eagle.weight_bytes / hw.bandwidth_bytes_s
    assert drafting(eagle, 3) > 3 * (1e-3 + layer_read) * 0.99 and drafting(eagle, 6) > 2 * drafting(eagle, 3) * 0.99
    draft = gpufit.drafter_for("draft_model", t, 1e9, layers=32)
    assert draft.params == 1e9 and not draft.parallel
    def pass_cost(d, k):  # what a fixed 1 ms per pass adds: 1 ms times the passes the drafter makes
        plain = step_terms(hw, t, replace(d, per_pass_s=0.0), k=k * one, **kw).drafting_s[0]
        return drafting(d, k) - plain

    for kind in ("mtp", "block"):
        d = gpufit.drafter_for(kind, t, layers=32)
        assert d.parallel and pass_cost(d, 3) == pytest.approx(1e-3) and pass_cost(d, 7) == pytest.approx(1e-3)
    assert pass_cost(eagle, 3) == pytest.approx(3e-3) and pass_cost(ngram, 3) == 0.0
    with pytest.raises(StepCostError, match="draft model's cost needs its size"):
        gpufit.drafter_for("draft_model", t, layers=32)
    capped = gpufit.drafter_for("draft_model", t, 8e9, layers=32, kv_bytes_per_token=t.kv_bytes_per_token, context_cap=512)
    full = replace(capped, context_cap=0.0)
    long = dict(kw, prompt=32000 * one, batch=64 * one)
    assert (step_terms(hw, t, capped, k=3 * one, **long).drafting_s[0]
            < 0.5 * step_terms(hw, t, full, k=3 * one, **long).drafting_s[0])


def test_only_a_drafter_without_weights_proposes_on_the_host_and_the_gpu_file_drafts_on_the_device():
    import yaml

    from specnb import paths
    from specnb.models.stepcost import runs_on_host

    assert runs_on_host("ngram", 0.0) and not runs_on_host("ngram", 1e9) and not runs_on_host("draft_model", 0.0)
    gpu = yaml.safe_load((paths.ROOT / "notebooks/params/gpu/calculator.yaml").read_text())
    method = gpu.get("drafter_method", "ngram")  # the notebook's default when the file says nothing
    assert not runs_on_host(method, gpu["drafter_params_b"] * 1e9), "the GPU file's draft model must draft on the device"


def test_a_mixture_of_experts_reads_the_experts_its_tokens_touch():
    hw = load_hardware("h100-sxm")
    dense = TargetModel.dense("moe", 100e9, layers=48, kv_heads=8, head_dim=128)
    moe = dense.with_experts(20e9, experts=16, experts_per_token=1)
    one = np.ones(1)

    def memory(batch):
        return step_terms(hw, moe, Drafter("x", host=True), batch=batch * one, prompt=0 * one, prefill=0 * one,
                          output=256 * one, k=0 * one, tau=one, q=one, spec=np.zeros(1, bool), sharpness=None).memory_s[0]

    routed = moe.expert_bytes
    always = moe.weight_bytes - routed

    def weights(batch):  # what the step reads beyond the KV of its requests (context 128: half the output)
        return memory(batch) * hw.bandwidth_bytes_s - batch * moe.kv_bytes_per_token * 128

    assert weights(1) == pytest.approx(always + routed / 16, rel=1e-9)
    assert weights(1) < weights(8) < weights(256)
    assert weights(256) == pytest.approx(moe.weight_bytes, rel=1e-6)
    assert always + routed / 16 == pytest.approx(20e9 * 2, rel=1e-9)  # one token reads its active parameters
    with pytest.raises(StepCostError):
        dense.with_experts(120e9, experts=16, experts_per_token=1)


def test_attention_compute_grows_with_context():
    hw = load_hardware("h100-sxm")
    t = TargetModel.dense("8b", 8e9, layers=32, kv_heads=8, head_dim=128)
    ta = t.with_attention(32, 32, 128)
    one = np.ones(1)
    kw = dict(batch=64 * one, prefill=0 * one, output=256 * one, k=0 * one, tau=one, q=one, spec=np.zeros(1, bool),
              sharpness=None)
    assert step_terms(hw, ta, Drafter(), prompt=0 * one, **kw).compute_s[0] == pytest.approx(
        step_terms(hw, t, Drafter(), prompt=0 * one, **kw).compute_s[0] * (1 + 4 * 32 * 32 * 128 * 128 / (2 * 8e9)))
    assert (step_terms(hw, ta, Drafter(), prompt=32000 * one, **kw).compute_s[0]
            > 2 * step_terms(hw, t, Drafter(), prompt=32000 * one, **kw).compute_s[0])


def test_the_engine_terms_come_from_the_published_step_model_and_match_its_steps():
    """anchor_terms reads SpecDecode-Bench's fitted H100 step model; the GPU model with those terms
    gives that model's Llama-3.1-8B baseline steps back (the same additive form) from batch 1 to 64."""
    from specnb.ledger.published import read_published

    led = read_published(gpufit.STEP_MODEL_LEDGER)
    c = {r.metric: r.value for r in led.rows}
    terms = gpufit.anchor_terms(PRESETS)
    assert 0.5 < terms.bandwidth_efficiency <= 1.0 and 0.5 < terms.compute_efficiency <= 1.0 and terms.step_ms > 0
    hw, d = terms.apply(load_hardware("h100-sxm"), None, Drafter())  # type: ignore[arg-type]
    t = TargetModel.dense("8b", 8.03e9, layers=32, kv_heads=8, head_dim=128)
    batch = np.array([1.0, 8, 16, 32, 64])
    ctx = 300.0  # InstructCoder-like context per request (prompt 171 + half of 262 generated)
    ours = step_terms(hw, t, d, batch=batch, prompt=np.full(5, ctx), prefill=np.zeros(5), output=np.full(5, 1e-9),
                      k=np.zeros(5), tau=np.ones(5), q=np.ones(5), spec=np.zeros(5, bool), sharpness=gpufit.SHARPNESS).step_s
    theirs = (batch * ctx * c["target_c_kv"] + batch * c["target_c_compute"] + c["target_c_fixed"]
              + c["overhead_constant_per_step"])
    assert ours == pytest.approx(theirs, rel=1e-6)
    broken = led.model_copy(update={"rows": [r for r in led.rows if r.metric != "target_c_fixed"]})
    with pytest.raises(StepCostError, match="needs"):
        gpufit.anchor_terms(PRESETS, broken)


def test_known_engine_terms_are_recovered_from_synthetic_step_times():
    hw = load_hardware("h100-sxm")
    known = GpuTerms(bandwidth_efficiency=0.85, compute_efficiency=0.6, step_ms=1.7)
    for target in (TargetModel.dense("8b", 8e9, layers=32, kv_heads=8, head_dim=128).with_attention(32, 32, 128),
                   TargetModel.dense("moe", 100e9, layers=48, kv_heads=8, head_dim=128).with_experts(20e9, 16, 2)):
        b, ctx = (g.ravel() for g in np.meshgrid([1.0, 4, 16, 64, 256], [0.0, 2048, 16384]))
        n = np.where(b > 16, 1.0, 4.0)  # verification-sized steps too
        hw2, d = known.apply(hw, target, Drafter())
        steps = step_terms(hw2, target, d, batch=b, prompt=ctx, prefill=0 * b, output=np.full_like(b, 1e-9), k=n - 1,
                           tau=np.ones_like(b), q=np.ones_like(b), spec=np.ones(b.size, bool),
                           sharpness=gpufit.SHARPNESS).step_s
        got = gpufit.engine_terms_from_steps(hw, target, b, ctx, n, steps)
        for term in ("bandwidth_efficiency", "compute_efficiency", "step_ms"):
            assert getattr(got, term) == pytest.approx(getattr(known, term), rel=1e-6), (target.name, term)
    with pytest.raises(StepCostError, match="4 steps or more"):
        gpufit.engine_terms_from_steps(hw, target, [1, 2], [0, 0], [1, 1], [1e-3, 2e-3])
    with pytest.raises(StepCostError, match="no physical engine terms"):
        gpufit.engine_terms_from_steps(hw, target, [1, 2, 4, 8], [0, 0, 0, 0], [1, 1, 1, 1], [8e-3, 4e-3, 2e-3, 1e-3])


def test_the_band_is_sized_without_the_source_it_covers():
    loso = pd.DataFrame({"ledger_id": ["a"] * 4 + ["b"] * 2 + ["c"] * 2,
                         "value": [1.0] * 8, "predicted": [1.1, 1.2, 0.9, 1.05, 2.0, 0.5, 1.01, 0.99]})
    loso["log_error"] = np.log(loso["predicted"] / loso["value"])
    banded = gpufit.prediction_band(loso, 0.9)
    b = banded[banded["ledger_id"] == "b"]
    assert b["band_log"].iloc[0] == pytest.approx(gpufit.band_width(loso[loso["ledger_id"] != "b"], 0.9))
    assert not b["covered"].any()  # b's errors are wider than anything the others show
    assert banded[banded["ledger_id"] == "c"]["covered"].all()
    summary = gpufit.band_summary(banded).set_index("ledger_id")
    assert summary.loc["all (each source once)", "coverage"] == pytest.approx(summary["coverage"].iloc[:3].mean())
    with pytest.raises(StepCostError, match="two or more sources"):
        gpufit.prediction_band(loso[loso["ledger_id"] == "a"])
    with pytest.raises(StepCostError, match="level"):
        gpufit.band_width(loso, 1.5)


def test_the_band_weighs_each_source_once():
    # nine small errors of one source weigh as much as one large error of another
    errs = pd.DataFrame({"ledger_id": ["a"] * 9 + ["b"], "log_error": [0.1] * 9 + [1.0]})
    assert gpufit.band_width(errs, 0.75) == pytest.approx(1.0)
    assert float(np.quantile(errs["log_error"].abs(), 0.75)) == pytest.approx(0.1)  # what counting points would say
    assert gpufit.band_width(errs, 0.4) == pytest.approx(0.1)


def test_a_nested_band_never_saw_its_source():
    pts = _synthetic()
    pts.loc[pts["ledger_id"] == "b", "value"] *= 1.5  # sources the others cannot explain
    pts.loc[pts["ledger_id"] == "a", "value"] *= 1.2
    loso = gpufit.leave_one_source_out(pts, PRESETS, fixed=KNOWN)
    inner = loso.attrs["inner_errors"]
    assert set(inner) == {"a", "b", "c"} and set(inner["a"]["ledger_id"]) == {"b", "c"}
    banded = gpufit.prediction_band(loso)
    for held in ("a", "b", "c"):
        assert banded.loc[banded["ledger_id"] == held, "band_log"].iloc[0] == pytest.approx(
            gpufit.band_width(inner[held]))
    # the inner errors of b come from fits without a: they differ from the outer ones, which saw a
    outer_b = loso.loc[loso["ledger_id"] == "b", "log_error"].to_numpy()
    inner_b = inner["a"].loc[inner["a"]["ledger_id"] == "b", "log_error"].to_numpy()
    assert not np.allclose(outer_b, inner_b)
    assert "inner_errors" not in gpufit.leave_one_source_out(pts, PRESETS, fixed=KNOWN, nested=False).attrs


def test_the_crossing_band_reads_where_the_band_ends_reach_one():
    conc = [1, 2, 4, 8, 16, 32, 64]
    speed = [1.8, 1.6, 1.4, 1.2, 1.0, 0.9, 0.8]
    lo, hi = gpufit.crossing_band(conc, speed, math.log(1.2))
    assert lo.startswith("c~") and hi.startswith("c~")
    assert float(lo[2:]) < 16 < float(hi[2:])
    assert gpufit.crossing_band(conc, [3.0] * 7, 0.1) == ("past c=64", "past c=64")
    assert gpufit.crossing_band(conc, [0.5] * 7, 0.1) == ("below c=1", "below c=1")
    assert gpufit.crossing_band(conc, [float("nan")] * 7, 0.1) == ("n/a", "n/a")
    assert gpufit.crossing_band(conc, speed, float("nan")) == ("n/a", "n/a")


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
    on the host and on the device, sequential and block)."""
    pts = pd.concat([_synthetic(), _curve("d", "8b draft model", "h100-sxm", 8.0, kind="draft_model"),
                     _curve("e", "8b n-gram", "h100-sxm", 8.0, kind="ngram")], ignore_index=True)
    pts.loc[pts["ledger_id"] == "d", "drafter_params_b"] = 0.5
    stacked = gpufit.predict_speedups(pts, PRESETS, KNOWN)
    for c in gpufit.curve_models(pts, PRESETS):
        hw, d = KNOWN.apply(c.hw, c.target, c.drafter)
        kw = {k: v for k, v in c.arrays.items()}
        base = step_terms(hw, c.target, d, tau=np.ones_like(c.tau), spec=np.zeros(c.tau.size, bool), **kw)
        spec = step_terms(hw, c.target, d, tau=c.tau, spec=np.ones(c.tau.size, bool), **kw)
        assert np.array_equal(stacked.loc[c.index].to_numpy(), spec.tok_s / base.tok_s), c.condition
    assert {c.drafter.parallel for c in gpufit.curve_models(pts, PRESETS)} == {True, False}
    assert {c.drafter.host for c in gpufit.curve_models(pts, PRESETS)} == {True, False}


def test_known_terms_are_recovered_from_synthetic_curves():
    both = ("spec_step_ms", "draft_pass_ms")
    fit = gpufit.fit_gpu_terms(_synthetic(), PRESETS, both, fixed=replace(KNOWN, spec_step_ms=0.1, draft_pass_ms=0.1))
    assert fit.free == both
    for term in both:
        assert getattr(fit.terms, term) == pytest.approx(getattr(KNOWN, term), rel=0.05), term
    assert fit.rms_log_error < 1e-3
    assert fit.points["predicted"].to_numpy() == pytest.approx(fit.points["value"].to_numpy(), rel=1e-3)


def test_held_out_synthetic_sources_are_predicted():
    loso = gpufit.leave_one_source_out(_synthetic(), PRESETS, fixed=KNOWN)
    summary = gpufit.loso_summary(loso).set_index("ledger_id")
    assert list(summary.index) == ["a", "b", "c"]
    assert (summary["median_abs_log_error"] < 0.02).all() and (summary["same_side_share"] == 1.0).all()
    levels = gpufit.loso_levels(loso)
    assert {"c=1", "c=128", "K=2", "K=7"} <= set(levels["level"])


def test_a_held_out_source_reads_the_pass_cost_of_its_own_engine():
    fast, slow = replace(KNOWN, draft_pass_ms=0.2), replace(KNOWN, draft_pass_ms=2.0)
    parts = []
    for lid, engine, terms in (("v1", "vllm", fast), ("v2", "vllm", fast), ("s1", "sglang", slow), ("s2", "sglang", slow),
                               ("o1", "own", slow)):
        pts = _curve(lid, f"{lid} 8b", "h100-sxm", 8.0).assign(engine=engine)
        pts["value"] = gpufit.predict_speedups(pts, PRESETS, terms).to_numpy()
        parts.append(pts)
    pts = pd.concat(parts, ignore_index=True)
    fits = gpufit.fit_by_engine(pts, PRESETS, fixed=KNOWN)
    assert set(fits) == {"", "vllm", "sglang", "own"}
    assert fits["vllm"].terms.draft_pass_ms == pytest.approx(0.2, rel=0.02)
    assert fits["sglang"].terms.draft_pass_ms == pytest.approx(2.0, rel=0.02)
    assert gpufit.terms_for(fits, "trtllm") == (fits[""].terms, "all sources")
    assert gpufit.terms_for(fits, "vllm") == (fits["vllm"].terms, "vllm")
    loso = gpufit.leave_one_source_out(pts, PRESETS, fixed=KNOWN).set_index("ledger_id")
    assert (loso.loc[["v1", "v2", "s1", "s2"], "log_error"].abs() < 0.01).all()  # predicted by its engine's peer
    assert set(loso.loc["o1", "fit_engine"]) == {"all sources"}  # no other source of its engine
    pooled = gpufit.leave_one_source_out(pts, PRESETS, fixed=KNOWN, by_engine=False).set_index("ledger_id")
    assert pooled.loc[["v1", "s1"], "log_error"].abs().median() > loso.loc[["v1", "s1"], "log_error"].abs().median()


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
    # with no cost for drafting on the device, the spec-sheet model is too kind to every drafter that does
    device = pts["drafter_kind"] != "ngram"
    assert (plain[device] > pts.loc[device, "value"]).mean() > 0.8
    assert 0 < fit.terms.draft_pass_ms and fit.terms.compute_efficiency == gpufit.anchor_terms(PRESETS).compute_efficiency


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
    spec_only = GpuTerms(spec_step_ms=1.5, draft_pass_ms=0.4)
    costed = gpufit.published_fit_gap(table, acc, load_hardware("cpu-demo"), target, Drafter("ngram"), spec_only)
    none = gpufit.published_fit_gap(table, acc, load_hardware("cpu-demo"), target, Drafter("ngram"), GpuTerms())
    assert (none["predicted"] >= costed["predicted"]).all()  # speculative costs only slow the speculative arm
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
