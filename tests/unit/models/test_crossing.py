"""Where a curve crosses 1.0: one rule for one curve and for many at once."""

from __future__ import annotations

import numpy as np
import pytest

from specnb.models.crossing import crossing, crossings


def test_crossing_interpolates_in_log2_concurrency():
    kind, at = crossing([1, 2, 4, 8], [1.4, 1.2, 1.1, 0.8])  # seed 000's INT4 row
    assert kind == "crosses" and 4 < at < 8
    assert at == pytest.approx(2 ** (2 + 0.1 / 0.3))
    assert crossing([1, 2, 4], [1.2, 1.1, 1.05]) == ("above", None)
    assert crossing([1, 2, 4], [0.9, 0.8, 0.7]) == ("below", None)
    kind, at = crossing([1, 4], [0.5, 1.5])
    assert kind == "rises" and at == pytest.approx(2.0)


def test_crossing_prefers_the_fall_after_a_noisy_rise():
    kind, at = crossing([1, 2, 4, 8], [0.98, 1.02, 0.76, 0.73])
    assert kind == "crosses" and 2 < at < 4


def test_one_rule_for_one_curve_and_many():
    rng = np.random.default_rng(3)
    curves = rng.uniform(0.6, 1.5, size=(500, 5))
    curves[::7, 2] = np.nan
    cs = [1, 2, 4, 8, 16]
    kinds, at = crossings(cs, curves)
    for row, k, a in zip(curves, kinds, at, strict=True):
        keep = ~np.isnan(row)
        one = crossing(list(np.asarray(cs)[keep]), list(row[keep]))
        assert one[0] == k
        assert (one[1] is None and np.isnan(a)) or one[1] == pytest.approx(a)
