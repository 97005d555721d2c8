"""Sweeps: the engine side's plan. Arms, the sweep definition, its preflight, the runner, and
studies (one sweep per condition of a notebook axis).

- :mod:`~specnb.sweep.arm`: the baseline and the speculative configurations paired with it;
- :mod:`~specnb.sweep.spec`: a sweep's definition, validated in one line per mistake;
- :mod:`~specnb.sweep.preflight`: models, workloads and drafters resolved before any server;
- :mod:`~specnb.sweep.runner`: a sweep's preflight, then its blocks run here (``BlockRunner``), composed of
  :mod:`~specnb.sweep.plan` (which points, in which blocks, how many requests, the time left),
  :mod:`~specnb.sweep.rounds` (the one round loop, local and Ray), :mod:`~specnb.sweep.servers` (start,
  start together, restart), :mod:`~specnb.sweep.measure` (one point measured, its ledger written) and
  :mod:`~specnb.sweep.observers` (the progress bar, file hooks);
- :mod:`~specnb.sweep.executor`: where the pairing blocks run (here, or on Ray: :mod:`~specnb.sweep.fleet`);
- :mod:`~specnb.sweep.study`: a notebook's parameters as one sweep per condition;
- :mod:`~specnb.sweep.progress`: a bar in a terminal, a line per point in a file or CI log;

The definition modules are light; the runner (aiohttp, the load generator, servers) is
imported only when a name from it is asked for, so reading a study's parameters never loads
the engine.
"""

from __future__ import annotations

from typing import Any

from specnb.sweep.arm import Arm, ArmError
from specnb.sweep.spec import SweepError, SweepSpec, blocks, point_path
from specnb.sweep.study import Condition, Study

__all__ = ["Arm", "ArmError", "Condition", "Study", "SweepError", "SweepSpec", "SweepOutcome", "blocks",
           "point_path", "prepare", "run_sweep"]

_LAZY = {"run_sweep": "specnb.sweep.executor", "SweepOutcome": "specnb.sweep.runner",
         "prepare": "specnb.sweep.preflight"}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'specnb.sweep' has no attribute {name!r}")
