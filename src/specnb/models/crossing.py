"""Where a speedup curve crosses 1.0: one rule, for one curve and for thousands at once.

The crossing is interpolated linearly in log2(concurrency) between the two measured levels
that straddle 1.0. The *first fall* through 1.0 is the threshold ("pays below c~X"), even
after a noisy rise below it; a curve that only rises through 1.0 loses below and pays above
("rises"); a curve on one side over the whole range is "above" or "below". Points that are
NaN are dropped from their curve.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

__all__ = ["KINDS", "crossing", "crossings"]

KINDS = np.array(["crosses", "rises", "above", "below"])


def crossing(concurrency: Sequence[float], speedup: Sequence[float]) -> tuple[str, float | None]:
    """One curve: ``("crosses", c)``, ``("rises", c)``, ``("above", None)`` or ``("below", None)``."""
    kinds, at = crossings(concurrency, np.asarray([speedup], dtype=float))
    return str(kinds[0]), None if np.isnan(at[0]) else float(at[0])


def crossings(concurrency: Sequence[float], curves: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Every row of ``curves`` (n, C) at once: the kinds (``crosses`` / ``rises`` / ``above`` /
    ``below``) and the crossing concurrency (NaN for ``above`` / ``below``). A row with NaN
    points is read without them; a row with no points at all is ``below``."""
    c = np.asarray(concurrency, dtype=float)
    v = np.atleast_2d(np.asarray(curves, dtype=float))
    if v.shape[1] != c.size:
        raise ValueError(f"curves have {v.shape[1]} points, concurrency has {c.size}")
    order = np.argsort(c)
    c, v = c[order], v[:, order]
    if not c.size:
        return np.full(len(v), "below", dtype=object), np.full(len(v), np.nan)
    x = np.log2(c)
    kinds = np.where(v[:, 0] >= 1.0, 2, 3)
    at = np.full(len(v), np.nan)
    if c.size >= 2:
        v0, v1 = v[:, :-1], v[:, 1:]
        cross = ((v0 - 1.0) * (v1 - 1.0) < 0) | ((v1 == 1.0) & (v0 != 1.0))
        with np.errstate(all="ignore"):  # segments that do not cross divide by zero: masked below
            where = 2 ** (x[:-1] + (1.0 - v0) * (x[1:] - x[:-1]) / (v1 - v0))
        # the first fall through 1.0 is the threshold, even after a noisy rise below it
        for code, mask in ((1, cross & (v0 < v1)), (0, cross & (v0 > v1))):
            hit = mask.any(axis=1)
            first = mask.argmax(axis=1)
            kinds = np.where(hit, code, kinds)
            at = np.where(hit, where[np.arange(len(v)), first], at)
    out_kinds = KINDS[kinds].astype(object)
    for i in np.flatnonzero(np.isnan(v).any(axis=1)):
        keep = ~np.isnan(v[i])
        sub_kinds, sub_at = crossings(c[keep], v[i, keep][None, :])
        out_kinds[i], at[i] = sub_kinds[0], sub_at[0]
    return out_kinds, at
