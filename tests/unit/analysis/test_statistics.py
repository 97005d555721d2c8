"""The error rates specnb prints, checked by simulation (tests/unit/analysis/simulation.py says the
model): paired runs with start noise, prompt noise inside categories, category effects, an order
effect, heavy tails and a bad start, read by the estimator, the looks and the answer across levels
exactly as ``specnb report`` reads ledgers.

A rate that the method holds exactly (a t interval where the starts dominate) cannot be shown
below its nominal value by a finite simulation, only not above it: those checks allow two binomial
standard errors over the nominal rate, with enough runs that this is a tenth of it or less. The
table docs/statistics.md quotes is ``python -m tests.unit.analysis.simulation``.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from specnb.analysis.design import Design, sequential_design
from specnb.analysis.estimator import (
    LOSES,
    PAYS,
    Sample,
    Scope,
    estimate,
    estimate_batch,
    per_look_alpha,
    t_quantile,
    t_quantiles,
    t_quantiles_exact,
    t_two_sided_p,
)
from specnb.analysis.thresholds import UNDECIDED, fixed_sequence
from tests.unit.analysis.simulation import (
    FIXED,
    NOISES,
    SEQUENTIAL,
    Noise,
    familywise,
    level_rates,
    order_pattern,
    power_table,
    simulate,
    tune_verified,
)


def _margin(p: float, runs: int) -> float:
    return 2.0 * math.sqrt(p * (1.0 - p) / runs)


@pytest.mark.parametrize(("p", "df", "want"), [
    # table values (e.g. NIST/SEMATECH e-Handbook, table 1.3.6.7.2)
    (0.975, 1, 12.706), (0.975, 2, 4.303), (0.975, 4, 2.776), (0.975, 30, 2.042),
    (0.995, 2, 9.925), (0.99, 3, 4.541), (0.95, 10, 1.812), (0.999, 5, 5.893),
])
def test_t_quantile_matches_the_table(p, df, want):
    assert t_quantile(p, df) == pytest.approx(want, abs=1e-3)
    assert t_quantile(1 - p, df) == pytest.approx(-want, abs=1e-3)


def test_the_vectorised_t_functions_agree_with_the_exact_ones():
    dfs = np.exp(np.random.default_rng(0).uniform(0.0, math.log(1e6), 300))
    for p in (0.975, 0.985, 0.999):
        got = t_quantiles(p, np.r_[dfs, 0.6, np.inf, np.nan])
        want = np.array([t_quantile(p, float(d)) for d in np.r_[dfs, 0.6, np.inf]])
        assert np.max(np.abs(got[:-1] / want - 1)) < 2e-6 and np.isnan(got[-1])
    for df in (1, 2, 3, 4, 7, 10):
        q = t_quantile(0.985, df)
        assert t_two_sided_p(np.array([q]), df)[0] == pytest.approx(0.03, abs=1e-9)
    with pytest.raises(ValueError):
        t_quantile(1.0, 3)


def test_the_quantiles_all_at_once_are_the_one_at_a_time_ones_bit_for_bit():
    """The grid behind every interval is computed all at once (t_quantiles_exact: the scalar
    bisection run on an array, each element stopping where it alone would); its numbers are
    t_quantile's exactly, so no stored report or figure moves with it, whatever the mix of
    degrees of freedom (heavy tails below 1, the grid's span, integers) or the level (a per-look
    one among them)."""
    rng = np.random.default_rng(1)
    dfs = np.r_[np.exp(rng.uniform(math.log(0.3), math.log(1e6), 60)), 1.0, 2.0, 3.0, 30.0, 1e6, 1e7, 1.5e7, 1e300]
    for p in (0.975, 1.0 - 0.023 / 2.0, 0.75):
        got = t_quantiles_exact(p, dfs)
        assert got.tolist() == [t_quantile(p, float(d)) for d in dfs], p
    for p, tails in ((1.0 - 1e-9, [3.0, 1e4]), (0.5, [7.0])):  # a far tail; the median
        assert t_quantiles_exact(p, np.array(tails)).tolist() == [t_quantile(p, d) for d in tails], p
    assert t_quantiles_exact(0.975, dfs[:4].reshape(2, 2)).shape == (2, 2)
    assert t_quantiles(0.025, np.array([4.0]))[0] == -t_quantiles(0.975, np.array([4.0]))[0]
    for p, df in ((0.4, [3.0]), (1.0, [3.0]), (0.975, [np.inf]), (0.975, [0.0]), (0.975, [np.nan])):
        with pytest.raises(ValueError):
            t_quantiles_exact(p, np.array(df))


def test_the_calibrated_looks_spend_exactly_alpha():
    """Three nested looks (3, 4, 5) at 0.023 each spend 5.0 % (Bonferroni's 0.0167 spends 3.7 %:
    the independent review's figures); looks 4 and 6 at about 0.029 each. A fresh simulation of
    the union of the looks' errors lands on alpha."""
    assert per_look_alpha((3, 4, 5), 0.05) == pytest.approx(0.023, abs=5e-4)
    a = per_look_alpha((4, 6), 0.05)
    assert 0.025 < a < 0.033 and per_look_alpha((4,), 0.05) == 0.05
    rng = np.random.default_rng(123)
    runs = 200_000
    z = rng.standard_normal((runs, 6))
    miss = np.zeros(runs, dtype=bool)
    for n in (4, 6):
        b = estimate_batch(z[:, :n], order_pattern(n), confidence=1 - a)
        miss |= (b.lo > 0) | (b.hi < 0)
    assert abs(miss.mean() - 0.05) < _margin(0.05, runs)
    assert sequential_design(0.05, 3, 5).looks == (4,)
    with pytest.raises(ValueError, match="even number"):
        sequential_design(0.05, 3, 3)


def test_the_batch_path_is_the_one_estimate_takes():
    rng = np.random.default_rng(4)
    y, infl, strata = simulate(rng, 50, 5, 0.2, Noise())
    b = estimate_batch(y[:, 0], order_pattern(5), infl[:, 0], strata, 0.95)
    for i in range(50):
        e = estimate(Sample(y[i, 0], order_pattern(5), infl[i, 0], strata), 0.95)
        assert math.log(e.lo) == pytest.approx(b.lo[i], rel=1e-9) and math.log(e.hi) == pytest.approx(b.hi[i], rel=1e-9)
        assert e.order == "unbalanced: order in the model" and e.scope is Scope.PROMPTS


def test_what_an_estimate_covers_and_when_it_has_no_interval():
    bf = order_pattern(4)
    y = np.log([1.3, 1.2, 1.25, 1.35])
    panel = estimate(Sample(y, bf), 0.95)
    assert panel.scope is Scope.PANEL and "no request records" in panel.note and panel.prompt_var is None
    one = estimate(Sample(y[:1], bf[:1]), 0.95)
    assert one.lo is None and one.decision is None and "one start" in one.note
    single = estimate(Sample(y, bf, np.zeros((4, 1)), ("a",)), 0.95)
    assert single.scope is Scope.PANEL and "one prompt" in single.note
    # prompts add to the starts' part; a panel of equal prompts adds nothing
    infl = np.tile(np.array([0.02, -0.02, 0.01, -0.01]), (4, 1))
    both = estimate(Sample(y, bf, infl, ("a", "a", "b", "b")), 0.95)
    flat = estimate(Sample(y, bf, np.zeros((4, 4)), ("a", "a", "b", "b")), 0.95)
    assert both.prompt_var > 0 and flat.prompt_var == 0 and both.hi > flat.hi
    assert flat.lo == pytest.approx(panel.lo)
    # two prompts per category, m_h / (m_h - 1) = 2 times the squares about the category's mean of
    # each prompt's influence averaged over the starts: 2 * (0.02^2 + 0.02^2) + 2 * (0.01^2 + 0.01^2)
    assert both.prompt_var == pytest.approx(0.002)


def test_the_fixed_sequence_claims_only_what_every_level_before_it_shows():
    assert fixed_sequence({1.0: PAYS, 2.0: PAYS, 4.0: None, 8.0: LOSES}) == {
        1.0: PAYS, 2.0: PAYS, 4.0: UNDECIDED, 8.0: LOSES}
    # a level that pays on its own past an undecided one is not claimed; a rising curve claims nothing
    assert fixed_sequence({1.0: PAYS, 2.0: None, 4.0: PAYS})[4.0] == UNDECIDED
    assert set(fixed_sequence({1.0: LOSES, 2.0: None, 4.0: PAYS}).values()) == {UNDECIDED}
    assert set(fixed_sequence({1.0: LOSES, 2.0: LOSES}).values()) == {LOSES}


@pytest.mark.parametrize("noise", list(NOISES), ids=list(NOISES))
def test_the_printed_interval_covers_the_truth(noise):
    """At least 94 % of runs cover the true ratio, at ratios 0.7-1.6, with 2 to 6 repeats (odd
    counts in unbalanced orders, read with order in the model), fixed and sequential."""
    rng = np.random.default_rng(2026)
    runs = 6000
    for n in (2, 3, 4, 5, 6):
        for ratio in (0.7, 1.0, 1.2, 1.6):
            cover = level_rates(rng, runs, n, ratio, NOISES[noise], FIXED).coverage
            assert cover >= 0.94, (noise, n, ratio, cover)
    for ratio in (0.7, 1.2, 1.6):
        cover = level_rates(rng, runs, 6, ratio, NOISES[noise], SEQUENTIAL).coverage
        assert cover >= 0.94, (noise, "sequential", ratio, cover)


@pytest.mark.parametrize("noise", list(NOISES), ids=list(NOISES))
def test_false_decisions_per_level_across_levels_and_in_tune(noise):
    """Under the null: a level stopped by the sequential rule says "pays" (or "loses") in at most
    2.5 % of runs; the answer across 3 to 6 levels claims any level in at most 5 %; ``tune`` calls a
    candidate truly at 0.9x of static K verified in at most 5 % (at its margin, 0.98x, 2.5 %)."""
    rng = np.random.default_rng(59)
    nz = NOISES[noise]
    runs = 60_000
    r = level_rates(rng, runs, 6, 1.0, nz, SEQUENTIAL)
    assert r.pays <= 0.025 + _margin(0.025, runs) and r.loses <= 0.025 + _margin(0.025, runs), r
    runs_fw = 20_000
    for levels in (3, 4, 6):
        seq, _ = familywise(rng, runs_fw, 4, levels, nz, FIXED)
        assert seq <= 0.05 + _margin(0.05, runs_fw), (levels, seq)
    for levels in (3, 6):  # levels stopped by the sequential rule, then read in sequence
        seq, _ = familywise(rng, runs_fw // 2, 6, levels, nz, SEQUENTIAL)
        assert seq <= 0.05 + _margin(0.05, runs_fw // 2), ("sequential", levels, seq)
    # tune's per-round level (alpha 0.05 over 3 rounds): a candidate 10 % slower than static K, and
    # one at the margin itself (0.98x), called verified no more than its share of alpha
    assert tune_verified(rng, runs, 4, 0.90, 1.2, nz) <= 0.05 / 3
    assert tune_verified(rng, runs, 4, 0.98, 1.2, nz) <= 0.05 / 6 + _margin(0.05 / 6, runs)


def test_the_simulations_reading_is_the_one_the_report_takes():
    """The vectorised reading of a level (the simulation's) against the report's: design.choose_look
    on each run's Sample, then estimator.estimate, decision and interval alike."""
    from specnb.analysis.design import choose_look
    from specnb.analysis.estimator import Sample
    from tests.unit.analysis.simulation import read_level

    rng = np.random.default_rng(31)
    for design, n in ((SEQUENTIAL, 6), (FIXED, 4), (FIXED, 5)):
        y, infl, strata = simulate(rng, 300, n, 0.1, Noise(start_sd=0.12))
        dec, lo, hi = read_level(y[:, 0], infl[:, 0], strata, design)
        for i in range(300):
            def sample(k, i=i, y=y, infl=infl, strata=strata):
                return Sample(y[i, 0, :k], order_pattern(k), infl[i, 0, :k], strata)
            lk = choose_look(design, n, sample)
            est = estimate(sample(lk.n), lk.confidence)
            assert (est.decision or "") == dec[i]
            assert math.log(est.lo) == pytest.approx(lo[i], abs=1e-9) and math.log(est.hi) == pytest.approx(hi[i], abs=1e-9)


def test_reading_levels_one_by_one_would_overstate_the_answer():
    """The reason for the sequence: with every level at 1.0x and the starts dominating, some
    level's own interval decides in well over 5 % of runs."""
    rng = np.random.default_rng(8)
    seq, own = familywise(rng, 20_000, 4, 6, NOISES["starts dominate"], FIXED)
    assert own > 0.1 and seq <= 0.05 + _margin(0.05, 20_000)


def test_search_rounds_and_looks_split_alpha():
    d = Design(alpha=0.05, search_rounds=3)
    assert d.round_alpha(0) == 0.025 and d.round_alpha(2) == pytest.approx(0.05 / 6)
    assert d.round_alpha(0) + 3 * d.round_alpha(1) == pytest.approx(0.05)
    assert Design().round_alpha(4) == 0.05


def test_power_table_prints_and_rises_with_the_ratio(capsys):
    lines = power_table(runs=2000)
    print("\n".join(lines))
    cells = [[float(c.strip(" %")) for c in ln.split("|")[2:-1]] for ln in lines[2:]]
    for row in cells:
        assert row[0] <= 2.5 + 100 * _margin(0.025, 2000) and row == sorted(row) and row[-1] > 80
