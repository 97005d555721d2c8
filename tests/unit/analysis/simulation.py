"""Paired runs simulated as specnb measures them, read by the estimator specnb reports with.

The model (log scale; docs/statistics.md, "What is assumed"): a run's panel holds ``per_cat``
prompts from each of ``cats`` categories, drawn anew from the population in every simulated run.
Start ``r`` (a repeat: both arms started afresh, A B or B A) gives

    y_r = theta + a_r + order_r + mean_j v_rj,     v_rj = c_h(j) + p_j + e_rj

with ``a_r`` the start's luck (normal, or Student t with 3 degrees of freedom scaled to the same
SD; a *bad start* shifted by three SDs in some runs), ``order_r = +-beta / 2`` (the baseline
first or second), ``c_h`` category effects (centred: the estimand weighs categories as the panel
does), ``p_j`` the prompt's own effect (normal or heavy-tailed) and ``e_rj`` the prompt's luck in
that start. The influence of prompt ``j`` in start ``r`` is ``(v_rj - mean_k v_rk) / m``: the
derivative of the start's log ratio in the prompt's weight, as
:func:`specnb.analysis.requests.prompt_influence` computes it from request records. The truth is
``theta``: the order-balanced log speedup on prompts like the panel's.

Every reading goes through :func:`specnb.analysis.estimator.estimate_batch` (the path
:func:`~specnb.analysis.estimator.estimate` takes), the looks through
:class:`specnb.analysis.design.Design` and the answer across levels through
:func:`specnb.analysis.thresholds.fixed_sequence`. ``python -m tests.unit.analysis.simulation``
prints the table docs/statistics.md quotes.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

import numpy as np

from specnb.analysis.design import Design
from specnb.analysis.estimator import LOSES, PAYS, estimate_batch
from specnb.analysis.thresholds import fixed_sequence


@dataclass(frozen=True)
class Noise:
    """Sizes of the model's parts, from the committed CPU runs: a start's SD of the log ratio about
    0.06-0.12, the prompts' part of a panel of 10 about as large (prompt_var 0.002-0.008)."""

    start_sd: float = 0.08
    prompt_sd: float = 0.20  # a prompt's own effect, within its category
    category_sd: float = 0.30  # between categories (cancels in a stratified panel)
    luck_sd: float = 0.10  # a prompt's luck in one start
    order: float = 0.06  # baseline first minus baseline second
    heavy: bool = False  # Student t(3) starts and prompts, scaled to the same SD
    bad_start: float = 0.0  # share of runs in which one start is off by three start SDs
    cats: int = 5
    per_cat: int = 2


def _draw(rng: np.random.Generator, shape: tuple[int, ...], heavy: bool) -> np.ndarray:
    if not heavy:
        return rng.standard_normal(shape)
    return rng.standard_t(3, shape) / math.sqrt(3.0)  # unit variance


def order_pattern(n: int) -> np.ndarray:
    """A B | B A | A B ...: the baseline listed first runs first in even repeats."""
    return np.arange(n) % 2 == 0


def simulate(rng: np.random.Generator, runs: int, n: int, theta: float | np.ndarray, noise: Noise,
             levels: int = 1, shared: float = 0.5) -> tuple[np.ndarray, np.ndarray, tuple[str, ...]]:
    """``runs`` simulated runs of ``n`` starts at ``levels`` levels: log ratios (runs, levels, n),
    influences (runs, levels, n, m) and the prompts' categories. ``theta`` per level (or one for
    all); a start's luck is shared by every level of its repeat in proportion ``shared`` of its
    variance (one server start serves every level), the rest is the level's own."""
    m = noise.cats * noise.per_cat
    strata = tuple(f"cat{h}" for h in range(noise.cats) for _ in range(noise.per_cat))
    cat_of = np.repeat(np.arange(noise.cats), noise.per_cat)
    theta = np.broadcast_to(np.asarray(theta, dtype=float), (levels,))
    cat = rng.standard_normal((runs, 1, noise.cats)) * noise.category_sd
    cat -= cat.mean(axis=2, keepdims=True)
    prompt = _draw(rng, (runs, 1, m), noise.heavy) * noise.prompt_sd
    v = cat[..., cat_of][:, :, None, :] + prompt[:, :, None, :] + rng.standard_normal((runs, levels, n, m)) * noise.luck_sd
    common = _draw(rng, (runs, 1, n), noise.heavy) * math.sqrt(shared)
    own = _draw(rng, (runs, levels, n), noise.heavy) * math.sqrt(1.0 - shared)
    start = (common + own) * noise.start_sd
    if noise.bad_start:
        bad = rng.random(runs) < noise.bad_start
        which = rng.integers(0, n, runs)
        sign = np.where(rng.random(runs) < 0.5, -1.0, 1.0)
        start[bad, :, which[bad]] += (3.0 * noise.start_sd * sign[bad])[:, None]
    order = np.where(order_pattern(n), noise.order / 2, -noise.order / 2)
    y = theta[None, :, None] + start + order[None, None, :] + v.mean(axis=3)
    infl = (v - v.mean(axis=3, keepdims=True)) / m
    return y, infl, strata


def read_level(y: np.ndarray, infl: np.ndarray, strata: tuple[str, ...], design: Design,
               search_round: int = 0) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Each run's row as the report reads one level (:func:`specnb.analysis.design.choose_look`,
    vectorised): the decision (``pays`` / ``loses`` / ``""``), and the interval's log ends of the
    look it stops at."""
    runs, n = y.shape
    if not design.looks:
        b = estimate_batch(y, order_pattern(n), infl, strata, 1.0 - design.round_alpha(search_round))
        return _decision(b.lo, b.hi), b.lo, b.hi
    conf = 1.0 - design.look_alpha
    dec = np.full(runs, "", dtype=object)
    lo, hi = np.full(runs, np.nan), np.full(runs, np.nan)
    todo = np.ones(runs, dtype=bool)
    for k in [k for k in design.looks if k <= n]:
        b = estimate_batch(y[:, :k], order_pattern(k), infl[:, :k], strata, conf)
        d = _decision(b.lo, b.hi)
        take = todo & ((d != "") | (k == max(x for x in design.looks if x <= n)))
        dec[take], lo[take], hi[take] = d[take], b.lo[take], b.hi[take]
        todo &= ~take
    return dec, lo, hi


def _decision(lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
    return np.where(lo > 0, PAYS, np.where(hi < 0, LOSES, ""))


@dataclass(frozen=True)
class Rates:
    coverage: float
    pays: float
    loses: float


def level_rates(rng: np.random.Generator, runs: int, n: int, ratio: float, noise: Noise, design: Design) -> Rates:
    """Coverage of the printed interval and the shares of runs decided each way, one level."""
    theta = math.log(ratio)
    y, infl, strata = simulate(rng, runs, n, theta, noise)
    dec, lo, hi = read_level(y[:, 0], infl[:, 0], strata, design)
    return Rates(float(np.mean((lo <= theta) & (theta <= hi))), float(np.mean(dec == PAYS)),
                 float(np.mean(dec == LOSES)))


def familywise(rng: np.random.Generator, runs: int, n: int, levels: int, noise: Noise, design: Design
               ) -> tuple[float, float]:
    """Every level truly at 1.0x: the share of runs in which the answer across levels claims any
    level (the fixed sequence), and in which any level's own interval decides (no sequence)."""
    y, infl, strata = simulate(rng, runs, n, 0.0, noise, levels=levels)
    decs = np.stack([read_level(y[:, c], infl[:, c], strata, design)[0] for c in range(levels)], axis=1)
    seq = 0
    for row in decs:
        verdicts = fixed_sequence({float(c): (d or None) for c, d in enumerate(row)})
        seq += any(v in (PAYS, LOSES) for v in verdicts.values())
    return seq / runs, float(np.mean((decs != "").any(axis=1)))


TUNE_CONFIDENCE = 1.0 - 0.05 / 3  # tune's default: alpha 0.05 over max_rounds 3


def tune_verified(rng: np.random.Generator, runs: int, n: int, vs_static: float, static: float, noise: Noise,
                  margin: float = 0.02, confidence: float = TUNE_CONFIDENCE) -> float:
    """The share of runs in which ``specnb tune`` would call a candidate verified at one level in
    one round: its paired ratio against static K (true ``vs_static``) with a lower bound above
    ``1 - margin`` and its speedup (true ``vs_static * static``) with a lower bound above 1.0, both
    at ``confidence`` (tune's per-round level)."""
    y, infl, strata = simulate(rng, runs, n, [math.log(static), math.log(vs_static * static)], noise, levels=2)
    pattern = order_pattern(n)
    pair = estimate_batch(y[:, 1] - y[:, 0], pattern, infl[:, 1] - infl[:, 0], strata, confidence)
    tuned = estimate_batch(y[:, 1], pattern, infl[:, 1], strata, confidence)
    return float(np.mean((pair.lo > math.log(1.0 - margin)) & (tuned.lo > 0.0)))


SEQUENTIAL = Design(alpha=0.05, looks=(4, 6))
FIXED = Design(alpha=0.05)
NOISES = {
    "normal": Noise(),
    "heavy tails": Noise(heavy=True),
    "a bad start in 20 % of runs": Noise(bad_start=0.2),
    "prompts dominate": Noise(start_sd=0.03, prompt_sd=0.3),
    "starts dominate": Noise(start_sd=0.15, prompt_sd=0.05),
}


def power_table(seed: int = 7, runs: int = 4000) -> list[str]:
    """Lines: the share of runs that say "pays" at each true ratio, per design, normal noise."""
    rng = np.random.default_rng(seed)
    ratios = (1.0, 1.1, 1.2, 1.3, 1.5)
    rows = [("fixed, 4 repeats", 4, FIXED), ("fixed, 6 repeats", 6, FIXED),
            ("sequential, looks 4 and 6", 6, SEQUENTIAL)]
    lines = ["| design | " + " | ".join(f"{r:.1f}x" for r in ratios) + " |",
             "| --- |" + " --- |" * len(ratios)]
    for name, n, design in rows:
        cells = [level_rates(rng, runs, n, r, Noise(), design).pays for r in ratios]
        lines.append(f"| {name} | " + " | ".join(f"{100 * c:.1f} %" for c in cells) + " |")
    return lines


def error_table(seed: int = 11, runs: int = 6000, null_runs: int = 60_000) -> list[str]:
    """Lines: per noise, coverage (worst over true ratios 0.7-1.6 and 2-6 repeats, ``runs`` each),
    false "pays" at 1.0x (sequential and fixed 4), family-wise over 3 and 6 levels (the worse) and
    false "verified" at 0.9x (``null_runs`` each: rates near their nominal value need them)."""
    rng = np.random.default_rng(seed)
    lines = ["| noise | coverage, worst | false pays, sequential | false pays, fixed 4 | family-wise, fixed "
             "| family-wise, sequential | tune verified at 0.9x | at 0.98x |",
             "| --- | --- | --- | --- | --- | --- | --- | --- |"]
    for name, noise in NOISES.items():
        cover = min(level_rates(rng, runs, n, r, noise, FIXED).coverage for n in (2, 3, 4, 5, 6)
                    for r in (0.7, 1.0, 1.6))
        seq = level_rates(rng, null_runs, 6, 1.0, noise, SEQUENTIAL).pays
        fix = level_rates(rng, null_runs, 4, 1.0, noise, FIXED).pays
        fw = max(familywise(rng, null_runs // 3, 4, levels, noise, FIXED)[0] for levels in (3, 6))
        fws = max(familywise(rng, null_runs // 3, 6, levels, noise, SEQUENTIAL)[0] for levels in (3, 6))
        tv = tune_verified(rng, null_runs, 4, 0.9, 1.2, noise)
        tm = tune_verified(rng, null_runs, 4, 0.98, 1.2, noise)
        lines.append(f"| {name} | {100 * cover:.1f} % | {100 * seq:.2f} % | {100 * fix:.2f} % | {100 * fw:.2f} % "
                     f"| {100 * fws:.2f} % | {100 * tv:.2f} % | {100 * tm:.2f} % |")
    return lines


def with_order(noise: Noise, order: float) -> Noise:
    return replace(noise, order=order)


if __name__ == "__main__":
    print("\n".join(error_table()))
    print()
    print("\n".join(power_table()))
