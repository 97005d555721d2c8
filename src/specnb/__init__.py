"""specnb: measure where speculative decoding pays on a real vLLM server.

The library starts (or attaches to) vLLM, drives it with closed-loop streaming load at
fixed concurrency, reads its Prometheus metrics, pairs drafter-on and drafter-off arms on
the same prompts, and writes one write-once JSON ledger per point. Notebooks and the CLI
call into these names.
"""

from __future__ import annotations

from specnb.arm import Arm
from specnb.ledger import PointLedger, load_ledgers, load_requests, read_ledger
from specnb.report import paired, speedup_table
from specnb.server import VllmServer, attach
from specnb.sweep import SweepSpec, run_sweep
from specnb.workload import bundled, load_jsonl

__version__ = "0.1.0"

__all__ = [
    "Arm",
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
