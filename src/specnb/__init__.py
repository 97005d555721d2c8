"""specnb: measure where speculative decoding pays on a real vLLM server.

The library starts (or attaches to) vLLM, drives it with closed-loop streaming load at
fixed concurrency, reads its Prometheus metrics, pairs drafter-on and drafter-off arms on
the same prompts, and writes one write-once JSON ledger per point. Notebooks and the CLI
call into these names.
"""

from __future__ import annotations

from specnb.analysis import bootstrap_speedups, decide, kv_capacity, speedup_intervals, thresholds
from specnb.arm import Arm
from specnb.ledger import PointLedger, load_ledgers, load_requests, load_spec_by_category, read_ledger
from specnb.mix import expected_speedup, measure_mix
from specnb.published import list_published, load_published
from specnb.report import paired, speedup_table
from specnb.server import VllmServer, attach
from specnb.study import Study
from specnb.sweep import SweepSpec, run_sweep
from specnb.traffic import load_traffic
from specnb.workload import bundled, load_jsonl, resolve

__version__ = "0.1.0"

__all__ = [
    "Arm",
    "Study",
    "bootstrap_speedups",
    "decide",
    "expected_speedup",
    "kv_capacity",
    "list_published",
    "load_published",
    "load_spec_by_category",
    "load_traffic",
    "measure_mix",
    "resolve",
    "speedup_intervals",
    "thresholds",
    "PointLedger",
    "SweepSpec",
    "VllmServer",
    "attach",
    "bundled",
    "load_jsonl",
    "load_ledgers",
    "load_requests",
    "paired",
    "read_ledger",
    "run_sweep",
    "speedup_table",
]
