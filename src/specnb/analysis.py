"""Decisions from ledgers: paired speedups with bootstrap intervals, where they cross 1.0,
whether to attach the drafter, and what the drafter costs in KV capacity.

A sweep answers one operational question: below which concurrency does this drafter pay on
this endpoint and workload? One number per point cannot answer it honestly, because the
same CPU server measures up to 1.5x apart between two starts. This module puts an interval
on every paired speedup and on the concurrency where the curve crosses 1.0, then reads the
acceptance rate at that point against seed 004's rule of thumb, and the KV pool against
seed 000's "the guide also takes a seat".

**Pairs.** A ratio is formed only within a pair (:func:`specnb.report.paired`): the
speculative and the baseline point of the same sweep, (study, condition,) workload,
concurrency and repeat, sharing prompts, sampling and engine build, else
:class:`~specnb.report.PairingError`. Three ratios per pair: ``speedup`` (output tok/s in
the steady window), ``per_user_speedup`` (mean per-user decode tok/s) and
``computed_speedup`` (uncached prompt + output tokens per wall second, seed 002).

**The bootstrap** is two-level, paired and percentile-based: two sources of noise are
drawn for every replicate curve.

1. *Server starts.* Each repeat is a fresh start of both servers: the dominant noise here.
   A replicate draws ``n_repeats`` repeats with replacement; its speedup at a concurrency
   is the mean of the drawn repeats' ratios (the point estimate is the mean of the
   measured per-repeat ratios, as in :func:`specnb.report.speedup_table`). The same draw
   is used at every concurrency of a curve, because one server start serves all levels of
   its repeat (its luck is shared along the curve): replicate curves keep the shape of
   measured ones, which is what the crossing is read from. (If the levels of a curve hold
   different sets of repeats, each level draws on its own.)
2. *Prompts.* Prompts are drawn with replacement (a weight per prompt id), and one draw
   applies to both arms, every repeat and every concurrency of the curve: the sweep sends
   the same prompts to both arms in the same order in every repeat (the ids are checked),
   so prompts are crossed with repeats, not nested in them, and resampling requests anew
   inside each repeat would treat one prompt's luck as independent each time it recurs.
   Each metric is re-formed with the prompt weights as a ratio estimator anchored at the
   ledger's value, so equal weights return the ledger exactly: steady-window output tok/s
   scales with tokens over request-seconds inside the window (a short request brings
   little time as well as few tokens, so prompt length does not pass for noise); per-user
   decode speed is the weighted mean of per-request 1 / TPOT; computed tok/s scales with
   (uncached prompt + output) tokens over request-seconds of the whole run. Requests come
   from each ledger's Parquet sidecar; a pair without one enters through the repeat draw
   only.

The interval is the percentile interval over ``n_boot`` replicates (default 2000, numpy-
vectorised). Each curve is seeded from ``seed`` and its own key, so results are
reproducible and one curve's interval does not change when other curves join the frame.

What it cannot do, said plainly. With 2 repeats the start draw takes only three shapes
({r0, r0}, {r0, r1}, {r1, r1}): that part of the interval is about the two starts' [min,
max], a lower bound on start-to-start uncertainty rather than an estimate of it. With 1
repeat there is no between-start information at all and the interval covers the prompt
mix only. Requests served together share one server and are not independent; the prompt
level treats them as exchangeable given the start. A sweep whose levels send different
numbers of requests also sends different prompt subsets (request i gets prompt i), so
part of a curve's shape can be prompt mix; shared prompt weights keep that coherent but
cannot remove it. ``n_repeats`` and ``resampled`` columns say which case a row is, and the
formatters flag rows with fewer than 3 repeats.

**Threshold.** The crossing of 1.0 is interpolated in log2(concurrency) on the mean curve
(:func:`specnb.report.crossing`: the first fall through 1.0) and on every replicate curve;
its interval is the percentile interval of the replicate crossings, where a replicate that
pays over the whole range counts as "beyond the largest c" and one that never pays as
"below the smallest c" (shown as ``>8`` / ``<1``), and the share of replicates that never
cross is reported next to it.
"""

from __future__ import annotations

import json
import math
import warnings
import zlib
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from specnb import theory
from specnb.ledger import load_requests
from specnb.report import OPTIONAL_KEYS, PairingError, _baseline_arm, crossing, paired

__all__ = [
    "AnalysisError",
    "DEFAULT_N_BOOT",
    "DEFAULT_SEED",
    "DEFAULT_LEVEL",
    "METRICS",
    "Curve",
    "SpeedupBootstrap",
    "Threshold",
    "Decision",
    "group_keys",
    "bootstrap_speedups",
    "speedup_intervals",
    "crossings",
    "thresholds",
    "decide",
    "kv_capacity",
    "format_speedup_table",
    "format_threshold",
    "format_thresholds",
    "format_decision",
    "format_decisions",
    "format_kv_capacity",
    "format_report",
]

DEFAULT_N_BOOT = 2000
DEFAULT_SEED = 0
DEFAULT_LEVEL = 0.95
GROUP_CANDIDATES = ["sweep", "condition", "arm", "workload"]
# ratio column (from report.paired) -> ledger column it divides
METRICS = {
    "speedup": "output_tok_s",
    "per_user_speedup": "per_user_decode_tok_s_mean",
    "computed_speedup": "computed_tok_s_wall",
}
_KINDS = np.array(["crosses", "rises", "above", "below"])
# Fewer repeats than this and the interval cannot estimate start-to-start noise.
FEW_REPEATS = 3
PLAIN_CONDITION = "default"  # load_ledgers' condition for a sweep that is not part of a study


class AnalysisError(ValueError):
    """Bad arguments to an analysis call; the message is one line meant for the user."""


def group_keys(df: pd.DataFrame) -> list[str]:
    """The curve keys a frame supports: whichever of sweep, condition, arm, workload it has."""
    return [k for k in GROUP_CANDIDATES if k in df.columns]


@dataclass(frozen=True)
class Curve:
    """One speedup curve (a group at every concurrency) and its bootstrap replicates."""

    group: dict[str, Any]
    concurrency: np.ndarray  # (C,) ascending
    replicates: dict[str, np.ndarray]  # metric -> (n_boot, C)
    n_repeats: int  # fewest repeats behind any point of the curve


@dataclass
class SpeedupBootstrap:
    """What :func:`bootstrap_speedups` returns: the tidy table and the replicate curves."""

    table: pd.DataFrame
    curves: list[Curve]
    group_keys: list[str]
    n_boot: int
    seed: int
    level: float


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

    @property
    def label(self) -> str:
        return _label(self.group)


@dataclass(frozen=True)
class Decision:
    """Attach the drafter or not, for one endpoint and workload, with the evidence."""

    group: dict[str, Any]
    threshold: Threshold
    at_concurrency: float  # where acceptance was read: the threshold, or the range end that matters
    acceptance_rate: float | None
    acceptance_length: float | None
    accepted_output_share: float | None
    speedup: float | None  # mean curve, at at_concurrency
    per_user_speedup: float | None
    verdict: str | None  # theory.acceptance_verdict(acceptance_rate)
    method: str | None

    @property
    def label(self) -> str:
        return _label(self.group)


def _label(group: dict[str, Any], omit: Sequence[str] = ("sweep",)) -> str:
    # a report usually holds one sweep, and a plain sweep is the condition "default"
    # (load_ledgers): naming either on every line would be noise
    return " / ".join(str(v) for k, v in group.items()
                      if k not in omit and not _isna(v) and not (k == "condition" and v == PLAIN_CONDITION))


def _redundant_keys(groups: pd.DataFrame) -> list[str]:
    """Curve keys that would only repeat themselves on every line: sweep and condition when
    they take one value, and the sweep when each condition has a sweep of its own (a study)."""
    omit = [k for k in ("sweep", "condition") if k in groups.columns and groups[k].astype(str).nunique() <= 1]
    if "sweep" in groups.columns and "condition" in groups.columns and "sweep" not in omit:
        pairs = groups[["sweep", "condition"]].astype(str).drop_duplicates()
        if pairs["condition"].is_unique:
            omit.append("sweep")
    return omit


def _same_everywhere(items: Sequence[Threshold] | Sequence[Decision]) -> list[str]:
    return _redundant_keys(pd.DataFrame([x.group for x in items]))


def _isna(v: Any) -> bool:
    return v is None or (isinstance(v, float) and math.isnan(v))


def _key_hash(key: tuple) -> int:
    """A stable number per curve key (Python's hash() is salted per process)."""
    return zlib.crc32(json.dumps([str(v) for v in key]).encode())


# ---------------------------------------------------------------- request-level terms


@dataclass(frozen=True)
class _Terms:
    """Per-request numerators and denominators of one point's metrics, in request-index order."""

    index: np.ndarray
    prompt_id: np.ndarray
    steady_x: np.ndarray
    steady_d: np.ndarray
    user_u: np.ndarray  # 1 / TPOT, 0 where not valid
    user_ok: np.ndarray  # 1.0 where the request has a TPOT
    comp_x: np.ndarray
    comp_d: np.ndarray


def _terms(req: pd.DataFrame, concurrency: int) -> _Terms | None:
    need = {"index", "worker", "start_s", "end_s", "chunk_times_s", "chunk_tokens", "output_tokens"}
    if req.empty or not need <= set(req.columns):
        return None
    req = req.sort_values("index")
    err = req["error"] if "error" in req.columns else pd.Series([None] * len(req), index=req.index)
    ok = (err.isna() & (req["output_tokens"] > 0)).to_numpy()
    start, end = req["start_s"].to_numpy(float), req["end_s"].to_numpy(float)
    # The steady window as the load generator drew it: from the last worker's first start to
    # the first worker's last end (load.run_load); without one the ledger used the wall clock.
    per_worker = req.groupby("worker")
    lo, hi = per_worker["start_s"].min().max(), per_worker["end_s"].max().min()
    if per_worker.ngroups != concurrency or not hi > lo:
        lo, hi = start.min(), end.max()
    x = np.zeros(len(req))
    for i, (times, toks) in enumerate(zip(req["chunk_times_s"], req["chunk_tokens"], strict=True)):
        if ok[i] and times is not None and len(times):
            t, k = np.asarray(times, float), np.asarray(toks, float)
            x[i] = k[(t >= lo) & (t <= hi)].sum()
    d = np.clip(np.minimum(end, hi) - np.maximum(start, lo), 0.0, None)
    tpot = req["tpot_s"].to_numpy(float) if "tpot_s" in req.columns else np.full(len(req), np.nan)
    user_ok = ok & np.isfinite(tpot) & (tpot > 0)
    user_u = np.where(user_ok, 1.0 / np.where(user_ok, tpot, 1.0), 0.0)
    prompt = req["prompt_tokens"].fillna(0).to_numpy(float) if "prompt_tokens" in req.columns else 0.0
    cached = (pd.to_numeric(req["cached_prompt_tokens"], errors="coerce").fillna(0).to_numpy(float)
              if "cached_prompt_tokens" in req.columns else 0.0)
    comp_x = np.where(ok, prompt - cached + req["output_tokens"].to_numpy(float), 0.0)
    # the resampling unit is the prompt; without prompt ids each request is its own unit
    pid = (req["prompt_id"].astype(str).to_numpy() if "prompt_id" in req.columns
           else np.array([f"#{i}" for i in req["index"]]))
    return _Terms(req["index"].to_numpy(int), pid, x, d, user_u, user_ok.astype(float), comp_x,
                  np.clip(end - start, 0.0, None))


def _rate_factor(w: np.ndarray, x: np.ndarray, d: np.ndarray) -> np.ndarray:
    """(sum w x / sum w d) / (sum x / sum d): 1 for the measured sample."""
    sx, sd = x.sum(), d.sum()
    if sx <= 0 or sd <= 0:
        return np.ones(w.shape[:-1])
    wx, wd = w @ x, w @ d
    with np.errstate(divide="ignore", invalid="ignore"):
        f = (wx / wd) / (sx / sd)
    # a draw with no time in the window says nothing: keep the measured value
    return np.where(wd > 0, f, 1.0)


def _mean_factor(w: np.ndarray, u: np.ndarray, valid: np.ndarray) -> np.ndarray:
    n = valid.sum()
    if n == 0 or u.sum() <= 0:
        return np.ones(w.shape[:-1])
    wu, wn = w @ u, w @ valid
    with np.errstate(divide="ignore", invalid="ignore"):
        f = (wu / wn) / (u.sum() / n)
    return np.where(wn > 0, f, 1.0)


def _factors(t: _Terms, w: np.ndarray) -> dict[str, np.ndarray]:
    return {
        "speedup": _rate_factor(w, t.steady_x, t.steady_d),
        "per_user_speedup": _mean_factor(w, t.user_u, t.user_ok),
        "computed_speedup": _rate_factor(w, t.comp_x, t.comp_d),
    }


class _Sidecars:
    """Reads each ledger's Parquet sidecar once."""

    def __init__(self) -> None:
        self._cache: dict[str, _Terms | None] = {}

    def terms(self, path: Any, concurrency: int) -> _Terms | None:
        if _isna(path) or not Path(str(path)).is_file():
            return None
        key = str(path)
        if key not in self._cache:
            self._cache[key] = _terms(load_requests(key), concurrency)
        return self._cache[key]


def _pair_terms(row: pd.Series, side: _Sidecars) -> tuple[_Terms, _Terms] | None:
    spec = side.terms(row.get("path"), int(row["concurrency"]))
    base = side.terms(row.get("path_base"), int(row["concurrency"]))
    if spec is None or base is None:
        return None
    if not (np.array_equal(spec.index, base.index) and np.array_equal(spec.prompt_id, base.prompt_id)):
        raise PairingError(
            f"{row['arm']} vs {row['baseline_arm']} at {row['workload']} c={row['concurrency']} "
            f"r={row['repeat']}: the request records do not send the same prompts in the same order"
        )
    return spec, base


# ---------------------------------------------------------------- the bootstrap


def _quantiles(values: np.ndarray, level: float, axis: int = 0) -> tuple[np.ndarray, np.ndarray]:
    a = (1.0 - level) / 2
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # all-NaN columns stay NaN
        lo, hi = np.nanquantile(values, [a, 1.0 - a], axis=axis)
    return lo, hi


def _check_args(n_boot: int, seed: int, level: float) -> None:
    if int(n_boot) != n_boot or n_boot < 1:
        raise AnalysisError(f"n_boot must be a positive integer, got {n_boot}")
    if int(seed) != seed or seed < 0:
        raise AnalysisError(f"seed must be a non-negative integer, got {seed}")
    if not 0.0 < level < 1.0:
        raise AnalysisError(f"level must be in (0, 1), got {level}")


def bootstrap_speedups(
    df: pd.DataFrame,
    baseline: str | None = None,
    *,
    n_boot: int = DEFAULT_N_BOOT,
    seed: int = DEFAULT_SEED,
    level: float = DEFAULT_LEVEL,
    keys: Sequence[str] | None = None,
    prompts: bool = True,
) -> SpeedupBootstrap:
    """Paired speedups per (curve, concurrency) with two-level bootstrap intervals.

    ``df`` is :func:`specnb.load_ledgers` output; ``keys`` are the curve keys (default
    :func:`group_keys`); ``prompts=False`` skips the prompt level (server starts only).
    Raises :class:`~specnb.report.PairingError` when points that would pair differ in
    prompts, sampling or engine build, and :class:`AnalysisError` on bad arguments.

    ``table`` has one row per curve and concurrency: the curve keys, ``concurrency``,
    ``n_repeats``, ``n_requests`` (fewest requests in a pair with records), ``resampled``
    (``repeats+prompts``, ``repeats``, ``prompts``, ``none``; ``some prompts`` when only
    part of the pairs had records), ``baseline_arm``, ``method``, ``base_tok_s`` and
    ``spec_tok_s`` (means over repeats), ``speedup`` / ``per_user_speedup`` /
    ``computed_speedup`` each with ``_lo`` / ``_hi``, ``speedup_min`` / ``speedup_max`` (over
    repeats), and the speculative arm's ``acceptance_length``, ``acceptance_rate`` and
    ``accepted_output_share`` (means over repeats). ``curves`` holds the replicate curves.
    """
    _check_args(n_boot, seed, level)
    n_boot = int(n_boot)
    pairs = paired(df, baseline)
    keys = list(keys) if keys is not None else group_keys(df)
    missing = [k for k in keys if k not in df.columns]
    if missing:
        raise AnalysisError(f"group keys {missing} are not columns of the frame")
    if pairs.empty:
        return SpeedupBootstrap(pd.DataFrame(), [], keys, n_boot, seed, level)
    for ratio in METRICS:
        if ratio not in pairs.columns:
            pairs[ratio] = np.nan
    side = _Sidecars()
    rows: list[dict[str, Any]] = []
    curves: list[Curve] = []
    for key, g in pairs.groupby(keys, sort=True, dropna=False):
        key = key if isinstance(key, tuple) else (key,)
        group = dict(zip(keys, key, strict=True))
        rng = np.random.default_rng([seed, _key_hash(key)])
        levels = sorted(g["concurrency"].unique())
        repeat_sets = {c: tuple(sorted(g.loc[g["concurrency"] == c, "repeat"])) for c in levels}
        shared = len(set(repeat_sets.values())) == 1
        n_rep_all = len(next(iter(repeat_sets.values())))
        # repeat draws shared along the curve: one server start serves every level of a repeat
        shared_draw = rng.integers(0, n_rep_all, size=(n_rep_all, n_boot)) if shared else None
        terms = {i: _pair_terms(row, side) if prompts else None for i, row in g.iterrows()}
        # prompt weights shared by both arms, every repeat and every level: the same prompts
        # recur in all of them, so one draw of "which prompts" must apply to all at once
        prompt_ids = sorted({p for t in terms.values() if t is not None for p in t[0].prompt_id})
        n_ids = len(prompt_ids)
        weights = (rng.multinomial(n_ids, np.full(n_ids, 1.0 / n_ids), size=n_boot).astype(float)
                   if n_ids else None)
        column = {p: j for j, p in enumerate(prompt_ids)}
        reps = {m: np.full((n_boot, len(levels)), np.nan) for m in METRICS}
        for ci, c in enumerate(levels):
            pts = g[g["concurrency"] == c].sort_values("repeat")
            n_rep = len(pts)
            # slot s of replicate b uses repeat draw[s, b]
            draw = shared_draw if shared else np.random.default_rng(
                [seed, _key_hash(key), int(c)]).integers(0, n_rep, size=(n_rep, n_boot))
            per_repeat = {m: np.empty((n_rep, n_boot)) for m in METRICS}
            n_req, with_requests = [], 0
            for k, (i, row) in enumerate(pts.iterrows()):
                if terms[i] is None:
                    for m in METRICS:
                        per_repeat[m][k] = row[m]
                    continue
                spec_t, base_t = terms[i]
                n_req.append(len(spec_t.index))
                with_requests += 1
                w = weights[:, [column[p] for p in spec_t.prompt_id]]
                fs, fb = _factors(spec_t, w), _factors(base_t, w)
                for m in METRICS:
                    per_repeat[m][k] = row[m] * fs[m] / fb[m]
            for m in METRICS:
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore", RuntimeWarning)
                    reps[m][:, ci] = np.nanmean(per_repeat[m][draw, np.arange(n_boot)], axis=0)
            resampled = ("repeats" if n_rep > 1 else "") + (
                "+prompts" if with_requests == n_rep else "+some prompts" if with_requests else "")
            out = dict(group)
            out.update(
                concurrency=int(c),
                n_repeats=n_rep,
                n_requests=min(n_req) if n_req else None,
                resampled=resampled.lstrip("+") or "none",
                baseline_arm=pts["baseline_arm"].iloc[0],
                method=pts["method"].iloc[0] if "method" in pts.columns else None,
                base_tok_s=pts["output_tok_s_base"].mean(),
                spec_tok_s=pts["output_tok_s"].mean(),
            )
            for m in METRICS:
                lo, hi = _quantiles(reps[m][:, ci], level)
                out[m] = pts[m].mean()
                out[f"{m}_lo"], out[f"{m}_hi"] = float(lo), float(hi)
            out["speedup_min"], out["speedup_max"] = pts["speedup"].min(), pts["speedup"].max()
            for col, src in (("acceptance_length", "mean_acceptance_length"),
                             ("acceptance_rate", "acceptance_rate"),
                             ("accepted_output_share", "accepted_output_share")):
                out[col] = pd.to_numeric(pts[src], errors="coerce").mean() if src in pts.columns else np.nan
            rows.append(out)
        n_min = int(g.groupby("concurrency").size().min())
        curves.append(Curve(group, np.asarray(levels, dtype=float), reps, n_min))
    return SpeedupBootstrap(pd.DataFrame(rows), curves, keys, n_boot, seed, level)


def speedup_intervals(df: pd.DataFrame, baseline: str | None = None, **kwargs: Any) -> pd.DataFrame:
    """The tidy table of :func:`bootstrap_speedups` alone (same arguments)."""
    return bootstrap_speedups(df, baseline, **kwargs).table


# ---------------------------------------------------------------- thresholds


def crossings(concurrency: Sequence[float], curves: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """:func:`specnb.report.crossing` on every row of ``curves`` (n, C) at once.

    Returns the kinds (``crosses`` / ``rises`` / ``above`` / ``below``) and the crossing
    concurrency (NaN for ``above`` / ``below``). Rows with NaN go through the scalar
    function, which drops NaN points.
    """
    c = np.asarray(concurrency, dtype=float)
    v = np.atleast_2d(np.asarray(curves, dtype=float))
    if v.shape[1] != c.size:
        raise AnalysisError(f"curves have {v.shape[1]} points, concurrency has {c.size}")
    order = np.argsort(c)
    c, v = c[order], v[:, order]
    if not c.size:
        return np.full(len(v), "below", dtype=object), np.full(len(v), np.nan)
    x = np.log2(c)
    kinds = np.where(v[:, 0] >= 1.0, 2, 3)
    at = np.full(len(v), np.nan)
    if c.size >= 2:
        v0, v1 = v[:, :-1], v[:, 1:]
        cross = ((v0 - 1.0) * (v1 - 1.0) < 0) | ((v1 == 1.0) & (v0 != 1.0))
        with np.errstate(all="ignore"):  # segments that do not cross divide by zero: masked below
            where = 2 ** (x[:-1] + (1.0 - v0) * (x[1:] - x[:-1]) / (v1 - v0))
        # the first fall through 1.0 is the threshold, even after a noisy rise below it
        for code, mask in ((1, cross & (v0 < v1)), (0, cross & (v0 > v1))):
            hit = mask.any(axis=1)
            first = mask.argmax(axis=1)
            kinds = np.where(hit, code, kinds)
            at = np.where(hit, where[np.arange(len(v)), first], at)
    out_kinds = _KINDS[kinds].astype(object)
    for i in np.flatnonzero(np.isnan(v).any(axis=1)):
        kind, val = crossing(list(c), list(v[i]))
        out_kinds[i], at[i] = kind, np.nan if val is None else val
    return out_kinds, at


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
        shares = {str(k): float(np.mean(rkinds == k)) for k in _KINDS}
        lo = hi = None
        if kind in ("crosses", "rises"):
            # a replicate that pays everywhere crossed beyond the range; one that never pays, before it
            past, before = ("above", "below") if kind == "crosses" else ("below", "above")
            vals = np.where(rkinds == kind, rat, np.nan)
            vals = np.where(rkinds == past, np.inf, np.where(rkinds == before, -np.inf, vals))
            vals = vals[~np.isnan(vals)]
            if vals.size:
                lo, hi = (float(q) for q in np.quantile(vals, [a, 1.0 - a], method="inverted_cdf"))
        out.append(Threshold(
            group=dict(curve.group), metric=metric, kind=kind, concurrency=at, lo=lo, hi=hi,
            share_no_crossing=shares["above"] + shares["below"], replicate_kinds=shares,
            c_min=int(cs.min()), c_max=int(cs.max()), n_repeats=curve.n_repeats,
            n_boot=boot.n_boot, level=boot.level,
        ))
    return out


def _curve_rows(boot: SpeedupBootstrap, group: dict[str, Any]) -> pd.DataFrame:
    t = boot.table
    mask = np.ones(len(t), dtype=bool)
    for k, v in group.items():
        mask &= t[k].isna().to_numpy() if _isna(v) else (t[k] == v).to_numpy()
    return t[mask].sort_values("concurrency")


def _curve_values(boot: SpeedupBootstrap, group: dict[str, Any], col: str) -> np.ndarray:
    return pd.to_numeric(_curve_rows(boot, group)[col], errors="coerce").to_numpy(float)


def _interp(cs: np.ndarray, vals: np.ndarray, at: float) -> float | None:
    """Linear in log2(concurrency) between measured levels; the nearest level outside them."""
    keep = ~np.isnan(vals)
    if not keep.any():
        return None
    return float(np.interp(math.log2(at), np.log2(cs[keep]), vals[keep]))


# ---------------------------------------------------------------- decisions


def decide(boot: SpeedupBootstrap, *, serving_concurrency: float | None = None,
           metric: str = "speedup") -> list[Decision]:
    """Per curve: attach the drafter below the threshold or not, and the acceptance there.

    Acceptance is read at ``serving_concurrency`` when given (seed 004: at the real batch
    size), else at the threshold, or for a curve that never crosses at the end of the range
    that decides it (the largest c for one that pays throughout, the smallest for one that
    never pays); interpolated in log2(concurrency), nearest measured level outside the range.
    """
    if serving_concurrency is not None and not serving_concurrency > 0:
        raise AnalysisError(f"serving_concurrency must be > 0, got {serving_concurrency}")
    out = []
    for th in thresholds(boot, metric):
        rows = _curve_rows(boot, th.group)
        cs = rows["concurrency"].to_numpy(float)
        if serving_concurrency is not None:
            at = float(serving_concurrency)
        elif th.concurrency is not None:
            at = th.concurrency
        else:
            at = float(th.c_max if th.kind == "above" else th.c_min)

        def read(col: str, rows: pd.DataFrame = rows, cs: np.ndarray = cs, at: float = at) -> float | None:
            return _interp(cs, pd.to_numeric(rows[col], errors="coerce").to_numpy(float), at)

        rate = read("acceptance_rate")
        out.append(Decision(
            group=dict(th.group), threshold=th, at_concurrency=at, acceptance_rate=rate,
            acceptance_length=read("acceptance_length"),
            accepted_output_share=read("accepted_output_share"),
            speedup=read(metric), per_user_speedup=read("per_user_speedup"),
            verdict=None if rate is None else theory.acceptance_verdict(min(max(rate, 0.0), 1.0)),
            method=rows["method"].iloc[0] if "method" in rows.columns and len(rows) else None,
        ))
    return out


# ---------------------------------------------------------------- KV capacity


def kv_capacity(df: pd.DataFrame, *, context_tokens: float | None = None,
                baseline: str | None = None) -> pd.DataFrame:
    """KV pool per arm (``kv_cache_tokens``, from the server start log or ``cache_config_info``),
    the share the drafter takes against the baseline arm of the same sweep / condition, and
    the concurrent sessions it holds at ``context_tokens`` (seed 000)."""
    if context_tokens is not None and not context_tokens > 0:
        raise AnalysisError(f"context_tokens must be > 0, got {context_tokens}")
    if df.empty or "kv_cache_tokens" not in df.columns:
        return pd.DataFrame()
    have = df[pd.to_numeric(df["kv_cache_tokens"], errors="coerce").notna()].copy()
    if have.empty:
        return pd.DataFrame()
    have["kv_cache_tokens"] = pd.to_numeric(have["kv_cache_tokens"])
    base_name = _baseline_arm(have, baseline)
    by = [k for k in ["sweep", *OPTIONAL_KEYS] if k in have.columns]
    rows = []
    for key, g in have.groupby(by, sort=True, dropna=False):
        key = key if isinstance(key, tuple) else (key,)
        base = g.loc[g["arm"] == base_name, "kv_cache_tokens"]
        base_kv = float(base.median()) if len(base) else None
        for arm, a in g.groupby("arm", sort=True):
            kv = float(a["kv_cache_tokens"].median())
            row = dict(zip(by, key, strict=True))
            row.update(
                arm=arm, speculative=bool(a["speculative"].iloc[0]) if "speculative" in a.columns else None,
                kv_cache_tokens=kv,
                kv_cache_tokens_min=float(a["kv_cache_tokens"].min()),
                kv_cache_tokens_max=float(a["kv_cache_tokens"].max()),
                baseline_kv_cache_tokens=base_kv,
                drafter_kv_share=theory.drafter_kv_share(base_kv, kv) if base_kv else None,
                context_tokens=context_tokens,
                sessions=theory.kv_sessions(kv, context_tokens) if context_tokens else None,
                baseline_sessions=(theory.kv_sessions(base_kv, context_tokens)
                                   if context_tokens and base_kv is not None else None),
            )
            rows.append(row)
    return pd.DataFrame(rows)


# ---------------------------------------------------------------- formatting


def _f(v: Any, spec: str = ".2f") -> str:
    return "-" if v is None or pd.isna(v) else format(v, spec)


def _c(v: float, th: Threshold) -> str:
    if v == -math.inf:
        return f"<{th.c_min}"
    if v == math.inf:
        return f">{th.c_max}"
    return f"{v:.1f}"


def _repeats_note(n: int) -> str:
    if n <= 1:
        return "1 repeat: the interval covers the prompt mix only, not server starts"
    if n < FEW_REPEATS:
        return f"{n} repeats: the interval understates start-to-start noise"
    return ""


def format_speedup_table(table: pd.DataFrame, level: float = DEFAULT_LEVEL) -> str:
    """Plain-text table: paired speedups with bootstrap intervals, per-user and computed-token
    speedups, acceptance, and the share of output the drafter supplied."""
    if table.empty:
        return "(no paired points)"
    pct = f"{100 * level:g}%"
    # sweep / condition columns only when they tell rows apart
    shown = [k for k in ("sweep", "condition") if k in table.columns and k not in _redundant_keys(table)]
    lead = "".join(f"{k:<12} " for k in shown)
    head = (f"{lead}{'arm':<12} {'workload':<10} {'c':>3} {'n':>2} {'base tok/s':>10} {'spec tok/s':>10} "
            f"{'speedup [' + pct + ' CI]':>20} {'per-user [' + pct + ' CI]':>21} {'computed':>8} "
            f"{'acc len':>7} {'acc %':>5} {'drafted %':>9}")
    lines = [head, "-" * len(head)]

    def ci(row: Any, m: str) -> str:
        if row.resampled == "none":
            return f"{_f(getattr(row, m))}x (1 run)"
        return f"{_f(getattr(row, m))}x [{_f(getattr(row, m + '_lo'))}, {_f(getattr(row, m + '_hi'))}]"

    for row in table.itertuples(index=False):
        rate = None if pd.isna(row.acceptance_rate) else 100 * row.acceptance_rate
        share = None if pd.isna(row.accepted_output_share) else 100 * row.accepted_output_share
        first = "".join(f"{'-' if _isna(getattr(row, k)) else str(getattr(row, k)):<12} " for k in shown)
        mark = "*" if row.n_repeats < FEW_REPEATS else " "
        lines.append(
            f"{first}{row.arm:<12} {row.workload:<10} {row.concurrency:>3} {row.n_repeats:>2}{mark}"
            f"{_f(row.base_tok_s, '.1f'):>10} {_f(row.spec_tok_s, '.1f'):>10} {ci(row, 'speedup'):>20} "
            f"{ci(row, 'per_user_speedup'):>21} {_f(row.computed_speedup):>7}x "
            f"{_f(row.acceptance_length):>7} {_f(rate, '.0f'):>5} {_f(share, '.0f'):>9}"
        )
    lines.append(f"speedup = speculative / baseline output tok/s (steady window), paired per repeat; "
                 f"[{pct} CI] bootstrap over repeats and prompts.")
    lines.append("per-user = mean decode tok/s per request; computed = (uncached prompt + output) "
                 "tok/s; drafted % = accepted draft tokens / output tokens.")
    if (table["n_repeats"] < FEW_REPEATS).any():
        lines.append(f"* n = repeats (server starts) < {FEW_REPEATS}: the interval cannot estimate "
                     "start-to-start noise; read it as a lower bound.")
    return "\n".join(lines)


def format_threshold(th: Threshold, omit: Sequence[str] = ("sweep",)) -> str:
    """One line: where the curve crosses 1.0 (with interval), or that it never does."""
    rng = f"c={th.c_min}..{th.c_max}"
    crossing_share = 1.0 - th.share_no_crossing
    if th.kind in ("crosses", "rises"):
        ci = (f"{100 * th.level:g}% CI {_c(th.lo, th)} to {_c(th.hi, th)}"
              if th.lo is not None and th.hi is not None else "no interval")
        head = (f"pays below c~{th.concurrency:.1f}" if th.kind == "crosses"
                else f"loses below c~{th.concurrency:.1f} and pays above it")
        text = (f"{head} ({ci}; {th.share_no_crossing:.0%} of {th.n_boot} bootstrap curves "
                f"never cross 1.0 in {rng})")
    else:
        side = "pays" if th.kind == "above" else "loses"
        text = (f"never crosses 1.0 in the measured range ({side} over {rng}; "
                f"{crossing_share:.0%} of {th.n_boot} bootstrap curves cross)")
    note = _repeats_note(th.n_repeats)
    what = "" if th.metric == "speedup" else f" [{th.metric}]"
    return f"{_label(th.group, omit)}{what}: {text}" + (f"; {note}" if note else "")


def format_thresholds(ths: Sequence[Threshold]) -> str:
    """One line per curve, labelled by the curve keys that differ between the curves."""
    omit = _same_everywhere(ths)
    return "\n".join(format_threshold(t, omit) for t in ths) if ths else "(no curves)"


def format_decision(d: Decision, omit: Sequence[str] = ("sweep",)) -> str:
    """Two lines: attach the drafter below X (interval) or not; then, indented, the acceptance
    evidence at that point and seed 004's verdict on it."""
    th = d.threshold
    rng = f"c={th.c_min}..{th.c_max}"
    ci = (f" ({100 * th.level:g}% CI {_c(th.lo, th)} to {_c(th.hi, th)})"
          if th.lo is not None and th.hi is not None else "")
    if th.kind == "crosses":
        head = f"attach the drafter below c~{th.concurrency:.1f}{ci}"
    elif th.kind == "rises":
        head = f"attach the drafter only above c~{th.concurrency:.1f}{ci}: it loses below"
    elif th.kind == "above":
        head = f"attach the drafter: it pays at every measured concurrency ({rng})"
    else:
        head = f"leave the drafter off: it never pays over {rng}"
    line = f"{_label(d.group, omit)}: {head}"
    if d.acceptance_rate is None:
        return line
    ev = f"at c~{d.at_concurrency:.1f}: acceptance {d.acceptance_rate:.0%} -> seed 004 rule: {d.verdict}"
    if (d.verdict == "worth it" and th.kind == "below") or (
            d.verdict == "switch it off" and th.kind == "above"):
        ev += " (the measured speedup overrules it)"
    ev += f"; acceptance length {_f(d.acceptance_length)}"
    if d.accepted_output_share is not None:
        ev += f", drafter supplied {d.accepted_output_share:.0%} of output"
    if d.per_user_speedup is not None:
        ev += f", per-user {d.per_user_speedup:.2f}x"
    if d.method == "ngram":
        ev += " (n-gram: rate and length count only steps where it drafted)"
    return f"{line}\n    {ev}"


def format_decisions(ds: Sequence[Decision]) -> str:
    """One entry per curve, labelled by the curve keys that differ between the curves."""
    omit = _same_everywhere(ds)
    return "\n".join(format_decision(d, omit) for d in ds) if ds else "(no curves)"


def format_kv_capacity(kv: pd.DataFrame) -> str:
    """One line per speculative arm: its KV pool against the baseline's, and sessions if asked."""
    if kv.empty:
        return "(no KV capacity in the ledgers)"
    lines = []
    for row in kv.itertuples(index=False):
        if not row.speculative or row.baseline_kv_cache_tokens is None or pd.isna(row.baseline_kv_cache_tokens):
            continue
        cond = getattr(row, "condition", None)
        label = row.arm if _isna(cond) or cond == PLAIN_CONDITION else f"{cond} / {row.arm}"
        text = (f"{label}: KV pool {row.kv_cache_tokens:,.0f} tokens vs {row.baseline_kv_cache_tokens:,.0f} "
                f"without the drafter (the drafter takes {row.drafter_kv_share:.0%})")
        if row.kv_cache_tokens_min != row.kv_cache_tokens_max:
            text += f" [varies {row.kv_cache_tokens_min:,.0f}-{row.kv_cache_tokens_max:,.0f} across starts]"
        if row.sessions is not None and not pd.isna(row.sessions):
            text += (f"; at {row.context_tokens:,.0f}-token context: {row.baseline_sessions:.1f} -> "
                     f"{row.sessions:.1f} concurrent sessions")
        lines.append(text)
    return "\n".join(lines) if lines else "(no speculative arm with a baseline KV pool)"


def format_report(
    df: pd.DataFrame,
    baseline: str | None = None,
    *,
    n_boot: int = DEFAULT_N_BOOT,
    seed: int = DEFAULT_SEED,
    level: float = DEFAULT_LEVEL,
    context_tokens: float | None = None,
    serving_concurrency: float | None = None,
) -> str:
    """What ``specnb report`` prints: the table, the thresholds, the decisions, the KV cost."""
    boot = bootstrap_speedups(df, baseline, n_boot=n_boot, seed=seed, level=level)
    parts = [format_speedup_table(boot.table, level)]
    if boot.curves:
        parts += ["", "where the speedup crosses 1.0 (log2-interpolated; interval from the bootstrap curves):",
                  format_thresholds(thresholds(boot)),
                  "", "decision:", format_decisions(decide(boot, serving_concurrency=serving_concurrency))]
    kv = kv_capacity(df, context_tokens=context_tokens, baseline=baseline)
    if not kv.empty and kv["speculative"].any():
        parts += ["", "KV capacity:", format_kv_capacity(kv)]
    return "\n".join(parts)
