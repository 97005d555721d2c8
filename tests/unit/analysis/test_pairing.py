"""Paired speedups: ratios only within a pair, spread over repeats, refusals."""

from __future__ import annotations

import pandas as pd
import pytest

from specnb.analysis.pairing import PairingError, paired, speedup_table
from specnb.ledger import load_ledgers, write_ledger
from tests.unit.factories import ledger


def _frame(tmp_path, ledgers):
    for i, led in enumerate(ledgers):
        write_ledger(tmp_path / f"{i:03d}.json", led)
    return load_ledgers(tmp_path)


def test_speedup_is_a_ratio_within_each_repeat(tmp_path):
    df = _frame(tmp_path, [
        ledger("baseline", c=1, r=0, tok_s=100), ledger("ngram-k4", c=1, r=0, tok_s=150, mal=3.0),
        ledger("baseline", c=1, r=1, tok_s=50), ledger("ngram-k4", c=1, r=1, tok_s=100, mal=2.0),
        ledger("baseline", c=8, r=0, tok_s=400), ledger("ngram-k4", c=8, r=0, tok_s=300, mal=2.5),
    ])
    table = speedup_table(df)
    row1 = table[table["concurrency"] == 1].iloc[0]
    # mean of per-repeat ratios (1.5, 2.0), not ratio of means (125/75)
    assert row1["speedup"] == pytest.approx(1.75)
    assert (row1["speedup_min"], row1["speedup_max"], row1["n"]) == (pytest.approx(1.5), pytest.approx(2.0), 2)
    assert row1["acceptance_length"] == pytest.approx(2.5)
    row8 = table[table["concurrency"] == 8].iloc[0]
    assert row8["speedup"] == pytest.approx(0.75) and row8["n"] == 1


def test_unflagged_only(tmp_path):
    df = _frame(tmp_path, [
        ledger("baseline", tok_s=100), ledger("ngram-k4", tok_s=90, mal=None, flags=["spec_no_drafts"]),
    ])
    assert paired(df).empty


def test_failed_points_never_pair(tmp_path):
    df = _frame(tmp_path, [ledger("baseline", tok_s=100), ledger("ngram-k4", status="failed")])
    assert speedup_table(df).empty


@pytest.mark.parametrize("field, a, b", [
    ("content_hash", "sha256:aa", "sha256:bb"),
    ("engine", "0.32.0", "0.31.0"),
    ("temperature", 0.0, 1.0),
])
def test_refuses_mismatched_pairs(tmp_path, field, a, b):
    df = _frame(tmp_path, [ledger("baseline", **{field: a}), ledger("ngram-k4", mal=2.0, **{field: b})])
    with pytest.raises(PairingError):
        paired(df)


def test_needs_one_baseline(tmp_path):
    df = _frame(tmp_path, [ledger("ngram-k4", mal=2.0)])
    with pytest.raises(PairingError, match="exactly one arm without a drafter"):
        paired(df)
    assert paired(pd.DataFrame()).empty


def test_category_acceptance_table():
    from specnb.analysis.text import format_category_acceptance

    cats = pd.DataFrame([
        {"arm": "ngram", "workload": "copy", "concurrency": 1, "repeat": r, "status": "ok", "category": "fix-json",
         "requests": 2, "num_spec_steps": 10, "num_draft_tokens": 40, "num_accepted_draft_tokens": 30,
         "output_tokens": 60} for r in (0, 1)
    ] + [{"arm": "ngram", "workload": "copy", "concurrency": 1, "repeat": 0, "status": "ok", "category": "chat",
          "requests": 1, "num_spec_steps": 0, "num_draft_tokens": 0, "num_accepted_draft_tokens": 0,
          "output_tokens": 30}])
    text = format_category_acceptance(cats)
    fj = next(line for line in text.splitlines() if "fix-json" in line).split()
    assert fj[-4:] == ["4", "4.00", "75", "50"]  # 4 requests; 1 + 60/20; 60/80; 60/120
    chat = next(line for line in text.splitlines() if " chat " in line).split()
    assert chat[-3:] == ["-", "-", "0"]
    assert format_category_acceptance(cats.iloc[0:0]) == "(no per-request acceptance in these ledgers)"


def test_category_acceptance_pools_levels_that_agree_and_shows_levels_that_differ():
    """The AVX2 demo printed 30 rows where 5 said it all: the same panel drafted alike at every
    level gives one row per category (c = all, requests summed); a category whose numbers move
    with the level keeps a row per level."""
    from specnb.analysis.text import format_category_acceptance

    def row(c, cat, accepted):
        return {"arm": "ngram", "workload": "copy", "concurrency": c, "repeat": 0, "status": "ok", "category": cat,
                "requests": 2, "num_spec_steps": 10, "num_draft_tokens": 40, "num_accepted_draft_tokens": accepted,
                "output_tokens": 60}

    levels = (1, 2, 4, 8, 16, 32)
    cats = pd.DataFrame([row(c, "fix-json", 30) for c in levels] + [row(c, "chat", 10 if c < 8 else 5) for c in levels])
    text = format_category_acceptance(cats)
    fj = [ln.split() for ln in text.splitlines() if "fix-json" in ln]
    assert fj == [["ngram", "copy", "all", "fix-json", "12", "4.00", "75", "50"]]
    chat = [ln.split() for ln in text.splitlines() if " chat " in ln]
    assert [ln[2] for ln in chat] == [str(c) for c in levels]  # they differ: every level shown
    assert "c = all: every level gave the same numbers" in text
    assert "c = all" not in format_category_acceptance(cats[cats["concurrency"] == 1])  # one level: nothing pooled


def test_category_acceptance_is_never_pooled_across_a_studys_sweeps():
    from specnb.analysis.text import format_category_acceptance

    row = {"arm": "ngram", "workload": "copy", "concurrency": 1, "repeat": 0, "status": "ok", "category": "fix-json",
           "requests": 2, "num_draft_tokens": 40, "output_tokens": 60}
    cats = pd.DataFrame([{**row, "sweep": "t-t0", "num_spec_steps": 10, "num_accepted_draft_tokens": 30},
                         {**row, "sweep": "t-t1", "num_spec_steps": 10, "num_accepted_draft_tokens": 0}])
    lines = [ln.split() for ln in format_category_acceptance(cats).splitlines() if "fix-json" in ln]
    assert [(ln[0], ln[-3]) for ln in lines] == [("t-t0", "4.00"), ("t-t1", "1.00")]  # not 2.50 pooled


def test_a_pair_measured_on_two_kinds_of_machine_is_left_out_and_named(tmp_path):
    """A fleet block retried on another node type would pair an H100 with an A100: that pair is
    no ratio of arms. It is left out with a line naming it, and the rest of the run is reported
    (it used to raise PairingError for the whole report; issue 46 item 4)."""
    from specnb.analysis import pairing_notes
    from specnb.analysis.report import format_run_report
    from specnb.ledger.records import RunRecords

    def on(led, gpu=None, node=None):
        hw = {**led.provenance.hardware, **({"gpus": [{"name": gpu, "driver": "550.54"}]} if gpu else {})}
        ex = {"kind": "ray", "node_id": node} if node else None
        return led.model_copy(update={"provenance": led.provenance.model_copy(update={"hardware": hw, "executor": ex})})

    h100, a100 = "NVIDIA H100 80GB HBM3", "NVIDIA A100-SXM4-80GB"
    leds = [on(ledger("baseline", c=1, r=0), h100, "n1"), on(ledger("ngram-k4", c=1, r=0, mal=2.0, tok_s=150.0), h100, "n1"),
            on(ledger("baseline", c=1, r=1), h100, "n1"), on(ledger("ngram-k4", c=1, r=1, mal=2.0, tok_s=150.0), a100, "n3"),
            on(ledger("baseline", c=1, r=2), h100, "n1"), on(ledger("ngram-k4", c=1, r=2, mal=2.0, tok_s=150.0), h100, "n2")]
    df = _frame(tmp_path, leds)
    pairs = paired(df)
    assert sorted(pairs["repeat"]) == [0, 2]  # the H100 / A100 pair left out, the others kept
    notes = pairing_notes(df)
    assert len(notes) == 2
    assert notes[0].startswith("left out: 1 pair(s) measured on two kinds of machine") and "r=1" in notes[0]
    assert "A100" in notes[0] and "H100" in notes[0]
    assert notes[1].startswith("1 pair(s) ran on two nodes of the same kind of machine") and "r=2" in notes[1]
    text = format_run_report(RunRecords(tmp_path, df))
    assert notes[0] in text and notes[1] in text and "1.50x" in text
