"""What the resampling intervals share: their replicates, seed and percentile interval.

The paired speedups' interval is not a bootstrap (:mod:`specnb.analysis.estimator`). Quantities
that are not a paired ratio of one metric keep a percentile bootstrap of their own: goodput under
SLOs (:mod:`specnb.analysis.latency`), the speedup on a traffic mix (:mod:`specnb.analysis.mix`)
and the predicted acceptance's prompt spread (:mod:`specnb.analysis.predicted`).
"""

from __future__ import annotations

import warnings

import numpy as np

__all__ = ["DEFAULT_N_BOOT", "DEFAULT_SEED", "quantiles"]

DEFAULT_N_BOOT = 2000
DEFAULT_SEED = 0


def quantiles(values: np.ndarray, confidence: float, axis: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """The percentile interval holding ``confidence`` of ``values`` along ``axis``."""
    a = (1.0 - confidence) / 2
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # all-NaN columns stay NaN
        lo, hi = np.nanquantile(values, [a, 1.0 - a], axis=axis)
    return lo, hi
