"""vLLM plugins that specnb ships, loaded by vLLM itself in every one of its processes.

vLLM runs every entry point of the group ``vllm.general_plugins`` in the API server, the
engine core and the workers before any model code runs. specnb uses that hook for one
gap in the CPU build: synthetic acceptance (the "ceiling" arms, seed 002's "measure the
ceiling before training a drafter") is accepted by the CPU build's config but its CPU
sampler kills the engine at the first speculative step.
:mod:`specnb.engine.plugins.synthetic_cpu` supplies that path in plain PyTorch.

The modules here import neither vLLM nor torch at import time: vLLM imports them early,
and specnb's own pre-start checks import them in a process that never loads an engine.
"""

from __future__ import annotations

__all__ = ["ENTRY_POINT_GROUP"]

ENTRY_POINT_GROUP = "vllm.general_plugins"
