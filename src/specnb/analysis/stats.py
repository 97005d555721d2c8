"""Small, dependency-light statistics used by every summary.

Percentiles use linear interpolation between order statistics (numpy's default), so a
p99 over 40 samples is an interpolated value, not the maximum. Functions take plain
sequences and return ``None`` for empty input rather than raising or returning NaN, so a
ledger field reads ``null`` when there was nothing to measure.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

__all__ = ["percentile", "percentiles", "mean"]


def percentile(values: Sequence[float], q: float) -> float | None:
    """The q-th percentile (0-100) of ``values``, or ``None`` when empty."""
    if not 0 <= q <= 100:
        raise ValueError(f"percentile must be in [0, 100], got {q}")
    if len(values) == 0:
        return None
    return float(np.percentile(np.asarray(values, dtype=float), q))


def percentiles(values: Sequence[float], qs: Sequence[float] = (50, 95, 99)) -> dict[str, float | None]:
    """``{"p50": ..., "p95": ..., "p99": ...}`` for the given percentiles."""
    arr = np.asarray(values, dtype=float)
    out: dict[str, float | None] = {}
    for q in qs:
        if not 0 <= q <= 100:
            raise ValueError(f"percentile must be in [0, 100], got {q}")
        key = f"p{q:g}".replace(".", "_")
        out[key] = float(np.percentile(arr, q)) if arr.size else None
    return out


def mean(values: Sequence[float]) -> float | None:
    return float(np.mean(values)) if len(values) else None
