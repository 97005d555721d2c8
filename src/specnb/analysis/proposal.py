"""Proposal length: which K pays at each concurrency, how sure that choice is, and how the
measured acceptance and step cost compare with seed 002's model.

Seed 002 writes throughput as MAL(alpha, K) / T(K), with MAL(alpha, K) = (1 - alpha^(K+1)) /
(1 - alpha) and T(K) = t0 (1 + (v + d) K): a longer draft raises the numerator and the
denominator, and concurrency raises the overhead v + d, so the best K moves left as load
grows. A sweep with one arm per K (paired with the baseline, as every axis is) measures it:

- per level and K: the paired speedup with its interval (:mod:`specnb.analysis.speedups`);
- the best K per level and how sure that choice is: the best option against the runner-up (the
  second-best K, or the baseline at speedup 1), a paired ratio per repeat with the one interval
  (every arm of a workload ran in the same server starts on the same prompts);
- alpha fitted to the per-position acceptance (position i is accepted with probability
  alpha^(i+1) under the model), the acceptance length MAL(alpha, K) that alpha predicts, and
  the measured one beside it;
- the step cost each K implied: tokens per step / speedup = T(K) / t0, and the overhead per
  proposed token v + d = (T(K) / t0 - 1) / K, with the best K seed 002's model picks for it.

n-gram drafts only on a match: its acceptance counts only steps that drafted, and tokens per
step are 1 + (accepted draft tokens / output tokens) / (1 - that share), not MAL.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from specnb.analysis.estimator import estimate
from specnb.analysis.pairing import usable
from specnb.analysis.speedups import Speedups
from specnb.models import theory

__all__ = ["k_of", "fit_alpha", "k_choice", "k_model", "acceptance_vs_model"]


def k_of(df: pd.DataFrame) -> pd.Series:
    """Each row's proposal length K (0 for the baseline, and for an off arm: the drafter loaded with
    K = 0 at every batch size)."""
    k = pd.to_numeric(df.get("num_speculative_tokens"), errors="coerce")
    on = df["speculative"].astype(bool)
    if "drafting_off" in df.columns:
        on &= ~df["drafting_off"].fillna(False).astype(bool)
    return k.where(on, 0).fillna(0).astype(int)


def fit_alpha(per_position: list[float] | np.ndarray) -> float | None:
    """The conditional acceptance alpha whose powers alpha^(i+1) best fit the per-position
    acceptance (vLLM's accepted at position i / drafts), least squares over a fine grid."""
    p = np.asarray([x for x in (per_position if per_position is not None else []) if x is not None], float)
    if p.size == 0 or not np.isfinite(p).all():
        return None
    grid = np.linspace(0.0, 0.999, 1000)
    pos = np.arange(1, p.size + 1)
    err = ((grid[:, None] ** pos[None, :] - p[None, :]) ** 2).sum(axis=1)
    return float(grid[int(np.argmin(err))])


def k_choice(sp: Speedups, df: pd.DataFrame) -> pd.DataFrame:
    """Per workload (and condition) and level: every K's speedup with its interval, the same
    interval with the error split over the level's arms (``family_lo`` / ``family_hi`` at
    ``family_confidence``: the bound a claim about the best of several K is read from), the best K
    (0 when no K's estimate beats the baseline), and on the best option's row its margin over the
    runner-up (``runner_up``, ``margin`` with ``margin_lo`` / ``margin_hi``: the best K over the
    second-best K, paired per repeat, or its speedup over the baseline when it is the only K or the
    baseline is second; the baseline's own row when it is best)."""
    t = sp.table
    if t.empty:
        return pd.DataFrame()
    ks = dict(zip(df["arm"], k_of(df), strict=True))
    by = [k for k in sp.group_keys if k != "arm"]
    rows = []
    for key, g in t.groupby(by, sort=True, dropna=False):
        key = key if isinstance(key, tuple) else (key,)
        group = dict(zip(by, key, strict=True))
        for level, lg in g.groupby("level", sort=True):
            point = lg.set_index("arm")["speedup"].astype(float).sort_values(ascending=False)
            best_arm = point.index[0] if point.iloc[0] > 1.0 else "(baseline)"
            margin = _margin(sp, group, float(level), lg, point, best_arm)
            family = _family_bounds(sp, group, float(level), lg)
            for r in lg.itertuples(index=False):
                rows.append({**group, "level": float(level), "concurrency": int(r.concurrency), "arm": r.arm,
                             "k": int(ks.get(r.arm, 0)), "speedup": r.speedup, "speedup_lo": r.speedup_lo,
                             "speedup_hi": r.speedup_hi, **family[r.arm], "best": r.arm == best_arm,
                             "n_repeats": r.n_repeats, **(margin if r.arm == best_arm else _NO_MARGIN)})
            rows.append({**group, "level": float(level), "concurrency": int(lg["concurrency"].iloc[0]),
                         "arm": "(baseline)", "k": 0, "speedup": 1.0, "speedup_lo": 1.0, "speedup_hi": 1.0,
                         "family_lo": 1.0, "family_hi": 1.0, "family_confidence": np.nan, "family_arms": np.nan,
                         "best": best_arm == "(baseline)", "n_repeats": int(lg["n_repeats"].min()),
                         **(margin if best_arm == "(baseline)" else _NO_MARGIN)})
    return pd.DataFrame(rows)


_NO_MARGIN = {"runner_up": None, "margin": np.nan, "margin_lo": np.nan, "margin_hi": np.nan}


def _family_bounds(sp: Speedups, group: dict[str, Any], level: float, lg: pd.DataFrame) -> dict[str, dict[str, Any]]:
    """Each arm's interval at a level with its error split over the arms of the level (Bonferroni):
    the best K is picked from several, so the claim that it pays is one of several tests."""
    k = max(1, len(lg))
    out = {}
    for r in lg.itertuples(index=False):
        conf = 1.0 - (1.0 - float(getattr(r, "confidence", sp.confidence))) / k
        data = sp.data({**group, "arm": r.arm}, level)
        sample = data.sample("speedup", int(r.n_repeats)) if data is not None else None
        est = estimate(sample, conf, sp.scope) if sample is not None else None
        out[r.arm] = {"family_lo": np.nan if est is None or est.lo is None else est.lo,
                      "family_hi": np.nan if est is None or est.hi is None else est.hi,
                      "family_confidence": conf, "family_arms": k}
    return out


def _margin(sp: Speedups, group: dict[str, Any], level: float, lg: pd.DataFrame, point: pd.Series,
            best: str) -> dict[str, Any]:
    """The best option over the runner-up at one level, with the one interval."""
    rows = lg.set_index("arm")
    if best == "(baseline)":  # the baseline over the best K: 1 / that K's speedup
        top = point.index[0]
        r = rows.loc[top]

        def inv(v):
            return 1.0 / v if pd.notna(v) and v > 0 else np.nan

        return {"runner_up": top, "margin": inv(r["speedup"]), "margin_lo": inv(r["speedup_hi"]),
                "margin_hi": inv(r["speedup_lo"])}
    second = point.index[1] if len(point) > 1 and point.iloc[1] > 1.0 else "(baseline)"
    if second == "(baseline)":
        r = rows.loc[best]
        return {"runner_up": second, "margin": r["speedup"], "margin_lo": r["speedup_lo"], "margin_hi": r["speedup_hi"]}
    est = sp.contrast(group, best, second, level)
    if est is None:
        return {**_NO_MARGIN, "runner_up": second}
    return {"runner_up": second, "margin": est.ratio, "margin_lo": np.nan if est.lo is None else est.lo,
            "margin_hi": np.nan if est.hi is None else est.hi}


def k_model(choice: pd.DataFrame, df: pd.DataFrame) -> pd.DataFrame:
    """Per workload, level and K: measured acceptance length, alpha fitted to the per-position
    acceptance, MAL(alpha, K) that alpha predicts, tokens per step, the step cost T(K) / t0 the
    speedup implies, the overhead per proposed token (v + d), and seed 002's best K for it."""
    ok = usable(df)
    ok = ok[ok["speculative"].astype(bool)]
    if ok.empty or choice.empty:
        return pd.DataFrame()
    ok = ok.assign(k=k_of(ok))
    rows = []
    for (wl, arm, c), g in ok.groupby(["workload", "arm", "concurrency"], sort=True):
        k = int(g["k"].iloc[0])
        pp = [np.asarray(v, float) for v in g.get("per_position_acceptance", pd.Series(dtype=object))
              if isinstance(v, (list, np.ndarray)) and len(v)]
        alpha = fit_alpha(np.mean(pp, axis=0)) if pp else None
        mal = pd.to_numeric(g["mean_acceptance_length"], errors="coerce").mean()
        share = pd.to_numeric(g.get("accepted_output_share"), errors="coerce").mean()
        tau = 1.0 / (1.0 - share) if pd.notna(share) and share < 1 else mal
        sel = choice[(choice["arm"] == arm) & (choice["workload"] == wl) & (choice["concurrency"] == c)]
        speed = float(sel["speedup"].iloc[0]) if len(sel) else np.nan
        step = tau / speed if speed and np.isfinite(speed) and pd.notna(tau) else np.nan
        overhead = (step - 1.0) / k if k and np.isfinite(step) else np.nan
        row: dict[str, Any] = {"workload": wl, "arm": arm, "concurrency": int(c), "k": k, "alpha": alpha,
                               "mal_measured": mal, "mal_model": theory.acceptance_length(alpha, k) if alpha is not None else None,
                               "tokens_per_step": tau, "speedup": speed, "step_cost": step, "overhead": overhead}
        if alpha is not None and np.isfinite(overhead) and overhead >= 0:
            row["model_best_k"], _ = theory.best_k(alpha, overhead, k_max=16)
        rows.append(row)
    return pd.DataFrame(rows)


def acceptance_vs_model(model: pd.DataFrame) -> str:
    """A few lines: measured acceptance length against MAL(alpha, K), per arm (mean over levels)."""
    if model.empty:
        return "(no speculative points)"
    lines = []
    for (wl, arm), g in model.groupby(["workload", "arm"], sort=True):
        a = g["alpha"].dropna()
        lines.append(f"{arm} / {wl}: K={int(g['k'].iloc[0])}, alpha {a.mean():.2f} (fitted to per-position acceptance), "
                     f"MAL measured {g['mal_measured'].mean():.2f} vs model {g['mal_model'].dropna().mean():.2f}; "
                     f"step cost T(K)/t0 {g['step_cost'].min():.2f} to {g['step_cost'].max():.2f} over "
                     f"c={g['concurrency'].min()}..{g['concurrency'].max()}" if len(a) else
                     f"{arm} / {wl}: K={int(g['k'].iloc[0])}, no per-position acceptance")
    return "\n".join(lines)
