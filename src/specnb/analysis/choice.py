"""Which drafter to attach, per workload and load level, when a run measured drafters of several
kinds on the same prompts (the drafter axis: n-gram, a trained head, a draft model).

Each arm's own decision at the level is the one interval's (:mod:`specnb.analysis.speedups`);
the choice only reads them: attach the arm that pays with the highest estimate, none where no
arm is known to pay. Where several pay, the leader is set against each other payer with
:meth:`~specnb.analysis.speedups.Speedups.contrast` (their ratio per server start, both paired
with the same baseline, the same interval at the same confidence), so "ahead of" is said only
where that interval excludes 1.0; otherwise the two are "not told apart". Ceiling arms (synthetic
acceptance) are not drafters one deploys and are left out.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pandas as pd

from specnb.analysis.ceiling import is_ceiling
from specnb.analysis.estimator import LOSES, PAYS
from specnb.analysis.speedups import Speedups

__all__ = ["drafter_choice", "choice_lines"]


def _x(v: float) -> str:
    return f"{v:.2f}x"


def _level(row: Mapping[str, Any]) -> str:
    rate = row.get("rate_rps")
    if rate is not None and pd.notna(rate) and float(rate) > 0:
        return f"{float(rate):g} req/s"
    return f"c={float(row['concurrency']):g}"


def drafter_choice(sp: Speedups, configs: Mapping[str, Mapping[str, Any] | None]) -> pd.DataFrame:
    """One row per (curve group without the arm, level) where drafters of two kinds or more were
    measured: ``choice`` (the arm to attach, or None), ``verdict`` (``attach``, ``off``: every arm
    loses, ``open``: none is known to pay and one is undecided), and ``arms`` (each arm's
    ``(arm, method, speedup, lo, hi, decision)``, best estimate first), ``versus`` (the leader
    against each other payer: ``(other, ratio, lo, hi)``, NaN bounds where they share under two
    starts)."""
    t = sp.table
    if t.empty or "arm" not in t.columns:
        return pd.DataFrame()
    t = t[[not is_ceiling(configs.get(str(a))) for a in t["arm"]]]
    keys = [k for k in sp.group_keys if k != "arm"]
    rows = []
    for key, g in t.groupby([*keys, "level"], sort=True, dropna=False):
        if g["method"].nunique() < 2:
            continue
        key = key if isinstance(key, tuple) else (key,)
        group = dict(zip(keys, key[:-1], strict=True))
        g = g.sort_values("speedup", ascending=False)
        arms = [(str(r["arm"]), str(r["method"]), float(r["speedup"]), float(r["speedup_lo"]), float(r["speedup_hi"]),
                 r["decision"] if isinstance(r["decision"], str) else None) for _, r in g.iterrows()]
        payers = [a for a in arms if a[5] == PAYS]
        versus = []
        if payers:
            best = payers[0][0]
            for other in payers[1:]:
                est = sp.contrast(group, best, other[0], float(key[-1]))
                versus.append((other[0], *((est.ratio, est.lo, est.hi) if est is not None and est.lo is not None
                                            else (float("nan"),) * 3)))
            verdict, choice = "attach", best
        else:
            verdict, choice = ("off" if all(a[5] == LOSES for a in arms) else "open"), None
        first = g.iloc[0]
        rows.append({**group, "level": float(key[-1]), "concurrency": first["concurrency"],
                     "rate_rps": first.get("rate_rps"), "choice": choice, "verdict": verdict, "arms": arms,
                     "versus": versus})
    return pd.DataFrame(rows)


def _arm(a: tuple) -> str:
    name, _method, x, lo, hi, decision = a
    return f"{name} {decision or 'undecided'} ({_x(x)} [{lo:.2f}, {hi:.2f}])"


def choice_lines(choice: pd.DataFrame, confidence: float) -> list[str]:
    """The report's lines for :func:`drafter_choice`'s table (none when it is empty)."""
    if choice.empty:
        return []
    varies = [k for k in ("condition", "sweep") if k in choice.columns and choice[k].nunique() > 1]
    keys = varies[:1] + (["workload"] if "workload" in choice.columns else [])  # a study's sweep is its condition
    out = ["", f"which drafter to attach (per workload and level, each arm's own {confidence:.0%} decision there; "
               "where two pay, the leader against the other, paired per start):"]
    for _, r in choice.iterrows():
        where = " / ".join(str(r[k]) for k in keys) + f", {_level(r)}"
        arms = r["arms"]
        if r["verdict"] == "attach":
            lead = next(a for a in arms if a[0] == r["choice"])
            parts = [f"attach {lead[0]} ({_x(lead[2])} [{lead[3]:.2f}, {lead[4]:.2f}])"]
            for other, ratio, lo, hi in r["versus"]:
                if pd.isna(lo):
                    parts.append(f"{other} also pays; the two are not compared (under two shared starts)")
                elif lo > 1.0:
                    parts.append(f"ahead of {other}, which also pays, by {_x(ratio)} [{lo:.2f}, {hi:.2f}]")
                else:
                    parts.append(f"{other} also pays and is not told apart from it ({lead[0]} / {other} "
                                 f"{_x(ratio)} [{lo:.2f}, {hi:.2f}])")
            rest = [a for a in arms if a[5] != PAYS]
            if rest:
                parts.append("; ".join(_arm(a) for a in rest))
            out.append(f"{where}: " + "; ".join(parts))
        elif r["verdict"] == "off":
            out.append(f"{where}: leave drafting off, every drafter loses: " + "; ".join(_arm(a) for a in arms))
        else:
            out.append(f"{where}: no drafter is known to pay: " + "; ".join(_arm(a) for a in arms))
    return out
