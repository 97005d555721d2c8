"""The speedup to expect on your traffic mix, from per-category speedups of a sweep.

Why: the speedups of a sweep are per workload, and your traffic is a mix. :func:`expected_speedup` combines per-category speedups from a sweep with a
mix. Producing a token mix with shares w_c takes time proportional to sum(w_c / B_c) at
baseline rates B_c and sum(w_c / (B_c s_c)) with speculation, so the traffic's speedup is
``sum(w_c / B_c) / sum(w_c / (B_c s_c))``: a time-weighted (harmonic) mean, not an
arithmetic one. B_c is the baseline tok/s per category when the frame has it, else equal.
This treats mixed traffic as if the server alternated between batches of one kind; a
batch mixing kinds at high concurrency may differ. The interval: with per-repeat speedups,
a percentile bootstrap over repeats within each category (with two repeats it is crude,
and it says so by being wide); with only lo/hi per category, the estimate at all lo's and
at all hi's, which bounds it exactly because the estimate rises with every s_c (a range
over repeats, not a confidence interval). The mix itself is taken as exact.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np
import pandas as pd

from specnb.prompts.copyshare import CLASS_OF, MixError

__all__ = ["MixEstimate", "expected_speedup", "category_speedups"]


@dataclass(frozen=True)
class MixEstimate:
    """Expected speedup on a traffic mix, with its interval."""

    speedup: float
    lo: float | None
    hi: float | None
    method: str  # "bootstrap" (per-repeat values), "propagated" (lo/hi per category) or "point"
    level: float | None  # bootstrap coverage; None for the other methods
    weights: dict[str, float]  # token share given to each category of the frame

    def __str__(self) -> str:
        if self.lo is None:
            return f"{self.speedup:.2f}x (point estimate: one value per category, no interval)"
        what = f"{100 * self.level:.0f} % bootstrap interval" if self.method == "bootstrap" else "range at lo/hi"
        return f"{self.speedup:.2f}x [{self.lo:.2f}, {self.hi:.2f}] ({what})"


def _class_of(category: str, groups: Mapping[str, str]) -> str | None:
    if category in groups:
        return groups[category]
    if ":" in category:  # 'copy:fix-json' -> its category, else its set
        base, _, cat = category.rpartition(":")
        return groups.get(cat) or groups.get(base)
    return None


def _weights(categories: list[str], mix: Mapping[str, float], groups: Mapping[str, str]) -> dict[str, float]:
    if not mix:
        raise MixError("the mix is empty")
    bad = {k: v for k, v in mix.items() if not isinstance(v, (int, float)) or v < 0 or v != v}
    if bad:
        raise MixError(f"mix shares must be numbers >= 0: {bad}")
    total = float(sum(mix.values()))
    if total <= 0:
        raise MixError("mix shares add up to 0")
    shares = {k: v / total for k, v in mix.items()}
    w = dict.fromkeys(categories, 0.0)
    for key, share in shares.items():
        if key in w:
            w[key] += share
            continue
        members = [c for c in categories if _class_of(c, groups) == key]
        if not members:
            if share == 0:
                continue
            raise MixError(f"mix key {key!r} matches no category of the speedups ({categories}); "
                           f"name categories, or classes {sorted(set(groups.values()))} mapped by groups=")
        for c in members:  # a class's share is spread evenly over its measured categories
            w[c] += share / len(members)
    return w


def _mixed(s: np.ndarray, w: np.ndarray, base: np.ndarray) -> np.ndarray:
    """Time-weighted speedup; ``s`` may carry a leading bootstrap axis."""
    return (w / base).sum() / (w / (base * s)).sum(axis=-1)


def expected_speedup(
    speedups: pd.DataFrame,
    mix: Mapping[str, float],
    *,
    groups: Mapping[str, str] | None = None,
    level: float = 0.95,
    n_boot: int = 4000,
    seed: int = 0,
) -> MixEstimate:
    """The speedup to expect on traffic with the given mix, from per-category speedups.

    ``speedups``: a ``category`` (or ``workload``) column and ``speedup``; either one row per
    category and repeat (bootstrap interval), or one row per category with ``lo``/``hi`` (or
    ``speedup_min``/``speedup_max``, as :func:`specnb.analysis.pairing.speedup_table` names them).
    Optional baseline rates (``base_tok_s`` or ``output_tok_s_base``) weight by time.
    ``mix``: shares per category, or per class (``copy-style``/``free-form``) spread over the
    categories ``groups`` maps to it (default :data:`CLASS_OF`).
    """
    if speedups is None or len(speedups) == 0:
        raise MixError("no speedups to weight")
    df = speedups.copy()
    cat_col = "category" if "category" in df.columns else "workload" if "workload" in df.columns else None
    if cat_col is None or "speedup" not in df.columns:
        raise MixError("the speedups need a 'category' (or 'workload') column and a 'speedup' column")
    for col in ("arm", "concurrency"):
        if col in df.columns and df[col].nunique() > 1:
            raise MixError(f"the speedups hold several values of {col!r}: filter to one arm and one concurrency")
    if (df["speedup"] <= 0).any() or df["speedup"].isna().any():
        raise MixError("every speedup must be a positive number")
    if not 0 < level < 1:
        raise MixError(f"level must be between 0 and 1, got {level}")
    df[cat_col] = df[cat_col].astype(str)
    cats = sorted(df[cat_col].unique())
    weights = _weights(cats, mix, CLASS_OF if groups is None else groups)
    used = [c for c in cats if weights[c] > 0]
    w = np.array([weights[c] for c in used])
    base_col = next((c for c in ("base_tok_s", "output_tok_s_base") if c in df.columns), None)
    base = np.array([df.loc[df[cat_col] == c, base_col].mean() if base_col else 1.0 for c in used])
    groups_of = {c: df.loc[df[cat_col] == c, "speedup"].to_numpy(float) for c in used}
    point = float(_mixed(np.array([groups_of[c].mean() for c in used]), w, base))
    out = dict(weights={c: weights[c] for c in cats})
    if any(len(v) > 1 for v in groups_of.values()):
        rng = np.random.default_rng(seed)
        draws = np.column_stack([
            v[rng.integers(0, len(v), size=(n_boot, len(v)))].mean(axis=1) if len(v) > 1 else np.full(n_boot, v[0])
            for v in groups_of.values()
        ])
        boot = _mixed(draws, w, base)
        a = (1 - level) / 2
        return MixEstimate(speedup=point, lo=float(np.quantile(boot, a)), hi=float(np.quantile(boot, 1 - a)),
                           method="bootstrap", level=level, **out)
    lo_col, hi_col = next(((lo, hi) for lo, hi in (("lo", "hi"), ("speedup_min", "speedup_max"))
                           if lo in df.columns and hi in df.columns), (None, None))
    if lo_col is not None:
        lo = np.array([float(df.loc[df[cat_col] == c, lo_col].iloc[0]) for c in used])
        hi = np.array([float(df.loc[df[cat_col] == c, hi_col].iloc[0]) for c in used])
        if (lo <= 0).any() or (lo > hi).any():
            raise MixError("each category needs 0 < lo <= hi")
        return MixEstimate(speedup=point, lo=float(_mixed(lo, w, base)), hi=float(_mixed(hi, w, base)),
                           method="propagated", level=None, **out)
    return MixEstimate(speedup=point, lo=None, hi=None, method="point", level=None, **out)


def category_speedups(pairs: pd.DataFrame, *, arm: str, concurrency: int) -> pd.DataFrame:
    """Per-repeat speedups of one arm at one concurrency from :func:`specnb.analysis.pairing.paired`, one
    row per workload and repeat, ready for :func:`expected_speedup`."""
    if pairs.empty:
        raise MixError("no paired points")
    sel = pairs[(pairs["arm"] == arm) & (pairs["concurrency"] == concurrency)]
    if sel.empty:
        raise MixError(f"no paired points for arm {arm!r} at concurrency {concurrency} "
                       f"(arms {sorted(set(pairs['arm']))}, levels {sorted(set(pairs['concurrency']))})")
    cols = ["workload", "repeat", "speedup"] + [c for c in ("output_tok_s_base",) if c in sel.columns]
    return sel[cols].rename(columns={"workload": "category"}).reset_index(drop=True)
