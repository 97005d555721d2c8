"""Proposal length: which K pays at each concurrency, how sure that choice is, and how the
measured acceptance and step cost compare with seed 002's model.

Seed 002 writes throughput as MAL(alpha, K) / T(K), with MAL(alpha, K) = (1 - alpha^(K+1)) /
(1 - alpha) and T(K) = t0 (1 + (v + d) K): a longer draft raises the numerator and the
denominator, and concurrency raises the overhead v + d, so the best K moves left as load
grows. A sweep with one arm per K (paired with the baseline, as every axis is) measures it:

- per level and K: the paired speedup with its interval (:mod:`specnb.analysis.bootstrap`);
- the best K per level and the share of bootstrap replicates in which it wins: the arms of a
  workload are drawn on the same server starts and prompts, so replicate b compares every K
  on equal luck; K = 0 (the baseline, speedup 1) competes too;
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

from specnb.analysis.bootstrap import SpeedupBootstrap
from specnb.analysis.pairing import usable
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


def k_choice(boot: SpeedupBootstrap, df: pd.DataFrame) -> pd.DataFrame:
    """Per workload (and condition) and level: every K's speedup with its interval, the best K
    (0 when no K's point estimate beats the baseline) and the share of bootstrap replicates in
    which each K is the best, the baseline included."""
    t = boot.table
    if t.empty:
        return pd.DataFrame()
    ks = dict(zip(df["arm"], k_of(df), strict=True))
    by = [k for k in boot.group_keys if k != "arm"]
    rows = []
    for key, g in t.groupby(by, sort=True, dropna=False):
        key = key if isinstance(key, tuple) else (key,)
        group = dict(zip(by, key, strict=True))
        curves = {c.group["arm"]: c for c in boot.curves
                  if all(c.group.get(k) == v or (pd.isna(v) and pd.isna(c.group.get(k))) for k, v in group.items())}
        for level, lg in g.groupby("level", sort=True):
            arms = list(lg["arm"])
            reps = []
            for arm in arms:
                curve = curves[arm]
                j = int(np.flatnonzero(curve.concurrency == level)[0])
                reps.append(curve.replicates["speedup"][:, j])
            reps.append(np.ones_like(reps[0]))  # K = 0: the baseline, speedup 1 by definition
            names = [*arms, "(baseline)"]
            wins = np.nanargmax(np.vstack(reps), axis=0)
            share = {n: float(np.mean(wins == i)) for i, n in enumerate(names)}
            point = lg.set_index("arm")["speedup"]
            best_arm = point.idxmax() if point.max() > 1.0 else "(baseline)"
            for r in lg.itertuples(index=False):
                rows.append({**group, "level": float(level), "concurrency": int(r.concurrency), "arm": r.arm,
                             "k": int(ks.get(r.arm, 0)), "speedup": r.speedup, "speedup_lo": r.speedup_lo,
                             "speedup_hi": r.speedup_hi, "win_share": share[r.arm],
                             "best": r.arm == best_arm, "n_repeats": r.n_repeats})
            rows.append({**group, "level": float(level), "concurrency": int(lg["concurrency"].iloc[0]),
                         "arm": "(baseline)", "k": 0, "speedup": 1.0, "speedup_lo": 1.0, "speedup_hi": 1.0,
                         "win_share": share["(baseline)"], "best": best_arm == "(baseline)",
                         "n_repeats": int(lg["n_repeats"].min())})
    return pd.DataFrame(rows)


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
