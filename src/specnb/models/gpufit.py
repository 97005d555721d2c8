"""The step-cost model's GPU terms, fitted to published speedup curves and held out source by source.

On a GPU the step-cost model (:mod:`specnb.models.stepcost`) knows the roofline of a step from a
spec sheet, and nothing of what a speculative step costs beyond it: proposing, rejection sampling,
metadata, kernels that run far from peak at small batch. Those terms are fitted here to published
curves (:func:`specnb.ledger.published.published_curves`: each point a published speedup at a
concurrency, or at a K, with the target's shape, the drafter, K and tokens per step). Every term is
dimensionless, so one fit applies to any GPU preset and target:

- ``compute_efficiency``: effective FLOP/s over the preset's peak, with the bandwidth at its peak;
  a ratio of speedups only sees FLOP/s over bandwidth, so this is that ratio relative to the spec
  sheet's, not the FLOP/s alone;
- ``spec_step_frac``: what a speculative step costs regardless of batch and K, in units of the
  target's weight-read time (weight bytes / bandwidth): a drafter that is not counted by size,
  launches, bookkeeping;
- ``draft_pass_frac``: what one drafting pass costs regardless of batch, in weight-read times; a
  sequential drafter (EAGLE, a draft model) makes K passes a step, a block or MTP drafter one;
- ``per_token_frac``: what each proposed token costs beyond its FLOPs through the target, in units
  of one token's target compute time (2 * params / effective FLOP/s), applied per request: the
  verification's inefficiency, which grows with the batch;
- ``step_overhead_frac`` (off by default): a fixed engine cost in both arms, in weight-read times.

The fit is least squares on log speedup, each source weighted equally. :func:`bootstrap_terms`
resamples curves to give each term's spread; :func:`leave_one_source_out` fits on every source but
one and predicts the held-out one. Once a user's own sweep exists, :func:`published_fit_gap` says
how far the published fit is from it (their measured speedups, with their own acceptance), next to
what :func:`specnb.models.calibration.calibrate` refits on it. Pure functions: the caller passes
the curves frame and the hardware presets (:func:`specnb.models.hardware.hardware_presets`).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from types import SimpleNamespace
from typing import Any

import numpy as np
import pandas as pd

from specnb.models.hardware import Hardware, StepCostError
from specnb.models.optimize import nelder_mead
from specnb.models.stepcost import Drafter, TargetModel, step_terms

__all__ = ["TERMS", "DEFAULT_TERMS", "GpuTerms", "GpuFit", "curve_models", "predict_speedups", "fit_gpu_terms",
           "bootstrap_terms", "term_summary", "leave_one_source_out", "loso_summary", "loso_levels",
           "published_fit_gap", "gap_line", "measured_on_gpu"]

TERMS = ("compute_efficiency", "spec_step_frac", "draft_pass_frac", "per_token_frac", "step_overhead_frac")
DEFAULT_TERMS = ("compute_efficiency", "spec_step_frac", "draft_pass_frac", "per_token_frac")
# starting values of the multi-start fit, per term (each tried at 0.1x, 1x and 10x)
_START = {"compute_efficiency": 0.3, "spec_step_frac": 0.1, "draft_pass_frac": 0.03, "per_token_frac": 1.0,
          "step_overhead_frac": 0.1}
_NEED = ("ledger_id", "condition", "hardware_preset", "gpus", "compute_dtype", "target_params_b", "target_layers",
         "target_kv_heads", "target_head_dim", "weight_bytes_per_param", "kv_bytes_per_value", "drafter_kind",
         "drafter_params_b", "k", "tokens_per_step", "prompt_tokens", "output_tokens", "concurrency", "value")


def _with(obj: Any, **changes: Any) -> Any:
    # a dataclass (one curve, one preset) or a stack of curves (a namespace of per-point arrays)
    return SimpleNamespace(**{**vars(obj), **changes}) if isinstance(obj, SimpleNamespace) else replace(obj, **changes)


@dataclass(frozen=True)
class GpuTerms:
    """The fitted terms; zero costs and full efficiency are the spec-sheet model."""

    compute_efficiency: float = 1.0
    spec_step_frac: float = 0.0
    draft_pass_frac: float = 0.0
    per_token_frac: float = 0.0
    step_overhead_frac: float = 0.0

    def apply(self, hw: Hardware, target: TargetModel, drafter: Drafter) -> tuple[Hardware, Drafter]:
        """``hw`` and ``drafter`` with these terms in seconds for ``target`` (added to what they carry)."""
        read_s = target.weight_bytes / hw.bandwidth_bytes_s
        flop_s = hw.flop_s * self.compute_efficiency
        hw2 = _with(hw, flop_s=flop_s, step_overhead_s=hw.step_overhead_s + self.step_overhead_frac * read_s)
        d2 = _with(drafter, step_overhead_s=drafter.step_overhead_s + self.spec_step_frac * read_s,
                   per_pass_s=drafter.per_pass_s + self.draft_pass_frac * read_s,
                   per_token_s=drafter.per_token_s + self.per_token_frac * 2.0 * target.params / flop_s)
        return hw2, d2

    def seconds(self, hw: Hardware, target: TargetModel) -> dict[str, float]:
        """The speculative costs in seconds on ``hw`` for ``target``: per step, per drafting pass, per proposed token."""
        _, d = self.apply(hw, target, Drafter("fit"))
        return {"step_overhead_s": d.step_overhead_s, "per_pass_s": d.per_pass_s, "per_token_s": d.per_token_s}


@dataclass(frozen=True)
class _Curve:
    """One published curve as the step-cost model sees it: hardware, target, drafter and its points."""

    ledger_id: str
    condition: str
    index: np.ndarray  # rows of the points frame
    hw: Hardware
    target: TargetModel
    drafter: Drafter
    arrays: dict[str, Any]
    tau: np.ndarray
    value: np.ndarray


def curve_models(points: pd.DataFrame, presets: Mapping[str, Hardware]) -> list[_Curve]:
    """The published points grouped into curves with their hardware (preset peaks times GPUs), target and drafter."""
    missing = [c for c in _NEED if c not in points.columns]
    if missing:
        raise StepCostError(f"curves frame lacks {missing}: pass specnb.ledger.published_curves()")
    if points.empty:
        raise StepCostError("no published curve points to fit")
    out = []
    for (lid, cond), g in points.groupby(["ledger_id", "condition"], sort=True):
        r = g.iloc[0]
        if r["hardware_preset"] not in presets:
            raise StepCostError(f"{lid} {cond!r}: unknown hardware preset {r['hardware_preset']!r}")
        base = presets[r["hardware_preset"]].for_dtype(r["compute_dtype"])
        n = float(r["gpus"])
        hw = replace(base, bandwidth_bytes_s=base.bandwidth_bytes_s * n, flop_s=base.flop_s * n,
                     memory_bytes=None, step_overhead_s=0.0)
        target = TargetModel.dense(str(cond), float(r["target_params_b"]) * 1e9,
                                   bytes_per_param=float(r["weight_bytes_per_param"]), layers=int(r["target_layers"]),
                                   kv_heads=int(r["target_kv_heads"]), head_dim=int(r["target_head_dim"]),
                                   kv_bytes_per_value=float(r["kv_bytes_per_value"]))
        dp = float(r["drafter_params_b"]) * 1e9
        # a drafter counted by size reads its weights in bf16; a block or MTP drafter proposes K in one pass
        drafter = Drafter(str(r["drafter_kind"]), params=dp, weight_bytes=2.0 * dp,
                          parallel=r["drafter_kind"] in ("block", "mtp"))
        batch = g["concurrency"].to_numpy(float)
        arrays = dict(batch=batch, prompt=g["prompt_tokens"].to_numpy(float), prefill=g["prompt_tokens"].to_numpy(float),
                      output=g["output_tokens"].to_numpy(float), k=g["k"].to_numpy(float), q=np.ones_like(batch),
                      sharpness=None)
        out.append(_Curve(str(lid), str(cond), g.index.to_numpy(), hw, target, drafter, arrays,
                          g["tokens_per_step"].to_numpy(float), g["value"].to_numpy(float)))
    return out


@dataclass(frozen=True)
class _Stack:
    """Every curve's points in one set of arrays, each point carrying its curve's hardware, target and
    drafter fields, twice over (every baseline point, then every speculative one): the fit evaluates
    all curves in one step_terms call (elementwise, so each point's value is the one its curve alone gives)."""

    hw: SimpleNamespace
    target: SimpleNamespace
    drafter: SimpleNamespace
    arrays: dict[str, Any]
    n: int

    @classmethod
    def of(cls, curves: Sequence[_Curve]) -> _Stack:
        def per_point(get: Any) -> np.ndarray:
            one = np.concatenate([np.full(c.tau.size, get(c)) for c in curves])
            return np.concatenate([one, one])

        hw = SimpleNamespace(bandwidth_bytes_s=per_point(lambda c: c.hw.bandwidth_bytes_s),
                             flop_s=per_point(lambda c: c.hw.flop_s), step_overhead_s=per_point(lambda c: c.hw.step_overhead_s))
        target = SimpleNamespace(**{f: per_point(lambda c, f=f: getattr(c.target, f))
                                    for f in ("params", "weight_bytes", "kv_bytes_per_token")})
        drafter = SimpleNamespace(**{f: per_point(lambda c, f=f: getattr(c.drafter, f))
                                     for f in ("params", "weight_bytes", "kv_bytes_per_token", "parallel", "per_request_s",
                                               "step_overhead_s", "per_token_s", "per_pass_s")})
        n = sum(c.tau.size for c in curves)
        arrays = {k: np.concatenate([c.arrays[k] for c in curves] * 2) for k in ("batch", "prompt", "prefill", "output", "k", "q")}
        arrays["tau"] = np.concatenate([np.ones(n)] + [c.tau for c in curves])
        arrays["spec"] = np.concatenate([np.zeros(n, bool), np.ones(n, bool)])
        return cls(hw, target, drafter, arrays, n)

    def speedups(self, terms: GpuTerms) -> np.ndarray:
        """Every point's predicted speedup, curve after curve in the order given."""
        hw, d = terms.apply(self.hw, self.target, self.drafter)
        both = step_terms(hw, self.target, d, sharpness=None, **self.arrays)
        return both.tok_s[self.n:] / both.tok_s[:self.n]


def predict_speedups(points: pd.DataFrame, presets: Mapping[str, Hardware], terms: GpuTerms) -> pd.Series:
    """The model's speedup at every published point (aligned with ``points``)."""
    curves = curve_models(points, presets)
    out = pd.Series(np.nan, index=points.index, name="predicted")
    out.loc[np.concatenate([c.index for c in curves])] = _Stack.of(curves).speedups(terms)
    return out


@dataclass(frozen=True)
class GpuFit:
    """Fitted terms, which were free, and every point with its prediction (``predicted``)."""

    terms: GpuTerms
    free: tuple[str, ...]
    points: pd.DataFrame = field(repr=False)
    rms_log_error: float

    def summary(self) -> str:
        vals = ", ".join(f"{t} {getattr(self.terms, t):.3g}" for t in self.free)
        return (f"fitted to {len(self.points)} points of {self.points['ledger_id'].nunique()} sources "
                f"({self.points.groupby(['ledger_id', 'condition']).ngroups} curves): {vals}; "
                f"rms log error {self.rms_log_error:.3f}")


def _weights(points: pd.DataFrame) -> np.ndarray:
    # each source counts once, however many points it published
    per = points.groupby("ledger_id")["value"].transform("size").to_numpy(float)
    return 1.0 / np.sqrt(per)


def _terms_from(x: np.ndarray, free: Sequence[str], fixed: GpuTerms) -> GpuTerms:
    x = np.clip(x, -30.0, 10.0)
    return replace(fixed, **{t: float(np.exp(v)) for t, v in zip(free, x, strict=True)})


def fit_gpu_terms(points: pd.DataFrame, presets: Mapping[str, Hardware], terms: Sequence[str] = DEFAULT_TERMS,
                  *, fixed: GpuTerms = GpuTerms(), start: GpuTerms | None = None) -> GpuFit:
    """Least squares of log speedup over the published points; ``terms`` are fitted, the rest stay at ``fixed``.

    ``start`` (e.g. a previous fit) replaces the multi-start grid with one start and a polish.
    """
    free = tuple(dict.fromkeys(terms))
    bad = sorted(set(free) - set(TERMS))
    if bad:
        raise StepCostError(f"cannot fit {bad}; terms: {list(TERMS)}")
    if not free:
        raise StepCostError("name at least one term to fit")
    curves = curve_models(points, presets)
    if len(points) <= len(free):
        raise StepCostError(f"{len(points)} points cannot fit {len(free)} terms")
    w = pd.Series(_weights(points), index=points.index)
    wc = np.concatenate([w.loc[c.index].to_numpy() for c in curves])
    logv = np.concatenate([np.log(c.value) for c in curves])
    stack = _Stack.of(curves)

    def residuals(x: np.ndarray) -> np.ndarray:
        return wc * (np.log(stack.speedups(_terms_from(x, free, fixed))) - logv)

    def sse(x: np.ndarray) -> float:
        r = residuals(x)
        return float(r @ r) if np.all(np.isfinite(r)) else math.inf

    if start is not None:
        starts = [np.log([max(getattr(start, t), 1e-9) for t in free])]
    else:
        x0 = np.log([_START[t] for t in free])
        # the start, and each term moved 10x down or up on its own (the full grid costs 3^terms searches)
        starts = [x0] + [x0 + np.log(10.0) * sign * e for e in np.eye(len(free)) for sign in (-1.0, 1.0)]
    # a short search from every start, then the best one polished
    best = min((nelder_mead(sse, s0, iters=300) for s0 in starts), key=lambda t: t[1])
    x, _ = nelder_mead(sse, best[0], step=0.1)
    x, _ = nelder_mead(sse, x, step=0.02)
    fitted = _terms_from(x, free, fixed)
    pts = points.copy()
    pts["predicted"] = predict_speedups(points, presets, fitted)
    err = np.log(pts["predicted"]) - np.log(pts["value"])
    return GpuFit(fitted, free, pts, float(np.sqrt(np.mean(err**2))))


def bootstrap_terms(points: pd.DataFrame, presets: Mapping[str, Hardware], fit: GpuFit, n: int = 200,
                    seed: int = 0) -> pd.DataFrame:
    """Refit on ``n`` resamples of the curves (drawn with replacement, whole curves): one row per resample."""
    rng = np.random.default_rng(seed)
    keys = list(points.groupby(["ledger_id", "condition"], sort=True).groups.items())
    rows = []
    for _ in range(n):
        pick = rng.integers(0, len(keys), len(keys))
        parts = []
        for j, i in enumerate(pick):
            part = points.loc[keys[i][1]].copy()
            part["condition"] = f"{part['condition'].iloc[0]} #{j}"  # a curve drawn twice counts twice
            parts.append(part)
        sample = pd.concat(parts, ignore_index=True)
        try:
            f = fit_gpu_terms(sample, presets, fit.free, fixed=fit.terms, start=fit.terms)
        except StepCostError:
            continue
        rows.append({t: getattr(f.terms, t) for t in fit.free})
    return pd.DataFrame(rows, columns=list(fit.free))


def term_summary(fit: GpuFit, samples: pd.DataFrame, pinned_factor: float = 3.0) -> pd.DataFrame:
    """Per term: the fit, the bootstrap's 16th and 84th percentiles, the one-sigma factor
    sqrt(p84 / p16) and whether the data pin it down (factor below ``pinned_factor``)."""
    rows = []
    for t in fit.free:
        s = samples[t].dropna()
        lo, hi = (float(np.percentile(s, 16)), float(np.percentile(s, 84))) if len(s) else (math.nan, math.nan)
        factor = math.sqrt(hi / lo) if lo > 0 else math.inf
        rows.append({"term": t, "fitted": getattr(fit.terms, t), "p16": lo, "p84": hi, "factor": factor,
                     "pinned": bool(factor < pinned_factor), "resamples": int(len(s))})
    return pd.DataFrame(rows)


def leave_one_source_out(points: pd.DataFrame, presets: Mapping[str, Hardware],
                         terms: Sequence[str] = DEFAULT_TERMS) -> pd.DataFrame:
    """Fit on every source but one, predict the held-out source's points: one row per point, with
    ``predicted`` (held out), ``log_error`` and ``same_side`` (both above, or both at or below, 1.0)."""
    sources = sorted(points["ledger_id"].unique())
    if len(sources) < 2:
        raise StepCostError("leave-one-source-out needs two or more sources")
    parts = []
    for held in sources:
        train, test = points[points["ledger_id"] != held], points[points["ledger_id"] == held].copy()
        f = fit_gpu_terms(train, presets, terms)
        test["predicted"] = predict_speedups(test, presets, f.terms)
        for t in f.free:
            test[f"fit_{t}"] = getattr(f.terms, t)
        parts.append(test)
    out = pd.concat(parts).sort_index()
    out["log_error"] = np.log(out["predicted"]) - np.log(out["value"])
    out["same_side"] = (out["predicted"] > 1.0) == (out["value"] > 1.0)
    return out


def loso_summary(loso: pd.DataFrame) -> pd.DataFrame:
    """Per held-out source: points, median |log error| (and as a factor), share on the same side of 1.0."""
    g = loso.assign(abs_log_error=loso["log_error"].abs()).groupby("ledger_id", sort=True)
    out = g.agg(points=("value", "size"), median_abs_log_error=("abs_log_error", "median"),
                max_abs_log_error=("abs_log_error", "max"), same_side_share=("same_side", "mean")).reset_index()
    out["median_factor"] = np.exp(out["median_abs_log_error"])
    return out


def loso_levels(loso: pd.DataFrame) -> pd.DataFrame:
    """Per held-out source and level (concurrency, or K for a curve along K): published and predicted
    speedups of each curve at that level and whether they fall on the same side of 1.0."""
    level = np.where(loso["axis"] == "num_speculative_tokens", "K=" + loso["k"].astype(str),
                     "c=" + loso["concurrency"].astype(str))
    cols = ["ledger_id", "condition", "level", "value", "predicted", "same_side"]
    return loso.assign(level=level)[cols].reset_index(drop=True)


def published_fit_gap(table: pd.DataFrame, acceptance: pd.DataFrame, hw: Hardware, target: TargetModel,
                      drafter: Drafter, terms: GpuTerms) -> pd.DataFrame:
    """How far the published GPU fit is from a measured sweep, point by point.

    ``table`` is the sweep's paired speedups (:func:`specnb.analysis.speedup_table`: arm, workload,
    concurrency, speedup), ``acceptance`` its per (arm, workload) acceptance
    (:func:`specnb.models.calibration.workload_acceptance`: K, tokens per step, draft fraction, mean
    prompt and output lengths). Each measured speedup is predicted by ``hw`` (a preset: peaks)
    with ``terms`` applied, for ``target`` and ``drafter``, at the sweep's own acceptance; out come
    ``predicted``, ``log_error`` and ``same_side`` (of 1.0) per measured point.
    """
    need = {"arm", "workload", "concurrency", "speedup"}
    if not need <= set(table.columns):
        raise StepCostError(f"speedup table lacks {sorted(need - set(table.columns))}: pass specnb.analysis.speedup_table()")
    acc = acceptance.set_index(["arm", "workload"])
    hw2, d2 = terms.apply(hw, target, drafter)
    rows = []
    for r in table.itertuples(index=False):
        if (r.arm, r.workload) not in acc.index:
            continue
        a = acc.loc[(r.arm, r.workload)]
        one = np.ones(1)
        kw = dict(batch=float(r.concurrency) * one, prompt=float(a["prompt_tokens_mean"]) * one,
                  prefill=float(a["prompt_tokens_mean"]) * one, output=float(a["output_tokens_mean"]) * one,
                  k=float(a["k"]) * one, q=float(a["draft_fraction"]) * one, sharpness=None)
        base = step_terms(hw2, target, d2, tau=one, spec=np.zeros(1, bool), **kw)
        spec = step_terms(hw2, target, d2, tau=float(a["tokens_per_step"]) * one, spec=np.ones(1, bool), **kw)
        pred = float(spec.tok_s[0] / base.tok_s[0])
        rows.append({"arm": r.arm, "workload": r.workload, "concurrency": r.concurrency, "measured": float(r.speedup),
                     "predicted": pred, "log_error": math.log(pred / float(r.speedup)),
                     "same_side": (pred > 1.0) == (float(r.speedup) > 1.0)})
    return pd.DataFrame(rows, columns=["arm", "workload", "concurrency", "measured", "predicted", "log_error",
                                       "same_side"])


def measured_on_gpu(df: pd.DataFrame) -> bool:
    """Whether every point of a ledger frame (:func:`specnb.ledger.load_ledgers`) ran on a machine
    with a GPU (its ``machine`` label names one); the published GPU fit is held only against those."""
    if df.empty or "machine" not in df.columns:
        return False
    from specnb.ledger.frame import NO_GPU

    return bool((~df["machine"].astype(str).str.endswith(NO_GPU)).all())


def gap_line(gap: pd.DataFrame) -> str:
    """One sentence for :func:`published_fit_gap`'s table: the median factor the published fit was
    off by on this machine, the worst point, and the share on the measured side of 1.0."""
    if gap.empty:
        return "the published GPU fit has no point to hold against: no measured pair carries its arm's acceptance"
    err = gap["log_error"].abs()
    worst = gap.loc[err.idxmax()]
    way = "kinder" if float(gap["log_error"].median()) > 0 else "harsher"
    return (f"on this machine the published GPU fit was off by a factor {math.exp(err.median()):.2f} (median over "
            f"{len(gap)} measured point(s), {way} than measured; worst {worst['arm']} / {worst['workload']} at "
            f"c={worst['concurrency']:g}: predicted {worst['predicted']:.2f}x, measured {worst['measured']:.2f}x) and put "
            f"{100 * gap['same_side'].mean():.0f} % of them on the measured side of 1.0")
