"""The break-even map: what acceptance pays at each load, for every drafter of a kind.

A speculative arm's speedup is what it accepts over what it costs, and the cost belongs to
the hardware, the engine and the drafter's *kind* (its proposer and K), not to the traffic.
vLLM sets acceptance by construction (``rejection_sample_method = "synthetic"``): a *map
cell* is a synthetic arm whose proposer runs for real and whose acceptance is only set. Cells
of one kind at several acceptance lengths, each paired with the same baseline at each level,
trace the speedup against acceptance length there; where that curve crosses 1.0 is the
*break-even*: the least acceptance length a drafter of that kind must reach at that load.

- :func:`acceptance_check`: whether a synthetic arm's measured acceptance length is the one set
  (the sweep records a point that is not as a failure: it is no cell of the map).
- :func:`map_cells`: the cells of a paired table, grouped by kind, K, workload and level.
- :func:`break_even`: per group, the crossing (linear between the two cells around it, on the
  cells' *measured* acceptance length) and its band: where the upper ends of the cells'
  intervals cross 1.0 and where their lower ends do. The band inverts the table's one
  interval (docs/statistics.md) cell by cell; it is the range of acceptance lengths at which
  the cells cannot tell paying from costing, not a joint interval over the curve.
- :func:`predict`: a real arm's speedup read off its kind's cells at its own measured
  acceptance length, with the band read the same way, beside its measured pair.

A real drafter and its kind's cells need not draft equally often: an n-gram proposer finds a
match on some steps only, and forced acceptance changes the text it looks in. ``drafted_share``
(steps that carried a draft, estimated from the counters) says how far they differ where a
prediction misses.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from specnb.analysis.ceiling import SYNTHETIC_KEYS, is_ceiling
from specnb.analysis.schedule import SCHEDULE_KEYS
from specnb.ledger.names import PLAIN_CONDITION
from specnb.ledger.schema import synthetic_rates

__all__ = ["ACCEPTANCE_NOT_AS_SET", "AcceptanceCheck", "Z_ACCEPTANCE", "acceptance_check", "kind_of", "drafter_rows",
           "map_cells", "break_even",
           "predict", "break_even_lines", "prediction_lines", "drafted_share", "is_map_run", "MIN_DRAFTS", "WATCH_Z",
           "MapLevel", "BreakEvenLine", "break_even_line", "below_break_even", "at_length"]

# standard errors a synthetic arm's measured acceptance length may sit from the one set: a false
# failure about once in 15,000 points (two-sided normal tail at 4)
Z_ACCEPTANCE = 4.0
# the failure type of a synthetic arm's point whose measured acceptance is not the one set
ACCEPTANCE_NOT_AS_SET = "AcceptanceNotAsSet"
K_KEY = "num_speculative_tokens"


@dataclass(frozen=True)
class AcceptanceCheck:
    """A synthetic arm's measured mean acceptance length against the one set.

    Every draft accepts its positions from the set per-position rates independently of the
    text, so the accepted count per draft has a known mean and variance: the measured mean may
    sit ``Z_ACCEPTANCE`` standard errors either side, and lower by the draft tokens the proposer
    did not propose (a draft shorter than K cannot accept its missing positions)."""

    set_length: float
    measured: float
    low: float
    high: float
    drafts: float

    @property
    def ok(self) -> bool:
        return self.low <= self.measured <= self.high

    def message(self) -> str:
        return (f"measured acceptance length {self.measured:.3f} is not the {self.set_length:g} set "
                f"(allowed {self.low:.3f}-{self.high:.3f} over {self.drafts:,.0f} drafts): not a cell of the map")


def acceptance_check(config: Mapping[str, Any] | None, spec_decode: Mapping[str, Any] | None) -> AcceptanceCheck | None:
    """The check for a synthetic arm's point from its ``/metrics`` deltas (``num_drafts``,
    ``num_draft_tokens``, ``num_accepted_tokens``); None for any other arm or a point without drafts."""
    rates = synthetic_rates(dict(config) if config else None)
    sd = spec_decode or {}
    drafts = float(sd.get("num_drafts") or 0)
    if rates is None or drafts <= 0:
        return None
    k = int((config or {}).get(K_KEY) or len(rates))
    mean = sum(rates)
    # E[A^2] for A = the number of leading positions accepted: sum over i of (2i + 1) P(A > i)
    var = max(sum((2 * i + 1) * r for i, r in enumerate(rates)) - mean * mean, 0.0)
    se = math.sqrt(var / drafts)
    missing = max(drafts * k - float(sd.get("num_draft_tokens") or 0), 0.0) / drafts
    measured = 1.0 + float(sd.get("num_accepted_tokens") or 0) / drafts
    slack = 1e-9 + 0.5 / drafts  # counters are whole numbers
    return AcceptanceCheck(set_length=1.0 + mean, measured=measured,
                           low=1.0 + mean - missing - Z_ACCEPTANCE * se - slack,
                           high=1.0 + mean + Z_ACCEPTANCE * se + slack, drafts=drafts)


def _proposer(config: Mapping[str, Any]) -> dict[str, Any]:
    """The proposer: what drafts, without K, a K schedule (a tune or policy run's) or acceptance."""
    return {k: v for k, v in config.items() if k not in SYNTHETIC_KEYS and k not in (K_KEY, *SCHEDULE_KEYS)}


def method_of(kind: str) -> str:
    """A kind's method (``eagle3`` of ``eagle3:head``, ``ngram`` of ``ngram(prompt_lookup_max=4)``)."""
    return kind.split("(")[0].split(":")[0]


def kind_of(config: Mapping[str, Any] | None) -> str | None:
    """A drafter's kind as figures and reports name it: its method (a draft model's folder name
    for a draft model or a head) and any other proposer setting, K and acceptance left out."""
    if not config:
        return None
    p = _proposer(config)
    model = p.pop("model", None)
    method = p.pop("method", None) or "draft_model"
    name = method + (f":{Path(str(model)).name}" if model else "")
    extra = ",".join(f"{k}={json.dumps(v, sort_keys=True)}" for k, v in sorted(p.items()))
    return name + (f"({extra})" if extra else "")


def _group_keys(table: pd.DataFrame) -> list[str]:
    return [k for k in ("condition", "workload", "kind", "k", "concurrency") if k in table.columns]


def drafter_rows(table: pd.DataFrame, configs: Mapping[str, Mapping[str, Any] | None]) -> pd.DataFrame:
    """The paired ``table``'s drafter rows (:func:`specnb.analysis.summarize`) with ``kind``, ``k``,
    ``cell`` (True for a synthetic arm: a cell of a map) and ``set_length`` (a cell's length set;
    NaN for a real drafter)."""
    if table.empty:
        return pd.DataFrame()
    t = table.copy()
    if "condition" not in t.columns:  # a table without conditions is one (every curve keyed alike)
        t.insert(0, "condition", PLAIN_CONDITION)
    cfg = {a: configs.get(a) for a in t["arm"].unique()}
    t["kind"] = t["arm"].map(lambda a: kind_of(cfg.get(a)))
    t["k"] = t["arm"].map(lambda a: (cfg.get(a) or {}).get(K_KEY))
    t["cell"] = t["arm"].map(lambda a: is_ceiling(cfg.get(a)))
    t["set_length"] = t["arm"].map(lambda a: (1.0 + sum(synthetic_rates(dict(cfg[a])) or []))
                                   if is_ceiling(cfg.get(a)) else np.nan)
    return t[t["kind"].notna()].reset_index(drop=True)


def map_cells(table: pd.DataFrame, configs: Mapping[str, Mapping[str, Any] | None]) -> pd.DataFrame:
    """:func:`drafter_rows` kept to the map: its cells, and the real drafters of a kind and K it
    has cells of (their acceptance is read against those cells)."""
    t = drafter_rows(table, configs)
    if t.empty:
        return t
    kinds = set(zip(t.loc[t["cell"], "kind"], t.loc[t["cell"], "k"], strict=True))
    keep = t["cell"] | pd.Series([(kd, k) in kinds for kd, k in zip(t["kind"], t["k"], strict=True)], index=t.index)
    return t[keep].reset_index(drop=True)


def is_map_run(table: pd.DataFrame, configs: Mapping[str, Mapping[str, Any] | None]) -> bool:
    """True when some kind and level has cells at two acceptance lengths or more (a curve)."""
    return bool(_curves(map_cells(table, configs)))


def _crossing(xs: np.ndarray, ys: np.ndarray) -> tuple[float | None, str]:
    """Where y crosses 1.0 going up in x, linear between the two points around it; with where
    it lies: 'inside', 'below' (y >= 1 at the first point: pays at every x measured), 'above'
    (y < 1 at the last: costs at every x measured)."""
    if len(ys) == 0 or np.isnan(ys).any():  # an interval end missing (one start): no band
        return None, "n/a"
    if ys[0] >= 1.0:
        return None, "below"
    for i in range(1, len(xs)):
        if ys[i] >= 1.0:
            x0, x1, y0, y1 = xs[i - 1], xs[i], ys[i - 1], ys[i]
            return float(x0 + (1.0 - y0) * (x1 - x0) / (y1 - y0)) if y1 != y0 else float(x1), "inside"
    return None, "above"


def break_even(cells: pd.DataFrame) -> pd.DataFrame:
    """Per condition, workload, kind, K and level: the cells' acceptance lengths and speedups, the
    break-even length (``break_even``; NaN where the curve does not cross inside the cells: ``where``
    says 'below' (pays at every length measured) or 'above' (costs at every one)) and its band
    (``band_lo``: where the cells' upper interval ends cross 1.0; ``band_hi``: where their lower
    ends do; NaN where that end lies outside the cells, ``band_lo_where``/``band_hi_where`` say which
    side)."""
    rows = []
    for key, g in _curves(cells).items():
        xs = g["acceptance_length"].to_numpy(float)
        be, where = _crossing(xs, g["speedup"].to_numpy(float))
        lo, lo_where = _crossing(xs, g["speedup_hi"].to_numpy(float))
        hi, hi_where = _crossing(xs, g["speedup_lo"].to_numpy(float))
        rows.append({**dict(zip(_group_keys(g), key, strict=True)), "cells": len(g),
                     "lengths": [round(x, 3) for x in xs], "speedups": [round(y, 3) for y in g["speedup"]],
                     "break_even": be, "where": where, "band_lo": lo, "band_lo_where": lo_where,
                     "band_hi": hi, "band_hi_where": hi_where, "n_repeats": int(g["n_repeats"].min())})
    return pd.DataFrame(rows)


def drafted_share(df: pd.DataFrame) -> pd.Series:
    """Per (arm, workload, concurrency) of a usable ledger frame: the share of decode steps that
    carried a draft, estimated from the counters (each drafted step emits its acceptance length,
    each other step one token; the first token of each request is the prefill's)."""
    if df.empty or "num_drafts" not in df.columns:
        return pd.Series(dtype=float)
    d = df[pd.to_numeric(df["num_drafts"], errors="coerce").fillna(0) > 0].copy()
    if d.empty:
        return pd.Series(dtype=float)
    drafts = pd.to_numeric(d["num_drafts"], errors="coerce")
    decode = pd.to_numeric(d["output_tokens"], errors="coerce") - pd.to_numeric(d["num_ok"], errors="coerce")
    plain = (decode - drafts * pd.to_numeric(d["mean_acceptance_length"], errors="coerce")).clip(lower=0)
    d["_drafts"], d["_steps"] = drafts, drafts + plain
    g = d.groupby(["arm", "workload", "concurrency"])[["_drafts", "_steps"]].sum()
    return (g["_drafts"] / g["_steps"]).rename("drafted_share")


def _interp(x: float, xs: np.ndarray, ys: np.ndarray) -> tuple[float | None, str]:
    """y at x, linear between the cells around it; outside the cells: None and which side."""
    if x < xs[0]:
        return None, "below"
    if x > xs[-1]:
        return None, "above"
    return float(np.interp(x, xs, ys)), "inside"


def _curves(cells: pd.DataFrame) -> dict[tuple[Any, ...], pd.DataFrame]:
    """(condition, workload, kind, K, level) -> that curve's cells, by measured acceptance length."""
    if cells.empty or "cell" not in cells.columns:
        return {}
    c = cells[cells["cell"]].dropna(subset=["acceptance_length", "speedup"])
    return {key: g.sort_values("acceptance_length") for key, g in c.groupby(_group_keys(c), sort=True)
            if g["set_length"].nunique() >= 2}


def _curve_for(curves: dict[tuple[Any, ...], pd.DataFrame], r: Mapping[str, Any],
               same_run: bool) -> tuple[tuple[Any, ...] | None, pd.DataFrame | None]:
    """The curve a real row is read against: its own condition and workload in its own run; from
    another run, its kind, K and level on the map's same workload, or the map's only one."""
    if same_run:
        key = (r.get("condition"), r.get("workload"), r["kind"], r["k"], r["concurrency"])
        return key, curves.get(key)
    match = {key: g for key, g in curves.items() if key[2:] == (r["kind"], r["k"], r["concurrency"])}
    same_wl = {key: g for key, g in match.items() if key[1] == r.get("workload")}
    pick = same_wl or (match if len({key[1] for key in match}) == 1 else {})
    if not pick:
        return None, None
    key = sorted(pick)[0]
    return key, pick[key]


def predict(cells: pd.DataFrame, shares: pd.Series | None = None, real: pd.DataFrame | None = None,
            cell_shares: pd.Series | None = None) -> pd.DataFrame:
    """Per real drafter row (the map's own with ``real`` None; else ``real``, :func:`drafter_rows` of
    another run) whose kind, K and level the map has a curve for: its measured acceptance length and
    speedup (the table's interval), the speedup its kind's cells give at that length (``predicted``,
    ``predicted_lo``/``predicted_hi`` read off the cells' interval ends), ``gap`` = measured /
    predicted - 1 and, given :func:`drafted_share` of the real arms' run (``shares``) and of the
    map's (``cell_shares``; the same as ``shares`` for the map's own drafters), how often the real
    arm and the cell nearest its acceptance drafted."""
    if cells.empty:
        return pd.DataFrame()
    curves = _curves(cells)
    same_run = real is None
    if not same_run and (real.empty or "cell" not in real.columns):
        return pd.DataFrame()
    cell_shares = shares if same_run and cell_shares is None else cell_shares
    rows_in = cells[~cells["cell"].astype(bool)] if same_run else real[~real["cell"].astype(bool)]
    rows = []
    for r in rows_in.to_dict("records"):
        key, ce = _curve_for(curves, r, same_run)
        if ce is None:
            continue
        xs = ce["acceptance_length"].to_numpy(float)
        x = r.get("acceptance_length")
        row = {"workload": r.get("workload"), "map_workload": key[1], "kind": r["kind"], "k": r["k"],
               "concurrency": r["concurrency"], "arm": r["arm"], "acceptance_length": x, "speedup": r["speedup"],
               "speedup_lo": r.get("speedup_lo"), "speedup_hi": r.get("speedup_hi"), "n_repeats": r.get("n_repeats"),
               "cell_lengths": f"{xs[0]:.2f}-{xs[-1]:.2f}", "predicted": None, "gap": None}
        if x is None or pd.isna(x):
            rows.append({**row, "where": "no acceptance measured"})
            continue
        p, where = _interp(float(x), xs, ce["speedup"].to_numpy(float))
        lo, _ = _interp(float(x), xs, ce["speedup_lo"].to_numpy(float))
        hi, _ = _interp(float(x), xs, ce["speedup_hi"].to_numpy(float))
        row.update(predicted=p, predicted_lo=lo, predicted_hi=hi, where=where,
                   gap=(r["speedup"] / p - 1.0) if p else None)
        near = ce.iloc[int(np.argmin(np.abs(xs - float(x))))]["arm"]
        if shares is not None and len(shares):
            row["drafted_share"] = shares.get((r["arm"], r.get("workload"), r["concurrency"]))
        if cell_shares is not None and len(cell_shares):
            row["cell_drafted_share"] = cell_shares.get((near, key[1], r["concurrency"]))
        rows.append(row)
    return pd.DataFrame(rows)


def _fmt(x: Any, spec: str = ".2f") -> str:
    return "n/a" if x is None or (isinstance(x, float) and math.isnan(x)) else format(x, spec)


def _where(r: Mapping[str, Any]) -> str:
    if r["where"] == "below":
        return f"pays at every length measured (from {r['lengths'][0]:.2f})"
    if r["where"] == "above":
        return f"costs at every length measured (up to {r['lengths'][-1]:.2f})"
    def end(name: str) -> str:  # a band end, or the side of the cells it lies beyond
        where = r[f"{name}_where"]
        return {"inside": _fmt(r[name]), "below": f"<{r['lengths'][0]:.2f}",
                "above": f">{r['lengths'][-1]:.2f}"}.get(where, "n/a")

    return f"break-even at acceptance length {r['break_even']:.2f} [{end('band_lo')}, {end('band_hi')}]"


def break_even_lines(be: pd.DataFrame) -> list[str]:
    """One line per kind, K, workload and level: the break-even and its band, or which side it lies."""
    lines = []
    for r in be.to_dict("records"):
        cond = f"{r['condition']} " if r.get("condition") not in (None, "default") else ""
        lines.append(f"{cond}{r['workload']} c={r['concurrency']:g} {r['kind']} K={r['k']}: {_where(r)}; cells "
                     + ", ".join(f"{x:.2f}->{y:.2f}x" for x, y in zip(r["lengths"], r["speedups"], strict=True))
                     + f" ({r['n_repeats']} starts)")
    return lines


def prediction_lines(pr: pd.DataFrame) -> list[str]:
    """One line per real arm and level: measured against read off its kind's cells."""
    lines = []
    for r in pr.to_dict("records"):
        on = f" (map on {r['map_workload']})" if r.get("map_workload") not in (None, r["workload"]) else ""
        head = (f"{r['workload']}{on} c={r['concurrency']:g} {r['arm']}: acceptance length {_fmt(r['acceptance_length'])}, "
                f"measured {r['speedup']:.2f}x [{_fmt(r['speedup_lo'])}, {_fmt(r['speedup_hi'])}]")
        if r.get("predicted") is None or pd.isna(r.get("predicted")):
            side = {"below": "below", "above": "above"}.get(r["where"])
            lines.append(head + (f"; {side} the cells' lengths ({r['cell_lengths']}): not predicted" if side
                                 else f"; {r['where']}"))
            continue
        line = (head + f"; the map gives {r['predicted']:.2f}x [{_fmt(r['predicted_lo'])}, {_fmt(r['predicted_hi'])}]"
                f", gap {100 * r['gap']:+.0f}%")
        share, cshare = r.get("drafted_share"), r.get("cell_drafted_share")
        if share is not None and cshare is not None and pd.notna(share) and pd.notna(cshare):
            line += f"; drafted on {100 * share:.0f}% of steps against the cells' {100 * cshare:.0f}%"
        lines.append(line)
    return lines


# -- a live endpoint against the map (specnb watch / specnb alerts --map) ---------------------

# fewer drafts than this in a window: its acceptance length is not judged against the map
MIN_DRAFTS = 50


@dataclass(frozen=True)
class MapLevel:
    """One level of a map's curve, in the scheduler's units: the mean running requests its cells
    ran at, and ``floor``, the acceptance length below which the cells are shown to lose there: the
    band's lower end (where the cells' upper interval ends reach 1.0); the top cell's length where
    every cell's interval lies below 1.0; None where no cell is shown to lose (nothing to fall below).
    A window below the floor costs by the map's own interval, not only by its estimate."""

    concurrency: int
    running: float
    floor: float | None
    where: str
    break_even: float | None
    band_lo: float | None
    band_hi: float | None


@dataclass(frozen=True)
class BreakEvenLine:
    """A map's break-even for one drafter kind and K on one workload, level by level."""

    run: str
    kind: str
    k: int
    workload: str
    levels: list[MapLevel]

    def segments(self) -> list[tuple[float, float, MapLevel, MapLevel | None]]:
        """The running-request ranges the map judges, each with the level at its start and the next:
        from 0.8 x the lowest level's batch to 1.5 x the highest's (beyond: unmeasured). A closed loop's
        measured batch sits below its concurrency (the gaps between a client's requests), a live
        endpoint's near its users: 1.5 x keeps a live load of the top level's users inside."""
        placed = sorted(self.levels, key=lambda lv: lv.running)
        out = []
        for i, lv in enumerate(placed):
            lo = placed[0].running * 0.8 if i == 0 else lv.running
            nxt = placed[i + 1] if i + 1 < len(placed) else None
            out.append((lo, nxt.running if nxt else lv.running * 1.5, lv, nxt))
        return out

    def at(self, running: float) -> tuple[float | None, str] | None:
        """The break-even a window at ``running`` requests is judged against, and where it is read:
        linear in running requests between the two levels around it (both with a floor); the level's
        own below the first level's batch and past the last; ``(None, where)`` where the level below
        pays at every length the map set; None outside the judged range (unmeasured)."""
        for lo, hi, lv, nxt in self.segments():  # a boundary belongs to the level above it, as in PromQL
            if lo <= running < hi or (nxt is None and running == hi):
                if lv.floor is None or nxt is None or nxt.floor is None or running <= lv.running:
                    return lv.floor, f"c={lv.concurrency}"
                slope = (nxt.floor - lv.floor) / (nxt.running - lv.running)
                return lv.floor + (running - lv.running) * slope, f"between c={lv.concurrency} and c={nxt.concurrency}"
        return None

    def margin(self, length: float, drafts: float) -> float:
        """Z standard errors of a window's mean acceptance length over ``drafts`` drafts, with the
        largest variance an accepted count in [0, K] of that mean can have (Bhatia-Davis)."""
        extra = min(max(length - 1.0, 0.0), float(self.k))
        return WATCH_Z * math.sqrt(extra * (self.k - extra) / drafts) if drafts > 0 else math.inf


# one-sided, as the watch's acceptance rule (specnb.analysis.watch.ACCEPTANCE_Z)
WATCH_Z = 3.0


def break_even_line(df: pd.DataFrame, run: str, kind: str, k: int, workload: str | None = None) -> BreakEvenLine:
    """From a map run's frame: the curve of ``kind`` at ``k`` (on ``workload``, named where the map
    has several), placed in running requests by the batch its cells ran at each level."""
    from specnb.analysis.pairing import AnalysisError, usable
    from specnb.analysis.schedule import measured_batch
    from specnb.analysis.tables import summarize
    from specnb.ledger import arm_configs

    ok = usable(df)
    configs = arm_configs(df)
    be = break_even(map_cells(summarize(df), configs)) if len(ok) else pd.DataFrame()
    have = sorted({(r["kind"], int(r["k"])) for r in be.to_dict("records")}) if len(be) else []
    mine = be[(be["kind"] == kind) & (be["k"] == k)] if len(be) else be
    if mine.empty:
        raise AnalysisError(f"map {run} has no curve for {kind} at K={k} (it has: "
                            f"{', '.join(f'{a} K={b}' for a, b in have) or 'none'})")
    workloads = sorted(set(mine["workload"]))
    if workload is None and len(workloads) > 1:
        raise AnalysisError(f"map {run} has {kind} K={k} on workloads {workloads}: name one")
    workload = workload or workloads[0]
    if workload not in workloads:
        workload = workloads[0] if len(workloads) == 1 else None
        if workload is None:
            raise AnalysisError(f"map {run} has no {kind} K={k} curve on that workload (it has {workloads})")
    mine = mine[mine["workload"] == workload]
    conditions = sorted(set(mine["condition"]))
    if len(conditions) > 1:
        raise AnalysisError(f"map {run} has {kind} K={k} under conditions {conditions}: give a map of one condition")
    batch = measured_batch(ok[(ok["workload"] == workload) & (ok["condition"] == conditions[0])]
                           if "condition" in ok.columns else ok[ok["workload"] == workload])
    levels = []
    for r in mine.sort_values("concurrency").to_dict("records"):
        cells = [a for a, cfg in configs.items() if is_ceiling(cfg) and kind_of(cfg) == kind and cfg.get(K_KEY) == k]
        ran = [batch[(a, int(r["concurrency"]))] for a in cells if (a, int(r["concurrency"])) in batch]
        floor = {"inside": r["band_lo"], "above": max(r["lengths"])}.get(r["band_lo_where"])
        levels.append(MapLevel(int(r["concurrency"]), float(np.mean(ran)) if ran else float(r["concurrency"]),
                               floor, r["where"], _num(r["break_even"]), _num(r["band_lo"]), _num(r["band_hi"])))
    return BreakEvenLine(run=run, kind=kind, k=k, workload=workload, levels=levels)


def _num(x: Any) -> float | None:
    return None if x is None or (isinstance(x, float) and math.isnan(x)) else float(x)


def below_break_even(line: BreakEvenLine, length: float | None, drafts: float | None,
                     running: float) -> tuple[bool | None, str]:
    """Whether a window's mean acceptance length is below the map's break-even at its load: True
    (below by more than its sampling error: the drafter now costs, whatever traffic it meets), False,
    or None (not judged), with the phrase that says why."""
    found = line.at(running)
    if found is None:
        lo, hi = min(x.running for x in line.levels), max(x.running for x in line.levels)
        return None, f"the map has no level near {running:.1f} running (it measured {lo:.1f} to {hi:.1f})"
    floor, where = found
    if length is None or not drafts or drafts < MIN_DRAFTS:
        return None, f"{drafts or 0:.0f} drafts in the window ({MIN_DRAFTS} needed to judge it against the map)"
    if floor is None:
        return None, (f"no cell of the map's {line.kind} K={line.k} is shown to lose at {where}: nothing to fall "
                      "below there")
    margin = line.margin(length, drafts)
    text = (f"acceptance length {length:.2f} against {floor:.2f}, below which the map's cells lose at "
            f"{running:.1f} running ({where}; less {margin:.2f} for this window's {drafts:.0f} drafts)")
    return length < floor - margin, text


def at_length(cells: pd.DataFrame, length: float, k: int, method: str | None = None) -> pd.DataFrame:
    """The map as the calculator's cost side: for every curve at K = ``k`` (of a kind whose method is
    ``method``, where given), the speedup its cells give at acceptance length ``length`` (with the
    band read off the cells' interval ends; None outside the cells, ``where`` says which side) and
    the curve's break-even (:func:`break_even`)."""
    be = break_even(cells)
    rows = []
    for key, ce in _curves(cells).items():
        cond, wl, kind, kk, c = key
        if int(kk) != int(k) or (method and method_of(str(kind)) != method):
            continue
        xs = ce["acceptance_length"].to_numpy(float)
        p, where = _interp(float(length), xs, ce["speedup"].to_numpy(float))
        lo, _ = _interp(float(length), xs, ce["speedup_lo"].to_numpy(float))
        hi, _ = _interp(float(length), xs, ce["speedup_hi"].to_numpy(float))
        b = be[(be["condition"] == cond) & (be["kind"] == kind) & (be["k"] == kk) & (be["concurrency"] == c)
               & (be["workload"] == wl)]
        b = b.iloc[0] if len(b) else None
        rows.append({"condition": cond, "workload": wl, "kind": kind, "k": int(kk), "concurrency": c,
                     "length": float(length),
                     "predicted": p, "predicted_lo": lo, "predicted_hi": hi, "where": where,
                     "break_even": None if b is None else _num(b["break_even"]),
                     "break_even_where": None if b is None else b["where"]})
    return pd.DataFrame(rows)
