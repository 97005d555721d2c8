"""specnb: measure where speculative decoding pays on a real vLLM server.

The data flows one way, and the package is laid out along it::

    parameters -> sweep -> ledgers -> frame -> tables and figures -> notebooks
    (sweep/, engine/)      (ledger/)  (analysis/, models/, figures/)  (notebooks/)

The *engine side* (:mod:`specnb.engine`, :mod:`specnb.sweep`) starts or attaches to vLLM,
drives it with closed-loop streaming load at fixed concurrency, reads its Prometheus metrics
and writes one write-once JSON ledger per point, drafter-on and drafter-off arms paired on
the same prompts. The *analysis side* (:mod:`specnb.ledger`, :mod:`specnb.analysis`,
:mod:`specnb.models`, :mod:`specnb.figures`) reads ledgers and never a server:
``import specnb`` loads only it, so figures rebuild without an engine installed. Engine
names below (``SweepSpec``, ``run_sweep``, ``VllmServer``, ``attach``) are imported when
first used.
"""

from __future__ import annotations

from typing import Any

from specnb.analysis import (
    bootstrap_speedups,
    decide,
    expected_speedup,
    kv_capacity,
    paired,
    speedup_table,
    summarize,
    thresholds,
)
from specnb.ledger import PointLedger, load_ledgers, load_requests, load_spec_by_category, read_ledger
from specnb.ledger.published import list_published, load_published
from specnb.prompts import bundled, load_jsonl, load_traffic, measure_mix, resolve

__version__ = "0.1.0"

__all__ = [
    "Arm",
    "PointLedger",
    "Study",
    "SweepSpec",
    "VllmServer",
    "attach",
    "bootstrap_speedups",
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
    "read_ledger",
    "resolve",
    "run_sweep",
    "speedup_table",
    "summarize",
    "thresholds",
]

# the engine side, imported on first use
_LAZY = {
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
