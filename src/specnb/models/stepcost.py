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
speculation (:func:`specnb.models.theory.acceptance_length`); per-user tok/s = tokens / step time,
aggregate = B times that. Their ratio against B gives the speedup curve, and
:func:`predicted_crossing` finds where it crosses 1.0 (the log2 interpolation of
:func:`specnb.models.crossing.crossing`). With a memory size the model also says where each arm's KV
pool runs out (the drafter's weights and KV cache take seats: seed 000's 6.7 -> 4.3 sessions).

Left out on purpose: attention FLOPs (the KV *reads* are in the memory floor, and they
dominate decode attention), prefill of the drafter, scheduler effects such as preemption,
and the difference between per-user and aggregate ratios that prefill latency causes.

The hardware terms are *effective* values. GPU presets (:mod:`specnb.models.hardware`) are peak
spec-sheet numbers, which a server never reaches; :func:`specnb.models.calibration.calibrate` fits effective bandwidth,
FLOP/s and fixed overhead to a measured baseline sweep (least squares on log throughput,
numpy only), then predicts the speculative arm from its measured acceptance, and optionally
fits the drafting overheads to it. It reports fit quality and, per fitted term, a
multiplicative uncertainty factor; a term the points cannot pin down (for instance bandwidth,
when every measured step is compute- or overhead-bound) shows up as unidentified.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from specnb.models.crossing import crossing
from specnb.models.hardware import Hardware, StepCostError, positive
from specnb.models.theory import acceptance_length

__all__ = ["TargetModel", "Drafter", "NGRAM", "Scenario", "tokens_per_step", "predict", "predicted_crossing",
           "max_concurrency", "step_terms", "weights_read", "runs_on_host"]


@dataclass(frozen=True)
class TargetModel:
    """The served (target) model: parameter count, bytes of weights, KV bytes per token."""

    name: str
    params: float
    weight_bytes: float
    kv_bytes_per_token: float  # K and V over all layers, one token of context
    # attention's FLOPs per new token per context token (QK^T and AV: 4 * layers * query heads * head dim);
    # 0 leaves attention compute out (the KV reads are in the memory term either way)
    attn_flops_per_context: float = 0.0
    # a mixture of experts: the routed experts' bytes (part of weight_bytes), how many experts a layer
    # routes over and how many each token takes; params per token (compute) is active_params (0: params)
    expert_bytes: float = 0.0
    experts: int = 0
    experts_per_token: int = 0
    active_params: float = 0.0

    def __post_init__(self) -> None:
        positive("params", self.params)
        positive("weight_bytes", self.weight_bytes)
        positive("kv_bytes_per_token", self.kv_bytes_per_token, zero_ok=True)
        positive("attn_flops_per_context", self.attn_flops_per_context, zero_ok=True)
        positive("active_params", self.active_params, zero_ok=True)
        if not 0.0 <= self.expert_bytes < self.weight_bytes:
            raise StepCostError(f"expert_bytes must be in [0, weight_bytes), got {self.expert_bytes}")
        if self.expert_bytes and not 0 < self.experts_per_token <= self.experts:
            raise StepCostError(f"a mixture of experts needs 0 < experts_per_token <= experts, got "
                                f"{self.experts_per_token} of {self.experts}")

    def with_attention(self, layers: int, heads: int, head_dim: int) -> TargetModel:
        """This model with attention's FLOPs counted: 4 * layers * query heads * head dim per token of context."""
        return replace(self, attn_flops_per_context=4.0 * layers * heads * head_dim)

    def with_experts(self, active_params: float, experts: int, experts_per_token: int) -> TargetModel:
        """This model as a mixture of experts: ``active_params`` per token of its ``params``; the routed experts
        hold params - active over 1 - experts_per_token / experts of the weights (the rest is always read)."""
        if not 0 < experts_per_token < experts:
            raise StepCostError(f"experts_per_token must be in (0, experts), got {experts_per_token} of {experts}")
        if not 0 < active_params < self.params:
            raise StepCostError(f"active_params must be in (0, params), got {active_params:g} of {self.params:g}")
        routed = (self.params - active_params) / (1.0 - experts_per_token / experts)
        if routed >= self.params:
            raise StepCostError("these active params leave no dense part: check active_params and the expert counts")
        return replace(self, expert_bytes=routed * self.weight_bytes / self.params, experts=experts,
                       experts_per_token=experts_per_token, active_params=active_params)

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
    ``host``: the drafter runs on the host (n-gram): no drafting pass on the device, so ``per_pass_s``
    and a size do not apply.
    ``draft_fraction``: share of steps that carry a draft (n-gram drafts only on a match).
    ``step_overhead_s``, ``per_request_s`` and ``per_token_s`` (per proposed token: B * q * K
    per step): what speculation costs beyond the drafter's roofline, e.g. proposing, rejection
    sampling, bookkeeping, or a slower engine path; a calibration fits them. ``per_pass_s``: a
    drafting pass's cost whatever the batch (K passes per step for a sequential drafter, one for
    a parallel one), e.g. a draft head's launches; the GPU fit (:mod:`specnb.models.gpufit`) sets it.
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
    per_pass_s: float = 0.0
    host: bool = False
    context_cap: float = 0.0  # the drafter reads KV for at most this much context (0: all of it)

    def __post_init__(self) -> None:
        for name in ("params", "weight_bytes", "kv_bytes_per_token", "per_request_s", "step_overhead_s",
                     "per_token_s", "per_pass_s", "context_cap"):
            positive(name, getattr(self, name), zero_ok=True)
        if not 0.0 <= self.draft_fraction <= 1.0:
            raise StepCostError(f"draft_fraction must be in [0, 1], got {self.draft_fraction}")


NGRAM = Drafter("ngram", host=True)


def runs_on_host(method: str, params: float) -> bool:
    """Whether a drafter proposes on the host (no drafting pass on the device): vLLM's n-gram, which has
    no weights; any drafter with a size runs on the device, whatever its method is called."""
    return method == "ngram" and params <= 0


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
        positive("prompt_tokens", self.prompt_tokens, zero_ok=True)
        positive("output_tokens", self.output_tokens)
        if not 0.0 <= self.cached_prompt_share <= 1.0:
            raise StepCostError(f"cached_prompt_share must be in [0, 1], got {self.cached_prompt_share}")
        if not 0.0 < self.memory_utilization <= 1.0:
            raise StepCostError(f"memory_utilization must be in (0, 1], got {self.memory_utilization}")
        if self.sharpness is not None:
            positive("sharpness", self.sharpness)

    @property
    def context_tokens(self) -> float:
        """Mean context a decode step reads KV for: the prompt plus half the output."""
        return self.prompt_tokens + self.output_tokens / 2.0


def tokens_per_step(alpha: float, k: int, draft_fraction: float = 1.0) -> float:
    """Tokens one request emits per speculative step: 1 + q * (MAL(alpha, K) - 1)."""
    if not 0.0 <= draft_fraction <= 1.0:
        raise StepCostError(f"draft_fraction must be in [0, 1], got {draft_fraction}")
    return 1.0 + draft_fraction * (acceptance_length(alpha, k) - 1.0)


def weights_read(target: TargetModel, step_tokens: np.ndarray) -> np.ndarray:
    """Weight bytes a step reads: all of a dense model's; for a mixture of experts the dense part and
    the routed experts its tokens touch (each token picks experts_per_token of experts, uniformly: the
    share touched is 1 - (1 - k/E)^tokens)."""
    experts = np.asarray(target.experts, float)
    share = np.divide(np.asarray(target.experts_per_token, float), experts, out=np.zeros_like(experts),
                      where=experts > 0)
    untouched = (1.0 - share) ** step_tokens
    return target.weight_bytes - target.expert_bytes * untouched


def _roofline(memory: np.ndarray, compute: np.ndarray, sharpness: float | None) -> np.ndarray:
    if sharpness is None:
        return np.maximum(memory, compute)
    return (memory**sharpness + compute**sharpness) ** (1.0 / sharpness)


@dataclass
class StepTerms:
    memory_s: np.ndarray
    compute_s: np.ndarray
    target_s: np.ndarray
    drafting_s: np.ndarray
    step_s: np.ndarray
    tok_s: np.ndarray  # aggregate output tok/s


def step_terms(hw: Hardware, target: TargetModel, drafter: Drafter, batch: np.ndarray, prompt: np.ndarray,
           prefill: np.ndarray, output: np.ndarray, k: np.ndarray, tau: np.ndarray, q: np.ndarray,
           spec: np.ndarray, sharpness: float | None) -> StepTerms:
    """Vectorised step cost: one element per (batch, traffic, acceptance, arm) point."""
    context = prompt + output / 2.0
    # tokens through the target per request per step: 1 decoded (or 1 + qK verified) plus the
    # prefill a closed loop adds (each request's prompt spread over its output / tau steps)
    tokens = np.where(spec, 1.0 + q * k, 1.0) + tau * prefill / output
    memory = (weights_read(target, batch * tokens) + batch * target.kv_bytes_per_token * context) / hw.bandwidth_bytes_s
    active = np.where(np.asarray(target.active_params) > 0, target.active_params, target.params)
    compute = (2.0 * active + target.attn_flops_per_context * context) * batch * tokens / hw.flop_s
    target_s = _roofline(memory, compute, sharpness)
    drafting = drafter.step_overhead_s + drafter.per_request_s * batch + drafter.per_token_s * batch * q * k
    # the drafter's fields may be arrays too (one drafter per element: gpufit stacks its curves);
    # a host drafter (n-gram) makes no pass on the device
    device = ~np.asarray(drafter.host, bool)
    passes = np.where(drafter.parallel, 1.0, k) * device
    drafting = drafting + drafter.per_pass_s * passes
    sized = ((np.asarray(drafter.params) > 0) | (np.asarray(drafter.weight_bytes) > 0)) & device
    if np.any(sized):
        per_pass = np.where(drafter.parallel, k, 1.0)
        cap = np.asarray(drafter.context_cap, float)
        d_context = np.where(cap > 0, np.minimum(context, np.where(cap > 0, cap, 1.0)), context)
        d_mem = (drafter.weight_bytes + batch * drafter.kv_bytes_per_token * d_context) / hw.bandwidth_bytes_s
        d_comp = 2.0 * drafter.params * batch * per_pass / hw.flop_s
        drafting = drafting + np.where(sized, passes * _roofline(d_mem, d_comp, sharpness), 0.0)
    drafting = np.where(spec, drafting, 0.0)
    step = hw.step_overhead_s + target_s + drafting
    return StepTerms(memory, compute, target_s, drafting, step, batch * tau / step)


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
    base = step_terms(s.hardware, s.target, d, batch, tau=np.ones_like(batch), spec=np.zeros(batch.shape, bool), **shape)
    spec = step_terms(s.hardware, s.target, d, batch, tau=np.full_like(batch, tau), spec=np.ones(batch.shape, bool),
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
