"""Percentiles and means on known values; empty input and bad percentiles."""

from __future__ import annotations

import pytest

from specnb.analysis import stats


def test_percentile_interpolates_linearly():
    values = [10.0, 20.0, 30.0, 40.0, 50.0]
    assert stats.percentile(values, 0) == 10.0
    assert stats.percentile(values, 100) == 50.0
    assert stats.percentile(values, 50) == 30.0
    assert stats.percentile(values, 25) == 20.0
    # rank 0.9 * 4 = 3.6 -> 40 + 0.6 * 10
    assert stats.percentile(values, 90) == pytest.approx(46.0)


def test_percentile_is_order_independent_and_returns_float():
    out = stats.percentile([3, 1, 2], 50)
    assert out == 2.0
    assert type(out) is float


def test_p99_of_forty_samples_is_interpolated_not_the_maximum():
    values = list(range(1, 41))  # 1..40
    p99 = stats.percentile(values, 99)
    # rank 0.99 * 39 = 38.61 -> 39 + 0.61
    assert p99 == pytest.approx(39.61)
    assert p99 < max(values)


def test_percentile_of_one_value_is_that_value():
    assert stats.percentile([7.5], 1) == 7.5
    assert stats.percentile([7.5], 99) == 7.5


def test_percentile_empty_is_none():
    assert stats.percentile([], 50) is None


@pytest.mark.parametrize("q", [-0.1, 100.5, 150, -50])
def test_percentile_bad_q_raises(q):
    with pytest.raises(ValueError, match="percentile"):
        stats.percentile([1.0, 2.0], q)


def test_percentile_bad_q_raises_even_when_empty():
    with pytest.raises(ValueError):
        stats.percentile([], 101)


def test_percentiles_default_keys_and_values():
    values = list(range(1, 101))  # 1..100
    out = stats.percentiles(values)
    assert set(out) == {"p50", "p95", "p99"}
    assert out["p50"] == pytest.approx(50.5)
    assert out["p95"] == pytest.approx(95.05)
    assert out["p99"] == pytest.approx(99.01)


def test_percentiles_custom_qs_and_fractional_key():
    out = stats.percentiles([0.0, 10.0], qs=(0, 25, 99.9, 100))
    assert out == {"p0": 0.0, "p25": 2.5, "p99_9": pytest.approx(9.99), "p100": 10.0}


def test_percentiles_empty_gives_none_per_key():
    assert stats.percentiles([]) == {"p50": None, "p95": None, "p99": None}


def test_percentiles_bad_q_raises_on_data():
    with pytest.raises(ValueError):
        stats.percentiles([1.0, 2.0], qs=(50, 101))


def test_percentiles_bad_q_raises_even_when_empty():
    with pytest.raises(ValueError):
        stats.percentiles([], qs=(101,))


def test_mean():
    assert stats.mean([1, 2, 3, 4]) == 2.5
    assert stats.mean([-1.0, 1.0]) == 0.0
    assert stats.mean([]) is None

