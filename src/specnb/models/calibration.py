"""Calibrating the step-cost model from a measured sweep.

:func:`calibrate` fits effective bandwidth, FLOP/s and fixed overhead to a measured baseline
sweep (least squares on log throughput, :mod:`specnb.models.optimize`), then predicts the
speculative arm from its measured acceptance, and optionally fits the drafting overheads to
it. It reports fit quality and, per fitted term, a multiplicative uncertainty factor; a term
the points cannot pin down (for instance bandwidth, when every measured step is compute- or
overhead-bound) shows up as unidentified.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np
import pandas as pd

from specnb.ledger import usable
from specnb.models.hardware import Hardware, StepCostError
from specnb.models.optimize import fit_least_squares, uncertainty_factors
from specnb.models.stepcost import NGRAM, Drafter, TargetModel, step_terms
from specnb.models.theory import alpha_from_acceptance_length

__all__ = ["FitQuality", "Calibration", "measured_points", "workload_acceptance", "calibrate", "check_against_anatomy",
           "refit_drafter_terms"]


def measured_points(df: pd.DataFrame) -> pd.DataFrame:
    """The usable rows of a :func:`specnb.ledger.load_ledgers` frame, with what the model needs per point.

    Adds per-request ``prompt_tokens_mean``, ``prefill_tokens_mean`` (prompt tokens the prefix
    cache did not serve) and ``output_tokens_mean`` and, for speculative rows,
    ``k``, ``tokens_per_step`` (1 / (1 - accepted share of the output), i.e. what one step
    really emitted, drafted or not) and ``draft_fraction`` (share of steps that carried a
    draft: (tokens per step - 1) / (acceptance length - 1)).
    """
    need = ["status", "speculative", "concurrency", "output_tok_s", "num_requests", "prompt_tokens", "output_tokens"]
    missing = [c for c in need if c not in df.columns]
    if missing:
        raise StepCostError(f"ledger frame lacks column(s) {missing}: pass the frame load_ledgers() returns")
    ok = usable(df)
    ok = ok[ok["output_tok_s"].notna() & (ok["output_tok_s"] > 0)].copy()
    if ok.empty:
        raise StepCostError("no usable measured points (status ok, with output_tok_s) in the ledgers")
    ok["speculative"] = ok["speculative"].astype(bool)
    ok["prompt_tokens_mean"] = ok["prompt_tokens"] / ok["num_requests"]
    ok["output_tokens_mean"] = ok["output_tokens"] / ok["num_requests"]
    cached = ok["prompt_tokens_cached"].fillna(0.0) if "prompt_tokens_cached" in ok.columns else 0.0
    ok["prefill_tokens_mean"] = (ok["prompt_tokens"] - cached).clip(lower=0.0) / ok["num_requests"]

    def col(name: str) -> pd.Series:
        return pd.to_numeric(ok[name], errors="coerce") if name in ok.columns else pd.Series(np.nan, index=ok.index)

    ok["k"] = col("num_speculative_tokens").fillna(0.0)
    mal, share = col("mean_acceptance_length"), col("accepted_output_share")
    tau = (1.0 / (1.0 - share)).where(share.notna() & (share < 1.0), mal)
    ok["tokens_per_step"] = np.where(ok["speculative"], tau, 1.0)
    frac = ((tau - 1.0) / (mal - 1.0)).where(mal > 1.0, 0.0).clip(0.0, 1.0)
    ok["draft_fraction"] = np.where(ok["speculative"], frac, 0.0)
    bad = ok["speculative"] & (ok["tokens_per_step"].isna() | (ok["k"] <= 0))
    if bad.any():
        row = ok[bad].iloc[0]
        raise StepCostError(f"speculative point {row.get('point_id', '?')} has no acceptance length or K")
    return ok.reset_index(drop=True)


def workload_acceptance(df: pd.DataFrame) -> pd.DataFrame:
    """Measured acceptance per (arm, workload) of the speculative arms: K, vLLM's mean acceptance
    length, the alpha it implies at that K, tokens per step and draft fraction (means over points)."""
    pts = measured_points(df)
    spec = pts[pts["speculative"]]
    if spec.empty:
        return pd.DataFrame(columns=["arm", "workload", "k", "mean_acceptance_length", "alpha",
                                     "tokens_per_step", "draft_fraction", "points"])
    g = spec.groupby(["arm", "workload"], sort=True)
    out = g.agg(k=("k", "first"), mean_acceptance_length=("mean_acceptance_length", "mean"),
                tokens_per_step=("tokens_per_step", "mean"), draft_fraction=("draft_fraction", "mean"),
                prompt_tokens_mean=("prompt_tokens_mean", "mean"), output_tokens_mean=("output_tokens_mean", "mean"),
                points=("concurrency", "size")).reset_index()
    out["k"] = out["k"].astype(int)
    out["alpha"] = [alpha_from_acceptance_length(min(m, k + 1.0), k)
                    for m, k in zip(out["mean_acceptance_length"], out["k"], strict=True)]
    return out


# --------------------------------------------------------------------------------------------
# Calibration


@dataclass(frozen=True)
class FitQuality:
    """How well predicted aggregate tok/s match measured ones over ``n`` points."""

    n: int
    rms_log_error: float  # root mean square of ln(predicted / measured)
    max_abs_rel_error: float  # largest |predicted / measured - 1|

    @classmethod
    def of(cls, predicted: np.ndarray, measured: np.ndarray) -> FitQuality:
        r = np.log(predicted) - np.log(measured)
        return cls(int(r.size), float(np.sqrt(np.mean(r**2))), float(np.max(np.abs(np.exp(r) - 1.0))))

    def __str__(self) -> str:
        return f"n={self.n}, rms log error {self.rms_log_error:.3f}, max |rel error| {100 * self.max_abs_rel_error:.1f}%"


@dataclass(frozen=True)
class Calibration:
    """A fitted :class:`Hardware` (and drafter overheads), the points it came from, and its quality.

    ``uncertainty`` maps each fitted term to a multiplicative one-sigma factor from the fit's
    Jacobian (1.05 = known to about 5 %); ``inf`` means these points do not determine it.
    ``spec_predicted`` is the speculative arm predicted from the baseline fit and the measured
    acceptance alone; ``spec_fitted`` is after fitting the drafter's overheads to it.
    """

    hardware: Hardware
    drafter: Drafter
    baseline: FitQuality
    spec_predicted: FitQuality | None
    spec_fitted: FitQuality | None
    uncertainty: dict[str, float]
    fixed: dict[str, float]
    points: pd.DataFrame = field(repr=False)

    def unidentified(self, factor: float = 3.0) -> list[str]:
        """Fitted terms whose uncertainty factor exceeds ``factor`` (the data cannot tell)."""
        return sorted(k for k, v in self.uncertainty.items() if not v <= factor)

    def summary(self) -> str:
        hw, d = self.hardware, self.drafter
        lines = [
            f"bandwidth {hw.bandwidth_bytes_s / 1e9:.3g} GB/s, {hw.flop_s / 1e12:.3g} TFLOP/s, "
            f"fixed step overhead {1e3 * hw.step_overhead_s:.3g} ms"
            + (f" (held fixed: {', '.join(sorted(self.fixed))})" if self.fixed else ""),
            f"baseline fit: {self.baseline}",
        ]
        if self.spec_predicted is not None:
            lines.append(f"speculative arm predicted from the baseline fit and measured acceptance: {self.spec_predicted}")
        if self.spec_fitted is not None:
            costs = [f"{1e3 * d.step_overhead_s:.3g} ms per step", f"{1e3 * d.per_request_s:.3g} ms per request",
                     f"{1e3 * d.per_token_s:.3g} ms per proposed token"]
            lines.append(f"after fitting drafting costs ({' + '.join(costs)}): {self.spec_fitted}")
        unc = ", ".join(f"{k} x/{v:.3g}" if math.isfinite(v) else f"{k} undetermined"
                        for k, v in sorted(self.uncertainty.items()))
        lines.append(f"one-sigma factors: {unc}")
        return "\n".join(lines)


_HW_TERMS = ("bandwidth_bytes_s", "flop_s", "step_overhead_s")
_SPEC_TERMS = ("step_overhead_s", "per_request_s", "per_token_s")
# terms that may be zero are fitted as the log of a value above a floor
_FLOOR = {"step_overhead_s": 1e-9, "per_request_s": 1e-12, "per_token_s": 1e-12}


def calibrate(df: pd.DataFrame, target: TargetModel, *, drafter: Drafter = NGRAM,
              fixed: dict[str, float] | None = None,
              spec_terms: Sequence[str] = ("step_overhead_s", "per_token_s"), name: str = "calibrated",
              memory_bytes: float | None = None, sharpness: float | None = None) -> Calibration:
    """Fit effective bandwidth, FLOP/s and fixed step overhead to the baseline points of a sweep.

    ``df`` is a :func:`specnb.ledger.load_ledgers` frame; its points without a drafter are fitted
    (least squares of ln tok/s), each at its own concurrency and measured prompt and output
    lengths. ``fixed`` holds terms (``bandwidth_bytes_s``, ``flop_s``, ``step_overhead_s``) to
    keep instead of fitting, e.g. a bandwidth measured separately when the sweep never reaches
    a memory-bound step. The speculative points are then predicted from their own measured
    acceptance (tokens per step, draft fraction, K) with ``drafter``, and the drafter's
    ``spec_terms`` (any of ``step_overhead_s``, ``per_request_s``, ``per_token_s``; empty: none)
    are fitted to them. The default pair, a fixed cost per step and a cost per proposed token,
    is what the committed demo's n-gram arm on vLLM-CPU supports: a per-request term instead
    fits it about 2.7 times worse (rms log error), and beside these two it comes out near zero
    and undetermined.
    """
    fixed = dict(fixed or {})
    unknown = sorted(set(fixed) - set(_HW_TERMS))
    if unknown:
        raise StepCostError(f"cannot fix {unknown}; fixable terms: {list(_HW_TERMS)}")
    names = tuple(dict.fromkeys(spec_terms))
    bad = sorted(set(names) - set(_SPEC_TERMS))
    if bad:
        raise StepCostError(f"cannot fit drafter term(s) {bad}; fittable: {list(_SPEC_TERMS)}")
    pts = measured_points(df)
    base, spec = pts[~pts["speculative"]], pts[pts["speculative"]]
    free = [t for t in _HW_TERMS if t not in fixed]
    if len(base) < len(free) + 1:
        raise StepCostError(f"{len(base)} baseline point(s) cannot fit {len(free)} term(s) {free}; "
                            "measure more concurrency levels or fix some terms")

    def arrays(rows: pd.DataFrame) -> dict[str, Any]:
        return dict(batch=rows["concurrency"].to_numpy(float), prompt=rows["prompt_tokens_mean"].to_numpy(float),
                    prefill=rows["prefill_tokens_mean"].to_numpy(float),
                    output=rows["output_tokens_mean"].to_numpy(float), k=rows["k"].to_numpy(float),
                    tau=rows["tokens_per_step"].to_numpy(float), q=rows["draft_fraction"].to_numpy(float),
                    spec=rows["speculative"].to_numpy(bool), sharpness=sharpness)

    b_arr, y_base = arrays(base), base["output_tok_s"].to_numpy(float)

    def hardware(x: np.ndarray) -> Hardware:
        vals = dict(fixed)
        vals.update({t: max(float(np.exp(v)), _FLOOR.get(t, 0.0)) for t, v in zip(free, x, strict=True)})
        return Hardware(name, vals["bandwidth_bytes_s"], vals["flop_s"], vals["step_overhead_s"], memory_bytes,
                        source="calibrated")

    def base_res(x: np.ndarray) -> np.ndarray:
        x = np.clip(x, -60.0, 80.0)
        return np.log(step_terms(hardware(x), target, drafter, **b_arr).tok_s) - np.log(y_base)

    # starting points from the data itself: the smallest step time split between overhead and
    # weights read, the largest batch's step time as if all compute
    step = b_arr["batch"] / y_base
    guess = {"bandwidth_bytes_s": target.weight_bytes / (0.5 * step.min()), "step_overhead_s": 0.5 * step.min(),
             "flop_s": 2.0 * target.params * b_arr["batch"].max() * (1.0 + (b_arr["prefill"] / b_arr["output"]).max())
             / step.max()}
    x0 = np.log([guess[t] for t in free])
    starts = [x0 + np.log(10.0) * np.array(s) for s in itertools.product((-1.0, 0.0, 1.0), repeat=len(free))]
    x = fit_least_squares(base_res, starts)
    hw = hardware(x)
    uncertainty = uncertainty_factors(base_res, x, free)
    pts["predicted_tok_s"] = step_terms(hw, target, drafter, **arrays(pts)).tok_s
    pts["predicted_tok_s_before_spec_fit"] = pts["predicted_tok_s"]
    spec_pred = spec_fit = None
    fitted = drafter
    if len(spec):
        s_arr, y_spec = arrays(spec), spec["output_tok_s"].to_numpy(float)
        spec_pred = FitQuality.of(step_terms(hw, target, drafter, **s_arr).tok_s, y_spec)
        if names and len(spec) > len(names):
            fitted, spec_fit, spec_unc = _fit_drafter_costs(hw, target, drafter, names, s_arr, y_spec)
            uncertainty.update(spec_unc)
            pts["predicted_tok_s"] = step_terms(hw, target, fitted, **arrays(pts)).tok_s
    base_q = FitQuality.of(step_terms(hw, target, drafter, **b_arr).tok_s, y_base)
    return Calibration(hw, fitted, base_q, spec_pred, spec_fit, uncertainty, fixed, pts)


def _fit_drafter_costs(hw: Hardware, target: TargetModel, drafter: Drafter, names: Sequence[str],
                       s_arr: dict[str, Any], y_spec: np.ndarray) -> tuple[Drafter, FitQuality, dict[str, float]]:
    """The drafter's ``names`` costs fitted to the speculative points (least squares of ln tok/s) on
    the fitted hardware: the drafter, its fit quality, each cost's one-sigma factor."""

    def with_costs(x: np.ndarray) -> Drafter:
        x = np.clip(x, -60.0, 10.0)
        return replace(drafter, **{n: max(float(np.exp(v)), _FLOOR[n]) for n, v in zip(names, x, strict=True)})

    def spec_res(x: np.ndarray) -> np.ndarray:
        return np.log(step_terms(hw, target, with_costs(x), **s_arr).tok_s) - np.log(y_spec)

    s_step = s_arr["batch"] * s_arr["tau"] / y_spec
    scale = {"step_overhead_s": 0.1, "per_request_s": 0.01, "per_token_s": 0.01}
    g = np.log([max(scale[n] * s_step.min(), 1e-7) for n in names])
    grid = itertools.product((-2.0, 0.0, 1.0), repeat=len(names))
    xs = fit_least_squares(spec_res, [g + np.log(10.0) * np.array(s) for s in grid])
    fitted = with_costs(xs)
    quality = FitQuality.of(step_terms(hw, target, fitted, **s_arr).tok_s, y_spec)
    return fitted, quality, {f"drafter_{n}": v for n, v in uncertainty_factors(spec_res, xs, names).items()}


def check_against_anatomy(frame: pd.DataFrame, hw: Hardware, target: TargetModel, drafter: Drafter,
                          *, baseline: str = "baseline", methods: Sequence[str] = ("ngram",)) -> pd.DataFrame:
    """The step-cost model's step and drafter terms against profiled steps.

    ``frame`` is :func:`specnb.analysis.anatomy.anatomy_frame` of a run whose records carry the
    unprofiled twin (``unprofiled_cycle_ms``: each window's decode cycle over the profiler's
    slowdown). One row per window, baseline and the arms of ``methods`` (the drafter kind the
    terms were fitted to), each at its own batch (``decode_requests_per_step``) and prompt:

    - ``model_ms`` against ``measured_ms``: the whole decode step, model (``hw``'s overhead, the
      target's roofline, and for a speculative arm ``drafter``'s terms at the window's proposed
      tokens per step) against the engine, and ``rel_error``;
    - for speculative rows, the step's excess over the baseline at the same batch (the baseline's
      measured cycles, fitted linearly in the batch): ``measured_excess_ms`` against the model's
      ``model_excess_ms`` = ``model_compute_ms`` (the proposed tokens' FLOPs) + ``model_drafting_ms``
      (its fixed and per-token terms), and where the engine puts that excess: ``proposer_ms`` (the
      proposer's own scope over the slowdown) and the rest (``beyond_proposer_ms``).
    """
    need = ["unprofiled_cycle_ms", "decode_requests_per_step", "prompt_tokens_mean", "drafted_tokens_per_step",
            "emitted_tokens_per_step", "k", "method", "draft_ms", "profiling_slowdown"]
    missing = [c for c in need if c not in frame.columns]
    if missing:
        raise StepCostError(f"anatomy frame lacks {missing}: pass anatomy_frame() of the records")
    df = frame[frame["unprofiled_cycle_ms"].notna()].copy()
    base = df[df["arm"] == baseline]
    if len(base) < 2 or base["decode_requests_per_step"].nunique() < 2:
        raise StepCostError(f"the check needs {baseline!r} windows with their unprofiled twin at two or more "
                            "levels (records written before the twin have no unprofiled cycle)")
    slope, icpt = np.polyfit(base["decode_requests_per_step"], base["unprofiled_cycle_ms"], 1)
    rows = df[(df["arm"] == baseline) | df["method"].isin(list(methods))]
    spec = rows["arm"] != baseline
    batch = rows["decode_requests_per_step"].to_numpy(float)
    # proposed tokens per decoding request per step: q * K
    qk = np.where(spec, rows["drafted_tokens_per_step"].to_numpy(float) / np.maximum(batch, 1e-9), 0.0)
    k = np.maximum(rows["k"].to_numpy(float), 1.0)
    prompt = rows["prompt_tokens_mean"].fillna(0.0).to_numpy(float)
    out_tok = 32.0 * np.ones_like(batch)  # context only: the memory term's KV reads (small here)
    terms = dict(batch=batch, prompt=prompt, prefill=np.zeros_like(batch), output=out_tok, k=k, q=qk / k,
                 sharpness=None)
    base_model = step_terms(hw, target, drafter, **terms, tau=np.ones_like(batch), spec=np.zeros(batch.shape, bool))
    model = step_terms(hw, target, drafter, **terms, tau=np.ones_like(batch), spec=spec.to_numpy())
    out = rows[["arm", "workload", "concurrency", "repeat", "decode_requests_per_step", "emitted_tokens_per_step",
                "drafted_tokens_per_step", "profiling_slowdown"]].copy()
    out["proposed_per_request"] = qk
    out["measured_ms"] = rows["unprofiled_cycle_ms"].to_numpy(float)
    out["model_ms"] = 1e3 * model.step_s
    out["rel_error"] = out["model_ms"] / out["measured_ms"] - 1.0
    base_at = icpt + slope * batch
    out["baseline_fit_ms"] = base_at
    out["measured_excess_ms"] = np.where(spec, out["measured_ms"] - base_at, np.nan)
    out["model_compute_ms"] = np.where(spec, 1e3 * (model.target_s - base_model.target_s), np.nan)
    out["model_drafting_ms"] = np.where(spec, 1e3 * model.drafting_s, np.nan)
    out["model_excess_ms"] = out["model_compute_ms"] + out["model_drafting_ms"]
    out["proposer_ms"] = np.where(spec, rows["draft_ms"].to_numpy(float) / rows["profiling_slowdown"].to_numpy(float),
                                  np.nan)
    out["beyond_proposer_ms"] = out["measured_excess_ms"] - out["proposer_ms"]
    return out.reset_index(drop=True)


def refit_drafter_terms(check: pd.DataFrame) -> dict[str, Any]:
    """The drafter's fixed and per-proposed-token terms refitted to profiled steps: least squares
    of (measured excess - the proposed tokens' FLOPs) = a + b * (batch * proposed per request),
    both terms kept >= 0, over the speculative rows of :func:`check_against_anatomy`; with the
    fit's rms error in ms and the number of windows."""
    s = check[check["measured_excess_ms"].notna()]
    if len(s) < 3:
        raise StepCostError(f"{len(s)} speculative window(s) cannot refit two terms; profile more levels")
    y = (s["measured_excess_ms"] - s["model_compute_ms"]).to_numpy(float)
    x = (s["decode_requests_per_step"] * s["proposed_per_request"]).to_numpy(float)
    a_mat = np.column_stack([np.ones_like(x), x])
    (a, b), *_ = np.linalg.lstsq(a_mat, y, rcond=None)
    if b < 0:
        a, b = float(y.mean()), 0.0
    if a < 0:
        a, b = 0.0, max(float((x @ y) / (x @ x)) if x @ x > 0 else 0.0, 0.0)
    resid = y - (a + b * x)
    return {"step_overhead_ms": float(a), "per_token_ms": float(b), "windows": int(len(s)),
            "rms_error_ms": float(np.sqrt(np.mean(resid**2))),
            "proposed_tokens_per_step": [float(x.min()), float(x.max())]}


def drafter_terms_from_anatomy(frame: pd.DataFrame, hw: Hardware, target: TargetModel, method: str,
                               *, baseline: str = "baseline") -> dict[str, Any]:
    """What a drafter of kind ``method`` (``eagle3``, ``draft_model``, ``ngram``) costs a step on the
    profiled engine beyond the target's verification: :func:`refit_drafter_terms` over the arms of that
    kind in ``frame`` (:func:`specnb.analysis.anatomy.anatomy_frame` of a run with unprofiled twins),
    with a drafter that has no terms of its own, so the fixed and per-proposed-token terms hold
    everything the drafter adds (its own passes included): use them with a drafter of no size, and
    the windows' ``draft_fraction`` (the share of a request's steps that carried drafts). ``hw`` is
    the profiled machine's preset (its roofline is what the verification's compute is taken at).
    Raises :class:`StepCostError` when the run has no such arm or too few windows."""
    if "method" not in frame.columns or not (frame["method"] == method).any():
        arms = sorted(frame["arm"].unique()) if "arm" in frame.columns else []
        raise StepCostError(f"no {method} arm in this anatomy run (arms: {', '.join(map(str, arms))})")
    check = check_against_anatomy(frame, hw, target, Drafter(method), baseline=baseline, methods=(method,))
    spec = frame[(frame["method"] == method) & frame["unprofiled_cycle_ms"].notna()]
    k = spec["k"].clip(lower=1).astype(float)
    # the share of a decoding request's steps that carried drafts: q in the model's B * q * K
    q = (spec["drafted_tokens_per_step"] / spec["decode_requests_per_step"].clip(lower=1e-9) / k).clip(0.0, 1.0)
    return {**refit_drafter_terms(check), "method": method, "draft_fraction": float(q.mean()),
            "arms": sorted(check.loc[check["arm"] != baseline, "arm"].unique().tolist())}
