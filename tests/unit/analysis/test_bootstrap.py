"""Bootstrap speedups, thresholds, decisions and KV capacity on frames with known answers."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from specnb import analysis, paths
from specnb.analysis import (
    AnalysisError,
    bootstrap_speedups,
    crossings,
    decide,
    format_decision,
    format_kv_capacity,
    format_report,
    format_speedup_table,
    format_threshold,
    kv_capacity,
    thresholds,
)
from specnb.analysis.pairing import PairingError
from specnb.ledger import load_ledgers, write_ledger
from specnb.models.crossing import crossing
from tests.unit.factories import ledger

DEMO = paths.ROOT / "ledgers" / "concurrency" / "cpu" / "20261129-cpu-demo"


def _frame(tmp_path, ledgers, requests=None):
    """Write ledgers (with sidecars where ``requests[i]`` is a frame) and load them."""
    for i, led in enumerate(ledgers):
        side = None if requests is None else requests[i]
        write_ledger(tmp_path / f"{i:03d}.json", led, side)
    return load_ledgers(tmp_path)


def _curve(tmp_path, levels, speedups, factors=(1.0,), mal=None, workload="copy", **kw):
    """A baseline at 100 tok/s and a speculative arm at 100 x speedup x the repeat's factor.

    The factor is one server start's luck, shared by every level of that repeat."""
    rows = []
    for r, f in enumerate(factors):
        for i, (c, s) in enumerate(zip(levels, speedups, strict=True)):
            m = mal[i] if mal is not None else 3.0
            rows += [ledger("baseline", workload=workload, c=c, r=r, tok_s=100.0, **kw),
                     ledger("ngram-k4", workload=workload, c=c, r=r, tok_s=100.0 * s * f, mal=m, **kw)]
    return rows


def _sidecar(c: int, rates: list[float], tokens: list[int], n_requests: int) -> pd.DataFrame:
    """Closed-loop request records: request i carries prompt i % len(rates) at rates[p] tok/s."""
    rows, clock = [], [0.0] * c
    for i in range(n_requests):
        w, p = i % c, i % len(rates)
        start = clock[w]
        first = start + 0.05
        times = [first + k / rates[p] for k in range(tokens[p])]
        end = times[-1] + 0.001
        clock[w] = end + 0.0005
        rows.append({
            "index": i, "worker": w, "prompt_id": f"p{p:02d}", "category": "x", "start_s": start,
            "end_s": end, "first_token_s": first, "chunk_times_s": times, "chunk_tokens": [1] * tokens[p],
            "output_tokens": tokens[p], "prompt_tokens": 50, "cached_prompt_tokens": None,
            "finish_reason": "length", "token_count_source": "usage", "http_status": 200, "error": None,
            "ttft_s": 0.05, "tpot_s": (times[-1] - first) / (tokens[p] - 1),
        })
    return pd.DataFrame(rows)


def _with_sidecars(tmp_path, effect: list[float], c: int = 2, repeats: int = 1, n_requests: int = 8):
    """One level, ``repeats`` repeats; speculative rate = baseline rate x effect[prompt]."""
    base_rates = [20.0, 30.0, 40.0, 25.0]
    tokens = [10, 64, 30, 48]
    leds, sides = [], []
    for r in range(repeats):
        leds += [ledger("baseline", c=c, r=r, tok_s=100.0),
                 ledger("ngram-k4", c=c, r=r, tok_s=100.0 * float(np.mean(effect)), mal=3.0)]
        sides += [_sidecar(c, base_rates, tokens, n_requests),
                  _sidecar(c, [b * e for b, e in zip(base_rates, effect, strict=True)], tokens, n_requests)]
    return _frame(tmp_path, leds, sides)


# ---------------------------------------------------------------- thresholds


def test_a_curve_built_to_cross_at_4_gives_4_inside_its_interval(tmp_path):
    # log-linear from 1.2 at c=2 to 0.8 at c=8 passes 1.0 exactly at c=4
    df = _frame(tmp_path, _curve(tmp_path, [1, 2, 8, 16], [1.4, 1.2, 0.8, 0.7], factors=(0.97, 1.0, 1.03)))
    boot = bootstrap_speedups(df, n_boot=500)
    assert list(boot.table["n_repeats"]) == [3] * 4
    assert set(boot.table["resampled"]) == {"repeats"}  # no sidecars: server starts only
    (th,) = thresholds(boot)
    assert th.kind == "crosses" and th.concurrency == pytest.approx(4.0)
    assert 2 < th.lo < 4 < th.hi < 8
    assert th.share_no_crossing == 0.0
    line = format_threshold(th)
    assert line.startswith("ngram-k4 / copy: pays below c~4.0 (95% CI ")
    assert "understates" not in line  # three repeats


def test_a_curve_always_above_1_says_so(tmp_path):
    df = _frame(tmp_path, _curve(tmp_path, [1, 2, 4, 8], [1.5, 1.4, 1.3, 1.2], factors=(0.98, 1.02)))
    boot = bootstrap_speedups(df, n_boot=300)
    (th,) = thresholds(boot)
    assert th.kind == "above" and th.concurrency is None and th.lo is None
    assert th.share_no_crossing == 1.0
    line = format_threshold(th)
    assert "never crosses 1.0 in the measured range (pays over c=1..8" in line
    assert "2 repeats: the interval understates" in line
    (d,) = decide(boot)
    assert "attach the drafter: it pays at every measured concurrency (c=1..8)" in format_decision(d)
    assert d.at_concurrency == 8  # the heaviest load it still pays at


def test_a_curve_always_below_1_says_so(tmp_path):
    df = _frame(tmp_path, _curve(tmp_path, [1, 4], [0.9, 0.7], factors=(1.0, 1.0)))
    (th,) = thresholds(bootstrap_speedups(df, n_boot=100))
    assert th.kind == "below"
    assert "never crosses 1.0 in the measured range (loses over c=1..4" in format_threshold(th)


def test_replicates_that_never_cross_widen_the_interval_past_the_range(tmp_path):
    # repeat luck 0.8x / 1.3x: some replicate curves never cross, and the interval says so
    df = _frame(tmp_path, _curve(tmp_path, [1, 2, 4], [1.2, 1.05, 0.9], factors=(0.8, 1.0, 1.3)))
    (th,) = thresholds(bootstrap_speedups(df, n_boot=1000))
    assert th.kind == "crosses" and 0 < th.share_no_crossing < 1
    assert th.replicate_kinds["above"] > 0 and th.replicate_kinds["below"] > 0
    assert th.hi == math.inf and th.lo < th.concurrency  # a quarter of the replicates pay throughout
    assert " to >4;" in format_threshold(th)


def test_vectorised_crossings_match_the_scalar_function():
    rng = np.random.default_rng(5)
    cs = [1, 2, 4, 8, 16]
    curves = rng.choice([0.7, 0.9, 1.0, 1.1, 1.3], size=(400, 5)) * rng.choice([1.0, 1.0, 0.95], size=(400, 5))
    curves[:5] = [[1.0, 1.0, 1.0, 1.0, 1.0], [0.98, 1.02, 0.76, 0.73, 0.7], [0.5, 1.5, 0.5, 1.5, 0.5],
                  [1.1, np.nan, 0.9, 0.8, 0.7], [np.nan] * 5]
    kinds, at = crossings(cs, curves)
    for i, row in enumerate(curves):
        kind, val = crossing(cs, list(row))
        assert kinds[i] == kind, (i, row)
        assert (val is None and math.isnan(at[i])) or at[i] == pytest.approx(val)


# ---------------------------------------------------------------- the bootstrap


def test_point_estimate_is_the_mean_of_paired_ratios_with_spread(tmp_path):
    df = _frame(tmp_path, [
        ledger("baseline", c=1, r=0, tok_s=100, computed_tok_s=400), ledger("ngram-k4", c=1, r=0, tok_s=150,
                                                                         mal=3.0, computed_tok_s=500),
        ledger("baseline", c=1, r=1, tok_s=50, computed_tok_s=400), ledger("ngram-k4", c=1, r=1, tok_s=100,
                                                                        mal=2.0, computed_tok_s=300),
    ])
    row = bootstrap_speedups(df, n_boot=200).table.iloc[0]
    assert row["speedup"] == pytest.approx(1.75)  # mean of 1.5 and 2.0, not 125 / 75
    assert (row["speedup_min"], row["speedup_max"]) == (pytest.approx(1.5), pytest.approx(2.0))
    assert 1.5 <= row["speedup_lo"] <= row["speedup_hi"] <= 2.0
    assert row["computed_speedup"] == pytest.approx((1.25 + 0.75) / 2)
    assert row["acceptance_length"] == pytest.approx(2.5)


def test_one_repeat_without_request_records_is_degenerate_and_says_so(tmp_path):
    df = _frame(tmp_path, _curve(tmp_path, [1, 2], [1.3, 0.9]))
    boot = bootstrap_speedups(df, n_boot=50)
    t = boot.table
    assert list(t["resampled"]) == ["none", "none"] and list(t["n_repeats"]) == [1, 1]
    assert (t["speedup_lo"] == t["speedup"]).all() and (t["speedup_hi"] == t["speedup"]).all()
    assert "(1 run)" in format_speedup_table(t)
    assert "1 repeat: the interval covers the prompt mix only" in format_threshold(thresholds(boot)[0])


def test_prompts_resample_in_pairs(tmp_path):
    # the drafter makes every prompt exactly 1.5x faster per user: whichever prompts a
    # replicate draws, the paired per-user ratio cannot move
    df = _with_sidecars(tmp_path, [1.5, 1.5, 1.5, 1.5])
    row = bootstrap_speedups(df, n_boot=300).table.iloc[0]
    assert row["resampled"] == "prompts" and row["n_requests"] == 8
    assert row["per_user_speedup_lo"] == pytest.approx(row["per_user_speedup"], rel=1e-9)
    assert row["per_user_speedup_hi"] == pytest.approx(row["per_user_speedup"], rel=1e-9)
    assert row["speedup_hi"] - row["speedup_lo"] < 0.05 * row["speedup"]


def test_prompt_mix_widens_the_interval_with_one_repeat(tmp_path):
    df = _with_sidecars(tmp_path, [0.7, 2.0, 1.0, 1.4])
    row = bootstrap_speedups(df, n_boot=500).table.iloc[0]
    assert row["n_repeats"] == 1 and row["resampled"] == "prompts"
    assert row["speedup_lo"] < row["speedup"] < row["speedup_hi"]
    assert row["per_user_speedup_hi"] - row["per_user_speedup_lo"] > 0.2


def test_a_curve_without_request_records_leaves_the_next_curve_alone(tmp_path):
    bare = _frame(tmp_path / "a", _curve(tmp_path, [2], [1.1], workload="a-first"))
    full = _with_sidecars(tmp_path / "b", [0.7, 2.0, 1.0, 1.4])
    t = bootstrap_speedups(pd.concat([bare, full], ignore_index=True), n_boot=50).table
    assert list(t["resampled"]) == ["none", "prompts"]


def test_bootstrap_is_deterministic_under_a_seed(tmp_path):
    df = _with_sidecars(tmp_path, [0.7, 2.0, 1.0, 1.4], repeats=2)
    a = bootstrap_speedups(df, n_boot=400, seed=7)
    b = bootstrap_speedups(df, n_boot=400, seed=7)
    c = bootstrap_speedups(df, n_boot=400, seed=8)
    assert a.table["resampled"].iloc[0] == "repeats+prompts"
    pd.testing.assert_frame_equal(a.table, b.table)
    for m in analysis.METRICS:
        assert np.array_equal(a.curves[0].replicates[m], b.curves[0].replicates[m], equal_nan=True)
        assert a.curves[0].replicates[m].shape == (400, 1)
    assert not np.array_equal(a.curves[0].replicates["speedup"], c.curves[0].replicates["speedup"])


def test_a_curves_interval_does_not_depend_on_other_curves(tmp_path):
    rows = _curve(tmp_path, [1, 2, 4], [1.3, 1.1, 0.9], factors=(0.95, 1.05))
    alone = bootstrap_speedups(_frame(tmp_path / "a", rows), n_boot=300).table
    more = rows + _curve(tmp_path, [1, 2, 4], [0.9, 0.8, 0.7], factors=(0.9, 1.1), workload="freeform")
    both = bootstrap_speedups(_frame(tmp_path / "b", more), n_boot=300).table
    copy = both[both["workload"] == "copy"].reset_index(drop=True)
    pd.testing.assert_frame_equal(alone, copy)


def test_a_pairing_mismatch_raises(tmp_path):
    df = _frame(tmp_path, [ledger("baseline", content_hash="sha256:aa"),
                           ledger("ngram-k4", mal=2.0, content_hash="sha256:bb")])
    with pytest.raises(PairingError, match="workload_hash differs"):
        bootstrap_speedups(df)


def test_request_records_in_a_different_prompt_order_refuse_to_pair(tmp_path):
    base = _sidecar(2, [20.0, 30.0], [10, 20], 4)
    spec = base.copy()
    spec["prompt_id"] = list(reversed(spec["prompt_id"]))
    df = _frame(tmp_path, [ledger("baseline", c=2), ledger("ngram-k4", c=2, mal=2.0)], [base, spec])
    with pytest.raises(PairingError, match="same prompts in the same order"):
        bootstrap_speedups(df)
    assert bootstrap_speedups(df, prompts=False, n_boot=10).table["resampled"].iloc[0] == "none"


def test_conditions_are_curves_of_their_own(tmp_path):
    # a study: one sweep per condition, each with its own baseline server
    df_a = _frame(tmp_path / "a", _curve(tmp_path, [1, 4], [1.2, 0.8], sweep="study-bf16"))
    df_b = _frame(tmp_path / "b", _curve(tmp_path, [1, 4], [1.2, 0.8], sweep="study-int4"))
    df_a["condition"], df_b["condition"] = "bf16", "int4"
    df_b.loc[df_b["arm"] == "baseline", "output_tok_s"] = 50.0  # int4's baseline is another server
    boot = bootstrap_speedups(pd.concat([df_a, df_b], ignore_index=True), n_boot=50)
    t = boot.table
    assert list(t["condition"]) == ["bf16", "bf16", "int4", "int4"]
    assert list(t["speedup"]) == pytest.approx([1.2, 0.8, 2.4, 1.6])
    table = format_speedup_table(t)
    assert table.startswith("condition") and "study-bf16" not in table  # the sweep adds nothing here
    lines = analysis.format_thresholds(thresholds(boot)).splitlines()
    assert lines[0].startswith("bf16 / ngram-k4 / copy: pays below c~")
    assert lines[1].startswith("int4 / ngram-k4 / copy: never crosses 1.0")


def test_two_plain_sweeps_are_told_apart_by_name(tmp_path):
    df = pd.concat([_frame(tmp_path / "a", _curve(tmp_path, [1, 4], [1.2, 0.8], sweep="run-a")),
                    _frame(tmp_path / "b", _curve(tmp_path, [1, 4], [0.9, 0.8], sweep="run-b"))],
                   ignore_index=True)
    boot = bootstrap_speedups(df, n_boot=50)
    assert format_speedup_table(boot.table).startswith("sweep")
    assert analysis.format_decisions(decide(boot)).startswith("run-a / ngram-k4 / copy: attach")


def test_bad_arguments_are_one_line_errors(tmp_path):
    df = _frame(tmp_path, _curve(tmp_path, [1], [1.2]))
    for kw in ({"n_boot": 0}, {"level": 1.5}, {"seed": -1}, {"keys": ["nope"]}):
        with pytest.raises(AnalysisError):
            bootstrap_speedups(df, **kw)
    with pytest.raises(AnalysisError):
        thresholds(bootstrap_speedups(df, n_boot=10), metric="tok_s")
    with pytest.raises(AnalysisError):
        kv_capacity(df, context_tokens=0)
    assert bootstrap_speedups(pd.DataFrame()).table.empty


# ---------------------------------------------------------------- decisions and KV


def test_decision_reads_acceptance_at_the_threshold(tmp_path):
    # acceptance rate (mal - 1) / 4: 0.8 at c=2, 0.6 at c=8 -> 0.7 at the crossing c=4
    rows = _curve(tmp_path, [2, 8], [1.2, 0.8], factors=(0.98, 1.02), mal=[4.2, 3.4], share=0.4)
    boot = bootstrap_speedups(_frame(tmp_path, rows), n_boot=300)
    (d,) = decide(boot)
    assert d.at_concurrency == pytest.approx(4.0)
    assert d.acceptance_rate == pytest.approx(0.7) and d.verdict == "worth it"
    assert d.accepted_output_share == pytest.approx(0.4)
    text = format_decision(d)
    assert text.startswith("ngram-k4 / copy: attach the drafter below c~4.0 (95% CI ")
    assert "acceptance 70%" in text and "drafter supplied 40% of output" in text
    assert "n-gram: rate and length count only steps where it drafted" in text
    # at the real batch size instead: beyond the range, the nearest measured level
    (d16,) = decide(boot, serving_concurrency=16)
    assert d16.acceptance_rate == pytest.approx(0.6) and d16.verdict == "measure latency and throughput together"


def test_decision_says_when_the_measurement_overrules_the_rule_of_thumb(tmp_path):
    rows = _curve(tmp_path, [1, 4], [0.9, 0.8], factors=(1.0, 1.0), mal=[4.2, 4.2])
    (d,) = decide(bootstrap_speedups(_frame(tmp_path, rows), n_boot=50))
    assert d.verdict == "worth it" and d.threshold.kind == "below"
    assert "leave the drafter off" in format_decision(d) and "overrules" in format_decision(d)


def test_kv_capacity_reproduces_seed_000(tmp_path):
    # seed 000: the drafter's own KV cache shrank the pool ~36 %, 6.7 -> 4.3 sessions at 256k
    ctx = 256 * 1024
    df = _frame(tmp_path, [ledger("baseline", kv_tokens=round(6.7 * ctx)),
                           ledger("draft", mal=2.0, kv_tokens=round(4.3 * ctx))])
    kv = kv_capacity(df, context_tokens=ctx).set_index("arm")
    assert kv.loc["draft", "drafter_kv_share"] == pytest.approx(0.36, abs=0.005)
    assert kv.loc["draft", "sessions"] == pytest.approx(4.3, abs=1e-5)
    assert kv.loc["draft", "baseline_sessions"] == pytest.approx(6.7, abs=1e-5)
    assert kv.loc["baseline", "drafter_kv_share"] == 0.0
    text = format_kv_capacity(kv.reset_index())
    assert "the drafter takes 36%" in text and "6.7 -> 4.3 concurrent sessions" in text


# ---------------------------------------------------------------- the committed demo run


@pytest.fixture(scope="module")
def demo():
    return load_ledgers(DEMO)


def test_demo_copy_threshold_is_a_crossing_with_its_interval(demo):
    boot = bootstrap_speedups(demo)
    t = boot.table
    assert set(t["resampled"]) == {"repeats+prompts"} and set(t["n_repeats"]) == {2}
    ths = {th.group["workload"]: th for th in thresholds(boot)}
    copy = ths["copy"]
    assert copy.group["arm"] == "ngram-k4" and copy.kind == "crosses"
    assert 1 < copy.concurrency < 8
    assert 1 <= copy.lo <= copy.concurrency <= copy.hi <= 8
    assert ths["freeform"].kind == "below"
    # the paired table behind it: copy pays at c=1, loses at c=8
    row = t.set_index(["workload", "concurrency"])
    assert row.loc[("copy", 1), "speedup_lo"] < row.loc[("copy", 1), "speedup"] < row.loc[("copy", 1), "speedup_hi"]
    assert row.loc[("copy", 8), "speedup_hi"] < 1.0


def test_report_text_on_the_demo(demo):
    text = format_report(demo, n_boot=300, context_tokens=2048)
    assert text.startswith("measured on: AMD EPYC, 2 CPUs, no GPU; engine vLLM 0.32.0")
    assert "speedup [95% CI]" in text and "ngram-k4 / copy: pays below c~" in text
    decision = text[text.index("decision:"):]
    copy = next(line for line in decision.splitlines() if line.startswith("ngram-k4 / copy:"))
    # levels whose interval spans 1.0 are said to be undecided, not folded into a crossing
    assert "attach the drafter at c=1" in copy and "undecided at c=" in copy
    assert "leave it off at c=8" in decision or "leave the drafter off" in decision
    assert "the drafter takes 0%" in text  # n-gram keeps no KV cache of its own


def test_cli_report_prints_intervals_thresholds_and_decisions(capsys):
    from specnb.cli import main

    assert main(["report", str(DEMO), "--n-boot", "200", "--context", "2048"]) == 0
    out = capsys.readouterr().out
    assert "speedup [95% CI]" in out and "where the speedup crosses 1.0" in out and "decision:" in out
    assert "2,048-token context" in out
    assert main(["report", str(DEMO), "--n-boot", "0"]) == 2  # one line on stderr, no traceback
    assert "n_boot must be a positive integer" in capsys.readouterr().err


def test_a_server_that_never_started_is_not_a_second_machine():
    from specnb.analysis.text import format_machine

    df = pd.DataFrame([
        {"status": "ok", "machine": "Xeon, 2 CPUs", "engine_version": "0.32.0", "vllm_version": "0.32.0+cpu"},
        {"status": "failed", "machine": "Xeon, 2 CPUs", "engine_version": float("nan"), "vllm_version": "0.32.0+cpu"},
    ])
    assert format_machine(df) == "measured on: Xeon, 2 CPUs; engine vLLM 0.32.0 (installed 0.32.0+cpu)"
    # only failures (no server ran): the installed build, said as such (issue 47), never "vLLM ?"
    assert format_machine(df.iloc[1:]) == "measured on: Xeon, 2 CPUs; engine vLLM 0.32.0+cpu (the installed build; no server ran)"
