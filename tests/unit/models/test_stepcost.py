"""The step-cost model: hand arithmetic, physical sanity, calibration, presets."""

from __future__ import annotations

import math
from dataclasses import replace
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from specnb import paths
from specnb.models.calibration import calibrate, measured_points, workload_acceptance
from specnb.models.hardware import (
    Hardware,
    PresetError,
    StepCostError,
    calibration_record,
    hardware_presets,
    load_hardware,
)
from specnb.models.stepcost import (
    NGRAM,
    Drafter,
    Scenario,
    TargetModel,
    max_concurrency,
    predict,
    predicted_crossing,
    tokens_per_step,
)
from specnb.models.theory import acceptance_length

# a 70B-class dense model (Llama-3-70B shape: 80 layers, 8 KV heads of 128), bf16 weights and KV
LLAMA_70B = TargetModel.dense("70b", 70.6e9, layers=80, kv_heads=8, head_dim=128)
DEMO_LEDGERS = [paths.ROOT / "ledgers/cpu-demo/20261129-cpu-demo",
                paths.ROOT / "ledgers/concurrency/cpu/20261129-cpu-demo"]


# -- exact arithmetic -----------------------------------------------------------------------------


def _tiny(flop_s: float, drafter: Drafter | None = None) -> Scenario:
    hw = Hardware("tiny", bandwidth_bytes_s=100.0, flop_s=flop_s, step_overhead_s=0.5, memory_bytes=100.0)
    target = TargetModel("t", params=10.0, weight_bytes=20.0, kv_bytes_per_token=2.0)
    drafter = drafter or Drafter("ngram", step_overhead_s=0.25, per_request_s=0.125)
    return Scenario(hw, target, drafter, k=2, alpha=0.5, prompt_tokens=4.0, output_tokens=4.0)


def test_hand_computed_memory_bound_step():
    # MAL(0.5, 2) = 1 + 0.5 + 0.25 = 1.75; context L = 4 + 4/2 = 6
    row = predict(_tiny(flop_s=1000.0), [1]).iloc[0]
    # memory floor (20 + 1 * 2 * 6) / 100 = 0.32 s; baseline tokens 1 + 4/4 prefill = 2 -> 2*10*2/1000 = 0.04 s
    assert row["memory_ms"] == pytest.approx(320.0)
    assert row["base_compute_ms"] == pytest.approx(40.0)
    assert row["base_step_ms"] == pytest.approx(1e3 * (0.5 + 0.32))
    # verification 1 + K = 3 tokens, prefill 1.75 * 4/4 = 1.75 -> 2*10*4.75/1000 = 0.095 s, still memory-bound
    assert row["spec_compute_ms"] == pytest.approx(95.0)
    assert row["drafting_ms"] == pytest.approx(1e3 * (0.25 + 0.125))
    assert row["spec_step_ms"] == pytest.approx(1e3 * (0.5 + 0.32 + 0.375))
    assert row["base_tok_s"] == pytest.approx(1 / 0.82)
    assert row["spec_tok_s"] == pytest.approx(1.75 / 1.195)
    assert row["speedup"] == pytest.approx((1.75 / 1.195) / (1 / 0.82))
    assert (row["base_bound"], row["spec_bound"]) == ("memory", "memory")


def test_hand_computed_compute_bound_step():
    rows = predict(_tiny(flop_s=100.0), [1, 2])
    one, two = rows.iloc[0], rows.iloc[1]
    assert one["base_step_ms"] == pytest.approx(1e3 * (0.5 + 0.4))  # 2*10*1*2/100 beats 0.32
    assert one["spec_step_ms"] == pytest.approx(1e3 * (0.5 + 0.95 + 0.375))
    assert two["memory_ms"] == pytest.approx(1e3 * (20 + 2 * 2 * 6) / 100)
    assert two["base_tok_s"] == pytest.approx(2 / (0.5 + 0.8))
    assert two["spec_tok_s"] == pytest.approx(2 * 1.75 / (0.5 + 1.9 + 0.25 + 0.25))
    assert two["spec_per_user_tok_s"] == pytest.approx(two["spec_tok_s"] / 2)
    assert (two["base_bound"], two["spec_bound"]) == ("compute", "compute")


def test_hand_computed_model_drafter_and_capacity():
    seq = Drafter("d", params=1.0, weight_bytes=4.0, kv_bytes_per_token=1.0)
    par = replace(seq, parallel=True)
    # per pass at B = 1: memory (4 + 1 * 1 * 6) / 100 = 0.1 s beats compute; K = 2 passes, or 1 if parallel
    assert predict(_tiny(1000.0, seq), [1]).iloc[0]["drafting_ms"] == pytest.approx(200.0)
    assert predict(_tiny(1000.0, par), [1]).iloc[0]["drafting_ms"] == pytest.approx(100.0)
    # pool 100 * 0.9 - 20 = 70 bytes, 2 * (4 + 4) = 16 per session; with the drafter 66 / 24
    assert max_concurrency(_tiny(1000.0, seq), speculative=False) == pytest.approx(70 / 16)
    assert max_concurrency(_tiny(1000.0, seq), speculative=True) == pytest.approx(66 / 24)
    rows = predict(_tiny(1000.0, seq), [2, 3, 5])
    assert list(rows["base_fits"]) == [True, True, False]
    assert list(rows["spec_fits"]) == [True, False, False]


def test_per_token_cost_and_draft_fraction():
    d = Drafter("ngram", per_token_s=0.01, draft_fraction=0.5)
    row = predict(_tiny(1000.0, d), [4]).iloc[0]
    assert row["drafting_ms"] == pytest.approx(1e3 * 0.01 * 4 * 0.5 * 2)  # B * q * K proposed tokens
    assert row["tokens_per_step"] == pytest.approx(1 + 0.5 * 0.75)
    assert tokens_per_step(0.5, 2, 0.5) == pytest.approx(1.375)
    assert tokens_per_step(0.74, 3) == pytest.approx(acceptance_length(0.74, 3))


def test_smooth_roofline_lies_above_the_hard_one():
    hard = predict(_tiny(100.0), [1, 4, 16])
    smooth = predict(replace(_tiny(100.0), sharpness=4.0), [1, 4, 16])
    assert np.all(smooth["base_step_ms"] > hard["base_step_ms"])
    far = predict(replace(_tiny(100.0), sharpness=64.0), [1, 4, 16])
    assert np.allclose(far["base_step_ms"], hard["base_step_ms"], rtol=0.02)


def test_from_hf_config_counts_smollm2():
    # the SmolLM2-135M config (cpu-engine.md: 134.5M parameters, 30 layers, 3 KV heads of 64)
    cfg = {"hidden_size": 576, "num_hidden_layers": 30, "intermediate_size": 1536, "vocab_size": 49152,
           "num_attention_heads": 9, "num_key_value_heads": 3, "head_dim": 64, "tie_word_embeddings": True,
           "dtype": "bfloat16"}
    m = TargetModel.from_hf_config(cfg, name="smollm2")
    assert round(m.params / 1e6, 1) == 134.5
    assert m.weight_bytes == 2 * m.params
    assert m.kv_bytes_per_token == 2 * 30 * 3 * 64 * 2
    untied = TargetModel.from_hf_config({**cfg, "tie_word_embeddings": False})
    assert untied.params - m.params == 49152 * 576
    with pytest.raises(StepCostError, match="lacks 'hidden_size'"):
        TargetModel.from_hf_config({"vocab_size": 1})


@pytest.mark.parametrize("bad", [
    dict(alpha=1.5), dict(k=-1), dict(output_tokens=0.0), dict(cached_prompt_share=2.0), dict(memory_utilization=0.0),
])
def test_bad_scenarios_are_refused(bad):
    with pytest.raises(ValueError):
        replace(_tiny(100.0), **bad)


def test_bad_inputs_are_refused_in_one_line():
    with pytest.raises(StepCostError, match="flop_s must be > 0"):
        Hardware("x", 1.0, 0.0)
    with pytest.raises(StepCostError, match="draft_fraction"):
        Drafter(draft_fraction=1.5)
    with pytest.raises(StepCostError, match="concurrency"):
        predict(_tiny(100.0), [0, 1])


# -- physical sanity -------------------------------------------------------------------------------


def _h100(alpha=0.7, k=3, **kw) -> Scenario:
    return Scenario(load_hardware("h100-sxm"), LLAMA_70B, NGRAM, k=k, alpha=alpha, **kw)


def test_speedup_falls_once_compute_bound_and_settles_at_the_compute_ratio():
    s = _h100(output_tokens=256)
    grid = 2.0 ** np.arange(0, 13)
    p = predict(s, grid)
    sp = p["speedup"].to_numpy()
    assert np.all(np.diff(sp) <= 1e-12)  # never rises with concurrency
    tau = acceptance_length(0.7, 3)
    # memory-bound at one user: same floor in both arms, free n-gram drafting -> the full MAL
    assert p.iloc[0]["spec_bound"] == "memory" and sp[0] == pytest.approx(tau)
    compute = p["spec_bound"].eq("compute").to_numpy() & p["base_bound"].eq("memory").to_numpy()
    assert compute.sum() >= 2 and np.all(np.diff(sp[compute]) < 0)  # strictly falling there
    # both compute-bound: tokens emitted over tokens computed, tau / (1 + K)
    assert p.iloc[-1]["base_bound"] == "compute"
    assert sp[-1] == pytest.approx(tau / (1 + 3))
    assert np.all(np.diff(p["base_tok_s"]) >= 0)  # aggregate throughput never falls with more users
    assert np.all(np.diff(p["spec_per_user_tok_s"]) <= 0)


def test_h100_70b_crosses_one_at_a_plausible_concurrency():
    kind, at = predicted_crossing(_h100(output_tokens=256))
    assert kind == "crosses" and 8 < at < 1024
    # each knob moves the threshold the way the seeds say
    _, lower_alpha = predicted_crossing(_h100(alpha=0.5, output_tokens=256))
    _, with_prefill = predicted_crossing(_h100(output_tokens=256, prompt_tokens=2048))
    assert lower_alpha < at and with_prefill < at
    faster = replace(_h100(output_tokens=256), hardware=replace(load_hardware("h100-sxm"), flop_s=2 * 989e12))
    assert predicted_crossing(faster)[1] > at
    # a drafter that is never right and costs anything at all never pays
    useless = replace(_h100(alpha=0.0, output_tokens=256), drafter=Drafter(step_overhead_s=1e-4))
    assert predicted_crossing(useless) == ("below", None)
    # a 70B model in bf16 does not fit one H100: the model says so instead of pretending
    assert max_concurrency(_h100(output_tokens=256), speculative=False) == 0.0
    assert not predict(_h100(output_tokens=256), [1])["base_fits"].iloc[0]


def test_a_drafter_takes_seats():
    d = Drafter("1b", params=1.24e9, weight_bytes=2.48e9, kv_bytes_per_token=32768)
    fp8 = replace(LLAMA_70B, weight_bytes=LLAMA_70B.params)
    s = Scenario(load_hardware("h200-sxm"), fp8, d, k=3, alpha=0.7, prompt_tokens=2048, output_tokens=256)
    assert 0 < max_concurrency(s, True) < max_concurrency(s, False) < math.inf


# -- calibration -----------------------------------------------------------------------------------

TRUE_HW = Hardware("true", bandwidth_bytes_s=2.0e12, flop_s=4.0e14, step_overhead_s=3e-3)
TARGET_7B = TargetModel.dense("7b", 7e9, layers=32, kv_heads=8, head_dim=128)


def _synthetic(hw: Hardware, drafter: Drafter, concurrency, alpha=0.7, k=3, prompt=512.0, output=256.0):
    """Ledger-frame rows the model itself generates: a baseline and a speculative arm."""
    s = Scenario(hw, TARGET_7B, drafter, k=k, alpha=alpha, prompt_tokens=prompt, output_tokens=output)
    p = predict(s, concurrency)
    mal = acceptance_length(alpha, k)
    rows = []
    for spec in (False, True):
        for c, tok_s in zip(p["concurrency"], p["spec_tok_s" if spec else "base_tok_s"], strict=True):
            rows.append({"status": "ok", "flags": "", "arm": "spec" if spec else "base", "workload": "w",
                         "speculative": spec, "concurrency": int(c), "repeat": 0, "output_tok_s": tok_s,
                         "num_requests": 10, "prompt_tokens": 10 * prompt, "output_tokens": 10 * output,
                         "prompt_tokens_cached": 0.0, "num_speculative_tokens": k if spec else None,
                         "mean_acceptance_length": mal if spec else None,
                         "accepted_output_share": 1 - 1 / mal if spec else None})
    return pd.DataFrame(rows)


def test_calibration_recovers_the_parameters_that_made_the_curve():
    true_d = Drafter("ngram", step_overhead_s=1e-3, per_token_s=2e-5)
    df = _synthetic(TRUE_HW, true_d, [1, 2, 4, 8, 16, 32, 64, 128, 256, 512])
    cal = calibrate(df, TARGET_7B)
    hw = cal.hardware
    assert hw.bandwidth_bytes_s == pytest.approx(TRUE_HW.bandwidth_bytes_s, rel=1e-3)
    assert hw.flop_s == pytest.approx(TRUE_HW.flop_s, rel=1e-3)
    assert hw.step_overhead_s == pytest.approx(TRUE_HW.step_overhead_s, rel=1e-3)
    assert cal.drafter.step_overhead_s == pytest.approx(1e-3, rel=1e-2)
    assert cal.drafter.per_token_s == pytest.approx(2e-5, rel=1e-2)
    assert cal.baseline.rms_log_error < 1e-4 and cal.spec_fitted.rms_log_error < 1e-4
    assert cal.spec_predicted.rms_log_error > 10 * cal.spec_fitted.rms_log_error  # the costs mattered
    assert cal.unidentified() == []
    assert np.allclose(cal.points["predicted_tok_s"], cal.points["output_tok_s"], rtol=1e-3)
    assert "baseline fit: n=10" in cal.summary()


def test_calibration_says_when_points_cannot_determine_a_term():
    # only large batches with long prompts: every step is compute-bound, bandwidth never matters
    df = _synthetic(TRUE_HW, NGRAM, [256, 384, 512, 768, 1024], prompt=4096.0)
    cal = calibrate(df, TARGET_7B, spec_terms=())
    assert "bandwidth_bytes_s" in cal.unidentified()
    assert "undetermined" in cal.summary()
    assert cal.spec_fitted is None and cal.spec_predicted.rms_log_error < 1e-4  # free n-gram, true model
    # a term held fixed is not fitted and the others still come out
    fixed = calibrate(df, TARGET_7B, fixed={"bandwidth_bytes_s": 2e12}, spec_terms=())
    assert fixed.hardware.flop_s == pytest.approx(TRUE_HW.flop_s, rel=1e-3)
    assert fixed.hardware.bandwidth_bytes_s == 2e12 and "bandwidth_bytes_s" not in fixed.uncertainty


def test_calibration_refusals():
    df = _synthetic(TRUE_HW, NGRAM, [1, 2, 4, 8])
    with pytest.raises(StepCostError, match="cannot fix"):
        calibrate(df, TARGET_7B, fixed={"bandwidth": 1.0})
    with pytest.raises(StepCostError, match="cannot fit drafter term"):
        calibrate(df, TARGET_7B, spec_terms=("latency",))
    with pytest.raises(StepCostError, match="baseline point"):
        calibrate(df[df["concurrency"] <= 2], TARGET_7B)
    with pytest.raises(StepCostError, match="lacks column"):
        measured_points(df.drop(columns=["prompt_tokens"]))
    with pytest.raises(StepCostError, match="no usable"):
        measured_points(df.assign(status="failed"))


def test_measured_points_read_ngram_acceptance():
    df = _synthetic(TRUE_HW, NGRAM, [1, 2])
    # an n-gram arm that drafted on a quarter of its steps: MAL 3 per draft, 1.5 tokens per step
    df.loc[df["speculative"], ["mean_acceptance_length", "accepted_output_share"]] = [3.0, 1 / 3]
    pts = measured_points(df)
    spec = pts[pts["speculative"]].iloc[0]
    assert spec["tokens_per_step"] == pytest.approx(1.5)
    assert spec["draft_fraction"] == pytest.approx(0.25)
    acc = workload_acceptance(df).iloc[0]
    assert 0 < acc["alpha"] < 1 and acceptance_length(acc["alpha"], 3) == pytest.approx(3.0)
    assert (acc["k"], acc["tokens_per_step"], acc["points"]) == (3, pytest.approx(1.5), 2)


def _demo_folder() -> Path | None:
    return next((p for p in DEMO_LEDGERS if p.is_dir()), None)


def test_cpu_preset_is_reproduced_from_the_committed_ledgers():
    assert _demo_folder() is not None, "the committed demo ledgers are missing from this checkout"
    import specnb

    record = calibration_record("cpu-demo")
    cpu = load_hardware("cpu-demo")
    t = record["target"]
    target = TargetModel(t["name"], t["params"], t["weight_bytes"], t["kv_bytes_per_token"])
    cal = calibrate(specnb.load_ledgers(_demo_folder()), target, fixed={"bandwidth_bytes_s": cpu.bandwidth_bytes_s})
    assert cal.hardware.flop_s == pytest.approx(cpu.flop_s, rel=0.01)
    assert cal.hardware.step_overhead_s == pytest.approx(cpu.step_overhead_s, rel=0.01)
    assert cal.baseline.rms_log_error == pytest.approx(record["fit"]["baseline_quality"]["rms_log_error"], rel=0.05)
    assert cpu.bandwidth_bytes_s == pytest.approx(record["bandwidth_measurement"]["bandwidth_bytes_s"], rel=0.001)


# -- presets ---------------------------------------------------------------------------------------


def test_presets_load_and_are_physically_sane():
    presets = hardware_presets()
    assert {"h100-sxm", "h200-sxm", "b200", "cpu-demo"} <= set(presets)
    for name, hw in presets.items():
        assert hw.name == name and hw.source
        # units: TB/s and TFLOP/s keys read into bytes/s and FLOP/s; a GB/s value typed into the
        # TB/s key would land far outside these ranges
        assert 1e9 < hw.bandwidth_bytes_s < 1e14
        assert 1e10 < hw.flop_s < 1e17
        assert hw.memory_bytes is not None and 2**30 < hw.memory_bytes < 2**40
        assert hw.step_overhead_s >= 0
    h100, h200 = presets["h100-sxm"], presets["h200-sxm"]
    assert h200.bandwidth_bytes_s > h100.bandwidth_bytes_s and h200.flop_s == h100.flop_s  # same die
    assert presets["b200"].flop_s > h200.flop_s


def test_unknown_preset_lists_the_known_ones():
    with pytest.raises(PresetError) as err:
        load_hardware("h1000")
    msg = str(err.value)
    assert "\n" not in msg and "'h1000'" in msg
    for name in hardware_presets():
        assert name in msg
    with pytest.raises(PresetError, match="no calibration record"):
        calibration_record("h100-sxm")


@pytest.mark.parametrize("entry, match", [
    ('memory_bandwidth_gb_s = 3350\ndense_bf16_tflop_s = 989', "unknown key"),
    ('memory_bandwidth_tb_s = -1\ndense_bf16_tflop_s = 989', "bandwidth_bytes_s must be > 0"),
    ('memory_bandwidth_tb_s = "fast"\ndense_bf16_tflop_s = 989', "must be a number"),
    ('dense_bf16_tflop_s = 989', "lacks"),
])
def test_malformed_presets_are_refused(tmp_path, entry, match):
    f = tmp_path / "hw.toml"
    f.write_text(f'[x]\ndescription = "d"\nkind = "spec-sheet"\nsource = "s"\n{entry}\n')
    with pytest.raises(PresetError, match=match) as err:
        hardware_presets(f)
    assert "\n" not in str(err.value)
    f.write_text("[x\n")
    with pytest.raises(PresetError, match="not valid TOML"):
        hardware_presets(f)
