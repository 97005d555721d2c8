"""What holds across the levels of a curve: pays up to c_L, loses from c_H, at a family-wise rate,
and the crossing bracketed between them.

Each level has its one interval (:mod:`specnb.analysis.speedups`) and its own decision. Read
level by level, several levels at a true 1.0x would each risk a false decision; so the answer
across levels tests them in a fixed sequence, set before any data (docs/statistics.md):

- **pays**: from the lowest level up, while each level's interval lies above 1.0; the first level
  that does not stops the sequence. "Pays at every level up to c_L" is wrong with probability
  at most ``alpha / 2`` (each test spends it in full: a later level is only tested when every
  level before it passed);
- **loses**: from the highest level down, while each level's interval lies below 1.0: "loses at
  every level from c_H" at ``alpha / 2``.

Together the two answers are family-wise at ``alpha`` (5 %). The crossing from paying to losing
lies between c_L and c_H (beyond the measured range where one of them is missing); a point
estimate between them is the log2-interpolated first fall of the estimates through 1.0
(:mod:`specnb.models.crossing`), printed as interpolated. A level whose own interval clears 1.0
but that the sequence did not reach (a curve that rises, or a level past an undecided one) is
shown with its own decision, marked as outside the family-wise answer.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from specnb.analysis.estimator import LOSES, PAYS
from specnb.analysis.pairing import AnalysisError, curve_label, isna
from specnb.analysis.speedups import METRICS, Speedups
from specnb.models.crossing import crossing

__all__ = ["Threshold", "thresholds", "curve_rows", "interp", "verdict", "fixed_sequence", "UNDECIDED"]

UNDECIDED = "undecided"


@dataclass(frozen=True)
class Threshold:
    """One curve's answer across its levels.

    ``pays_through``: the family-wise answer "pays at every measured level up to this one" (None:
    not even the lowest level); ``loses_from``: "loses at every measured level from this one up"
    (None: not even the highest). ``lo`` / ``hi``: the bracket of the crossing from paying to
    losing (``-inf`` / ``inf`` where it may lie below / beyond the measured range). ``kind`` and
    ``concurrency``: the estimates' own shape (``crosses``, ``rises``, ``above``, ``below``) and
    their interpolated crossing (None where they never cross). ``verdicts``: per level, the
    family-wise verdict (``pays``, ``loses`` or ``undecided``); ``own``: each level's own decision.
    """

    group: dict[str, Any]
    metric: str
    kind: str
    concurrency: float | None
    pays_through: float | None
    loses_from: float | None
    lo: float
    hi: float
    c_min: float
    c_max: float
    n_repeats: int
    level: float  # the confidence level of a fixed run's intervals (a sequential row has its own)
    verdicts: dict[float, str] = field(default_factory=dict)
    own: dict[float, str | None] = field(default_factory=dict)

    @property
    def label(self) -> str:
        return curve_label(self.group)

    def at(self, verdict: str) -> list[float]:
        """The measured levels with this family-wise verdict, ascending."""
        return sorted(c for c, v in self.verdicts.items() if v == verdict)

    def outside(self) -> dict[float, str]:
        """Levels whose own interval decides but that the family-wise answer does not include."""
        return {c: d for c, d in sorted(self.own.items()) if d is not None and self.verdicts.get(c) == UNDECIDED}

    @property
    def bracketed(self) -> bool:
        """Whether the crossing lies inside the measured range (both ends are measured levels)."""
        return math.isfinite(self.lo) and math.isfinite(self.hi)


def verdict(lo: float, hi: float) -> str:
    """A level's reading of its own interval: pays (above 1.0), loses (below) or undecided."""
    if lo > 1.0:
        return PAYS
    if hi < 1.0:
        return LOSES
    return UNDECIDED


def fixed_sequence(own: dict[float, str | None]) -> dict[float, str]:
    """The family-wise verdicts from each level's own decision: pays from the lowest level up while
    each pays, loses from the highest down while each loses, undecided elsewhere."""
    levels = sorted(own)
    out = dict.fromkeys(levels, UNDECIDED)
    for c in levels:
        if own[c] != PAYS:
            break
        out[c] = PAYS
    for c in reversed(levels):
        if own[c] != LOSES:
            break
        out[c] = LOSES
    return out


def thresholds(sp: Speedups, metric: str = "speedup") -> list[Threshold]:
    """Each curve's answer across its levels (see the module text)."""
    if metric not in METRICS:
        raise AnalysisError(f"metric must be one of {sorted(METRICS)}, got {metric!r}")
    t = sp.table
    if t.empty:
        return []
    out = []
    for key, rows in t.groupby(sp.group_keys, sort=True, dropna=False):
        key = key if isinstance(key, tuple) else (key,)
        group = dict(zip(sp.group_keys, key, strict=True))
        rows = rows.sort_values("level")
        pv = pd.to_numeric(rows[metric], errors="coerce").to_numpy(float)
        keep = ~np.isnan(pv)
        if not keep.any():
            continue
        cs = rows["level"].to_numpy(float)
        kind, at = crossing(list(cs[keep]), list(pv[keep]))
        own: dict[float, str | None] = {}
        for r in rows.itertuples(index=False):
            lo, hi = getattr(r, f"{metric}_lo"), getattr(r, f"{metric}_hi")
            if metric == "speedup":  # the row's own decision (a level before its first look has none)
                d = getattr(r, "decision", None)
                own[float(r.level)] = d if isinstance(d, str) and d in (PAYS, LOSES) else None
            elif bool(getattr(r, "open", False)) or pd.isna(lo) or pd.isna(hi):
                own[float(r.level)] = None  # a sequential level before its first look decides nothing
            else:
                own[float(r.level)] = {PAYS: PAYS, LOSES: LOSES}.get(verdict(lo, hi))
        verdicts = fixed_sequence(own)
        pays = [c for c, v in verdicts.items() if v == PAYS]
        loses = [c for c, v in verdicts.items() if v == LOSES]
        pays_through = max(pays) if pays else None
        loses_from = min(loses) if loses else None
        out.append(Threshold(
            group=group, metric=metric, kind=kind, concurrency=at, pays_through=pays_through, loses_from=loses_from,
            lo=pays_through if pays_through is not None else -math.inf,
            hi=loses_from if loses_from is not None else math.inf,
            c_min=float(cs.min()), c_max=float(cs.max()), n_repeats=int(rows["n_repeats"].min()),
            level=sp.confidence, verdicts=verdicts, own=own))
    return out


def curve_rows(sp: Speedups, group: dict[str, Any]) -> pd.DataFrame:
    t = sp.table
    mask = np.ones(len(t), dtype=bool)
    for k, v in group.items():
        mask &= t[k].isna().to_numpy() if isna(v) else (t[k] == v).to_numpy()
    return t[mask].sort_values("level")


def interp(cs: np.ndarray, vals: np.ndarray, at: float) -> float | None:
    """Linear in log2(concurrency) between measured levels; the nearest level outside them."""
    keep = ~np.isnan(vals)
    if not keep.any():
        return None
    return float(np.interp(math.log2(at), np.log2(cs[keep]), vals[keep]))
