"""specnb: measure where speculative decoding pays on a real vLLM server.

The data flows one way, and the package is laid out along it::

    parameters -> sweep -> ledgers -> frame -> tables and figures -> notebooks
    (sweep/, engine/)      (ledger/)  (analysis/, models/, figures/)  (notebooks/)

The *engine side* (:mod:`specnb.engine`, :mod:`specnb.sweep`) starts or attaches to vLLM,
drives it with closed-loop streaming load at fixed concurrency, reads its Prometheus metrics
and writes one write-once JSON ledger per point, drafter-on and drafter-off arms paired on
the same prompts. The *analysis side* (:mod:`specnb.ledger`, :mod:`specnb.analysis`,
:mod:`specnb.models`, :mod:`specnb.figures`) reads ledgers and never a server:
no name of the analysis side imports the engine side, so figures rebuild without an engine
installed. ``import specnb`` itself loads nothing: every name below (``load_ledgers``,
``SweepSpec``, ``run_sweep``, ``VllmServer``, ...) is imported when first used.
"""

from __future__ import annotations

from typing import Any

__version__ = "0.1.0"

__all__ = [
    "Arm",
    "PointLedger",
    "Study",
    "SweepSpec",
    "VllmServer",
    "attach",
    "bundled",
    "decide",
    "expected_speedup",
    "kv_capacity",
    "list_published",
    "load_jsonl",
    "load_ledgers",
    "load_published",
    "load_requests",
    "load_spec_by_category",
    "load_traffic",
    "measure_mix",
    "paired",
    "paired_speedups",
    "read_ledger",
    "resolve",
    "run_sweep",
    "speedup_table",
    "summarize",
    "thresholds",
]

# every public name is imported on first use: vLLM imports specnb.engine.plugins (so this
# package) in every process of every server it starts, where the analysis side (pandas, pyarrow)
# would cost about 0.45 s per process; ``specnb.paired_speedups`` and the rest load their module
# when first asked for
_LAZY = {
    **dict.fromkeys(("decide", "expected_speedup", "kv_capacity", "paired", "paired_speedups", "speedup_table",
                     "summarize", "thresholds"), "specnb.analysis"),
    **dict.fromkeys(("PointLedger", "load_ledgers", "load_requests", "load_spec_by_category", "read_ledger"),
                    "specnb.ledger"),
    **dict.fromkeys(("list_published", "load_published"), "specnb.ledger.published"),
    **dict.fromkeys(("bundled", "load_jsonl", "load_traffic", "measure_mix", "resolve"), "specnb.prompts"),
    "Arm": "specnb.sweep.arm",
    "Study": "specnb.sweep.study",
    "SweepSpec": "specnb.sweep.spec",
    "run_sweep": "specnb.sweep.executor",
    "VllmServer": "specnb.engine.server",
    "attach": "specnb.engine.server",
}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'specnb' has no attribute {name!r}")


def __dir__() -> list[str]:
    """Every public name, loaded or not: what ``dir(specnb)`` and Jupyter's tab completion list."""
    return sorted(set(globals()) | set(__all__))
