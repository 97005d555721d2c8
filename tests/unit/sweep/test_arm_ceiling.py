"""Ceiling arms (synthetic acceptance): vLLM's rules checked before anything starts."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from specnb.sweep import SweepError, SweepSpec
from specnb.sweep.arm import Arm, synthetic_rates

NGRAM = {"method": "ngram", "num_speculative_tokens": 4, "prompt_lookup_max": 4, "prompt_lookup_min": 1}


def ceiling(**kw) -> dict:
    return {**NGRAM, "rejection_sample_method": "synthetic", **kw}


def test_ceiling_arm_is_recognised():
    arm = Arm(name="ceil", speculative_config=ceiling(synthetic_acceptance_rates=[0.9, 0.7, 0.5, 0.3]))
    assert arm.ceiling and arm.speculative
    assert synthetic_rates(arm.speculative_config) == [0.9, 0.7, 0.5, 0.3]
    assert not Arm(name="b").ceiling
    assert not Arm(name="n", speculative_config=NGRAM).ceiling
    assert not Arm(name="s", speculative_config={**NGRAM, "rejection_sample_method": "standard"}).ceiling


@pytest.mark.parametrize("length, rates", [
    (1.0, [0.0, 0.0, 0.0, 0.0]),
    (2.5, [1.0, 0.5, 0.0, 0.0]),
    (3.0, [1.0, 1.0, 0.0, 0.0]),
    (5.0, [1.0, 1.0, 1.0, 1.0]),
    (3, [1.0, 1.0, 0.0, 0.0]),
])
def test_acceptance_length_becomes_vllms_minimum_variance_schedule(length, rates):
    # vLLM: SpeculativeConfig._acceptance_length_to_rates
    cfg = ceiling(synthetic_acceptance_length=length)
    Arm(name="c", speculative_config=cfg)
    assert synthetic_rates(cfg) == pytest.approx(rates)
    assert 1 + sum(synthetic_rates(cfg)) == pytest.approx(length)


@pytest.mark.parametrize("cfg, needle", [
    (ceiling(), "exactly one of"),
    (ceiling(synthetic_acceptance_rates=[0.9, 0.7, 0.5, 0.3], synthetic_acceptance_length=2.0), "exactly one of"),
    (ceiling(synthetic_acceptance_rates=[0.9, 0.7, 0.5]), "has 3 entries; num_speculative_tokens is 4"),
    (ceiling(synthetic_acceptance_rates=[1.2, 0.7, 0.5, 0.3]), "in [0, 1]"),
    (ceiling(synthetic_acceptance_rates=[0.9, 0.7, 0.5, -0.1]), "in [0, 1]"),
    (ceiling(synthetic_acceptance_rates=[0.5, 0.7, 0.5, 0.3]), "non-increasing"),
    (ceiling(synthetic_acceptance_rates="0.9"), "list of numbers"),
    (ceiling(synthetic_acceptance_rates=[0.9, True, 0.5, 0.3]), "list of numbers"),
    (ceiling(synthetic_acceptance_length=0.5), "in [1, 5]"),
    (ceiling(synthetic_acceptance_length=5.5), "in [1, 5]"),
    (ceiling(synthetic_acceptance_length="3"), "in [1, 5]"),
    ({**NGRAM, "synthetic_acceptance_rates": [0.9, 0.7, 0.5, 0.3]}, "needs rejection_sample_method"),
    ({**NGRAM, "synthetic_acceptance_length": 2.0}, "needs rejection_sample_method"),
    ({**NGRAM, "rejection_sample_method": "synthetc"}, "unknown rejection_sample_method"),
    ({"rejection_sample_method": "synthetic", "num_speculative_tokens": 4, "synthetic_acceptance_length": 2.0},
     "needs a 'method'"),
])
def test_bad_ceiling_arm_is_one_line(cfg, needle):
    with pytest.raises(ValidationError) as exc:
        Arm(name="c", speculative_config=cfg)
    assert needle in str(exc.value)
    with pytest.raises(SweepError) as exc:
        SweepSpec.parse({"name": "t", "model": "m", "concurrency": [1],
                         "arms": [{"name": "b"}, {"name": "c", "speculative_config": cfg}]})
    assert needle in str(exc.value) and "\n" not in str(exc.value)
