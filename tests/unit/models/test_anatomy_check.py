"""The step-cost model against profiled steps (issue 24 item 2): windows made by the model itself
read back with no error and its terms refitted; a profile whose excess lies outside the proposer
says so; and frames the check cannot use are refused in words."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from specnb.models.calibration import check_against_anatomy, refit_drafter_terms
from specnb.models.hardware import Hardware, StepCostError
from specnb.models.stepcost import Drafter, TargetModel, step_terms

HW = Hardware("cpu-like", 1e13, 0.22e12, 0.0217)  # compute-bound at every batch: a step linear in it
TARGET = TargetModel("t", 134.5e6, 269e6, 23040)
TERMS = Drafter("ngram", step_overhead_s=0.0057, per_token_s=0.0042)


def _frame(drafter: Drafter, *, proposer_ms=0.3, slowdown=2.5) -> pd.DataFrame:
    """Windows whose unprofiled cycles are the model's own steps under ``drafter``."""
    rows = []
    for arm, method, k, batches, drafted in (("baseline", None, 0, (1.0, 4.0, 8.0), (0.0, 0.0, 0.0)),
                                             ("ngram-k4", "ngram", 4, (1.0, 2.7, 4.8), (0.8, 1.9, 4.1)),
                                             ("ngram-k0", "ngram", 4, (1.0, 3.8, 7.7), (0.0, 0.0, 0.0))):
        for c, b, d in zip((1, 4, 8), batches, drafted, strict=True):
            spec = np.array([method is not None])
            t = step_terms(HW, TARGET, drafter, batch=np.array([b]), prompt=np.array([180.0]),
                           prefill=np.zeros(1), output=np.array([32.0]), k=np.array([max(k, 1)]),
                           tau=np.ones(1), q=np.array([d / b / max(k, 1)]), spec=spec, sharpness=None)
            for r in (0, 1):
                rows.append({"arm": arm, "workload": "copy", "concurrency": c, "repeat": r, "method": method, "k": k,
                             "decode_requests_per_step": b, "prompt_tokens_mean": 180.0,
                             "drafted_tokens_per_step": d, "emitted_tokens_per_step": b,
                             "unprofiled_cycle_ms": 1e3 * float(t.step_s[0]),
                             "draft_ms": proposer_ms * slowdown if method else 0.0,
                             "profiling_slowdown": slowdown})
    return pd.DataFrame(rows)


def test_windows_the_model_made_read_back_without_error_and_refit_its_terms():
    chk = check_against_anatomy(_frame(TERMS), HW, TARGET, TERMS)
    assert set(chk["arm"]) == {"baseline", "ngram-k4", "ngram-k0"} and len(chk) == 18
    assert np.abs(chk["rel_error"]).max() < 1e-9
    spec = chk[chk["arm"] != "baseline"]
    # the baseline is linear in the batch here (compute-bound throughout): its fit is exact
    assert np.allclose(spec["measured_excess_ms"], spec["model_excess_ms"], atol=1e-6)
    assert np.allclose(spec["proposer_ms"], 0.3)
    k0 = chk[chk["arm"] == "ngram-k0"]
    assert np.allclose(k0["model_drafting_ms"], 5.7) and np.allclose(k0["model_compute_ms"], 0.0)
    fit = refit_drafter_terms(chk)
    assert fit["step_overhead_ms"] == pytest.approx(5.7, rel=1e-6)
    assert fit["per_token_ms"] == pytest.approx(4.2, rel=1e-6)
    assert fit["rms_error_ms"] < 1e-6 and fit["windows"] == 12


def test_a_step_slower_than_the_terms_shows_as_error_and_as_excess_beyond_the_proposer():
    heavier = Drafter("ngram", step_overhead_s=0.020, per_token_s=0.010)
    chk = check_against_anatomy(_frame(heavier), HW, TARGET, TERMS)
    spec = chk[chk["arm"] != "baseline"]
    assert (spec["rel_error"] < -0.1).all()  # the preset's terms predict a faster step than measured
    assert (spec["beyond_proposer_ms"] > 15).all()
    fit = refit_drafter_terms(chk)
    assert fit["step_overhead_ms"] == pytest.approx(20.0, rel=1e-6)
    assert fit["per_token_ms"] == pytest.approx(10.0, rel=1e-6)


def test_frames_the_check_cannot_use_are_refused_in_words():
    f = _frame(TERMS)
    with pytest.raises(StepCostError, match="lacks"):
        check_against_anatomy(f.drop(columns=["profiling_slowdown"]), HW, TARGET, TERMS)
    old = f.assign(unprofiled_cycle_ms=np.nan)  # records from before the unprofiled twin
    with pytest.raises(StepCostError, match="two or more levels"):
        check_against_anatomy(old, HW, TARGET, TERMS)
    chk = check_against_anatomy(f[f["concurrency"] != 8], HW, TARGET, TERMS)
    with pytest.raises(StepCostError, match="cannot refit"):
        refit_drafter_terms(chk[(chk["arm"] == "baseline") | (chk["repeat"] == 0) & (chk["concurrency"] == 1)])


def test_a_drafters_terms_are_learned_from_its_kinds_profiled_windows():
    """The calculator's ``drafter_costs_from``: the terms of the arms of one kind, refitted whatever
    terms the drafter was given, and a run without that kind refused in words."""
    from specnb.models.calibration import drafter_terms_from_anatomy

    heavier = Drafter("eagle3", step_overhead_s=0.020, per_token_s=0.010)
    frame = _frame(heavier).assign(method=lambda f: f["method"].map({"ngram": "eagle3"}))
    got = drafter_terms_from_anatomy(frame, HW, TARGET, "eagle3")
    assert got["step_overhead_ms"] == pytest.approx(20.0, rel=1e-6) and got["per_token_ms"] == pytest.approx(10.0, rel=1e-6)
    assert got["arms"] == ["ngram-k0", "ngram-k4"] and got["method"] == "eagle3" and got["windows"] == 12
    # drafts on (0.8/1 + 1.9/2.7 + 4.1/4.8) / 3 / 4 of a request's steps in ngram-k4, none in ngram-k0
    want = (0.8 / 1 + 1.9 / 2.7 + 4.1 / 4.8) / 3 / 4 / 2
    assert got["draft_fraction"] == pytest.approx(want, rel=1e-6)
    with pytest.raises(StepCostError, match="no draft_model arm in this anatomy run"):
        drafter_terms_from_anatomy(frame, HW, TARGET, "draft_model")
