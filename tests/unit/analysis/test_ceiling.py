"""The ceiling reading on hand-made paired tables with known answers."""

from __future__ import annotations

import json

import pandas as pd
import pytest

from specnb.analysis.ceiling import ceiling_lines, ceiling_table, twins
from specnb.ledger import arm_configs

NGRAM = {"method": "ngram", "num_speculative_tokens": 4, "prompt_lookup_max": 4}
SYN = {"rejection_sample_method": "synthetic"}
CONFIGS = {
    "baseline": None,
    "ngram-k4": NGRAM,
    "draft": {"model": "d", "num_speculative_tokens": 3},
    "ceil-as-ngram": {**NGRAM, **SYN, "synthetic_acceptance_rates": [0.9, 0.8, 0.7, 0.6]},
    "ceil-lo": {**NGRAM, "prompt_lookup_min": 1, **SYN, "synthetic_acceptance_rates": [0.3, 0.09, 0.03, 0.01]},
    "ceil-hi": {**NGRAM, "prompt_lookup_min": 1, **SYN, "synthetic_acceptance_rates": [0.95, 0.9, 0.86, 0.81]},
}


def _row(arm, acc, sp, lo=None, hi=None, c=1):
    return {"workload": "copy", "concurrency": c, "arm": arm, "acceptance_rate": acc, "speedup": sp,
            "speedup_lo": sp - 0.1 if lo is None else lo, "speedup_hi": sp + 0.1 if hi is None else hi}


def test_a_twin_is_the_same_proposer_with_synthetic_acceptance():
    assert twins(CONFIGS) == {"ceil-as-ngram": "ngram-k4"}


def test_captured_share_is_the_real_speedup_over_the_ceiling_at_its_acceptance():
    table = pd.DataFrame([_row("ceil-lo", 0.10, 0.8), _row("ceil-hi", 0.90, 1.8), _row("ngram-k4", 0.50, 1.1),
                          _row("draft", 0.95, 0.7), _row("ceil-as-ngram", 0.52, 1.12)])
    ct = ceiling_table(table, CONFIGS).set_index("arm")
    assert ct.loc["ngram-k4", "ceiling_at"] == pytest.approx(1.3)  # halfway between 0.8 and 1.8
    assert ct.loc["ngram-k4", "captured"] == pytest.approx(1.1 / 1.3)
    # above the sweep: the top ceiling point bounds it from below, the captured share from above
    assert ct.loc["draft", "ceiling_at"] == pytest.approx(1.8) and ct.loc["draft", "ceiling_is_bound"]
    assert ct.loc["ngram-k4", "twin"] == "ceil-as-ngram" and not ct.loc["ngram-k4", "twin_slower"]
    text = "\n".join(ceiling_lines(ct.reset_index()))
    assert "85% captured" in text and "as fast within its interval" in text
    assert "at most 39% captured (sweep higher to place it)" in text


def test_a_twin_that_accepts_as_much_and_runs_slower_is_called_out():
    table = pd.DataFrame([_row("ceil-lo", 0.1, 0.8), _row("ceil-hi", 0.9, 1.8), _row("ngram-k4", 0.5, 1.1),
                          _row("ceil-as-ngram", 0.55, 0.7, lo=0.6, hi=0.8)])
    ct = ceiling_table(table, CONFIGS).set_index("arm")
    assert ct.loc["ngram-k4", "twin_slower"]
    assert "SLOWER" in "\n".join(ceiling_lines(ct.reset_index()))


def test_arm_configs_come_from_the_frame():
    df = pd.DataFrame({"arm": ["baseline", "ngram-k4", "ngram-k4", "baseline"],
                       "speculative_config": [None, json.dumps(NGRAM), json.dumps({"other": 1}), None]})
    assert arm_configs(df) == {"baseline": None, "ngram-k4": NGRAM}  # the first row of each arm
