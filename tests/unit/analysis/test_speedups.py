"""Paired speedups with the one interval, the answer across levels, decisions and KV capacity, on
frames with known answers (the error rates themselves: test_statistics.py)."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from specnb import analysis, paths
from specnb.analysis import (
    AnalysisError,
    crossings,
    decide,
    format_decision,
    format_kv_capacity,
    format_speedup_table,
    format_threshold,
    kv_capacity,
    paired_speedups,
    thresholds,
)
from specnb.analysis.estimator import estimate
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


def _sidecar(c: int, rates: list[float], tokens: list[int], n_requests: int,
             cats: list[str] | None = None) -> pd.DataFrame:
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
            "index": i, "worker": w, "prompt_id": f"p{p:02d}", "category": (cats or ["x"] * len(rates))[p],
            "start_s": start,
            "end_s": end, "first_token_s": first, "chunk_times_s": times, "chunk_tokens": [1] * tokens[p],
            "output_tokens": tokens[p], "prompt_tokens": 50, "cached_prompt_tokens": None,
            "finish_reason": "length", "token_count_source": "usage", "http_status": 200, "error": None,
            "ttft_s": 0.05, "tpot_s": (times[-1] - first) / (tokens[p] - 1),
        })
    return pd.DataFrame(rows)


def _with_sidecars(tmp_path, effect: list[float], c: int = 2, repeats: int = 1, n_requests: int = 8,
                   factors: tuple[float, ...] | None = None, cats: list[str] | None = None,
                   base_rates: tuple[float, ...] = (20.0, 30.0, 40.0, 25.0), tokens: tuple[int, ...] = (10, 64, 30, 48)):
    """One level, ``repeats`` repeats; speculative rate = baseline rate x effect[prompt] (x the
    repeat's factor: its start's luck)."""
    leds, sides = [], []
    for r in range(repeats):
        f = 1.0 if factors is None else factors[r]
        leds += [ledger("baseline", c=c, r=r, tok_s=100.0),
                 ledger("ngram-k4", c=c, r=r, tok_s=100.0 * float(np.mean(effect)) * f, mal=3.0)]
        sides += [_sidecar(c, base_rates, tokens, n_requests, cats),
                  _sidecar(c, [b * e * f for b, e in zip(base_rates, effect, strict=True)], tokens, n_requests, cats)]
    return _frame(tmp_path, leds, sides)


# ---------------------------------------------------------------- across levels

FOUR = (0.97, 1.0, 1.03, 1.0)  # four starts' luck: small, so every level decides


def test_a_curve_built_to_cross_at_4_pays_below_and_loses_above_with_the_crossing_bracketed(tmp_path):
    # log-linear from 1.2 at c=2 to 0.8 at c=8 passes 1.0 exactly at c=4
    df = _frame(tmp_path, _curve(tmp_path, [1, 2, 8, 16], [1.4, 1.2, 0.8, 0.7], factors=FOUR))
    sp = paired_speedups(df)
    t = sp.table
    assert list(t["n_repeats"]) == [4] * 4 and set(t["scope"]) == {"panel"}  # no request records
    assert set(t["order"]) == {"balanced"} and set(t["design"]) == {"fixed"}
    assert list(t["decision"]) == ["pays", "pays", "loses", "loses"]
    (th,) = thresholds(sp)
    assert th.kind == "crosses" and th.concurrency == pytest.approx(4.0, rel=0.02)
    assert (th.pays_through, th.loses_from, th.lo, th.hi) == (2, 8, 2, 8) and th.bracketed
    line = format_threshold(th)
    assert line.startswith("ngram-k4 / copy: pays at every c <= 2; loses at every c >= 8; the crossing lies between "
                           "c=2 and c=8; the estimates cross 1.0 near c~4.0 (interpolated)"), line


def test_a_curve_always_above_1_says_so(tmp_path):
    df = _frame(tmp_path, _curve(tmp_path, [1, 2, 4, 8], [1.5, 1.4, 1.3, 1.2], factors=FOUR))
    sp = paired_speedups(df)
    (th,) = thresholds(sp)
    assert th.kind == "above" and th.concurrency is None and th.pays_through == 8 and th.hi == math.inf
    assert format_threshold(th) == "ngram-k4 / copy: pays at every measured level (c=1..8)"
    (d,) = decide(sp)
    assert "attach the drafter: it pays at every measured concurrency (c=1..8)" in format_decision(d)
    assert d.at_concurrency == 8  # the heaviest load it still pays at


def test_a_curve_always_below_1_says_so(tmp_path):
    df = _frame(tmp_path, _curve(tmp_path, [1, 4], [0.9, 0.7], factors=FOUR))
    (th,) = thresholds(paired_speedups(df))
    assert th.kind == "below" and th.loses_from == 1 and th.lo == -math.inf
    assert "loses at every measured level (c=1..4)" in format_threshold(th)


def test_a_level_past_an_undecided_one_is_shown_but_not_claimed(tmp_path):
    # c=2 is noisy (its starts 0.8x and 1.25x apart): undecided; c=4 pays on its own interval, but
    # the sequence from c=1 stopped at c=2, so the answer across levels claims only c=1
    rows = []
    for r, f in enumerate((0.8, 1.25, 0.8, 1.25)):
        for c, s, luck in ((1, 1.5, 1.0), (2, 1.3, f), (4, 1.4, 1.0 + 0.01 * r)):
            rows += [ledger("baseline", c=c, r=r, tok_s=100.0), ledger("ngram-k4", c=c, r=r, tok_s=100.0 * s * luck, mal=3.0)]
    sp = paired_speedups(_frame(tmp_path, rows))
    (th,) = thresholds(sp)
    assert th.own == {1.0: "pays", 2.0: None, 4.0: "pays"}
    assert th.verdicts == {1.0: "pays", 2.0: "undecided", 4.0: "undecided"} and th.outside() == {4.0: "pays"}
    text = format_decision(decide(sp)[0])
    assert "attach the drafter at c <= 1" in text and "undecided at c=2, 4" in text
    assert "c=4 pays on its own interval (outside the family-wise answer" in text


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


# ---------------------------------------------------------------- the estimate and its interval


def test_the_estimate_is_the_geometric_mean_of_paired_ratios_with_spread(tmp_path):
    df = _frame(tmp_path, [
        ledger("baseline", c=1, r=0, tok_s=100, computed_tok_s=400), ledger("ngram-k4", c=1, r=0, tok_s=150,
                                                                         mal=3.0, computed_tok_s=500),
        ledger("baseline", c=1, r=1, tok_s=50, computed_tok_s=400), ledger("ngram-k4", c=1, r=1, tok_s=100,
                                                                        mal=2.0, computed_tok_s=300),
    ])
    row = paired_speedups(df).table.iloc[0]
    assert row["speedup"] == pytest.approx(math.sqrt(1.5 * 2.0))  # exp of the mean log ratio, not 125 / 75
    assert (row["speedup_min"], row["speedup_max"]) == (pytest.approx(1.5), pytest.approx(2.0))
    assert row["speedup_lo"] < 1.5 and row["speedup_hi"] > 2.0  # two starts: one degree of freedom, t = 12.7
    assert row["computed_speedup"] == pytest.approx(math.sqrt(1.25 * 0.75))
    assert row["acceptance_length"] == pytest.approx(2.5) and row["order"] == "balanced"


def test_unbalanced_orders_weigh_each_order_equally(tmp_path):
    # three starts: A B (1.2x), B A (1.5x), A B (1.2x): the plain mean leans to A B; the estimate
    # is the mean of the two orders' means, and the starts keep n - 2 = 1 degree of freedom
    rows = []
    for r, s in enumerate((1.2, 1.5, 1.2)):
        rows += [ledger("baseline", c=1, r=r, tok_s=100.0), ledger("ngram-k4", c=1, r=r, tok_s=100.0 * s, mal=3.0)]
    t = paired_speedups(_frame(tmp_path, rows)).table
    row = t.iloc[0]
    assert row["speedup"] == pytest.approx(math.sqrt(1.2 * 1.5)) and row["order"].startswith("unbalanced")
    assert row["df"] == pytest.approx(1.0) and "o arm orders unbalanced" in format_speedup_table(t)


def test_one_repeat_has_no_interval_and_says_so(tmp_path):
    df = _frame(tmp_path, _curve(tmp_path, [1, 2], [1.3, 0.9]))
    sp = paired_speedups(df)
    t = sp.table
    assert list(t["n_repeats"]) == [1, 1] and t["speedup_lo"].isna().all() and t["decision"].isna().all()
    table = format_speedup_table(t)
    assert "(no CI)" in table and "no CI: one start" in table
    assert "no level decided across the curve" in format_threshold(thresholds(sp)[0])


def test_equal_effects_on_every_prompt_add_no_prompt_part(tmp_path):
    # the drafter makes every prompt exactly 1.5x faster per user: whichever prompts a panel held,
    # the per-user ratio would not move; two starts apart by 2 % carry the whole interval
    df = _with_sidecars(tmp_path, [1.5, 1.5, 1.5, 1.5], repeats=2, factors=(0.99, 1.01))
    sp = paired_speedups(df)
    row = sp.table.iloc[0]
    assert row["scope"] == "prompts" and row["n_requests"] == 8
    infl = sp.data({"sweep": "t", "condition": "default", "arm": "ngram-k4", "workload": "copy"}, 2.0).influence
    assert np.abs(infl["per_user_speedup"]).max() < 1e-9
    assert infl["speedup"].sum(axis=1) == pytest.approx([0.0, 0.0], abs=1e-9)  # influences sum to zero


def test_a_prompt_mix_widens_the_interval_across_prompts_but_not_for_this_panel(tmp_path):
    df = _with_sidecars(tmp_path, [0.7, 2.0, 1.0, 1.4], repeats=4, factors=FOUR)
    wide = paired_speedups(df).table.iloc[0]
    narrow = paired_speedups(df, scope="panel").table.iloc[0]
    assert wide["scope"] == "prompts" and narrow["scope"] == "panel"
    assert wide["prompt_var"] > 0 and pd.isna(narrow["prompt_var"])
    assert wide["speedup_lo"] < narrow["speedup_lo"] < narrow["speedup"] < narrow["speedup_hi"] < wide["speedup_hi"]
    assert wide["speedup"] == pytest.approx(narrow["speedup"])


def test_categories_are_strata_the_interval_does_not_resample_across(tmp_path):
    # two categories whose prompts differ between the categories only: within each, the prompts
    # agree, so the prompts add nothing; put the same prompts in one category and they do
    kw = dict(repeats=4, factors=FOUR, base_rates=(20.0, 20.0, 40.0, 40.0), tokens=(30, 30, 60, 60))
    effect = [0.7, 0.7, 2.0, 2.0]
    strat = paired_speedups(_with_sidecars(tmp_path / "a", effect, cats=["a", "a", "b", "b"], **kw)).table.iloc[0]
    pooled = paired_speedups(_with_sidecars(tmp_path / "b", effect, cats=["x", "x", "x", "x"], **kw)).table.iloc[0]
    assert strat["prompt_var"] < 1e-12 < 0.001 < pooled["prompt_var"]
    assert strat["speedup_hi"] < pooled["speedup_hi"]


def test_a_panel_grown_in_later_repeats_is_read_over_every_prompt_it_sent(tmp_path):
    # repeats 0-1 send prompts p00-p03, repeats 2-3 (a sequential round that grew the panel) p00-p07:
    # each prompt enters with its own influence, NaN (no weight) where a start did not send it
    effect = [0.7, 2.0, 1.0, 1.4, 1.1, 0.9, 1.6, 1.2]
    rates, tokens = [20.0, 30.0, 40.0, 25.0] * 2, [10, 64, 30, 48] * 2
    leds, sides = [], []
    for r, f in enumerate(FOUR):
        m = 4 if r < 2 else 8
        leds += [ledger("baseline", c=2, r=r, tok_s=100.0),
                 ledger("ngram-k4", c=2, r=r, tok_s=100.0 * float(np.mean(effect[:m])) * f, mal=3.0)]
        sides += [_sidecar(2, rates[:m], tokens[:m], 2 * m),
                  _sidecar(2, [b * e * f for b, e in zip(rates[:m], effect[:m], strict=True)], tokens[:m], 2 * m)]
    sp = paired_speedups(_frame(tmp_path, leds, sides))
    data = sp.data({"sweep": "t", "condition": "default", "arm": "ngram-k4", "workload": "copy"}, 2.0)
    assert data.prompts == tuple(f"p{j:02d}" for j in range(8))
    assert np.isnan(data.influence["speedup"][:2, 4:]).all() and np.isfinite(data.influence["speedup"][2:]).all()
    row = sp.table.iloc[0]
    assert row["scope"] == "prompts" and row["n_repeats"] == 4 and row["prompt_var"] > 0


def test_a_look_reads_the_same_before_and_after_a_later_round_grew_the_panel(tmp_path):
    # the look after 4 repeats, read when only 4 were measured and read again after repeats 4-5
    # sent a panel twice as large: the same interval (the new prompts were never part of it)
    effect = [0.7, 2.0, 1.0, 1.4, 1.1, 0.9, 1.6, 1.2]
    rates, tokens = [20.0, 30.0, 40.0, 25.0] * 2, [10, 64, 30, 48] * 2
    leds, sides = [], []
    for r, f in enumerate((*FOUR, 1.01, 0.99)):
        m = 4 if r < 4 else 8
        leds += [ledger("baseline", c=2, r=r, tok_s=100.0),
                 ledger("ngram-k4", c=2, r=r, tok_s=100.0 * float(np.mean(effect[:m])) * f, mal=3.0)]
        sides += [_sidecar(2, rates[:m], tokens[:m], 2 * m, cats=["a", "a", "b", "b", "a", "a", "b", "b"][:m]),
                  _sidecar(2, [b * e * f for b, e in zip(rates[:m], effect[:m], strict=True)], tokens[:m], 2 * m,
                           cats=["a", "a", "b", "b", "a", "a", "b", "b"][:m])]
    group = {"sweep": "t", "condition": "default", "arm": "ngram-k4", "workload": "copy"}
    before = paired_speedups(_frame(tmp_path / "four", leds[:8], sides[:8])).data(group, 2.0).sample("speedup", 4)
    after = paired_speedups(_frame(tmp_path / "six", leds, sides)).data(group, 2.0).sample("speedup", 4)
    assert after.influence.shape == before.influence.shape == (4, 4) and after.strata == before.strata
    a, b = estimate(before, 0.95), estimate(after, 0.95)
    assert (a.lo, a.hi, a.df) == (pytest.approx(b.lo), pytest.approx(b.hi), pytest.approx(b.df))


def test_a_pair_without_request_records_leaves_the_prompts_part_to_the_others(tmp_path):
    df = _with_sidecars(tmp_path, [0.7, 2.0, 1.0, 1.4], repeats=4, factors=FOUR)
    full = paired_speedups(df).table.iloc[0]
    lost = df.copy()
    lost.loc[(lost["arm"] == "ngram-k4") & (lost["repeat"] == 1), "path"] = None  # its sidecar is gone
    part = paired_speedups(lost).table.iloc[0]
    assert part["scope"] == "prompts" and part["prompt_var"] > 0
    assert part["prompt_var"] == pytest.approx(full["prompt_var"], rel=0.5)


def test_a_curve_without_request_records_leaves_the_next_curve_alone(tmp_path):
    bare = _frame(tmp_path / "a", _curve(tmp_path, [2], [1.1], workload="a-first", factors=(1.0, 1.02)))
    full = _with_sidecars(tmp_path / "b", [0.7, 2.0, 1.0, 1.4], repeats=2)
    t = paired_speedups(pd.concat([bare, full], ignore_index=True)).table
    assert list(t["scope"]) == ["panel", "prompts"]


def test_the_table_is_the_same_every_time_and_for_every_companion_curve(tmp_path):
    rows = _curve(tmp_path, [1, 2, 4], [1.3, 1.1, 0.9], factors=(0.95, 1.05, 1.0, 1.02))
    alone = paired_speedups(_frame(tmp_path / "a", rows)).table
    pd.testing.assert_frame_equal(alone, paired_speedups(load_ledgers(tmp_path / "a")).table)
    more = rows + _curve(tmp_path, [1, 2, 4], [0.9, 0.8, 0.7], factors=(0.9, 1.1, 1.0, 1.0), workload="freeform")
    both = paired_speedups(_frame(tmp_path / "b", more)).table
    copy = both[both["workload"] == "copy"].reset_index(drop=True)
    pd.testing.assert_frame_equal(alone, copy)


def test_two_arms_of_one_run_are_compared_repeat_by_repeat(tmp_path):
    rows = []
    for r, f in enumerate((0.8, 1.25, 0.9, 1.1)):  # large start luck, shared by both drafter arms
        rows += [ledger("baseline", c=1, r=r, tok_s=100.0),
                 ledger("ngram-k4", c=1, r=r, tok_s=105.0 * f, mal=3.0),
                 ledger("ngram-k8", c=1, r=r, tok_s=115.5 * f, mal=4.0)]
    sp = paired_speedups(_frame(tmp_path, rows))
    t = sp.table.set_index("arm")
    assert t.loc["ngram-k8", "decision"] is None or pd.isna(t.loc["ngram-k8", "decision"])  # the luck hides each
    est = sp.contrast({"sweep": "t", "condition": "default", "workload": "copy"}, "ngram-k8", "ngram-k4", 1.0)
    assert est.ratio == pytest.approx(1.1) and est.lo > 1.0  # paired, the luck cancels: K=8 beats K=4


def test_a_pairing_mismatch_raises(tmp_path):
    df = _frame(tmp_path, [ledger("baseline", content_hash="sha256:aa"),
                           ledger("ngram-k4", mal=2.0, content_hash="sha256:bb")])
    with pytest.raises(PairingError, match="workload_hash differs"):
        paired_speedups(df)


def test_request_records_in_a_different_prompt_order_refuse_to_pair(tmp_path):
    base = _sidecar(2, [20.0, 30.0], [10, 20], 4)
    spec = base.copy()
    spec["prompt_id"] = list(reversed(spec["prompt_id"]))
    df = _frame(tmp_path, [ledger("baseline", c=2), ledger("ngram-k4", c=2, mal=2.0)], [base, spec])
    with pytest.raises(PairingError, match="same prompts in the same order"):
        paired_speedups(df)


def test_conditions_are_curves_of_their_own(tmp_path):
    # a study: one sweep per condition, each with its own baseline server
    df_a = _frame(tmp_path / "a", _curve(tmp_path, [1, 4], [1.2, 0.8], sweep="study-bf16", factors=FOUR))
    df_b = _frame(tmp_path / "b", _curve(tmp_path, [1, 4], [1.2, 0.8], sweep="study-int4", factors=FOUR))
    df_a["condition"], df_b["condition"] = "bf16", "int4"
    df_b.loc[df_b["arm"] == "baseline", "output_tok_s"] = 50.0  # int4's baseline is another server
    sp = paired_speedups(pd.concat([df_a, df_b], ignore_index=True))
    t = sp.table
    assert list(t["condition"]) == ["bf16", "bf16", "int4", "int4"]
    assert list(t["speedup"]) == pytest.approx([1.2, 0.8, 2.4, 1.6], rel=1e-3)
    table = format_speedup_table(t)
    assert table.startswith("condition") and "study-bf16" not in table  # the sweep adds nothing here
    lines = analysis.format_thresholds(thresholds(sp)).splitlines()
    assert lines[0].startswith("bf16 / ngram-k4 / copy: pays at every c <= 1; loses at every c >= 4")
    assert lines[1].startswith("int4 / ngram-k4 / copy: pays at every measured level")


def test_two_plain_sweeps_are_told_apart_by_name(tmp_path):
    df = pd.concat([_frame(tmp_path / "a", _curve(tmp_path, [1, 4], [1.2, 0.8], sweep="run-a", factors=FOUR)),
                    _frame(tmp_path / "b", _curve(tmp_path, [1, 4], [0.9, 0.8], sweep="run-b", factors=FOUR))],
                   ignore_index=True)
    sp = paired_speedups(df)
    assert format_speedup_table(sp.table).startswith("sweep")
    assert analysis.format_decisions(decide(sp)).startswith("run-a / ngram-k4 / copy: attach")


def test_bad_arguments_are_one_line_errors(tmp_path):
    df = _frame(tmp_path, _curve(tmp_path, [1], [1.2]))
    for kw in ({"confidence": 1.5}, {"confidence": 0.0}, {"keys": ["nope"]}):
        with pytest.raises(AnalysisError):
            paired_speedups(df, **kw)
    with pytest.raises(ValueError):
        paired_speedups(df, scope="everything")
    with pytest.raises(AnalysisError):
        thresholds(paired_speedups(df), metric="tok_s")
    with pytest.raises(AnalysisError):
        kv_capacity(df, context_tokens=0)
    assert paired_speedups(pd.DataFrame()).table.empty


# ---------------------------------------------------------------- decisions and KV


def test_decision_reads_acceptance_at_the_crossing(tmp_path):
    # acceptance rate (mal - 1) / 4: 0.8 at c=2, 0.6 at c=8 -> 0.7 at the crossing c=4
    rows = _curve(tmp_path, [2, 8], [1.2, 0.8], factors=FOUR, mal=[4.2, 3.4], share=0.4)
    sp = paired_speedups(_frame(tmp_path, rows))
    (d,) = decide(sp)
    assert d.at_concurrency == pytest.approx(4.0, rel=0.02)
    assert d.acceptance_rate == pytest.approx(0.7, abs=0.005) and d.verdict == "worth it"
    assert d.accepted_output_share == pytest.approx(0.4)
    text = format_decision(d)
    assert text.startswith("ngram-k4 / copy: attach the drafter at c <= 2 (it pays at c=2); leave it off at c >= 8 "
                           "(it loses at c=8) [the crossing lies between c=2 and c=8; the estimates cross 1.0 near "
                           "c~4.0 (interpolated)]"), text
    assert "acceptance 70%" in text and "drafter supplied 40% of output" in text
    assert "n-gram: rate and length count only steps where it drafted" in text
    # at the real batch size instead: beyond the range, the nearest measured level
    (d16,) = decide(sp, serving_concurrency=16)
    assert d16.acceptance_rate == pytest.approx(0.6) and d16.verdict == "measure latency and throughput together"


def test_decision_says_when_the_measurement_overrules_the_rule_of_thumb(tmp_path):
    rows = _curve(tmp_path, [1, 4], [0.9, 0.8], factors=FOUR, mal=[4.2, 4.2])
    (d,) = decide(paired_speedups(_frame(tmp_path, rows)))
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


# ---------------------------------------------------------------- a committed run


@pytest.fixture(scope="module")
def demo():
    return load_ledgers(DEMO)


def test_a_committed_run_of_two_starts_decides_little_and_says_why(demo):
    """The 2026-11-29 demo run measured two starts per level: one degree of freedom for the starts
    (t = 12.7 at 95 %), so only a level whose prompts and starts agree closely decides."""
    sp = paired_speedups(demo)
    t = sp.table
    assert set(t["n_repeats"]) == {2} and set(t["scope"]) == {"prompts"} and (t["df"] == 1.0).all()
    ths = {th.group["workload"]: th for th in thresholds(sp)}
    assert ths["copy"].group["arm"] == "ngram-k4" and ths["copy"].kind == "crosses"
    assert 1 < ths["copy"].concurrency < 8
    row = t.set_index(["workload", "concurrency"])
    assert row.loc[("copy", 1), "speedup_lo"] < row.loc[("copy", 1), "speedup"] < row.loc[("copy", 1), "speedup_hi"]


def test_report_text_on_the_demo(demo):
    from specnb import paths
    from specnb.analysis.report import ReportOptions, format_run_report
    from specnb.ledger.records import RunRecords

    text = format_run_report(RunRecords(paths.ROOT, demo), ReportOptions(context_tokens=2048))
    assert text.startswith("measured on: AMD EPYC, 2 CPUs, no GPU; engine vLLM 0.32.0")
    assert "speedup [95% CI]" in text and "across levels (a fixed sequence" in text
    decision = text[text.index("decision:"):]
    assert next(line for line in decision.splitlines() if line.startswith("ngram-k4 / copy:"))
    assert "the drafter takes 0%" in text  # n-gram keeps no KV cache of its own


def test_cli_report_prints_intervals_levels_and_decisions(capsys):
    from specnb.cli import main

    assert main(["report", str(DEMO), "--context", "2048"]) == 0
    out = capsys.readouterr().out
    assert "speedup [95% CI]" in out and "across levels" in out and "decision:" in out
    assert "2,048-token context" in out
    assert main(["report", str(DEMO), "--scope", "panel"]) == 0
    out = capsys.readouterr().out
    assert "+ this panel only" not in out and "this panel's prompts only, as asked" in out  # no mark: the footer says it
    assert main(["report", str(DEMO), "--scope", "all"]) == 2  # one line on stderr, no traceback
    assert "invalid choice" in capsys.readouterr().err


def test_a_server_that_never_started_is_not_a_second_machine():
    from specnb.analysis.text import format_machine

    df = pd.DataFrame([
        {"status": "ok", "machine": "Xeon, 2 CPUs", "engine_version": "0.32.0", "vllm_version": "0.32.0+cpu"},
        {"status": "failed", "machine": "Xeon, 2 CPUs", "engine_version": float("nan"), "vllm_version": "0.32.0+cpu"},
    ])
    assert format_machine(df) == "measured on: Xeon, 2 CPUs; engine vLLM 0.32.0 (installed 0.32.0+cpu)"
    # only failures (no server ran): the installed build, said as such (issue 47), never "vLLM ?"
    assert format_machine(df.iloc[1:]) == "measured on: Xeon, 2 CPUs; engine vLLM 0.32.0+cpu (the installed build; no server ran)"
