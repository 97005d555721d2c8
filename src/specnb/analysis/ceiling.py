"""How much of the ceiling a real drafter captures, and whether the ceiling is one.

A *ceiling* arm forces its acceptance (vLLM's ``rejection_sample_method = "synthetic"``; on
CPU through specnb's plugin): swept over acceptance, its speedups trace what a drafter that
good could buy on this stack, drafting and verification costs included. A real drafter's
paired speedup divided by the ceiling's at the real drafter's own measured acceptance (linear
between the two nearest ceiling arms, same workload and level) is the share of the ceiling it
captures.

The ceiling must be a ceiling: a synthetic arm that accepts at least as much as a real arm
and still runs slower says the synthetic path (or its different text, or its drafting
pattern) costs something of its own, and the ceiling understates the stack. The *twin* of a
real arm (the same speculative config with synthetic acceptance set to the real arm's
measured per-position rates) isolates that cost: it must run as fast as the real arm within
the intervals.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
import pandas as pd

__all__ = ["SYNTHETIC_KEYS", "ceiling_lines", "ceiling_table", "is_ceiling", "twins"]

SYNTHETIC_KEYS = ("rejection_sample_method", "synthetic_acceptance_rates", "synthetic_acceptance_length")


def is_ceiling(config: Mapping[str, Any] | None) -> bool:
    return bool(config) and config.get("rejection_sample_method") == "synthetic"


def _proposer(config: Mapping[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in config.items() if k not in SYNTHETIC_KEYS}


def twins(configs: Mapping[str, Mapping[str, Any] | None]) -> dict[str, str]:
    """Ceiling arm -> the real arm whose speculative config it repeats (proposer, K and all), the
    acceptance apart."""
    real = {a: _proposer(c) for a, c in configs.items() if c and not is_ceiling(c)}
    out = {}
    for arm, c in configs.items():
        if is_ceiling(c):
            match = [r for r, p in real.items() if p == _proposer(c)]
            if match:
                out[arm] = match[0]
    return out


def _interp(x: float, xs: np.ndarray, ys: np.ndarray) -> tuple[float | None, bool]:
    """y at x, linear between the two nearest points, and whether it is only a bound: above the
    swept range the ceiling is at least its top point's (more acceptance buys no less); below
    it, None."""
    order = np.argsort(xs)
    xs, ys = xs[order], ys[order]
    if len(xs) < 2 or x < xs[0]:
        return None, False
    if x > xs[-1]:
        return float(ys[-1]), True
    return float(np.interp(x, xs, ys)), False


def ceiling_table(table: pd.DataFrame, configs: Mapping[str, Mapping[str, Any] | None]) -> pd.DataFrame:
    """One row per real drafter arm, workload and level of the paired ``table`` (``summarize``):
    its acceptance and speedup, the ceiling's speedup at that acceptance (``ceiling_at``, from the
    ceiling arms that are nobody's twin; above the sweep, its top point as a lower bound:
    ``ceiling_is_bound``), ``captured`` = speedup / ceiling_at (then an upper bound), and, where it has a
    twin, the twin's acceptance and speedup with ``twin_slower`` (the twin accepts at least as
    much and its interval lies below the real arm's point estimate)."""
    if table.empty:
        return pd.DataFrame()
    twin_of = twins(configs)
    ceil_arms = {a for a, c in configs.items() if is_ceiling(c)} - set(twin_of)
    real_arms = {a for a, c in configs.items() if c and not is_ceiling(c)}
    rows = []
    by = (["condition"] if "condition" in table.columns else []) + ["workload", "concurrency"]
    for key, g in table.groupby(by, sort=True):
        wl, c = key[-2], key[-1]
        ce = g[g["arm"].isin(ceil_arms)].dropna(subset=["acceptance_rate", "speedup"])
        xs, ys = ce["acceptance_rate"].to_numpy(float), ce["speedup"].to_numpy(float)
        for r in g[g["arm"].isin(real_arms)].to_dict("records"):
            at, bound = (_interp(float(r["acceptance_rate"]), xs, ys) if pd.notna(r.get("acceptance_rate"))
                         else (None, False))
            row = {**({"condition": key[0]} if len(by) == 3 else {}), "workload": wl, "concurrency": c, "arm": r["arm"],
                   "acceptance_rate": r["acceptance_rate"], "accepted_output_share": r.get("accepted_output_share"),
                   "speedup": r["speedup"], "speedup_lo": r.get("speedup_lo"), "speedup_hi": r.get("speedup_hi"),
                   "ceiling_at": at, "ceiling_is_bound": bound, "captured": (r["speedup"] / at) if at else None,
                   "twin": None, "twin_acceptance_rate": None, "twin_speedup": None, "twin_slower": None}
            tw = [a for a, real in twin_of.items() if real == r["arm"]]
            if tw:
                t = g[g["arm"] == tw[0]]
                if len(t):
                    t = t.iloc[0]
                    row.update(twin=tw[0], twin_acceptance_rate=t["acceptance_rate"], twin_speedup=t["speedup"],
                               twin_speedup_lo=t.get("speedup_lo"), twin_speedup_hi=t.get("speedup_hi"),
                               twin_accepted_output_share=t.get("accepted_output_share"),
                               twin_faster=bool(pd.notna(t.get("speedup_lo")) and t["speedup_lo"] > r["speedup"]),
                               twin_slower=bool(t["acceptance_rate"] >= r["acceptance_rate"] - 0.02
                                                and pd.notna(t.get("speedup_hi"))
                                                and t["speedup_hi"] < r["speedup"]))
            rows.append(row)
    return pd.DataFrame(rows)


def ceiling_lines(ct: pd.DataFrame) -> list[str]:
    """The reading: per real arm and level, the share of the ceiling captured; each twin against
    its real arm; ceiling arms that lose to a real arm accepting less."""
    if ct.empty:
        return []
    pct = (lambda x: "n/a" if x is None or pd.isna(x) else f"{100 * x:.0f}%")  # noqa: E731
    lines = []
    for r in ct.to_dict("records"):
        at = r.get("ceiling_at")
        if at is None or pd.isna(at):
            cap = "below the swept ceiling"
        elif r.get("ceiling_is_bound"):
            cap = (f"above the swept ceiling, whose top gives {at:.2f}x: at most {pct(r['captured'])} captured "
                   "(sweep higher to place it)")
        else:
            cap = f"the ceiling gives {at:.2f}x at that acceptance: {pct(r['captured'])} captured"
        lines.append(f"{r['workload']} c={r['concurrency']:g} {r['arm']}: accepts {pct(r['acceptance_rate'])}, "
                     f"{r['speedup']:.2f}x; {cap}")
        if isinstance(r.get("twin"), str):
            verdict = ("SLOWER: the synthetic path costs something of its own" if r["twin_slower"]
                       else "faster" if r.get("twin_faster") else "as fast within its interval")
            share, tshare = r.get("accepted_output_share"), r.get("twin_accepted_output_share")
            if share is not None and tshare is not None and pd.notna(share) and pd.notna(tshare):
                verdict += (f"; drafts supplied {pct(tshare)} of its output against the real arm's {pct(share)} "
                            "(forced acceptance changes the text, and with it how often the proposer finds a match)")
            lines.append(f"  twin {r['twin']} (same proposer, the real arm's rates): accepts "
                         f"{pct(r['twin_acceptance_rate'])}, {r['twin_speedup']:.2f}x "
                         f"[{r['twin_speedup_lo']:.2f}, {r['twin_speedup_hi']:.2f}]: {verdict}")
    return lines
