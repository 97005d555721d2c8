"""The seeds' formulas, checked against the seeds' own published numbers."""

from __future__ import annotations

import math

import pytest

from specnb.models.theory import (
    acceptance_length,
    alpha_from_acceptance_length,
    amdahl_ceiling,
    amdahl_gain,
    best_k,
    relative_throughput,
    required_decode_speedup,
)


def test_seed_002_acceptance_lengths():
    # seed 002: "at a measured conditional acceptance of about 0.74, raising K from 3 to 7
    # lifts modelled MAL from 2.69 to 3.50, about 30%"
    assert round(acceptance_length(0.74, 3), 2) == 2.69
    assert round(acceptance_length(0.74, 7), 2) == 3.50
    assert acceptance_length(0.74, 7) / acceptance_length(0.74, 3) == pytest.approx(1.30, abs=0.01)


def test_acceptance_length_edges():
    assert acceptance_length(0.0, 5) == 1.0
    assert acceptance_length(1.0, 5) == 6.0
    assert acceptance_length(0.5, 0) == 1.0
    with pytest.raises(ValueError):
        acceptance_length(1.2, 3)
    with pytest.raises(ValueError):
        acceptance_length(0.5, -1)


@pytest.mark.parametrize("alpha, k", [(0.1, 3), (0.55, 4), (0.74, 7), (0.95, 2)])
def test_inverse_round_trips(alpha, k):
    assert alpha_from_acceptance_length(acceptance_length(alpha, k), k) == pytest.approx(alpha, abs=1e-9)


def test_inverse_of_seed_000_lengths():
    # seed 000 reports lengths 3.1 (copy) and 2.2 (free-form) with a 7-token drafter
    a_copy, a_free = alpha_from_acceptance_length(3.1, 7), alpha_from_acceptance_length(2.2, 7)
    assert 0 < a_free < a_copy < 1
    assert acceptance_length(a_free, 7) == pytest.approx(2.2)
    with pytest.raises(ValueError):
        alpha_from_acceptance_length(9.0, 7)


def test_relative_throughput_and_best_k():
    assert relative_throughput(0.74, 0, 0.12) == 1.0
    assert relative_throughput(0.74, 7, 0.0) == pytest.approx(acceptance_length(0.74, 7))
    k_low, _ = best_k(0.74, 0.02)
    k_high, _ = best_k(0.74, 0.3)
    assert k_high < k_low  # more overhead (what concurrency does) moves the best K left
    k, score = best_k(0.74, 0.12)
    assert score == max(relative_throughput(0.74, j, 0.12) for j in range(17))
    assert relative_throughput(0.74, k, 0.12) == score
    assert best_k(0.0, 0.1) == (0, 1.0)  # a drafter that is never right: do not draft


@pytest.mark.parametrize("target, row", [
    (1.2, (1.31, 1.25, 1.22)),
    (1.5, (1.91, 1.67, 1.56)),
    (2.0, (3.50, 2.52, 2.16)),
])
def test_seed_002_amdahl_table(target, row):
    for f, expected in zip((0.70, 0.83, 0.93), row, strict=True):
        assert round(required_decode_speedup(f, target), 2) == expected
        assert amdahl_gain(f, required_decode_speedup(f, target)) == pytest.approx(target)


def test_amdahl_ceiling():
    assert round(amdahl_ceiling(0.83), 1) == 5.9  # seed 002: "cap ... at about 5.9x"
    assert required_decode_speedup(0.83, 6.0) == math.inf
    assert amdahl_gain(0.83, 1.0) == 1.0
    assert amdahl_ceiling(1.0) == math.inf


def test_seed_000_kv_seats():
    from specnb.models.theory import drafter_kv_share, kv_sessions

    # seed 000: the pool shrank by about 36 %; 6.7 sessions at 256k became 4.3
    without = 6.7 * 256_000
    with_drafter = without * (1 - 0.36)
    assert drafter_kv_share(without, with_drafter) == pytest.approx(0.36)
    assert round(kv_sessions(with_drafter, 256_000), 1) == 4.3
    # measured here: 46,592 tokens alone, 23,296 with a full-size draft model (cpu-engine.md)
    assert drafter_kv_share(46_592, 23_296) == pytest.approx(0.5)
    assert round(kv_sessions(46_592, 2_048), 2) == 22.75  # the engine's own "22.75x"


def test_seed_004_rule():
    from specnb.models.theory import acceptance_verdict

    assert acceptance_verdict(0.8) == "worth it"
    assert acceptance_verdict(0.4) == "switch it off"
    assert acceptance_verdict(0.6).startswith("measure")
    with pytest.raises(ValueError):
        acceptance_verdict(1.5)
