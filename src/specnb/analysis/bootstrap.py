"""The bootstrap behind every interval: paired speedups per curve and concurrency, resampled
over server starts and prompts.

A ratio is formed only within a pair (:func:`specnb.analysis.pairing.paired`). The
bootstrap is two-level, paired and percentile-based: two sources of noise are drawn for
every replicate curve.

1. *Server starts.* Each repeat is a fresh start of both servers: the dominant noise here.
   A replicate draws ``n_repeats`` repeats with replacement; its speedup at a concurrency
   is the mean of the drawn repeats' ratios (the point estimate is the mean of the
   measured per-repeat ratios, as in :func:`specnb.analysis.pairing.speedup_table`). The
   same draw is used at every concurrency of a curve, because one server start serves all
   levels of its repeat (its luck is shared along the curve): replicate curves keep the
   shape of measured ones, which is what the crossing is read from. (If the levels of a
   curve hold different sets of repeats, each level draws on its own.)
2. *Prompts.* Prompts are drawn with replacement (a weight per prompt id), and one draw
   applies to both arms, every repeat and every concurrency of the curve: the sweep sends
   the same prompts to both arms in the same order in every repeat (the ids are checked),
   so prompts are crossed with repeats, not nested in them, and resampling requests anew
   inside each repeat would treat one prompt's luck as independent each time it recurs.
   Each metric is re-formed with the prompt weights (:mod:`specnb.analysis.requests`).
   A pair without a request sidecar enters through the repeat draw only.

The interval is the percentile interval over ``n_boot`` replicates (default 2000, numpy-
vectorised). Draws are seeded from ``seed`` and the curve's key without its arm: results are
reproducible, one curve's interval does not change when other curves join the frame, and the
arms of one workload are compared on the same draws (replicate b of every arm uses the same
server starts and prompt weights), so "which arm wins, and in what share of replicates" is a
paired question. Levels added by the adaptive search (a later round, with servers started
anew) share the start draw only with the levels of their own round.

What it cannot do, said plainly. With 2 repeats the start draw takes only three shapes
({r0, r0}, {r0, r1}, {r1, r1}): that part of the interval is about the two starts' [min,
max], a lower bound on start-to-start uncertainty rather than an estimate of it. With 1
repeat there is no between-start information at all and the interval covers the prompt
mix only. Requests served together share one server and are not independent; the prompt
level treats them as exchangeable given the start. Every level of a sweep sends the same
prompt panel in whole passes (:mod:`specnb.sweep.spec`), so one prompt weight means the same
thing at every level; ledgers from before panels (schema 1) sent different prompt subsets at
different levels, which the shared weights keep coherent but cannot remove. ``n_repeats`` and
``resampled`` columns say which case a row is, and the formatters flag rows with fewer than
:data:`FEW_REPEATS` repeats.
"""

from __future__ import annotations

import json
import warnings
import zlib
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from specnb.analysis.pairing import AnalysisError, paired
from specnb.analysis.requests import Sidecars, pair_terms, weight_factors

__all__ = [
    "DEFAULT_N_BOOT",
    "DEFAULT_SEED",
    "DEFAULT_CONFIDENCE",
    "DEFAULT_LEVEL",
    "FEW_REPEATS",
    "METRICS",
    "Curve",
    "SpeedupBootstrap",
    "group_keys",
    "bootstrap_speedups",
    "quantiles",
    "level_of",
]

DEFAULT_N_BOOT = 2000
DEFAULT_SEED = 0
# the intervals' confidence level (a load level is a concurrency or a rate: see level_of)
DEFAULT_CONFIDENCE = 0.95
DEFAULT_LEVEL = DEFAULT_CONFIDENCE  # its older name, kept for callers
GROUP_CANDIDATES = ["sweep", "condition", "arm", "workload"]
# ratio column (from pairing.paired) -> ledger column it divides
METRICS = {
    "speedup": "output_tok_s",
    "per_user_speedup": "per_user_decode_tok_s_mean",
    "computed_speedup": "computed_tok_s_wall",
}
# Fewer repeats than this and the interval cannot estimate start-to-start noise.
FEW_REPEATS = 3


def group_keys(df: pd.DataFrame) -> list[str]:
    """The curve keys a frame supports: whichever of sweep, condition, arm, workload it has."""
    return [k for k in GROUP_CANDIDATES if k in df.columns]


@dataclass(frozen=True)
class Curve:
    """One speedup curve (a group at every concurrency) and its bootstrap replicates."""

    group: dict[str, Any]
    concurrency: np.ndarray  # (C,) ascending load levels
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
    confidence: float  # the intervals' confidence level (0.95)

    @property
    def level(self) -> float:
        """The confidence level, by its older name."""
        return self.confidence


def _key_hash(key: tuple) -> int:
    """A stable number per curve key (Python's hash() is salted per process)."""
    return zlib.crc32(json.dumps([str(v) for v in key]).encode())


def quantiles(values: np.ndarray, confidence: float, axis: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """The percentile interval holding ``confidence`` of ``values`` along ``axis``."""
    a = (1.0 - confidence) / 2
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # all-NaN columns stay NaN
        lo, hi = np.nanquantile(values, [a, 1.0 - a], axis=axis)
    return lo, hi


def _check_args(n_boot: int, seed: int, confidence: float) -> None:
    if int(n_boot) != n_boot or n_boot < 1:
        raise AnalysisError(f"n_boot must be a positive integer, got {n_boot}")
    if int(seed) != seed or seed < 0:
        raise AnalysisError(f"seed must be a non-negative integer, got {seed}")
    if not 0.0 < confidence < 1.0:
        raise AnalysisError(f"level must be in (0, 1), got {confidence}")


def level_of(df: pd.DataFrame) -> pd.Series:
    """Each point's load level: its concurrency in a closed loop, its offered rate in an open one."""
    if "rate_rps" not in df.columns:
        return df["concurrency"].astype(float)
    rate = pd.to_numeric(df["rate_rps"], errors="coerce")
    return rate.where(rate.notna(), df["concurrency"].astype(float))


def bootstrap_speedups(
    df: pd.DataFrame,
    baseline: str | None = None,
    *,
    n_boot: int = DEFAULT_N_BOOT,
    seed: int = DEFAULT_SEED,
    confidence: float = DEFAULT_CONFIDENCE,
    level: float | None = None,
    keys: Sequence[str] | None = None,
    prompts: bool = True,
    starts: bool = True,
) -> SpeedupBootstrap:
    """Paired speedups per (curve, concurrency) with two-level bootstrap intervals.

    ``df`` is :func:`specnb.load_ledgers` output; ``keys`` are the curve keys (default
    :func:`group_keys`); ``prompts=False`` skips the prompt level (server starts only);
    ``starts=False`` skips the start level (every replicate keeps every repeat: the prompts only,
    the spread of the answer over which prompts the panel holds);
    ``confidence`` is the intervals' confidence level (``level``: its older name, which wins
    when given). Raises :class:`~specnb.analysis.pairing.PairingError` when points that would
    pair differ in prompts, sampling or engine build, and :class:`AnalysisError` on bad arguments.

    ``table`` has one row per curve and concurrency: the curve keys, ``concurrency``,
    ``n_repeats``, ``n_requests`` (fewest requests in a pair with records), ``resampled``
    (``repeats+prompts``, ``repeats``, ``prompts``, ``none``; ``some prompts`` when only
    part of the pairs had records), ``baseline_arm``, ``method``, ``base_tok_s`` and
    ``spec_tok_s`` (means over repeats), ``speedup`` / ``per_user_speedup`` /
    ``computed_speedup`` each with ``_lo`` / ``_hi``, ``speedup_min`` / ``speedup_max`` (over
    repeats), and the speculative arm's ``acceptance_length``, ``acceptance_rate`` and
    ``accepted_output_share`` (means over repeats). ``curves`` holds the replicate curves.
    """
    if level is not None:
        confidence = level
    _check_args(n_boot, seed, confidence)
    n_boot = int(n_boot)
    pairs = paired(df, baseline)
    keys = list(keys) if keys is not None else group_keys(df)
    missing = [k for k in keys if k not in df.columns]
    if missing:
        raise AnalysisError(f"group keys {missing} are not columns of the frame")
    if pairs.empty:
        return SpeedupBootstrap(pd.DataFrame(), [], keys, n_boot, seed, confidence)
    for ratio in METRICS:
        if ratio not in pairs.columns:
            pairs[ratio] = np.nan
    pairs["level"] = level_of(pairs)
    if "search_round" not in pairs.columns:
        pairs["search_round"] = 0
    draw = _Draw(n_boot, seed, Sidecars() if prompts else None, starts)
    rows: list[dict[str, Any]] = []
    curves: list[Curve] = []
    for key, g in pairs.groupby(keys, sort=True, dropna=False):
        key = key if isinstance(key, tuple) else (key,)
        curve_rows, curve = draw.curve(dict(zip(keys, key, strict=True)), g, confidence)
        rows += curve_rows
        curves.append(curve)
    return SpeedupBootstrap(pd.DataFrame(rows), curves, keys, n_boot, seed, confidence)


@dataclass
class _Draw:
    """The replicates of one curve at a time: its server-start draws, its prompt weights, each
    load level's replicate speedups, and the table rows they give."""

    n_boot: int
    seed: int
    side: Sidecars | None  # None: no prompt level (server starts only)
    starts: bool = True  # False: no start level (each replicate keeps every repeat)

    def curve(self, group: dict[str, Any], g: pd.DataFrame, confidence: float) -> tuple[list[dict[str, Any]], Curve]:
        """One curve's table rows and its replicate curve; ``g``: its pairs."""
        # draws are keyed without the arm: every arm of a workload sees the same server-start and
        # prompt draws, so replicate b compares arms on equal luck (which K wins, and how often)
        base_key = _key_hash(tuple(v for k, v in group.items() if k != "arm"))
        load_levels = sorted(g["level"].unique())
        rounds = {c: int(g.loc[g["level"] == c, "search_round"].max()) for c in load_levels}
        draws = self._start_draws(g, load_levels, rounds, base_key)
        terms = {i: pair_terms(row, self.side) if self.side is not None else None for i, row in g.iterrows()}
        weights, column = self._prompt_weights(terms, base_key)
        reps = {m: np.full((self.n_boot, len(load_levels)), np.nan) for m in METRICS}
        rows = []
        for ci, c in enumerate(load_levels):
            pts = g[g["level"] == c].sort_values("repeat")
            n_rep = len(pts)
            # slot s of replicate b uses repeat draw[s, b]
            draw = draws.get(rounds[c]) if self.starts else np.repeat(np.arange(n_rep)[:, None], self.n_boot, axis=1)
            if draw is None:
                draw = np.random.default_rng([self.seed, base_key, 2, int(round(1000 * c))]).integers(
                    0, n_rep, size=(n_rep, self.n_boot))
            per_repeat, n_req, with_requests = self._per_repeat(pts, terms, weights, column)
            for m in METRICS:
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore", RuntimeWarning)
                    reps[m][:, ci] = np.nanmean(per_repeat[m][draw, np.arange(self.n_boot)], axis=0)
            rows.append(_row(group, pts, c, rounds[c], n_req, with_requests,
                             {m: reps[m][:, ci] for m in METRICS}, confidence))
        n_min = int(g.groupby("level").size().min())
        return rows, Curve(group, np.asarray(load_levels, dtype=float), reps, n_min)

    def _start_draws(self, g: pd.DataFrame, load_levels: list[float], rounds: dict[float, int],
                     base_key: int) -> dict[int, np.ndarray]:
        """Per search round, the repeats each replicate draws, shared along the curve: one server
        start serves every load level of a repeat (of one search round: a round restarts every
        server). A round whose levels hold different sets of repeats has none (each level draws
        on its own)."""
        repeat_sets = {c: tuple(sorted(g.loc[g["level"] == c, "repeat"])) for c in load_levels}
        draws = {}
        for rnd in sorted(set(rounds.values())):
            sets = {repeat_sets[c] for c in load_levels if rounds[c] == rnd}
            if len(sets) == 1:
                n_rep = len(next(iter(sets)))
                draws[rnd] = np.random.default_rng([self.seed, base_key, 1, rnd]).integers(
                    0, n_rep, size=(n_rep, self.n_boot))
        return draws

    def _prompt_weights(self, terms: dict[Any, Any], base_key: int) -> tuple[np.ndarray | None, dict[Any, int]]:
        """Prompt weights shared by both arms, every repeat and every load level: the same prompts
        recur in all of them, so one draw of "which prompts" must apply to all at once."""
        prompt_ids = sorted({p for t in terms.values() if t is not None for p in t[0].prompt_id})
        n_ids = len(prompt_ids)
        weights = (np.random.default_rng([self.seed, base_key, 0]).multinomial(
            n_ids, np.full(n_ids, 1.0 / n_ids), size=self.n_boot).astype(float) if n_ids else None)
        return weights, {p: j for j, p in enumerate(prompt_ids)}

    def _per_repeat(self, pts: pd.DataFrame, terms: dict[Any, Any], weights: np.ndarray | None,
                    column: dict[Any, int]) -> tuple[dict[str, np.ndarray], list[int], int]:
        """Each repeat's ratio per metric and replicate, re-formed with the prompt weights (a pair
        without request records: its measured ratio in every replicate); the requests of each pair
        with records, and how many pairs had them."""
        n_rep = len(pts)
        per_repeat = {m: np.empty((n_rep, self.n_boot)) for m in METRICS}
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
            fs, fb = weight_factors(spec_t, w), weight_factors(base_t, w)
            for m in METRICS:
                per_repeat[m][k] = row[m] * fs[m] / fb[m]
        return per_repeat, n_req, with_requests


def _row(group: dict[str, Any], pts: pd.DataFrame, load_level: float, search_round: int, n_req: list[int],
         with_requests: int, reps: dict[str, np.ndarray], confidence: float) -> dict[str, Any]:
    """One table row: a curve at one load level, its means over repeats and its intervals."""
    n_rep = len(pts)
    resampled = ("repeats" if n_rep > 1 else "") + (
        "+prompts" if with_requests == n_rep else "+some prompts" if with_requests else "")
    out = dict(group)
    out.update(
        concurrency=int(pts["concurrency"].iloc[0]),
        level=float(load_level),
        rate_rps=pts["rate_rps"].iloc[0] if "rate_rps" in pts.columns else None,
        search_round=search_round,
        n_repeats=n_rep,
        n_requests=min(n_req) if n_req else None,
        resampled=resampled.lstrip("+") or "none",
        baseline_arm=pts["baseline_arm"].iloc[0],
        method=pts["method"].iloc[0] if "method" in pts.columns else None,
        base_tok_s=pts["output_tok_s_base"].mean(),
        spec_tok_s=pts["output_tok_s"].mean(),
    )
    for m in METRICS:
        lo, hi = quantiles(reps[m], confidence)
        out[m] = pts[m].mean()
        out[f"{m}_lo"], out[f"{m}_hi"] = float(lo), float(hi)
    out["speedup_min"], out["speedup_max"] = pts["speedup"].min(), pts["speedup"].max()
    for col, src in (("acceptance_length", "mean_acceptance_length"),
                     ("acceptance_rate", "acceptance_rate"),
                     ("accepted_output_share", "accepted_output_share")):
        out[col] = pd.to_numeric(pts[src], errors="coerce").mean() if src in pts.columns else np.nan
    return out
