"""The EAGLE-3 head replayed along a text (``specnb predict`` for EAGLE-3 arms): the walk's steps and
the path estimator on hand-made drafts, then the committed head along the committed drafter run's
baseline text, against the acceptance the engine measured with that head (no server: the
replay is ``transformers`` and speculators on the CPU)."""

from __future__ import annotations

import pandas as pd
import pytest

from specnb import paths
from specnb.analysis.predicted import Step, eagle_walk, head_of, summarize_path_steps


def test_the_walk_moves_past_each_steps_accepted_drafts_and_hides_drafts_after_a_mismatch():
    prompt = [100, 101, 102]  # P = 3; the text is prompt + out
    out = [1, 2, 3, 4, 5, 6, 7]
    n = len(prompt) + len(out) - 1
    # drafts[m][j]: what the head drafts m + 1 positions after token j + 1 from the state at j
    drafts = [[0] * n for _ in range(2)]
    j = len(prompt) + 1 - 2  # first step: after out[0], from the last prompt token's state
    drafts[0][j], drafts[1][j] = 2, 3  # both right: out[1], out[2]
    j2 = len(prompt) + 4 - 2  # next step starts at out[4] (i = 1 + 2 + 1)
    drafts[0][j2], drafts[1][j2] = 9, 6  # first wrong
    steps = eagle_walk(prompt, out, drafts, 2)
    assert [(s.position, s.matched) for s in steps][:2] == [(1, 2), (4, 0)]
    assert steps[0].drafts == [2, 3] and steps[1].drafts == [9, -1]  # after a mismatch: unknown
    assert all(len(s.drafts) <= len(out) - s.position for s in steps)  # cut at the output's end


def test_the_path_estimator_sums_p_up_to_the_first_mismatch():
    steps = [Step(1, [5, 6, 7], 1, probs_lo=[0.9, 0.2], probs_hi=[0.9, 0.2]),
             Step(3, [8, 9, 1], 3, probs_lo=[0.5, 0.5, 0.5], probs_hi=[0.6, 0.5, 0.5])]
    got = summarize_path_steps(steps)
    assert got["drafted_tokens"] == 6 and got["replayed_accepted"] == 4
    assert got["expected_accepted_lo"] == pytest.approx(0.9 + 0.2 + 1.5)
    assert got["expected_accepted_hi"] == pytest.approx(0.9 + 0.2 + 1.6)
    assert summarize_path_steps([Step(1, [5, 6], 0)])["expected_accepted_lo"] is None  # no p: no expectation


def test_only_a_fixed_k_eagle3_config_names_a_head():
    assert head_of({"method": "eagle3", "model": "drafters/x", "num_speculative_tokens": 3}) == ("drafters/x", 3)
    assert head_of({"method": "ngram", "num_speculative_tokens": 3}) is None and head_of(None) is None


def test_the_committed_head_replayed_on_the_baseline_text_accepts_what_the_engine_measured():
    """Temperature 0, free-form, c = 1 (the engine's acceptance is the same in every start there):
    the head's drafts along the baseline's greedy text, computed offline from fp32 states, accept
    what the engine's head accepted on its own output within 3 points (21.4 % measured, 21.9 %
    replayed when written). A head read wrongly (layers, positions, the draft vocabulary's offsets,
    the walk's indexing) drafts nothing the text continues with."""
    from transformers import AutoTokenizer

    from specnb.drafter.replay import HeadDrafter
    from specnb.ledger import json_cell, load_ledgers
    from specnb.prompts import resolve

    run = paths.LEDGERS / "drafter" / "cpu" / "20261206T024704Z"
    df = load_ledgers(run)
    eagle = df[(df["arm"] == "eagle3-k3") & (df["workload"] == "freeform") & (df["concurrency"] == 1)]
    cfg = head_of(json_cell(eagle["speculative_config"].iloc[0]))
    assert cfg is not None
    target = paths.ROOT / "models" / "SmolLM2-135M-Instruct"
    head = HeadDrafter(target, paths.resolve(cfg[0]))
    tok = AutoTokenizer.from_pretrained(str(target))
    prompts = {p.id: p for p in resolve("freeform").prompts}
    req = pd.read_parquet(run / "default" / "baseline" / "freeform" / "c001-r00.requests.parquet")
    drafted = accepted = 0
    for r in req.to_dict("records"):
        ids = tok.apply_chat_template(prompts[r["prompt_id"]].messages, add_generation_prompt=True, tokenize=True)
        ids = list(ids["input_ids"] if hasattr(ids, "keys") else ids)
        assert len(ids) == r["prompt_tokens"]  # the engine's tokens
        out = [int(x) for x in r["output_token_ids"]]
        steps = eagle_walk(ids, out, head.drafts(ids + out, cfg[1]), cfg[1])
        drafted += sum(len(s.drafts) for s in steps)
        accepted += sum(s.matched for s in steps)
    measured = float(eagle["acceptance_rate"].mean())
    assert drafted > 500 and abs(accepted / drafted - measured) < 0.03, (accepted / drafted, measured)
