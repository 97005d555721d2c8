"""Stop measuring a level once its decision cannot change: repeated confidence intervals over
server starts.

A sweep's unit of evidence is a repeat: both arms started afresh, the same panel sent to each, one
paired ratio per level (:func:`specnb.analysis.pairing.paired`). Start-to-start variance is most
of the spread on the machines this project measures (docs/design.md), so a level's interval is a
Student t interval over its per-repeat log ratios, not over prompts inside one start (slices of
one start share its luck and would understate the spread).

Looking after every repeat and stopping at the first interval that clears 1.0 inflates the error
rate of a fixed-sample interval: with five looks at 95 % a true 1.0x is called a win or a loss
in about a fifth of runs, not one in twenty. The rule here keeps its stated rate under any
stopping: the looks are planned (repeats ``first`` .. ``last``), and each look's interval is
built at level ``alpha / looks`` (Bonferroni over the looks). This is the repeated confidence
interval of Jennison & Turnbull (1989, "Interim analyses: the repeated confidence interval
approach", JRSS B 51(3):305-361) in its simplest, conservative form: the chance that any look's
interval misses the true ratio is at most ``alpha`` whatever the stopping, so the decision one
drafter's level stopped at is wrong with probability at most ``alpha`` (at most ``alpha / 2`` in
each direction). That holds per drafter and level: over several levels, workloads or drafters the
chance that some decision is wrong grows with their number (at most their number times
``alpha``). Its assumption is the t interval's: per-repeat log ratios independent and about
normal. A simulation test (tests/unit/analysis/test_sequential.py) checks the rate.

A decision is ``pays`` (the interval's lower end above 1.0), ``loses`` (its upper end below
1.0) or None (open: more repeats, or the last look passed without one).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

__all__ = ["Look", "SequentialRule", "first_decision", "t_quantile", "PAYS", "LOSES"]

PAYS, LOSES = "pays", "loses"


def _betacf(a: float, b: float, x: float) -> float:
    """The continued fraction of the regularized incomplete beta (modified Lentz)."""
    tiny = 1e-300
    qab, qap, qam = a + b, a + 1.0, a - 1.0
    c, d = 1.0, 1.0 - qab * x / qap
    d = 1.0 / (d if abs(d) > tiny else tiny)
    h = d
    for m in range(1, 300):
        m2 = 2 * m
        aa = m * (b - m) * x / ((qam + m2) * (a + m2))
        d = 1.0 + aa * d
        d = 1.0 / (d if abs(d) > tiny else tiny)
        c = 1.0 + aa / c
        c = c if abs(c) > tiny else tiny
        h *= d * c
        aa = -(a + m) * (qab + m) * x / ((a + m2) * (qap + m2))
        d = 1.0 + aa * d
        d = 1.0 / (d if abs(d) > tiny else tiny)
        c = 1.0 + aa / c
        c = c if abs(c) > tiny else tiny
        step = d * c
        h *= step
        if abs(step - 1.0) < 1e-15:
            break
    return h


def _betai(a: float, b: float, x: float) -> float:
    """The regularized incomplete beta I_x(a, b)."""
    if x <= 0.0:
        return 0.0
    if x >= 1.0:
        return 1.0
    front = math.exp(math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + a * math.log(x) + b * math.log1p(-x))
    if x < (a + 1.0) / (a + b + 2.0):
        return front * _betacf(a, b, x) / a
    return 1.0 - front * _betacf(b, a, 1.0 - x) / b


def _t_cdf(t: float, df: float) -> float:
    tail = 0.5 * _betai(df / 2.0, 0.5, df / (df + t * t))
    return 1.0 - tail if t >= 0 else tail


def t_quantile(p: float, df: float) -> float:
    """Student's t quantile (the inverse of its CDF) at probability ``p`` with ``df`` degrees of
    freedom, by bisection on the CDF (no scipy): good to 1e-10."""
    if not 0.0 < p < 1.0:
        raise ValueError(f"p must be in (0, 1), got {p}")
    if not df > 0:
        raise ValueError(f"degrees of freedom must be > 0, got {df}")
    if p < 0.5:
        return -t_quantile(1.0 - p, df)
    lo, hi = 0.0, 1.0
    while _t_cdf(hi, df) < p:
        hi *= 2.0
    for _ in range(200):
        mid = 0.5 * (lo + hi)
        if _t_cdf(mid, df) < p:
            lo = mid
        else:
            hi = mid
        if hi - lo < 1e-12 * max(1.0, hi):
            break
    return 0.5 * (lo + hi)


@dataclass(frozen=True)
class Look:
    """One look at a level: its repeats so far, the geometric-mean ratio and the repeated interval."""

    n: int
    ratio: float
    lo: float
    hi: float
    decision: str | None  # PAYS, LOSES or None (open)

    @property
    def log_half(self) -> float:
        """The interval's half-width on the log scale (it is symmetric there)."""
        return (math.log(self.hi) - math.log(self.lo)) / 2

    def text(self) -> str:
        verdict = {PAYS: "pays", LOSES: "loses"}.get(self.decision or "", "open")
        return f"{self.ratio:.2f}x [{self.lo:.2f}, {self.hi:.2f}] after {self.n} repeats: {verdict}"


@dataclass(frozen=True)
class SequentialRule:
    """Looks at repeats ``first`` .. ``last``, each at level ``alpha / looks`` (two-sided)."""

    alpha: float = 0.05
    first: int = 3
    last: int = 5

    def __post_init__(self) -> None:
        if not 0.0 < self.alpha < 1.0:
            raise ValueError(f"alpha must be in (0, 1), got {self.alpha}")
        if not 2 <= self.first <= self.last:
            raise ValueError(f"looks must run from a first of at least 2 repeats to a last >= it, got "
                             f"{self.first}..{self.last}")

    @property
    def looks(self) -> int:
        return self.last - self.first + 1

    @property
    def per_look_alpha(self) -> float:
        return self.alpha / self.looks

    def look(self, ratios: Sequence[float]) -> Look | None:
        """The look after these per-repeat ratios (None before the first planned look, or when a
        ratio is not a positive number)."""
        xs = [math.log(r) for r in ratios if r is not None and math.isfinite(r) and r > 0]
        n = len(xs)
        if n < self.first or n != len(ratios):
            return None
        n_used = min(n, self.last)
        xs = xs[:n_used]
        mean = sum(xs) / n_used
        sd = math.sqrt(sum((x - mean) ** 2 for x in xs) / (n_used - 1))
        half = t_quantile(1.0 - self.per_look_alpha / 2.0, n_used - 1) * sd / math.sqrt(n_used)
        lo, hi = math.exp(mean - half), math.exp(mean + half)
        decision = PAYS if lo > 1.0 else LOSES if hi < 1.0 else None
        return Look(n_used, math.exp(mean), lo, hi, decision)

    def decided(self, ratios: Sequence[float]) -> bool:
        """Whether the level needs no more repeats: decided, or at its last look."""
        lk = self.look(ratios)
        return lk is not None and (lk.decision is not None or lk.n >= self.last)


def first_decision(rule: SequentialRule, ratios: Sequence[float]) -> Look | None:
    """Replay: the look a level would have stopped at, given its repeats in order (the first look
    with a decision, else the last look there is)."""
    last = None
    for n in range(rule.first, min(len(ratios), rule.last) + 1):
        lk = rule.look(ratios[:n])
        if lk is None:
            continue
        last = lk
        if lk.decision is not None:
            return lk
    return last
