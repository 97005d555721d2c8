"""Adaptive concurrency search: find where the speedup crosses 1.0 instead of hoping a fixed
grid brackets it.

A fixed grid of c = 1, 2, 4, 8 can miss the crossing entirely: on one 2-core machine n-gram
drafting crossed near c=3.8, on another it still paid 1.37x at c=8. So after the levels asked
for are measured (round 0), each round reads the run's ledgers, reads every drafter's curve as the
report does (the one interval per level, then the fixed sequence across levels:
:mod:`specnb.analysis.thresholds`: pays up to c_L, loses from c_H, the crossing between them), and
per workload adds at most one level per curve:

- **extend** geometrically (c_max -> 2 c_max) while no level is known to lose (the curve pays
  everywhere, or is undecided at the top); downward (c_min -> c_min / 2) while no level is known
  to pay;
- **refine** the bracket between c_L and c_H at the geometric midpoint of the two measured levels
  around the estimates' interpolated crossing while it spans more than ``target_log2_width``
  doublings;
- **stop** a curve when its bracket is narrower than the target, or two adjacent integers, the
  curve loses from c=1, or the next level would pass the cap.

Each round's levels are a family of their own (they are chosen from the data before them): the
first round's at alpha / 2, each later round's at alpha / (2 * max_rounds)
(:mod:`specnb.analysis.design`), so the search's looks together spend at most alpha.

The cap is derived and recorded: ``search.max_concurrency`` when given, ``--max-num-seqs`` in the
server arguments, and the sessions the smallest KV pool of the run holds at the workload's
context length (prompt + max_tokens), with 256 as a last resort. The search also stops before
a round that would end past the time budget (estimated from the server starts and points
measured so far) or after ``max_rounds``. Every added level is measured for every arm
and repeat, ABBA-ordered, with fresh server starts; each round's decisions are written once to
``search/round-NN.json`` (so a resumed run replays them), and each point records its round and
reason (``search`` in the ledger).
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd

from specnb.analysis.estimator import LOSES, PAYS
from specnb.analysis.speedups import paired_speedups
from specnb.analysis.thresholds import Threshold, thresholds
from specnb.ledger import load_ledgers, utcnow, write_once
from specnb.ledger.names import Status
from specnb.ledger.runs import search_lines, search_record
from specnb.sweep.preflight import flag_value
from specnb.sweep.spec import SweepSpec

__all__ = ["Step", "next_level", "search_cap", "next_search_round", "round_cost", "search_lines", "DEFAULT_CAP"]

DEFAULT_CAP = 256  # when nothing else bounds the search


@dataclass(frozen=True)
class Step:
    """One curve's decision: a level to add (or None: this curve is done), and why."""

    level: int | None
    reason: str


def next_level(levels: Sequence[int], th: Threshold | None, cap: int, target_log2_width: float) -> Step:
    """Where to measure next for one curve, from its measured levels and its answer across them.

    Pure: tested on hand-made curves. ``th`` is the curve's :class:`Threshold` (None when the
    curve has no usable point): the crossing lies between the highest level of its family-wise
    "pays" and the lowest of its "loses" (``th.lo`` / ``th.hi``, infinite where one is missing);
    ``cap`` the largest concurrency allowed.
    """
    lv = sorted(int(c) for c in levels)
    if th is None or not lv:
        return Step(None, "no usable points")
    c_min, c_max = lv[0], lv[-1]

    def up(why: str) -> Step:
        if c_max >= cap:
            return Step(None, f"{why}, and c={c_max} is the cap ({cap})")
        return Step(min(2 * c_max, cap), f"{why}: extend to c={min(2 * c_max, cap)}")

    def down(why: str) -> Step:
        if c_min <= 1:
            return Step(None, f"{why} from c=1")
        return Step(max(1, c_min // 2), f"{why}: extend down to c={max(1, c_min // 2)}")

    pays, loses = th.at(PAYS), th.at(LOSES)
    if pays and max(pays) >= c_max:
        return up(f"pays at every level up to c={c_max}")
    if loses and min(loses) <= c_min:
        return down("loses at every level")
    lo, hi = th.lo, th.hi
    if math.isinf(hi):
        return up(f"no level is known to lose up to c={c_max}" + (f" (pays up to c={lo:g})" if math.isfinite(lo) else ""))
    if math.isinf(lo):
        return down(f"no level is known to pay below c={hi:g}")
    width = math.log2(hi / lo)
    if width <= target_log2_width:
        return Step(None, f"settled: pays up to c={lo:g}, loses from c={hi:g} ({width:.2f} doublings <= "
                          f"{target_log2_width:g})")
    inside = [c for c in lv if lo <= c <= hi]
    x = th.concurrency if th.concurrency is not None and lo < th.concurrency < hi else math.sqrt(lo * hi)
    a = max(c for c in inside if c <= x)
    b = min(c for c in inside if c > x)
    mid = round(math.sqrt(a * b))
    if mid <= a:
        mid = a + 1
    if mid >= b:
        return Step(None, f"crossing between adjacent levels {a} and {b} (pays up to c={lo:g}, loses from "
                          f"c={hi:g}): as narrow as integer levels allow")
    return Step(mid, f"refine: pays up to c={lo:g}, loses from c={hi:g} ({width:.2f} doublings > "
                     f"{target_log2_width:g}); the estimates cross near c~{x:.1f}: measure c={mid}")


def search_cap(spec: SweepSpec, df: pd.DataFrame, workload: str) -> tuple[int, str]:
    """The largest concurrency the search may try for a workload, and what set it."""
    caps: list[tuple[int, str]] = []
    if spec.search is not None and spec.search.max_concurrency:
        caps.append((spec.search.max_concurrency, "search.max_concurrency"))
    for arm in spec.arms:
        seqs = flag_value([*spec.server_args, *arm.server_args], "--max-num-seqs")
        if seqs is not None and seqs.isdigit():
            caps.append((int(seqs), f"--max-num-seqs {seqs}"))
    ok = df[(df["workload"] == workload) & (df["status"] == Status.OK)] if len(df) else df
    if len(ok) and "kv_cache_tokens" in ok.columns and ok["kv_cache_tokens"].notna().any():
        pool = float(pd.to_numeric(ok["kv_cache_tokens"], errors="coerce").min())
        prompt = (float((ok["prompt_tokens"] / ok["num_requests"]).max())
                  if "prompt_tokens" in ok.columns and ok["prompt_tokens"].notna().any() else 0.0)
        context = prompt + spec.sampling.max_tokens
        seats = int(pool // context) if context > 0 else 0
        if seats >= 1:
            caps.append((seats, f"KV pool {pool:,.0f} tokens holds {seats} requests of {context:.0f} tokens"))
    if not caps:
        return DEFAULT_CAP, f"default cap {DEFAULT_CAP}"
    return min(caps)


def round_cost(spec: SweepSpec, df: pd.DataFrame, new_levels: int) -> float:
    """About how long a round takes: a server start per repeat and arm (as measured so far) and
    ``new_levels`` points per start (their mean duration so far)."""
    blocks = spec.repeats * len(spec.arms)
    ready = pd.to_numeric(df.get("server_ready_s"), errors="coerce").mean() if len(df) else float("nan")
    point = pd.to_numeric(df.get("duration_s"), errors="coerce").mean() if len(df) else float("nan")
    ready = 30.0 if pd.isna(ready) else float(ready)
    point = 30.0 if pd.isna(point) else float(point)
    return blocks * (ready + new_levels * point)


def next_search_round(spec: SweepSpec, out_dir: Path, round_: int, *, elapsed_s: float,
               echo: Callable[[str], None] = print) -> dict[str, list[tuple[float, str]]]:
    """The levels to measure in round ``round_`` per workload (empty: the search is over).

    The decision is written once to ``search/round-NN.json``; a resumed run replays it.
    """
    assert spec.search is not None
    path = search_record(out_dir, round_)
    if path.exists():
        doc = json.loads(path.read_text())
        return {wl: [(float(c), why) for c, why in lv] for wl, lv in doc["levels"].items()}
    doc: dict[str, Any] = {"kind": "search", "round": round_, "decided_at": utcnow(), "elapsed_s": round(elapsed_s, 1),
                           "levels": {}, "curves": [], "stopped": None}
    budget = spec.search.budget_s if spec.search.budget_s is not None else spec.budget_s
    if round_ > spec.search.max_rounds:
        doc["stopped"] = f"max_rounds ({spec.search.max_rounds}) reached"
    else:
        df = load_ledgers(out_dir)
        boot = paired_speedups(df)
        by_curve = {(t.group.get("arm"), t.group.get("workload")): t for t in thresholds(boot)}
        for wl in sorted(set(df["workload"])) if len(df) else []:
            cap, why_cap = search_cap(spec, df, wl)
            rows = boot.table[boot.table["workload"] == wl] if len(boot.table) else boot.table
            wanted: dict[int, str] = {}
            for arm in sorted(set(rows["arm"])) if len(rows) else []:
                levels = rows.loc[rows["arm"] == arm, "concurrency"].astype(int).tolist()
                step = next_level(levels, by_curve.get((arm, wl)), cap, spec.search.target_log2_width)
                doc["curves"].append({"workload": wl, "arm": arm, "cap": cap, "cap_from": why_cap,
                                      "level": step.level, "reason": step.reason})
                if step.level is not None and step.level not in levels:
                    wanted.setdefault(step.level, f"{arm}: {step.reason}")
            if wanted:
                doc["levels"][wl] = [[c, why] for c, why in sorted(wanted.items())]
        if not doc["levels"]:
            doc["stopped"] = "every curve settled or reached its limit"
        elif budget is not None:
            cost = round_cost(spec, df, sum(len(v) for v in doc["levels"].values()))
            doc["estimated_s"] = round(cost, 1)
            if elapsed_s + cost > budget:
                doc["stopped"] = (f"time budget: {elapsed_s:.0f} s spent, the round would take about {cost:.0f} s "
                                  f"(server starts and points as measured so far), budget {budget:.0f} s")
                doc["levels"] = {}
    write_once(path, (json.dumps(doc, indent=2) + "\n").encode())
    for c in doc["curves"]:
        echo(f"search round {round_}: {c['arm']} / {c['workload']}: {c['reason']} (cap {c['cap']}: {c['cap_from']})")
    if doc["stopped"]:
        echo(f"search: stopped before round {round_}: {doc['stopped']}")
    return {wl: [(float(c), why) for c, why in lv] for wl, lv in doc["levels"].items()}

