"""Where each curve crosses 1.0, with a bootstrap interval on the crossing itself.

The crossing is interpolated in log2(concurrency) on the mean curve
(:mod:`specnb.models.crossing`: the first fall through 1.0) and on every replicate curve;
its interval is the percentile interval of the replicate crossings, where a replicate that
pays over the whole range counts as "beyond the largest c" and one that never pays as
"below the smallest c" (shown as ``>8`` / ``<1``), and the share of replicates that never
cross is reported next to it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from specnb.analysis.bootstrap import METRICS, SpeedupBootstrap
from specnb.analysis.pairing import AnalysisError, curve_label, isna
from specnb.models.crossing import KINDS, crossing, crossings

__all__ = ["Threshold", "thresholds", "curve_rows", "interp", "verdict"]


@dataclass(frozen=True)
class Threshold:
    """Where one curve crosses 1.0, with its bootstrap interval.

    ``kind``: ``crosses`` (pays below ``concurrency``, loses above), ``rises`` (loses below,
    pays above), ``above`` / ``below`` (pays / loses over the whole measured range; then
    ``concurrency``, ``lo`` and ``hi`` are None). ``lo`` / ``hi`` may be ``-inf`` / ``inf``:
    the crossing lies below ``c_min`` / beyond ``c_max`` in that share of replicates.
    """

    group: dict[str, Any]
    metric: str
    kind: str
    concurrency: float | None
    lo: float | None
    hi: float | None
    share_no_crossing: float  # replicate curves that stay on one side of 1.0
    replicate_kinds: dict[str, float]  # share of replicate curves of each kind
    c_min: int
    c_max: int
    n_repeats: int
    n_boot: int
    level: float
    # per measured level: "pays" (interval above 1.0), "loses" (below) or "undecided" (spans 1.0)
    verdicts: dict[float, str] = field(default_factory=dict)

    @property
    def label(self) -> str:
        return curve_label(self.group)

    def at(self, verdict: str) -> list[float]:
        """The measured levels with this verdict, ascending."""
        return sorted(c for c, v in self.verdicts.items() if v == verdict)


def verdict(lo: float, hi: float) -> str:
    """A level's reading of its interval: pays (above 1.0), loses (below) or undecided (spans it)."""
    if lo > 1.0:
        return "pays"
    if hi < 1.0:
        return "loses"
    return "undecided"


def thresholds(boot: SpeedupBootstrap, metric: str = "speedup") -> list[Threshold]:
    """Where each curve of ``boot`` crosses 1.0, with a percentile interval over its replicates."""
    if metric not in METRICS:
        raise AnalysisError(f"metric must be one of {sorted(METRICS)}, got {metric!r}")
    out = []
    a = (1.0 - boot.level) / 2
    for curve in boot.curves:
        point = _curve_values(boot, curve.group, metric)
        keep = ~np.isnan(point)
        cs, pv, rep = curve.concurrency[keep], point[keep], curve.replicates[metric][:, keep]
        if not cs.size:
            continue
        kind, at = crossing(list(cs), list(pv))
        rkinds, rat = crossings(cs, rep)
        shares = {str(k): float(np.mean(rkinds == k)) for k in KINDS}
        lo = hi = None
        if kind in ("crosses", "rises"):
            # a replicate that pays everywhere crossed beyond the range; one that never pays, before it
            past, before = ("above", "below") if kind == "crosses" else ("below", "above")
            vals = np.where(rkinds == kind, rat, np.nan)
            vals = np.where(rkinds == past, np.inf, np.where(rkinds == before, -np.inf, vals))
            vals = vals[~np.isnan(vals)]
            if vals.size:
                lo, hi = (float(q) for q in np.quantile(vals, [a, 1.0 - a], method="inverted_cdf"))
        rows = curve_rows(boot, curve.group)
        verdicts = {float(r["level"]): verdict(r[f"{metric}_lo"], r[f"{metric}_hi"]) for _, r in rows.iterrows()
                    if pd.notna(r[f"{metric}_lo"]) and pd.notna(r[f"{metric}_hi"])}
        out.append(Threshold(
            group=dict(curve.group), metric=metric, kind=kind, concurrency=at, lo=lo, hi=hi,
            share_no_crossing=shares["above"] + shares["below"], replicate_kinds=shares,
            c_min=int(cs.min()), c_max=int(cs.max()), n_repeats=curve.n_repeats,
            n_boot=boot.n_boot, level=boot.level, verdicts=verdicts,
        ))
    return out


def curve_rows(boot: SpeedupBootstrap, group: dict[str, Any]) -> pd.DataFrame:
    t = boot.table
    mask = np.ones(len(t), dtype=bool)
    for k, v in group.items():
        mask &= t[k].isna().to_numpy() if isna(v) else (t[k] == v).to_numpy()
    return t[mask].sort_values("level")


def _curve_values(boot: SpeedupBootstrap, group: dict[str, Any], col: str) -> np.ndarray:
    return pd.to_numeric(curve_rows(boot, group)[col], errors="coerce").to_numpy(float)


def interp(cs: np.ndarray, vals: np.ndarray, at: float) -> float | None:
    """Linear in log2(concurrency) between measured levels; the nearest level outside them."""
    keep = ~np.isnan(vals)
    if not keep.any():
        return None
    return float(np.interp(math.log2(at), np.log2(cs[keep]), vals[keep]))
