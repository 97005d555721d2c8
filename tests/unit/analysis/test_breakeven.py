"""The break-even map (specnb.analysis.breakeven, specnb.sweep.mapgrid): the acceptance check a
synthetic cell must pass, the crossing and its band, a real drafter read off its kind's cells,
and the grid a study expands into arms."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from specnb.analysis.breakeven import (
    ACCEPTANCE_NOT_AS_SET,
    acceptance_check,
    break_even,
    break_even_lines,
    drafted_share,
    drafter_rows,
    is_map_run,
    kind_of,
    map_cells,
    predict,
    prediction_lines,
)
from specnb.ledger.schema import synthetic_rates
from specnb.sweep.arm import Arm
from specnb.sweep.ledgers import acceptance_failure
from specnb.sweep.mapgrid import AcceptanceMap
from specnb.sweep.spec import SweepError
from specnb.sweep.study import Study

NGRAM = {"method": "ngram", "prompt_lookup_max": 4}


def cell(k: int, length: float, base: dict | None = None) -> dict:
    return {**(base or NGRAM), "num_speculative_tokens": k, "rejection_sample_method": "synthetic",
            "synthetic_acceptance_length": length}


def draw(config: dict, drafts: int, rng: np.random.Generator, short: float = 0.0) -> dict:
    """Counters as the engine would report them: each draft accepts its leading positions with the
    set unconditional rates; a share ``short`` of drafts is one token short (its last position
    cannot be accepted)."""
    rates = synthetic_rates(config)
    k = len(rates)
    cond = [rates[0]] + [rates[i] / rates[i - 1] if rates[i - 1] else 0.0 for i in range(1, k)]
    accepted, tokens = 0, 0
    for _ in range(drafts):
        n = k - 1 if rng.random() < short else k
        tokens += n
        for i in range(n):
            if rng.random() >= cond[i]:
                break
            accepted += 1
    return {"num_drafts": drafts, "num_draft_tokens": tokens, "num_accepted_tokens": accepted}


# -- the acceptance check ------------------------------------------------------------------

@pytest.mark.parametrize("config", [cell(4, 2.5), cell(4, 1.25), cell(3, 4.0), cell(4, 3.0),
                                    {**NGRAM, "num_speculative_tokens": 4, "rejection_sample_method": "synthetic",
                                     "synthetic_acceptance_rates": [0.9, 0.7, 0.5, 0.3]}])
def test_a_cell_drawn_as_set_passes_and_one_drawn_otherwise_fails(config):
    rng = np.random.default_rng(7)
    for _ in range(200):  # a false failure is about 1 in 15,000 per point
        check = acceptance_check(config, draw(config, 300, rng))
        assert check is not None and check.ok, check.message()
    # the engine accepting at another length: found (with 1,000 drafts, 0.3 tokens off is many SEs)
    k, length = config["num_speculative_tokens"], 1 + sum(synthetic_rates(config))
    other = cell(k, length - 0.3 if length - 0.3 >= 1 else length + 0.3)
    missed = [not acceptance_check(config, draw(other, 1000, rng)).ok for _ in range(20)]
    assert all(missed)


def test_short_drafts_lower_what_is_allowed_and_only_that():
    rng = np.random.default_rng(3)
    config = cell(4, 4.5)  # rates [1, 1, 1, 0.5]: a draft one short loses its last position
    sd = draw(config, 800, rng, short=0.3)
    check = acceptance_check(config, sd)
    assert check.ok and check.measured < check.set_length - 0.1
    # the same counts claimed as full drafts: the shortfall is no longer explained
    assert not acceptance_check(config, {**sd, "num_draft_tokens": 800 * 4}).ok


def test_no_check_for_a_real_drafter_or_a_point_without_drafts():
    assert acceptance_check({**NGRAM, "num_speculative_tokens": 4}, {"num_drafts": 10}) is None
    assert acceptance_check(cell(4, 2.5), {"num_drafts": 0}) is None
    assert acceptance_check(None, None) is None


def test_the_sweep_records_a_cell_not_as_set_as_a_failure_that_says_why():
    arm = Arm(name="ngram-k4-L2.5", speculative_config=cell(4, 2.5))
    good = {"num_drafts": 500, "num_draft_tokens": 2000, "num_accepted_tokens": 750}
    assert acceptance_failure(arm, good) is None
    bad = acceptance_failure(arm, {**good, "num_accepted_tokens": 500})  # 2.0 measured
    assert bad.error_type == ACCEPTANCE_NOT_AS_SET
    assert "2.000" in bad.message and "2.5 set" in bad.message
    assert acceptance_failure(Arm(name="ngram-k4", speculative_config={**NGRAM, "num_speculative_tokens": 4}),
                              {**good, "num_accepted_tokens": 10}) is None


# -- kinds, cells, the crossing ------------------------------------------------------------

def test_a_kind_is_its_proposer_without_k_or_acceptance():
    real = {**NGRAM, "num_speculative_tokens": 4}
    assert kind_of(real) == kind_of(cell(2, 1.5)) == 'ngram(prompt_lookup_max=4)'
    head = {"method": "eagle3", "model": "/abs/drafters/head-eagle3", "num_speculative_tokens": 3}
    assert kind_of(head) == "eagle3:head-eagle3"
    assert kind_of({"model": "models/draft", "num_speculative_tokens": 3}) == "draft_model:draft"
    assert kind_of(None) is None


def table(rows: list[tuple[str, int, float, float, float, float]]) -> pd.DataFrame:
    """(arm, level, measured length, speedup, lo, hi) rows of a paired table on 'copy'."""
    return pd.DataFrame([{"condition": "default", "workload": "copy", "arm": a, "concurrency": c,
                          "acceptance_length": x, "speedup": s, "speedup_lo": lo, "speedup_hi": hi, "n_repeats": 3}
                         for a, c, x, s, lo, hi in rows])


CONFIGS = {"baseline": None, "ng-L1.5": cell(4, 1.5), "ng-L2.5": cell(4, 2.5), "ng-L3.5": cell(4, 3.5),
           "ngram-k4": {**NGRAM, "num_speculative_tokens": 4}, "other": {"method": "ngram", "num_speculative_tokens": 2}}


def test_the_break_even_is_linear_between_the_cells_around_it_with_its_band():
    t = table([("ng-L1.5", 1, 1.5, 0.8, 0.7, 0.9), ("ng-L2.5", 1, 2.5, 1.2, 1.1, 1.3), ("ng-L3.5", 1, 3.5, 1.6, 1.5, 1.7),
               ("ng-L1.5", 4, 1.5, 0.5, 0.4, 0.6), ("ng-L2.5", 4, 2.5, 0.7, 0.6, 0.8), ("ng-L3.5", 4, 3.5, 0.9, 0.8, 1.05),
               ("ngram-k4", 1, 3.0, 1.5, 1.3, 1.7), ("other", 1, 2.0, 1.1, 1.0, 1.2)])
    cells = map_cells(t, CONFIGS)
    assert set(cells["arm"]) == {"ng-L1.5", "ng-L2.5", "ng-L3.5", "ngram-k4"}  # 'other' has no cells of its kind
    assert is_map_run(t, CONFIGS)
    be = break_even(cells).set_index("concurrency")
    assert be.loc[1, "break_even"] == pytest.approx(1.5 + 0.2 / 0.4)  # 0.8 -> 1.2 between 1.5 and 2.5
    assert be.loc[1, "band_lo"] == pytest.approx(1.5 + 0.1 / 0.4)  # the upper ends 0.9 -> 1.3
    assert be.loc[1, "band_hi"] == pytest.approx(1.5 + 0.3 / 0.4)  # the lower ends 0.7 -> 1.1
    assert be.loc[4, "where"] == "above" and np.isnan(be.loc[4, "break_even"])
    assert be.loc[4, "band_lo"] == pytest.approx(2.5 + (1.0 - 0.8) / (1.05 - 0.8))  # the upper ends reach 1.0
    assert be.loc[4, "band_hi_where"] == "above"
    lines = break_even_lines(break_even(cells))
    assert "break-even at acceptance length 2.00 [1.75, 2.25]" in lines[0]
    assert "costs at every length measured (up to 3.50)" in lines[1]


def test_a_curve_that_pays_at_its_first_cell_says_so():
    t = table([("ng-L1.5", 1, 1.5, 1.1, 0.95, 1.2), ("ng-L2.5", 1, 2.5, 1.4, 1.3, 1.5)])
    be = break_even(map_cells(t, CONFIGS)).iloc[0]
    assert be["where"] == "below" and be["band_lo_where"] == "below"
    assert be["band_hi"] == pytest.approx(1.5 + 0.05 / 0.35)
    assert "pays at every length measured (from 1.50)" in break_even_lines(break_even(map_cells(t, CONFIGS)))[0]


def test_one_length_is_no_map():
    t = table([("ng-L1.5", 1, 1.5, 0.8, 0.7, 0.9), ("ngram-k4", 1, 3.0, 1.5, 1.3, 1.7)])
    assert not is_map_run(t, CONFIGS)
    assert break_even(map_cells(t, CONFIGS)).empty


def test_a_real_drafter_is_read_off_its_kinds_cells_at_its_own_acceptance():
    t = table([("ng-L1.5", 1, 1.5, 0.8, 0.7, 0.9), ("ng-L2.5", 1, 2.5, 1.2, 1.1, 1.3), ("ng-L3.5", 1, 3.5, 1.6, 1.5, 1.7),
               ("ngram-k4", 1, 3.0, 1.5, 1.3, 1.7)])
    pr = predict(map_cells(t, CONFIGS)).iloc[0]
    assert pr["predicted"] == pytest.approx(1.4) and pr["gap"] == pytest.approx(1.5 / 1.4 - 1)
    assert (pr["predicted_lo"], pr["predicted_hi"]) == (pytest.approx(1.3), pytest.approx(1.5))
    assert "the map gives 1.40x [1.30, 1.50], gap +7%" in prediction_lines(predict(map_cells(t, CONFIGS)))[0]
    # outside the cells' lengths: not predicted, and said which side
    far = table([("ng-L1.5", 1, 1.5, 0.8, 0.7, 0.9), ("ng-L2.5", 1, 2.5, 1.2, 1.1, 1.3),
                 ("ngram-k4", 1, 3.0, 1.5, 1.3, 1.7)])
    pr = predict(map_cells(far, CONFIGS))
    assert pr.iloc[0]["predicted"] is None and pr.iloc[0]["where"] == "above"
    assert "above the cells' lengths (1.50-2.50): not predicted" in prediction_lines(pr)[0]


def test_another_runs_drafters_are_read_against_the_maps_only_workload():
    m = table([("ng-L1.5", 1, 1.5, 0.8, 0.7, 0.9), ("ng-L3.5", 1, 3.5, 1.6, 1.5, 1.7)])
    other = table([("ngram-k4", 1, 2.5, 1.1, 1.0, 1.2), ("ngram-k4", 4, 2.5, 1.0, 0.9, 1.1)])
    other.loc[0, "workload"] = "freeform"
    pr = predict(map_cells(m, CONFIGS), real=drafter_rows(other, CONFIGS))
    assert len(pr) == 1  # the map has no c=4 curve
    r = pr.iloc[0]
    assert (r["workload"], r["map_workload"], r["predicted"]) == ("freeform", "copy", pytest.approx(1.2))
    assert prediction_lines(pr)[0].startswith("freeform (map on copy) c=1 ngram-k4")


def test_drafted_share_counts_steps_that_carried_a_draft():
    df = pd.DataFrame([{"arm": "a", "workload": "copy", "concurrency": 1, "num_drafts": 100, "output_tokens": 410,
                        "num_ok": 10, "mean_acceptance_length": 3.0}])
    # 400 decode tokens: 100 drafted steps emit 300, 100 plain steps the rest
    assert drafted_share(df).loc[("a", "copy", 1)] == pytest.approx(0.5)


# -- the grid as arms ----------------------------------------------------------------------

def test_the_grid_becomes_one_arm_per_kind_k_and_length_that_fits():
    grid = AcceptanceMap(kinds={"ngram": NGRAM, "head": {"method": "eagle3", "model": "x", "num_speculative_tokens": 3}},
                         k=[2, 4], lengths=[3.5, 1.5, 4.5, 2.5])
    arms = grid.drafters()
    assert [a for a in arms if a.startswith("ngram-k2")] == ["ngram-k2", "ngram-k2-L1.5", "ngram-k2-L2.5"]  # <= K + 1
    assert "ngram-k4-L4.5" in arms and "head-k3-L4.5" not in arms
    assert {a for a in arms if a.startswith("head")} == {"head-k3", "head-k3-L1.5", "head-k3-L2.5", "head-k3-L3.5"}
    assert arms["ngram-k4-L1.5"] == cell(4, 1.5)
    assert all(Arm(name=n, speculative_config=c) for n, c in arms.items())  # vLLM's rules hold for every arm
    assert not any(a.endswith("-k4") for a in AcceptanceMap(kinds={"n": NGRAM}, k=[4], lengths=[1.5, 2],
                                                          real=False).drafters())


@pytest.mark.parametrize(("grid", "says"), [
    ({"kinds": {"n": NGRAM}, "k": [4], "lengths": [2.0]}, "two or more distinct"),
    ({"kinds": {"n": NGRAM}, "k": [1], "lengths": [1.5, 2.5, 3.0]}, "fewer than two of the lengths"),
    ({"kinds": {"n": NGRAM}, "lengths": [1.5, 2.5]}, "has no K"),
    ({"kinds": {"n": {**NGRAM, "synthetic_acceptance_length": 2}}, "k": [4], "lengths": [1.5, 2]}, "sets acceptance itself"),
    ({"kinds": {"n": NGRAM}, "k": [4], "lenghts": [1.5, 2]}, "did you mean 'lengths'"),
    ({"kinds": {"n": {"prompt_lookup_max": 4}}, "k": [4], "lengths": [1.5, 2]}, "needs a proposer config"),
])
def test_a_bad_grid_is_one_line_before_anything_starts(grid, says):
    with pytest.raises(SweepError, match=says) as err:
        Study.from_parameters("map", study="x", model="m", server_args=[], env={}, drafters={}, acceptance_map=grid,
                              conditions={}, workloads=["copy"], concurrency=[1], repeats=3, panel_size=4,
                              work_floor_tokens=0, warmup_requests=0, max_tokens=16, temperature=0.0, seed=0)
    assert "\n" not in str(err.value) and "acceptance_map" in str(err.value)


def test_a_study_with_a_map_has_its_arms_and_refuses_a_name_twice():
    params = dict(study="x", model="m", server_args=[], env={}, conditions={}, workloads=["copy"], concurrency=[1],
                  repeats=3, panel_size=4, work_floor_tokens=0, warmup_requests=0, max_tokens=16, temperature=0.0,
                  seed=0, acceptance_map={"kinds": {"ngram": NGRAM}, "k": [4], "lengths": [1.5, 3.0]})
    s = Study.from_parameters("map", drafters={"extra": {"method": "ngram", "num_speculative_tokens": 2}}, **params)
    assert list(s.drafters) == ["extra", "ngram-k4", "ngram-k4-L1.5", "ngram-k4-L3"]
    arms = {a.name: a for a in s.specs()["default"].arms}
    assert arms["ngram-k4-L3"].ceiling and not arms["ngram-k4"].ceiling
    with pytest.raises(SweepError, match="both name arm"):
        Study.from_parameters("map", drafters={"ngram-k4": {"method": "ngram", "num_speculative_tokens": 4}}, **params)


def test_the_calculator_reads_a_length_off_the_maps_curve_of_its_kind_and_k():
    from specnb.analysis.breakeven import at_length

    t = table([("ng-L1.5", 1, 1.5, 0.8, 0.7, 0.9), ("ng-L2.5", 1, 2.5, 1.2, 1.1, 1.3), ("ng-L3.5", 1, 3.5, 1.6, 1.5, 1.7)])
    got = at_length(map_cells(t, CONFIGS), 3.0, 4, "ngram").iloc[0]
    assert got["predicted"] == pytest.approx(1.4) and got["break_even"] == pytest.approx(2.0)
    assert (got["predicted_lo"], got["predicted_hi"]) == (pytest.approx(1.3), pytest.approx(1.5))
    assert at_length(map_cells(t, CONFIGS), 3.0, 2, "ngram").empty  # no curve at K=2
    assert at_length(map_cells(t, CONFIGS), 3.0, 4, "eagle3").empty  # nor of another kind
    assert at_length(map_cells(t, CONFIGS), 4.0, 4).iloc[0]["where"] == "above"  # never extrapolated


def test_a_table_without_conditions_keys_its_curves_alike():
    from specnb.analysis.breakeven import at_length

    t = table([("ng-L1.5", 1, 1.5, 0.8, 0.7, 0.9), ("ng-L2.5", 1, 2.5, 1.2, 1.1, 1.3),
               ("ngram-k4", 1, 2.0, 1.1, 1.0, 1.2)]).drop(columns="condition")
    cells = map_cells(t, CONFIGS)
    assert predict(cells).iloc[0]["predicted"] == pytest.approx(1.0)
    assert at_length(cells, 2.0, 4).iloc[0]["predicted"] == pytest.approx(1.0)
    assert break_even(cells).iloc[0]["break_even"] == pytest.approx(2.0)


def test_review_cases_a_missing_interval_end_a_schedule_and_empty_inputs():
    from specnb.analysis.breakeven import at_length

    t = table([("ng-L1.5", 1, 1.5, 0.8, 0.7, 0.9), ("ng-L2.5", 1, 2.5, 1.2, np.nan, np.nan)])  # one start: no interval
    be = break_even(map_cells(t, CONFIGS)).iloc[0]
    assert be["break_even"] == pytest.approx(2.0) and be["band_lo_where"] == be["band_hi_where"] == "n/a"
    assert "break-even at acceptance length 2.00 [n/a, n/a]" in break_even_lines(break_even(map_cells(t, CONFIGS)))[0]
    # a tune or policy run's drafter (a K schedule) is the same kind as its fixed-K self
    sched = {**NGRAM, "num_speculative_tokens": 4, "num_speculative_tokens_per_batch_size": [[1, 4, 4], [5, 64, 0]]}
    assert kind_of(sched) == kind_of(cell(4, 2.0))
    # the calculator names a method: eagle is not eagle3
    head = {"method": "eagle3", "model": "h", "num_speculative_tokens": 4, "rejection_sample_method": "synthetic"}
    cfg = {"e-L1.5": {**head, "synthetic_acceptance_length": 1.5}, "e-L2.5": {**head, "synthetic_acceptance_length": 2.5}}
    e = table([("e-L1.5", 1, 1.5, 0.8, 0.7, 0.9), ("e-L2.5", 1, 2.5, 1.2, 1.1, 1.3)])
    assert len(at_length(map_cells(e, cfg), 2.0, 4, "eagle3")) == 1 and at_length(map_cells(e, cfg), 2.0, 4, "eagle").empty
    assert at_length(map_cells(e.iloc[0:0], cfg), 2.0, 4).empty
    assert predict(map_cells(e, cfg), real=drafter_rows(e.iloc[0:0], cfg)).empty
