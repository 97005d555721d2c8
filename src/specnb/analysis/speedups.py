"""Paired speedups per curve and load level, each with the one interval: the table every answer
reads (the report's table and decisions, the figures' error bars, ``specnb policy``, ``tune``,
``watch``'s expectations and the notebooks).

A ratio is formed only within a pair (:func:`specnb.analysis.pairing.paired`). Per curve (the
sweep, condition, arm and workload) and load level, the pairs' repeats (server starts) and their
request records make one :class:`~specnb.analysis.estimator.Sample` per metric: the per-start log
ratios, the arm order of each start, and each prompt's influence with its category. The row's
estimate and interval are :func:`specnb.analysis.estimator.estimate`'s, at the level the run's
*design* gives it:

- a sweep of fixed repeats: one look, at every repeat, at ``confidence`` (95 %);
- a sequential sweep (``sequential`` in its sweep.json): looks at its planned counts of repeats
  (balanced arm orders, :func:`~specnb.analysis.estimator.balanced_looks`), each at the
  calibrated per-look level (:func:`~specnb.analysis.estimator.per_look_alpha`); the row is the
  first look that decides, else the last look measured: the interval that stopped the level;
- an adaptive search: the first round's levels at half of alpha, each later round's at its share
  of the other half (a round restarts every server and chooses its levels from the data before
  it, so each round's tests are their own family).

A level's own decision is in ``decision`` (``pays``, ``loses`` or empty); what holds across the
levels of a curve is :mod:`specnb.analysis.thresholds`' (a fixed sequence over the levels).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from specnb.analysis.design import DEFAULT_ALPHA, Design, choose_look, design_of
from specnb.analysis.estimator import DEFAULT_CONFIDENCE, Estimate, Sample, Scope, estimate
from specnb.analysis.pairing import AnalysisError, paired
from specnb.analysis.requests import Sidecars, pair_terms, prompt_influence

__all__ = ["METRICS", "DEFAULT_CONFIDENCE", "DEFAULT_ALPHA", "LevelData", "Speedups", "group_keys", "level_of",
           "paired_speedups", "DESIGN_COLUMNS"]
GROUP_CANDIDATES = ["sweep", "condition", "arm", "workload"]
# ratio column (from pairing.paired) -> ledger column it divides
METRICS = {
    "speedup": "output_tok_s",
    "per_user_speedup": "per_user_decode_tok_s_mean",
    "computed_speedup": "computed_tok_s_wall",
}
# the frame's columns that carry a run's design (specnb.ledger.frame reads them from sweep.json)
DESIGN_COLUMNS = ("design_alpha", "design_first", "design_last", "design_search_rounds")


def group_keys(df: pd.DataFrame) -> list[str]:
    """The curve keys a frame supports: whichever of sweep, condition, arm, workload it has."""
    return [k for k in GROUP_CANDIDATES if k in df.columns]


def level_of(df: pd.DataFrame) -> pd.Series:
    """Each point's load level: its concurrency in a closed loop, its offered rate in an open one."""
    if "rate_rps" not in df.columns:
        return df["concurrency"].astype(float)
    rate = pd.to_numeric(df["rate_rps"], errors="coerce")
    return rate.where(rate.notna(), df["concurrency"].astype(float))


@dataclass(frozen=True)
class LevelData:
    """One curve's pairs at one load level, in repeat order: what every estimate there reads."""

    repeats: np.ndarray  # (n,) repeat numbers
    position: np.ndarray  # (n,) the drafter arm's position in its repeat's block order
    base_first: np.ndarray  # (n,) bool
    ratios: dict[str, np.ndarray]  # metric -> (n,) measured ratios (NaN: not measured)
    influence: dict[str, np.ndarray] | None  # metric -> (n, m); None: a pair without request records
    prompts: tuple[str, ...] = ()
    strata: tuple[str, ...] = ()

    def sample(self, metric: str = "speedup", n: int | None = None) -> Sample | None:
        """The first ``n`` repeats' sample of ``metric`` (None: a ratio missing or not positive):
        only the prompts those repeats sent (a panel grown in a later round adds prompts a look
        after 4 repeats never saw: they are no members of its strata)."""
        r = self.ratios[metric][:n]
        if not len(r) or not (np.isfinite(r) & (r > 0)).all():
            return None
        if self.influence is None:
            return Sample(np.log(r), self.base_first[:n], missing="no request records")
        infl = self.influence[metric][:n]
        sent = np.isfinite(infl).any(axis=0)
        if not np.isfinite(infl).any(axis=1).any():
            return Sample(np.log(r), self.base_first[:n], missing="no request records")
        return Sample(np.log(r), self.base_first[:n], infl[:, sent], tuple(np.asarray(self.strata, dtype=object)[sent]))


@dataclass
class Speedups:
    """What :func:`paired_speedups` returns: the table, and per (curve, level) the data behind it."""

    table: pd.DataFrame
    levels: dict[tuple[tuple[Any, ...], float], LevelData]
    group_keys: list[str]
    confidence: float  # the nominal level (a fixed run's; a sequential row says its own)
    scope: Scope

    def data(self, group: dict[str, Any], level: float) -> LevelData | None:
        return self.levels.get((tuple(group.get(k) for k in self.group_keys), float(level)))

    def contrast(self, group: dict[str, Any], arm: str, other: str, level: float, *, metric: str = "speedup",
                 confidence: float | None = None) -> Estimate | None:
        """``arm`` against ``other`` (two arms of one curve group, each paired with the same
        baseline) at ``level``: their ratio per repeat both measured, with the one interval (the
        order term is which of the two ran first). None where they share fewer than two repeats."""
        a = self.data({**group, "arm": arm}, level)
        b = self.data({**group, "arm": other}, level)
        if a is None or b is None:
            return None
        common, ia, ib = np.intersect1d(a.repeats, b.repeats, return_indices=True)
        if len(common) < 2:
            return None
        ra, rb = a.ratios[metric][ia], b.ratios[metric][ib]
        if not (np.isfinite(ra) & np.isfinite(rb) & (ra > 0) & (rb > 0)).all():
            return None
        infl, strata, missing = None, None, ""
        if a.influence is None or b.influence is None:
            missing = "no request records"
        elif a.prompts != b.prompts:
            missing = "the two arms' request records name different prompts"
        else:
            infl = a.influence[metric][ia] - b.influence[metric][ib]
            sent = np.isfinite(infl).any(axis=0)
            infl, strata = infl[:, sent], tuple(np.asarray(a.strata, dtype=object)[sent])
        other_first = b.position[ib] < a.position[ia]
        return estimate(Sample(np.log(ra) - np.log(rb), other_first, infl, strata, missing=missing),
                        confidence or self.confidence, self.scope)


def paired_speedups(df: pd.DataFrame, baseline: str | None = None, *, confidence: float | None = None,
                    scope: Scope | str = Scope.PROMPTS, keys: Sequence[str] | None = None,
                    design: Design | None = None) -> Speedups:
    """Paired speedups per (curve, load level) with the one interval.

    ``df`` is :func:`specnb.load_ledgers` output; ``keys`` the curve keys (default
    :func:`group_keys`); ``confidence`` the level of a fixed-repeat run (default 95 %; a
    sequential run's rows keep the level its looks spent); ``scope`` what the intervals cover
    (:class:`~specnb.analysis.estimator.Scope`: prompts like the panel's, or this panel);
    ``design`` the design of every row (default: each run's own, read from its sweep.json by
    :func:`specnb.ledger.load_ledgers`; a sweep deciding its next round passes its own).
    Raises :class:`~specnb.analysis.pairing.PairingError` when points that would pair differ in
    prompts, sampling or engine build, and :class:`AnalysisError` on bad arguments.

    ``table`` has one row per curve and level: the curve keys, ``concurrency``, ``level``,
    ``rate_rps``, ``search_round``, ``n_repeats`` (the repeats the row's estimate uses),
    ``n_measured`` (the repeats measured there), ``n_requests`` (fewest requests in a pair with
    records), ``baseline_arm``, ``method``, ``base_tok_s`` / ``spec_tok_s`` (means over the
    repeats used), ``speedup`` / ``per_user_speedup`` / ``computed_speedup`` each with ``_lo`` and
    ``_hi``, ``speedup_min`` / ``speedup_max`` (over those repeats), ``confidence`` (the row's
    interval level), ``look`` (how the row's repeats were chosen), ``open`` (a sequential level not
    yet at a decision or its last look), ``design`` (``fixed``, ``sequential`` or ``search``),
    ``decision`` (the level's own:
    ``pays``, ``loses`` or None), ``scope``, ``order``, ``log_se``, ``df``, ``start_var`` and
    ``prompt_var`` (the speedup's variance parts, log scale), ``note``, and the speculative arm's
    ``acceptance_length``, ``acceptance_rate`` and ``accepted_output_share``."""
    if confidence is not None and not 0.0 < confidence < 1.0:
        raise AnalysisError(f"confidence must be in (0, 1), got {confidence}")
    scope = Scope(scope)
    pairs = paired(df, baseline)
    keys = list(keys) if keys is not None else group_keys(df)
    missing = [k for k in keys if k not in df.columns]
    if missing:
        raise AnalysisError(f"group keys {missing} are not columns of the frame")
    nominal = confidence if confidence is not None else DEFAULT_CONFIDENCE
    if pairs.empty:
        return Speedups(pd.DataFrame(), {}, keys, nominal, scope)
    for ratio in METRICS:
        if ratio not in pairs.columns:
            pairs[ratio] = np.nan
    pairs["level"] = level_of(pairs)
    if "search_round" not in pairs.columns:
        pairs["search_round"] = 0
    side = Sidecars()
    rows: list[dict[str, Any]] = []
    levels: dict[tuple[tuple[Any, ...], float], LevelData] = {}
    for key, g in pairs.groupby([*keys, "level"], sort=True, dropna=False):
        key = key if isinstance(key, tuple) else (key,)
        group, level = dict(zip(keys, key[:-1], strict=True)), float(key[-1])
        pts = g.sort_values("repeat")
        data = _level_data(pts, side)
        levels[(tuple(key[:-1]), level)] = data
        rows.append(_row(group, pts, level, data, design or design_of(pts, confidence), scope))
    return Speedups(pd.DataFrame(rows), levels, keys, nominal, scope)


def _level_data(pts: pd.DataFrame, side: Sidecars) -> LevelData:
    pos = pd.to_numeric(pts.get("arm_position"), errors="coerce").to_numpy(float) if "arm_position" in pts else None
    pos_b = (pd.to_numeric(pts.get("arm_position_base"), errors="coerce").to_numpy(float)
             if "arm_position_base" in pts else None)
    repeats = pts["repeat"].to_numpy(int)
    if pos is not None and pos_b is not None and np.isfinite(pos).all() and np.isfinite(pos_b).all():
        base_first = pos_b < pos
    else:  # no positions recorded: the sweep's A B | B A order, the baseline listed first
        pos = (repeats % 2).astype(float)
        base_first = repeats % 2 == 0
    ratios = {m: pd.to_numeric(pts[m], errors="coerce").to_numpy(float) for m in METRICS}
    per_pair = [pair_terms(row, side) for _, row in pts.iterrows()]
    if not per_pair or all(t is None for t in per_pair):
        return LevelData(repeats, pos, base_first, ratios, None)
    # a pair without records (a sidecar lost) has no row of influences: the prompts' part is read
    # from the pairs that have them (the panel is the same in every start)
    got = [None if t is None else prompt_influence(*t) for t in per_pair]
    prompts = sorted({str(p) for x in got if x is not None for p in x[0]})
    col = {p: j for j, p in enumerate(prompts)}
    strata = ["(none)"] * len(prompts)
    infl = {m: np.full((len(got), len(prompts)), np.nan) for m in METRICS}
    for i, x in enumerate(got):
        if x is None:
            continue
        ids, cats, g = x
        idx = [col[str(p)] for p in ids]
        for j, c in zip(idx, cats, strict=True):
            strata[j] = str(c)
        for m in METRICS:
            infl[m][i, idx] = g[m]
    return LevelData(repeats, pos, base_first, ratios, infl, tuple(prompts), tuple(strata))


def _row(group: dict[str, Any], pts: pd.DataFrame, level: float, data: LevelData, design: Design,
         scope: Scope) -> dict[str, Any]:
    search_round = int(pts["search_round"].max())
    lk = choose_look(design, len(pts), lambda n: data.sample("speedup", n), scope=scope, search_round=search_round)
    n, conf = lk.n, lk.confidence
    used = pts.iloc[:n]
    out = dict(group)
    out.update(
        concurrency=int(pts["concurrency"].iloc[0]),
        level=level,
        rate_rps=pts["rate_rps"].iloc[0] if "rate_rps" in pts.columns else None,
        search_round=search_round,
        n_repeats=n,
        n_measured=len(pts),
        n_requests=None,
        baseline_arm=pts["baseline_arm"].iloc[0],
        method=pts["method"].iloc[0] if "method" in pts.columns else None,
        base_tok_s=used["output_tok_s_base"].mean(),
        spec_tok_s=used["output_tok_s"].mean(),
        confidence=conf,
        look=lk.text,
        open=lk.open,
        design=lk.kind,
    )
    if "num_requests" in used.columns:
        reqs = pd.to_numeric(used["num_requests"], errors="coerce").dropna()
        out["n_requests"] = int(reqs.min()) if len(reqs) else None
    main: Estimate | None = None
    for m in METRICS:
        sample = data.sample(m, n)
        est = estimate(sample, conf, scope) if sample is not None else None
        if m == "speedup":
            main = est
        out[m] = est.ratio if est is not None else float(pd.to_numeric(used[m], errors="coerce").mean())
        out[f"{m}_lo"] = est.lo if est is not None and est.lo is not None else np.nan
        out[f"{m}_hi"] = est.hi if est is not None and est.hi is not None else np.nan
    out["speedup_min"], out["speedup_max"] = used["speedup"].min(), used["speedup"].max()
    out.update(
        decision=(main.decision if main is not None and lk.planned else None),
        scope=str(main.scope) if main is not None else None,
        order=main.order if main is not None else None,
        log_se=main.log_se if main is not None else None,
        df=main.df if main is not None else None,
        start_var=main.start_var if main is not None else None,
        prompt_var=main.prompt_var if main is not None else None,
        note=main.note if main is not None else "a ratio is missing or not positive",
    )
    for col, src in (("acceptance_length", "mean_acceptance_length"),
                     ("acceptance_rate", "acceptance_rate"),
                     ("accepted_output_share", "accepted_output_share")):
        out[col] = pd.to_numeric(used[src], errors="coerce").mean() if src in used.columns else np.nan
    return out
