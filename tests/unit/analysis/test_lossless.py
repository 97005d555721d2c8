"""The lossless check on hand-made outputs with known answers."""

from __future__ import annotations

import json

import pandas as pd
import pytest

from specnb.analysis.lossless import (
    MARGINS_DIR,
    MARGINS_KIND,
    compare_outputs,
    divergence_margin,
    load_margins,
    lossless,
    lossless_summary,
    top_gaps,
)
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


def _timed(outputs: list[list[int]], starts: list[float], ends: list[float]) -> pd.DataFrame:
    side = _side(outputs)
    side["start_s"], side["end_s"] = starts, ends
    # one token per chunk, a token every 0.1 s from 0.1 s after the start
    side["chunk_times_s"] = [[s + 0.1 * (j + 1) for j in range(len(o))] for s, o in zip(starts, outputs, strict=True)]
    side["chunk_tokens"] = [[1] * len(o) for o in outputs]
    return side


def test_divergences_name_the_position_the_tokens_and_the_batch_there(tmp_path):
    base = [[1, 2, 3, 4], [5, 6, 7, 8], [8, 9]]
    spec = [[1, 2, 3, 4], [5, 6, 0, 8], [8, 9]]
    # the second request's token 2 arrives at 0.3 s, when requests 0 and 1 are in flight (2 ends at 0.25)
    write_ledger(tmp_path / "a.json", ledger("baseline"), _timed(base, [0.0, 0.0, 0.0], [1.0, 1.0, 0.25]))
    write_ledger(tmp_path / "b.json", ledger("ngram-k4", mal=3), _timed(spec, [0.0, 0.0, 0.0], [1.0, 1.0, 0.25]))
    cmp = compare_outputs(tmp_path / "a.json", tmp_path / "b.json", divergences=True)
    assert cmp["identical"] == 2
    (d,) = cmp["divergences"]
    assert (d["index"], d["position"], d["token_a"], d["token_b"]) == (1, 2, 7, 0)
    assert d["in_flight_b"] == 2 and cmp["in_flight_at_difference_p50"] == 2.0


def test_margin_at_a_difference_and_the_texts_ordinary_gaps():
    at = {7: -0.70, 0: -0.72, 3: -4.0}
    m = divergence_margin(7, 0, at)
    assert m["margin"] == pytest.approx(0.02) and m["argmax_is_base"] and not m["margin_is_bound"]
    far = divergence_margin(7, 99, at)  # the other token is not in the top k: a lower bound
    assert far["margin"] == pytest.approx(3.3) and far["margin_is_bound"]
    gaps = top_gaps([None, {1: -0.1, 2: -3.0}, {1: -1.0, 2: -1.5, 3: -2.0}, None], 1)
    assert gaps.tolist() == pytest.approx([2.9, 0.5])


def test_summary_says_how_close_to_a_tie_the_differences_were(tmp_path):
    rows = [(ledger("baseline", r=0), SAME), (ledger("ngram-k4", r=0, mal=3), [[1, 2, 3, 4], [5, 0, 7], [8, 9]])]
    for i, (led, out) in enumerate(rows):
        write_ledger(tmp_path / f"{i}.json", led, _side(out))
    table = lossless(load_ledgers(tmp_path))
    doc = {"kind": MARGINS_KIND, "condition": None, "arm": "ngram-k4", "workload": "copy", "concurrency": 1,
           "repeat": 0, "reference": False,
           "divergences": [{"index": 1, "position": 1, "token_a": 6, "token_b": 0, "margin": 0.03,
                            "margin_is_bound": False, "argmax_is_base": True, "as_close_share": 0.01}]}
    p = tmp_path / "predicted" / MARGINS_DIR / "ngram-k4" / "copy" / "c001-r00.json"
    p.parent.mkdir(parents=True)
    p.write_text(json.dumps(doc))
    margins = load_margins(tmp_path)
    assert len(margins) == 1 and margins["condition"].iloc[0] == "default"
    text = lossless_summary(table, margins=margins)
    assert "two candidates are 0.03 nats apart in the baseline's own logits (median of 1; 1.0% of the text's " \
        "ordinary positions are as close" in text
