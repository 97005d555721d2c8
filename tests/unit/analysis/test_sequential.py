"""The sequential rule: Student's t without scipy, and its error rate under repeated looks."""

from __future__ import annotations

import math

import numpy as np
import pytest

from specnb.analysis.sequential import LOSES, PAYS, SequentialRule, first_decision, t_quantile


@pytest.mark.parametrize(("p", "df", "want"), [
    # table values (e.g. NIST/SEMATECH e-Handbook, table 1.3.6.7.2)
    (0.975, 1, 12.706), (0.975, 2, 4.303), (0.975, 4, 2.776), (0.975, 30, 2.042),
    (0.995, 2, 9.925), (0.99, 3, 4.541), (0.95, 10, 1.812), (0.999, 5, 5.893),
])
def test_t_quantile_matches_the_table(p, df, want):
    assert t_quantile(p, df) == pytest.approx(want, abs=1e-3)
    assert t_quantile(1 - p, df) == pytest.approx(-want, abs=1e-3)


def test_t_quantile_approaches_the_normal_and_refuses_nonsense():
    assert t_quantile(0.975, 1e6) == pytest.approx(1.95996, abs=1e-4)
    with pytest.raises(ValueError):
        t_quantile(1.0, 3)
    with pytest.raises(ValueError):
        t_quantile(0.9, 0)


def test_a_look_needs_the_first_planned_repeats_and_reads_its_direction():
    rule = SequentialRule(alpha=0.05, first=3, last=5)
    assert rule.look([1.8, 1.7]) is None  # before the first look
    pays = rule.look([1.80, 1.75, 1.85])
    assert pays is not None and pays.decision == PAYS and pays.lo > 1.0 and pays.n == 3
    loses = rule.look([0.70, 0.72, 0.69])
    assert loses is not None and loses.decision == LOSES and loses.hi < 1.0
    open_ = rule.look([1.3, 0.9, 1.1])
    assert open_ is not None and open_.decision is None and open_.lo < 1.0 < open_.hi
    assert not rule.decided([1.3, 0.9, 1.1]) and rule.decided([1.3, 0.9, 1.1, 1.0, 1.2])  # the last look
    assert rule.look([1.8, float("nan"), 1.7]) is None  # a missing ratio is not silently dropped
    # the interval is wider than a fixed-sample 95 % one: Bonferroni over three looks
    x = np.log([1.80, 1.75, 1.85])
    fixed = math.exp(x.mean() - t_quantile(0.975, 2) * x.std(ddof=1) / math.sqrt(3))
    assert pays.lo < fixed


def test_first_decision_stops_at_the_first_clear_look():
    rule = SequentialRule(alpha=0.05, first=3, last=5)
    lk = first_decision(rule, [1.8, 1.75, 1.85, 0.5, 0.5])
    assert lk is not None and lk.n == 3 and lk.decision == PAYS
    lk = first_decision(rule, [1.3, 0.9, 1.1, 1.0, 1.2])
    assert lk is not None and lk.n == 5 and lk.decision is None


@pytest.mark.parametrize("bad", [dict(alpha=0.0), dict(alpha=1.0), dict(first=1), dict(first=4, last=3)])
def test_the_rule_refuses_impossible_settings(bad):
    with pytest.raises(ValueError):
        SequentialRule(**bad)


def _false_decisions(rule_alpha: float, looks: int, reps: int, seed: int, sd: float) -> float:
    """Share of replicates, true ratio exactly 1.0, in which stopping at the first decided look
    calls a win or a loss."""
    rng = np.random.default_rng(seed)
    rule = SequentialRule(alpha=rule_alpha, first=3, last=2 + looks)
    wrong = 0
    for _ in range(reps):
        ratios = np.exp(rng.normal(0.0, sd, rule.last)).tolist()
        lk = first_decision(rule, ratios)
        wrong += lk is not None and lk.decision is not None
    return wrong / reps


def test_simulation_the_false_decision_rate_stays_at_its_nominal_level():
    """Known effect (none: 1.0x), known noise (per-start SD of the log ratio 0.1), 4,000
    replicates of up to five repeats each, stopping at the first look that decides: at most 5 %
    of them decide, with a binomial margin (sd of a 5 % share over 4,000 is 0.34 %)."""
    rate = _false_decisions(0.05, looks=3, reps=4000, seed=1, sd=0.1)
    assert rate <= 0.05 + 2 * math.sqrt(0.05 * 0.95 / 4000)


def test_simulation_looking_at_full_alpha_each_time_is_not_honest():
    """The same looks without the split (each at 5 %) decide more often than 5 %: what the split
    is for. Looks at 3, 4, 5, ... 10 repeats: a true 1.0x is called more than one time in twenty."""
    rng = np.random.default_rng(2)
    each = {n: SequentialRule(alpha=0.05, first=n, last=n) for n in range(3, 11)}  # 5 % at every look
    wrong, reps = 0, 4000
    for _ in range(reps):
        ratios = np.exp(rng.normal(0.0, 0.1, 10)).tolist()
        wrong += any(rule.look(ratios[:n]).decision is not None for n, rule in each.items())
    assert wrong / reps > 0.05 + 3 * math.sqrt(0.05 * 0.95 / reps)


def test_simulation_a_real_effect_is_found_early():
    """A 1.8x effect with the same noise is decided by the last look in every replicate, and at the
    first look (three starts) in most of them (82 % in 2,000): the rule does not buy its error rate
    by never deciding, and a t on two degrees of freedom is what costs the rest."""
    rng = np.random.default_rng(3)
    rule = SequentialRule(alpha=0.05, first=3, last=5)
    looks = [first_decision(rule, np.exp(rng.normal(math.log(1.8), 0.1, 5)).tolist()) for _ in range(500)]
    assert all(lk is not None and lk.decision == PAYS for lk in looks)
    assert sum(lk.n == 3 for lk in looks) / len(looks) > 0.7
