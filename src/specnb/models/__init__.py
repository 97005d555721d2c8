"""Models: the seeds' formulas and a step-cost model, to check measurements against.

- :mod:`~specnb.models.theory`: the closed forms (acceptance length, best K, Amdahl, KV seats,
  seed 004's acceptance rule);
- :mod:`~specnb.models.hardware`: hardware presets (``data/hardware.toml``);
- :mod:`~specnb.models.stepcost`: the step-cost model of speculation under load;
- :mod:`~specnb.models.calibration` (with :mod:`~specnb.models.optimize`): fitting it to a sweep.
"""

from __future__ import annotations

from specnb.models import theory

__all__ = ["theory"]
