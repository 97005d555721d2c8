"""The lossless check on hand-made outputs with known answers."""

from __future__ import annotations

import pandas as pd

from specnb.analysis.lossless import compare_outputs, lossless, lossless_summary
from specnb.ledger import load_ledgers, write_ledger
from tests.unit.factories import ledger


def _side(outputs: list[list[int]]) -> pd.DataFrame:
    return pd.DataFrame([{"index": i, "prompt_id": f"p{i}", "error": None, "output_token_ids": ids,
                          "output_sha": "ids:" + ",".join(map(str, ids))} for i, ids in enumerate(outputs)])


SAME = [[1, 2, 3, 4], [5, 6, 7], [8, 9]]


def test_outputs_are_compared_request_by_request(tmp_path):
    write_ledger(tmp_path / "a.json", ledger("baseline"), _side(SAME))
    write_ledger(tmp_path / "b.json", ledger("ngram-k4", mal=3), _side([[1, 2, 3, 4], [5, 0, 7], [8, 9, 10]]))
    cmp = compare_outputs(tmp_path / "a.json", tmp_path / "b.json")
    assert cmp["requests"] == 3 and cmp["identical"] == 1
    assert cmp["first_difference_p50"] == 1.5  # parts at token 1, and at 2 (a prefix runs out)


def test_pairs_and_the_baselines_own_reference_with_a_flag(tmp_path):
    rows = [
        (ledger("baseline", r=0), SAME), (ledger("ngram-k4", r=0, mal=3), SAME),
        (ledger("baseline", r=1), [[1, 2, 3, 4], [5, 6, 7], [8, 0]]),
        (ledger("ngram-k4", r=1, mal=3), [[0], [0], [8, 0]]),
        (ledger("baseline", r=0, temperature=1.0, sweep="hot"), SAME),
        (ledger("ngram-k4", r=0, mal=3, temperature=1.0, sweep="hot"), [[0], [0], [0]]),
    ]
    for i, (led, out) in enumerate(rows):
        write_ledger(tmp_path / f"{i}.json", led, _side(out))
    t = lossless(load_ledgers(tmp_path))
    drafter = t[~t["reference"]].set_index("repeat")
    assert list(drafter["identical"]) == [3, 1]  # sampled points (temperature 1) are not compared
    assert bool(drafter.loc[1, "flagged"]) and not bool(drafter.loc[0, "flagged"])
    ref = t[t["reference"]]
    assert len(ref) == 1 and ref["identical"].iloc[0] == 2  # baseline r1 vs r0: numerics alone
    text = lossless_summary(t)
    assert "ngram-k4 / copy: 67% of 6 requests identical vs the baseline" in text
    assert "baseline / copy: 67% of 3 requests identical baseline vs its own first start" in text
    assert "flagged" in text and "c=1 r=1" in text


def test_nothing_to_compare_without_outputs(tmp_path):
    write_ledger(tmp_path / "a.json", ledger("baseline"))
    write_ledger(tmp_path / "b.json", ledger("ngram-k4", mal=3))
    assert lossless(load_ledgers(tmp_path)).empty
    assert "nothing to compare" in lossless_summary(pd.DataFrame())


def test_each_condition_is_its_own_reference(tmp_path):
    """A study's conditions (two checkpoints here) are separate sweeps: the baseline of one is
    never the other's numerics reference, and the summary has a line per condition."""
    other = [[9, 9, 9, 9], [9, 9, 9], [9, 9]]
    rows = []
    for sweep, out in (("bf16", SAME), ("int8", other)):
        rows += [(ledger("baseline", r=0, sweep=sweep), out), (ledger("baseline", r=1, sweep=sweep), out),
                 (ledger("ngram-k4", r=0, mal=3, sweep=sweep), out)]
    for i, (led, out) in enumerate(rows):
        write_ledger(tmp_path / f"{i}.json", led, _side(out))
    t = lossless(load_ledgers(tmp_path))
    assert (t["identical_share"] == 1.0).all() and len(t[t["reference"]]) == 2
    text = lossless_summary(t)
    assert "bf16 / baseline / copy: 100% of 3 requests identical baseline vs its own first start" in text
    assert "int8 / ngram-k4 / copy: 100% of 3 requests identical vs the baseline" in text
