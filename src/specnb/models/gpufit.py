"""The step-cost model's GPU terms in absolute units, fitted to published speedup curves and held out source by source.

On a GPU the step-cost model (:mod:`specnb.models.stepcost`) prices a step from a spec sheet: the
roofline of the weights a step reads (for a mixture of experts, the experts its tokens touch), each
request's KV reads, and the FLOPs of its tokens (attention's grow with context). What a spec sheet
does not give is fitted here to published curves (:func:`specnb.ledger.published.published_curves`:
each point a published speedup at a concurrency, or at a K, with the target's shape, the drafter,
K and tokens per step), as absolute quantities that carry across models and GPUs:

- ``bandwidth_efficiency`` and ``compute_efficiency``: the share of the spec sheet's bandwidth and
  FLOP/s a serving engine reaches;
- ``step_ms``: a fixed cost per engine step in both arms (scheduling, launches, sampling), ms;
- ``spec_step_ms``: what a speculative step adds whatever the drafter's size (proposal bookkeeping,
  rejection sampling, the n-gram proposer on the host), ms;
- ``draft_pass_ms``: the fixed cost of one drafting pass on the device (launches), ms.

Each drafter is costed as it runs (:func:`curve_models`): n-gram on the host (no device pass), an
EAGLE head one layer of the target's shape per pass, K passes; a draft model its full forward per
pass; an MTP or block drafter one pass. The fit is least squares on log speedup, each source
weighted equally. :func:`bootstrap_terms` resamples curves to give each term's spread;
:func:`leave_one_source_out` fits on every source but one and predicts the held-out one, and
:func:`prediction_band` turns the held-out errors into a band whose coverage is itself checked out of
sample (each source's band from the other sources' held-out errors). Once a user's own sweep exists,
:func:`published_fit_gap` says how far the published fit is from it. Pure functions: the caller passes
the curves frame and the hardware presets (:func:`specnb.models.hardware.hardware_presets`).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from types import SimpleNamespace
from typing import Any

import numpy as np
import pandas as pd

from specnb.models.crossing import crossing
from specnb.models.hardware import Hardware, StepCostError
from specnb.models.optimize import nelder_mead
from specnb.models.stepcost import Drafter, TargetModel, step_terms, weights_read

__all__ = ["TERMS", "DEFAULT_TERMS", "GpuTerms", "GpuFit", "curve_models", "predict_speedups", "fit_gpu_terms",
           "bootstrap_terms", "term_summary", "leave_one_source_out", "loso_summary", "loso_levels",
           "prediction_band", "band_summary", "band_width", "crossing_band", "anchor_terms", "engine_terms_from_steps", "SHARPNESS", "engine_of", "fit_by_engine", "terms_for", "published_fit_gap", "gap_line", "measured_on_gpu",
           "drafter_for"]

TERMS = ("bandwidth_efficiency", "compute_efficiency", "step_ms", "spec_step_ms", "draft_pass_ms")
# speedup ratios cannot tell an engine's efficiency from its fixed cost (both scale every step alike):
# those are fixed from a published step-time model (anchor_terms); so is a speculative step's own fixed
# cost, 0 there (its constant per step is the same in both arms, its n-gram proposal 0.59 % of the
# verification): only the cost of a drafting pass on the device is fitted
DEFAULT_TERMS = ("draft_pass_ms",)
# a step's memory and compute times add (the p-norm with p = 1): the published step-time model's form
# (SpecDecode-Bench's target step = KV term + token term + fixed), not a hard roofline max
SHARPNESS = 1.0
STEP_MODEL_LEDGER = "specdecode-bench-step-model"
# starting values of the multi-start fit, per term (each tried at 0.1x, 1x and 10x)
_START = {"bandwidth_efficiency": 0.7, "compute_efficiency": 0.5, "step_ms": 1.0, "spec_step_ms": 1.0,
          "draft_pass_ms": 0.3}
# efficiencies are shares of a spec sheet's peak: the fit keeps them at or below this
_MAX_EFFICIENCY = 1.0
_EFFICIENCY = ("bandwidth_efficiency", "compute_efficiency")
_NEED = ("ledger_id", "condition", "hardware_preset", "gpus", "compute_dtype", "target_params_b", "target_layers",
         "target_kv_heads", "target_head_dim", "weight_bytes_per_param", "kv_bytes_per_value", "drafter_kind",
         "drafter_params_b", "k", "tokens_per_step", "prompt_tokens", "output_tokens", "concurrency", "value")


def _with(obj: Any, **changes: Any) -> Any:
    # a dataclass (one curve, one preset) or a stack of curves (a namespace of per-point arrays)
    return SimpleNamespace(**{**vars(obj), **changes}) if isinstance(obj, SimpleNamespace) else replace(obj, **changes)


@dataclass(frozen=True)
class GpuTerms:
    """The fitted terms; full efficiency and no fixed cost are the spec-sheet model."""

    bandwidth_efficiency: float = 1.0
    compute_efficiency: float = 1.0
    step_ms: float = 0.0
    spec_step_ms: float = 0.0
    draft_pass_ms: float = 0.0

    def apply(self, hw: Hardware, target: TargetModel, drafter: Drafter) -> tuple[Hardware, Drafter]:
        """``hw`` and ``drafter`` with these terms (added to the fixed costs they carry); ``target``
        is not needed by absolute terms and kept for the callers' symmetry."""
        del target
        hw2 = _with(hw, bandwidth_bytes_s=hw.bandwidth_bytes_s * self.bandwidth_efficiency,
                    flop_s=hw.flop_s * self.compute_efficiency, step_overhead_s=hw.step_overhead_s + self.step_ms / 1e3)
        d2 = _with(drafter, step_overhead_s=drafter.step_overhead_s + self.spec_step_ms / 1e3,
                   per_pass_s=drafter.per_pass_s + self.draft_pass_ms / 1e3)
        return hw2, d2

    def seconds(self, hw: Hardware, target: TargetModel) -> dict[str, float]:
        """The fixed costs in seconds: per engine step, per speculative step, per drafting pass."""
        del hw, target
        return {"engine_step_s": self.step_ms / 1e3, "step_overhead_s": self.spec_step_ms / 1e3,
                "per_pass_s": self.draft_pass_ms / 1e3}


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


def _given(r: Any, column: str) -> float | None:
    v = r.get(column) if hasattr(r, "get") else None
    return None if v is None or (isinstance(v, float) and math.isnan(v)) or pd.isna(v) else float(v)


def _target_of(r: Any, name: str) -> TargetModel:
    """A curve's target from its row: dense shape, attention's FLOPs where the query heads are
    given, a mixture of experts where its active parameters and expert counts are."""
    layers = int(r["target_layers"])
    target = TargetModel.dense(name, float(r["target_params_b"]) * 1e9,
                               bytes_per_param=float(r["weight_bytes_per_param"]), layers=layers,
                               kv_heads=int(r["target_kv_heads"]), head_dim=int(r["target_head_dim"]),
                               kv_bytes_per_value=float(r["kv_bytes_per_value"]))
    heads = _given(r, "target_attention_heads")
    if heads:
        target = target.with_attention(layers, int(heads), int(r["target_head_dim"]))
    active = _given(r, "target_active_params_b")
    if active:
        target = target.with_experts(active * 1e9, int(_given(r, "target_experts") or 0),
                                     int(_given(r, "target_experts_per_token") or 0))
    return target


def drafter_for(kind: str, target: TargetModel, params: float = 0.0, *, layers: int,
                kv_bytes_per_token: float | None = None, context_cap: float = 0.0) -> Drafter:
    """A drafter costed as it runs: n-gram on the host (no pass on the device); an EAGLE head one layer
    of the target's shape per pass (``params`` when given), K passes; a draft model its own forward per
    pass (``params`` needed); an MTP or block drafter one pass (one target layer when ``params`` is 0).
    A drafter counted by size reads its weights in bf16; ``kv_bytes_per_token`` (default: one target
    layer's for an EAGLE or MTP head, none otherwise) over at most ``context_cap`` tokens of context."""
    if kind == "ngram":
        return Drafter("ngram", host=True)
    if kind == "draft_model" and params <= 0:
        raise StepCostError("a draft model's cost needs its size (drafter_params_b)")
    if params > 0:
        p, w = params, 2.0 * params
    else:
        per_layer = (target.active_params or target.params) / layers
        p, w = per_layer, 2.0 * per_layer
    if kv_bytes_per_token is None:
        kv_bytes_per_token = target.kv_bytes_per_token / layers if kind in ("eagle", "mtp") else 0.0
    return Drafter(kind, params=p, weight_bytes=w, kv_bytes_per_token=kv_bytes_per_token,
                   parallel=kind in ("block", "mtp"), context_cap=context_cap)


def curve_models(points: pd.DataFrame, presets: Mapping[str, Hardware]) -> list[_Curve]:
    """The published points grouped into curves with their hardware (preset peaks times GPUs), target and drafter."""
    missing = [c for c in _NEED if c not in points.columns]
    if missing:
        raise StepCostError(f"curves frame lacks {missing}: pass specnb.ledger.published_curves()")
    if points.empty:
        raise StepCostError("no published curve points to fit")
    # each column converted once, then taken per curve (a fit makes this call hundreds of times: a
    # sub-frame per curve was most of its cost); the values are the sub-frames' exactly
    groups = points.groupby(["ledger_id", "condition"], sort=True).indices
    firsts = points.iloc[[pos[0] for pos in groups.values()]].to_dict("records")
    col = {c: points[c].to_numpy(float) for c in ("concurrency", "prompt_tokens", "output_tokens", "k",
                                                  "tokens_per_step", "value")}
    prefill = points["prefill_tokens"].fillna(points["prompt_tokens"]) if "prefill_tokens" in points.columns else points["prompt_tokens"]
    col["prefill"] = prefill.to_numpy(float)
    col["q"] = (points["draft_fraction"].fillna(1.0).to_numpy(float) if "draft_fraction" in points.columns
                else np.ones(len(points)))
    index = points.index.to_numpy()
    out = []
    for ((lid, cond), pos), r in zip(groups.items(), firsts, strict=True):
        if r["hardware_preset"] not in presets:
            raise StepCostError(f"{lid} {cond!r}: unknown hardware preset {r['hardware_preset']!r}")
        base = presets[r["hardware_preset"]].for_dtype(r["compute_dtype"])
        n = float(r["gpus"])
        hw = replace(base, bandwidth_bytes_s=base.bandwidth_bytes_s * n, flop_s=base.flop_s * n,
                     memory_bytes=None, step_overhead_s=0.0)
        target = _target_of(r, str(cond))
        drafter = drafter_for(str(r["drafter_kind"]), target, float(r["drafter_params_b"]) * 1e9,
                              layers=int(r["target_layers"]), kv_bytes_per_token=_given(r, "drafter_kv_bytes_per_token"),
                              context_cap=_given(r, "drafter_context_tokens") or 0.0)
        arrays = dict(batch=col["concurrency"][pos], prompt=col["prompt_tokens"][pos], prefill=col["prefill"][pos],
                      output=col["output_tokens"][pos], k=col["k"][pos], q=col["q"][pos], sharpness=SHARPNESS)
        out.append(_Curve(str(lid), str(cond), index[pos], hw, target, drafter, arrays,
                          col["tokens_per_step"][pos], col["value"][pos]))
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
                                    for f in ("params", "weight_bytes", "kv_bytes_per_token", "attn_flops_per_context",
                                              "expert_bytes", "experts", "experts_per_token", "active_params")})
        drafter = SimpleNamespace(**{f: per_point(lambda c, f=f: getattr(c.drafter, f))
                                     for f in ("params", "weight_bytes", "kv_bytes_per_token", "parallel", "host",
                                               "context_cap",
                                               "per_request_s", "step_overhead_s", "per_token_s", "per_pass_s")})
        n = sum(c.tau.size for c in curves)
        arrays = {k: np.concatenate([c.arrays[k] for c in curves] * 2) for k in ("batch", "prompt", "prefill", "output", "k", "q")}
        arrays["tau"] = np.concatenate([np.ones(n)] + [c.tau for c in curves])
        arrays["spec"] = np.concatenate([np.zeros(n, bool), np.ones(n, bool)])
        return cls(hw, target, drafter, arrays, n)

    def speedups(self, terms: GpuTerms) -> np.ndarray:
        """Every point's predicted speedup, curve after curve in the order given."""
        hw, d = terms.apply(self.hw, self.target, self.drafter)
        both = step_terms(hw, self.target, d, sharpness=SHARPNESS, **self.arrays)
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
    # an efficiency is a share of the spec sheet's peak: capped at it
    return replace(fixed, **{t: float(np.exp(min(v, math.log(_MAX_EFFICIENCY)) if t in _EFFICIENCY else v))
                             for t, v in zip(free, x, strict=True)})


def engine_terms_from_steps(hw: Hardware, target: TargetModel, batch: Sequence[float], context: Sequence[float],
                            tokens: Sequence[float], step_s: Sequence[float]) -> GpuTerms:
    """An engine's terms from its step times: the bandwidth and compute efficiency on ``hw``'s spec
    sheet and the fixed cost per step, for steps of ``batch`` requests at ``context`` tokens each, each
    processing ``tokens`` tokens. The additive step (:data:`SHARPNESS` = 1) is linear in the fixed cost,
    1 / bandwidth efficiency and 1 / compute efficiency, so this is least squares on the relative error
    (each step weighted by 1 / its time), exact for steps the model itself generated."""
    b, ctx, n, t = (np.asarray(v, float) for v in (batch, context, tokens, step_s))
    if not (b.size == ctx.size == n.size == t.size) or b.size < 4:
        raise StepCostError("step times need batch, context, tokens and time for 4 steps or more, one each")
    if np.any(t <= 0) or np.any(b <= 0) or np.any(n <= 0) or np.any(ctx < 0):
        raise StepCostError("step times, batches and tokens must be positive, contexts not negative")
    memory = (weights_read(target, b * n) + b * target.kv_bytes_per_token * ctx) / hw.bandwidth_bytes_s
    active = target.active_params or target.params
    compute = (2.0 * active + target.attn_flops_per_context * ctx) * b * n / hw.flop_s
    design = np.column_stack([np.ones_like(t), memory, compute]) / t[:, None]
    coef, *_ = np.linalg.lstsq(design, np.ones_like(t), rcond=None)
    fixed, inv_bw, inv_flop = (float(c) for c in coef)
    if inv_bw <= 0 or inv_flop <= 0 or fixed < 0:
        raise StepCostError(f"these steps give no physical engine terms (fixed {1e3 * fixed:.3g} ms, 1/bandwidth share "
                            f"{inv_bw:.3g}, 1/compute share {inv_flop:.3g}): steps across more batches are needed")
    return GpuTerms(bandwidth_efficiency=1.0 / inv_bw, compute_efficiency=1.0 / inv_flop, step_ms=1e3 * fixed)


@functools.cache
def _step_model_ledger() -> Any:
    # read once a process: every fit without given engine terms (a nested leave-one-source-out makes dozens) needs it
    from specnb.ledger.published import read_published

    return read_published(STEP_MODEL_LEDGER)


def anchor_terms(presets: Mapping[str, Hardware], ledger: Any = None) -> GpuTerms:
    """The engine terms fixed from a published step-time model (SpecDecode-Bench's, fitted on one H100 to
    Llama-3.1-8B's vLLM steps "with instructcoder bs=1,8,16,32,64"; ``ledgers/published/
    specdecode-bench-step-model.json``): its baseline step (target forward plus its constant per step)
    evaluated at those batches and at contexts of 0 to 4,096 tokens, read back by
    :func:`engine_terms_from_steps` on the H100 preset. Its KV term is what tells the bandwidth apart from
    the fixed cost (its fixed forward cost alone cannot: weights and launches do not vary with the batch);
    the model's additive step has the simulator's form, so the steps come back exactly.
    ``ledger``: a :class:`~specnb.ledger.published.PublishedLedger` (default: the committed one)."""
    led = ledger if ledger is not None else _step_model_ledger()
    c = {r.metric: r.value for r in led.rows}
    need = ("target_c_fixed", "target_c_compute", "target_c_kv", "overhead_constant_per_step")
    if any(c.get(k) is None for k in need):
        raise StepCostError(f"{led.id}: a step-time model ledger needs {list(need)}")
    batch, context = (g.ravel() for g in np.meshgrid([1.0, 8.0, 16.0, 32.0, 64.0], [0.0, 302.0, 1024.0, 4096.0]))
    step = (c["target_c_fixed"] + batch * c["target_c_compute"] + batch * context * c["target_c_kv"]
            + c["overhead_constant_per_step"])
    llama8b = TargetModel.dense("Llama-3.1-8B", 8.03e9, layers=32, kv_heads=8, head_dim=128)
    return engine_terms_from_steps(presets["h100-sxm"], llama8b, batch, context, np.ones_like(batch), step)


def fit_gpu_terms(points: pd.DataFrame, presets: Mapping[str, Hardware], terms: Sequence[str] = DEFAULT_TERMS,
                  *, fixed: GpuTerms | None = None, start: GpuTerms | None = None) -> GpuFit:
    """Least squares of log speedup over the published points; ``terms`` are fitted, the rest stay at ``fixed``
    (default: :func:`anchor_terms`, the engine terms of the published step-time model).

    ``start`` (e.g. a previous fit) replaces the multi-start grid with one start and a polish.
    """
    free = tuple(dict.fromkeys(terms))
    bad = sorted(set(free) - set(TERMS))
    if bad:
        raise StepCostError(f"cannot fit {bad}; terms: {list(TERMS)}")
    if not free:
        raise StepCostError("name at least one term to fit")
    if fixed is None:
        fixed = anchor_terms(presets)
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


def engine_of(points: pd.DataFrame) -> pd.Series:
    """Each point's engine family (its curve's ``engine``), ``""`` where the curve names none."""
    if "engine" not in points.columns:
        return pd.Series("", index=points.index)
    return points["engine"].fillna("").astype(str)


def fit_by_engine(points: pd.DataFrame, presets: Mapping[str, Hardware], terms: Sequence[str] = DEFAULT_TERMS,
                  *, fixed: GpuTerms | None = None) -> dict[str, GpuFit]:
    """The fit per engine family (each on its own sources' points) and pooled over every source (key ``""``):
    what speculation costs beyond the roofline differs between engines (their drafting loops, graphs and
    launches), so an answer for an engine reads that engine's terms where any source measured it."""
    engines = engine_of(points)
    fits = {"": fit_gpu_terms(points, presets, terms, fixed=fixed)}
    for name in sorted(set(engines) - {""}):
        mine = points[engines == name]
        if len(mine) > len(tuple(terms)):
            fits[name] = fit_gpu_terms(mine, presets, terms, fixed=fixed)
    return fits


def terms_for(fits: Mapping[str, GpuFit], engine: str | None) -> tuple[GpuTerms, str]:
    """The terms an answer for ``engine`` reads, and whose: its own fit where one exists, the pooled one else."""
    if engine and engine in fits:
        return fits[engine].terms, engine
    return fits[""].terms, "all sources"


def _held_out(points: pd.DataFrame, presets: Mapping[str, Hardware], terms: Sequence[str], fixed: GpuTerms | None,
               by_engine: bool) -> pd.DataFrame:
    engines = engine_of(points)
    parts = []
    for held in sorted(points["ledger_id"].unique()):
        mine = points["ledger_id"] == held
        train, test = points[~mine], points[mine].copy()
        fits = (fit_by_engine(train, presets, terms, fixed=fixed) if by_engine
                else {"": fit_gpu_terms(train, presets, terms, fixed=fixed)})
        chosen, whose = terms_for(fits, engines[mine].iloc[0])
        test["predicted"] = predict_speedups(test, presets, chosen)
        test["fit_engine"] = whose
        for t in fits[""].free:
            test[f"fit_{t}"] = getattr(chosen, t)
        parts.append(test)
    out = pd.concat(parts).sort_index()
    out["log_error"] = np.log(out["predicted"]) - np.log(out["value"])
    out["same_side"] = (out["predicted"] > 1.0) == (out["value"] > 1.0)
    return out


def leave_one_source_out(points: pd.DataFrame, presets: Mapping[str, Hardware],
                         terms: Sequence[str] = DEFAULT_TERMS, *, fixed: GpuTerms | None = None,
                         by_engine: bool = True, nested: bool = True) -> pd.DataFrame:
    """Fit on every source but one, predict the held-out source's points: one row per point, with
    ``predicted`` (held out), ``log_error`` and ``same_side`` (both above, or both at or below, 1.0).
    ``by_engine``: the held-out source is predicted with the terms fitted to the other sources of its
    engine where there are any (``fit_engine`` names them; a source's engine is its first curve's), else
    with those fitted to all the others, as :func:`terms_for` answers a user's engine. ``nested``: for
    each source, the same held-out errors of the *other* sources with that source removed too (kept in
    ``attrs["inner_errors"]`` for :func:`prediction_band`, so a source's band never saw it); needs three
    sources or more."""
    if points["ledger_id"].nunique() < 2:
        raise StepCostError("leave-one-source-out needs two or more sources")
    out = _held_out(points, presets, terms, fixed, by_engine)
    if nested and points["ledger_id"].nunique() >= 3:
        out.attrs["inner_errors"] = {
            held: _held_out(points[points["ledger_id"] != held], presets, terms, fixed, by_engine)[["ledger_id", "log_error"]]
            for held in sorted(points["ledger_id"].unique())}
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


def band_width(loso: pd.DataFrame, level: float = 0.9) -> float:
    """The half-width, in log speedup, of the ``level`` prediction band: the ``level`` quantile of the
    held-out |log error| with each source weighted once (:func:`leave_one_source_out`'s rows)."""
    if not 0.0 < level < 1.0:
        raise StepCostError(f"level must be in (0, 1), got {level}")
    if loso.empty:
        raise StepCostError("no held-out points to size a band from")
    err = loso["log_error"].abs().to_numpy(float)
    w = 1.0 / loso.groupby("ledger_id")["log_error"].transform("size").to_numpy(float)
    order = np.argsort(err)
    cum = np.cumsum(w[order]) / w.sum()
    return float(err[order][min(np.searchsorted(cum, level), err.size - 1)])


def prediction_band(loso: pd.DataFrame, level: float = 0.9) -> pd.DataFrame:
    """Each held-out point with its ``level`` band, sized without its own source: a source's band is
    :func:`band_width` of the other sources' held-out errors, read from ``inner_log_error`` where
    :func:`leave_one_source_out` computed it (``nested=True``: those errors come from fits that never saw
    the source either, so whether its points fall inside is out of sample), else from their ordinary
    held-out errors (fits that did see it). Adds ``band_log``, ``band_low``, ``band_high`` and ``covered``."""
    if loso["ledger_id"].nunique() < 2:
        raise StepCostError("a band checked out of sample needs two or more sources")
    out = loso.copy()
    for held in out["ledger_id"].unique():
        mine = out["ledger_id"] == held
        inner = out.attrs.get("inner_errors", {}).get(held)
        others = inner if inner is not None else out.loc[~mine, ["ledger_id", "log_error"]]
        out.loc[mine, "band_log"] = band_width(others, level)
    out["band_low"] = out["predicted"] * np.exp(-out["band_log"])
    out["band_high"] = out["predicted"] * np.exp(out["band_log"])
    out["covered"] = (out["value"] >= out["band_low"]) & (out["value"] <= out["band_high"])
    return out


def band_summary(banded: pd.DataFrame) -> pd.DataFrame:
    """Per held-out source and overall: points, the band's half-width as a factor, and the share of
    the source's published points inside its out-of-sample band (:func:`prediction_band`)."""
    g = banded.groupby("ledger_id", sort=True)
    out = g.agg(points=("value", "size"), band_log=("band_log", "first"), coverage=("covered", "mean")).reset_index()
    out["band_factor"] = np.exp(out["band_log"])
    total = pd.DataFrame([{"ledger_id": "all (each source once)", "points": int(len(banded)),
                           "band_log": float("nan"), "coverage": float(out["coverage"].mean()),
                           "band_factor": float("nan")}])
    return pd.concat([out, total], ignore_index=True)


def crossing_band(concurrency: Sequence[float], speedup: Sequence[float], band_log: float) -> tuple[str, str]:
    """Where a predicted curve's band crosses 1.0: the lower band's crossing and the upper's, each as a
    phrase ("c~12", "below c=1": already below 1.0 there, "past c=4096": still above 1.0 there; "n/a" for a
    band or curve that is not a number)."""
    values = np.asarray(speedup, float)
    if not math.isfinite(band_log) or not np.isfinite(values).any():
        return "n/a", "n/a"
    out = []
    for shift in (-band_log, band_log):
        kind, at = crossing(concurrency, np.exp(shift) * values)
        out.append(f"c~{at:.0f}" if at is not None else
                   f"past c={max(concurrency):g}" if kind == "above" else f"below c={min(concurrency):g}")
    return out[0], out[1]


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
                  k=float(a["k"]) * one, q=float(a["draft_fraction"]) * one, sharpness=SHARPNESS)
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
