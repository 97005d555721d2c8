"""Predicted acceptance on hand-made sequences and distributions with known answers (no server:
the engine side is tested for real in tests/integration/test_predict_real.py)."""

from __future__ import annotations

import json
import math

import numpy as np
import pandas as pd
import pytest

from specnb.analysis.predicted import (
    PREDICTED_KIND,
    PredictError,
    Step,
    expected_accepted,
    flag_disagreement,
    load_predicted,
    ngram_propose,
    predicted_lines,
    predicted_table,
    summarize_steps,
    tempered,
    walk,
)
from specnb.ledger import load_ledgers, write_ledger
from specnb.ledger.frame import ledger_files
from specnb.sweep.arm import Arm
from specnb.sweep.predict import PredictError as DriverError
from specnb.sweep.predict import fill_step, ngram_settings, predict_run
from tests.unit.factories import ledger


def test_ngram_proposal_is_the_latest_longest_match():
    #           0  1  2  3  4  5  6  7  8  9
    context = [7, 1, 2, 3, 9, 1, 2, 3, 5, 1, 2, 3]
    # suffix [1, 2, 3] occurs at 1 and 5; vLLM's scan of the reversed context keeps the last match
    # it meets among the longest: the earliest occurrence in the text
    assert ngram_propose(context, 1, 3, 2, 100) == [9, 1]
    assert ngram_propose(context, 4, 4, 2, 100) == []  # no 4-gram repeats
    assert ngram_propose(context, 1, 3, 2, len(context)) == []  # at the model's length limit nothing is drafted
    assert ngram_propose([1, 2, 1, 2], 2, 2, 5, 100) == [1, 2]  # cut where the context ends


def test_walk_advances_by_the_accepted_drafts_plus_one():
    prompt = [1, 2, 3, 4, 5]
    out = [9, 1, 2, 3, 4, 5, 9, 8]
    steps = walk(prompt, out, min_n=1, max_n=2, k=3, max_model_len=100)
    # after [9]: suffix [9] never occurred before in the context -> no draft, move one
    # after [9, 1]: suffix "9 1"? no; "1" at 0 -> drafts [2, 3, 4]; out continues 2 3 4 -> all 3 accepted
    assert steps[0].position == 2 and steps[0].drafts == [2, 3, 4] and steps[0].matched == 3
    # the next step starts after 3 accepted + 1 bonus token
    assert steps[1].position == 6
    s = summarize_steps(steps)
    assert s["drafted_tokens"] == sum(len(st.drafts) for st in steps)
    assert s["replayed_accepted"] == sum(st.matched for st in steps)
    assert s["expected_rate_lo"] is None  # no probabilities filled in yet


def test_expected_accepted_is_the_sum_of_running_products():
    assert expected_accepted([1.0, 1.0, 1.0]) == 3.0
    assert expected_accepted([0.5, 0.5]) == pytest.approx(0.5 + 0.25)
    assert expected_accepted([0.0, 1.0]) == 0.0


def _logits(rng, n=200):
    logits = rng.normal(0, 3, n)
    return logits - np.log(np.exp(logits).sum())  # log-softmax at T 1


@pytest.mark.parametrize("t", [0.3, 0.5, 0.8])
def test_tempered_interval_holds_the_exact_tempered_probability(t):
    rng = np.random.default_rng(1)
    for _ in range(50):
        lp = _logits(rng)
        order = np.argsort(-lp)
        top = {int(i): float(lp[i]) for i in order[:20]}
        exact = np.exp(lp / t) / np.exp(lp / t).sum()
        for tok in (int(order[0]), int(order[5]), int(order[50])):
            lo, hi = tempered(tok, float(lp[tok]), top, t)
            assert lo - 1e-12 <= exact[tok] <= hi + 1e-12
            assert hi - lo < 0.2  # a top 20 of 200 leaves little tail at T < 1


def test_tempered_is_exact_at_one_and_zero():
    lp = {3: math.log(0.6), 4: math.log(0.3)}
    assert tempered(4, math.log(0.3), lp, 1.0) == pytest.approx((0.3, 0.3))
    assert tempered(3, math.log(0.6), lp, 0.0) == (1.0, 1.0)
    assert tempered(4, math.log(0.3), lp, 0.0) == (0.0, 0.0)
    with pytest.raises(PredictError):
        tempered(4, math.log(0.3), lp, 1.5)


def test_fill_uses_the_path_up_to_the_mismatch_and_bounds_what_was_not_asked():
    # context of 2 tokens, drafts [5, 6, 7]; the path continues 5 then 8 (first mismatch at draft 1)
    path = [None, {1: 0.0}, {5: math.log(0.9), 8: math.log(0.1)}, {8: math.log(0.7), 6: math.log(0.2)},
            {9: 0.0}]
    st = Step(position=0, drafts=[5, 6, 7], matched=1)
    fill_step(st, path, None, 2, 1.0)
    assert st.probs_lo[:2] == pytest.approx([0.9, 0.2])  # draft 6 at the mismatch is in the top-k there
    assert (st.probs_lo[2], st.probs_hi[2]) == (0.0, 1.0)  # beyond it, never asked
    off = [None, {1: 0.0}, {5: math.log(0.9)}, {6: math.log(0.2)}, {7: math.log(0.5)}]
    fill_step(st, path, off, 2, 1.0)
    assert st.probs_lo == pytest.approx([0.9, 0.2, 0.5]) and st.probs_hi == pytest.approx(st.probs_lo)
    assert summarize_steps([st])["expected_accepted_lo"] == pytest.approx(0.9 + 0.18 + 0.09)


def _pred_doc(cond, t, drafted, expected, replayed, prompts=4):
    per = [{"prompt_id": f"p{i}", "drafted_tokens": drafted // prompts, "replayed_accepted": replayed // prompts,
            "expected_accepted_lo": expected / prompts, "expected_accepted_hi": expected / prompts}
           for i in range(prompts)]
    return {"kind": PREDICTED_KIND, "condition": cond, "arm": "ngram-k4", "workload": "copy", "concurrency": 1,
            "repeat": 0, "temperature": t, "baseline_point": "baseline/copy/c001-r0", "requests": prompts,
            "results": summarize_steps([]) | {"drafted_tokens": drafted, "replayed_accepted": replayed,
                                              "expected_accepted_lo": expected, "expected_accepted_hi": expected},
            "per_request": per}


def test_a_collapsed_acceptance_is_flagged_and_an_agreeing_one_is_not(tmp_path):
    for cond, t, acc in (("t0", 0.0, 0.8), ("t1", 1.0, 0.05)):
        (tmp_path / cond).mkdir()
        (tmp_path / cond / "sweep.json").write_text("{}")
        write_ledger(tmp_path / cond / "ngram-k4" / "copy" / "c001-r00.json",
                     ledger("ngram-k4", mal=1 + 4 * acc, temperature=t, sweep=cond).model_copy(
                         update={"parameters": {"condition": cond}}), None)
        path = tmp_path / cond / "predicted" / "ngram-k4" / "copy" / "c001-r00.json"
        path.parent.mkdir(parents=True)
        path.write_text(json.dumps(_pred_doc(cond, t, 400, 0.8 * 400 if t == 0 else 0.45 * 400, 320 if t == 0 else 170)))
    (tmp_path / "t1" / "predicted" / "logs").mkdir()
    (tmp_path / "t1" / "predicted" / "logs" / "x.json").write_text("{}")  # a log folder is not a prediction
    pred = load_predicted(tmp_path)
    assert len(pred) == 2
    df = load_ledgers(tmp_path)
    assert not df["path"].str.contains("predicted").any()  # predictions are never ledgers
    table = predicted_table(df, pred).set_index("condition")
    assert not table.loc["t0", "flagged"] and table.loc["t1", "flagged"]
    assert table.loc["t1", "expected_lo"] == pytest.approx(0.45)
    text = "\n".join(predicted_lines(table.reset_index()))
    assert "DISAGREES" in text and "flagged: 1 row(s)" in text


def test_flag_needs_a_measurement_and_a_prediction():
    assert not flag_disagreement({"measured": float("nan"), "replayed": 0.5})
    assert not flag_disagreement({"measured": 0.5})
    assert flag_disagreement({"measured": 0.1, "replayed": 0.5, "expected_lo": 0.45, "expected_hi": 0.47})
    assert not flag_disagreement({"measured": 0.4, "replayed": 0.5, "expected_lo": 0.45, "expected_hi": 0.47})


def test_which_arms_are_predicted():
    assert ngram_settings(Arm(name="n", speculative_config={"method": "ngram", "num_speculative_tokens": 3,
                                                            "prompt_lookup_max": 4})) == {
        "prompt_lookup_min": 4, "prompt_lookup_max": 4, "num_speculative_tokens": 3}
    assert ngram_settings(Arm(name="n", speculative_config={"method": "ngram", "num_speculative_tokens": 2})) == {
        "prompt_lookup_min": 5, "prompt_lookup_max": 5, "num_speculative_tokens": 2}  # vLLM's defaults
    assert ngram_settings(Arm(name="b")) is None
    assert ngram_settings(Arm(name="d", speculative_config={"model": "x", "num_speculative_tokens": 3})) is None


def test_bad_folders_are_refused_before_any_server(tmp_path):
    with pytest.raises(DriverError, match="not a folder"):
        predict_run(tmp_path / "nope")
    with pytest.raises(DriverError, match="no sweep.json"):
        predict_run(tmp_path)
    with pytest.raises(DriverError, match="1 to 20"):
        predict_run(tmp_path, top=50)


def test_predicted_folder_is_a_sweep_record(tmp_path):
    (tmp_path / "sweep.json").write_text("{}")
    write_ledger(tmp_path / "baseline" / "copy" / "c001-r00.json", ledger("baseline"), None)
    p = tmp_path / "predicted" / "ngram-k4" / "copy" / "c001-r00.json"
    p.parent.mkdir(parents=True)
    p.write_text(json.dumps({"kind": "something else"}))
    assert [f.relative_to(tmp_path).as_posix() for f in ledger_files(tmp_path)] == ["baseline/copy/c001-r00.json"]
    assert pd.DataFrame().pipe(lambda d: predicted_table(d, load_predicted(tmp_path))).empty


def test_a_point_measured_again_is_predicted_again_and_only_its_own_prediction_counts(tmp_path):
    """Predictions were keyed by the baseline point's file name: a point measured again kept the
    prediction of the measurement it replaced (issue 46 item 6). A prediction names the baseline
    measurement it replayed (``baseline_started_at``); the driver predicts a newer measurement
    again, beside the stale record, and the table reads only the current one."""
    from specnb.sweep.predict import prediction_path

    base = tmp_path / "baseline" / "copy" / "c001-r00.json"
    old = ledger("baseline").model_copy(update={"started_at": "2026-11-29T00:00:00+00:00"})
    write_ledger(base, old, None)
    write_ledger(tmp_path / "ngram-k4" / "copy" / "c001-r00.json", ledger("ngram-k4", mal=1 + 4 * 0.8), None)
    canonical = tmp_path / "predicted" / "ngram-k4" / "copy" / "c001-r00.json"
    assert prediction_path(canonical, base) == canonical  # nothing predicted yet
    canonical.parent.mkdir(parents=True)
    stale = {**_pred_doc(None, 0.0, 400, 0.10 * 400, 0.10 * 400), "baseline_point": old.point_id, "baseline_started_at": old.started_at,
             "created_at": "2026-11-29T01:00:00Z"}
    canonical.write_text(json.dumps(stale))
    assert prediction_path(canonical, base) is None  # that measurement is predicted
    # the point is measured again (a new ledger at the same name, as a test may make it)
    base.unlink()
    new = ledger("baseline").model_copy(update={"started_at": "2026-11-30T12:00:00+00:00",
                                                "finished_at": "2026-11-30T12:00:05+00:00"})
    write_ledger(base, new, None)
    again = prediction_path(canonical, base)
    assert again is not None and again != canonical and again.name == "c001-r00.20261130120000.json"
    table = predicted_table(load_ledgers(tmp_path), load_predicted(tmp_path))
    assert table.empty  # the only prediction is of a measurement the ledgers no longer hold
    again.write_text(json.dumps({**_pred_doc(None, 0.0, 400, 0.8 * 400, 0.8 * 400),
                                 "baseline_point": new.point_id, "baseline_started_at": new.started_at, "created_at": "2026-11-30T13:00:00Z"}))
    assert prediction_path(canonical, base) is None
    table = predicted_table(load_ledgers(tmp_path), load_predicted(tmp_path))
    assert len(table) == 1 and table["expected_lo"].iloc[0] == pytest.approx(0.8)  # not pooled with the stale 0.1
    assert table["baseline_points"].iloc[0] == 1
    # a record from before measurements were named: current unless the point finished after it
    canonical.unlink()
    again.unlink()
    canonical.write_text(json.dumps({**_pred_doc(None, 0.0, 400, 0.5 * 400, 0.5 * 400), "created_at": "2026-11-30T01:00:00Z"}))
    assert prediction_path(canonical, base) is not None  # made before this measurement finished
    canonical.unlink()
    canonical.write_text(json.dumps({**_pred_doc(None, 0.0, 400, 0.5 * 400, 0.5 * 400), "created_at": "2026-12-01T01:00:00Z"}))
    assert prediction_path(canonical, base) is None
