"""The frontier, goodput under SLOs and latency against rate, on hand-made points with known answers."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from specnb.analysis.latency import (
    best_goodput,
    format_goodput,
    frontier,
    goodput,
    pareto_front,
    parse_slos,
)
from specnb.analysis.pairing import AnalysisError
from specnb.ledger import load_ledgers, write_ledger
from tests.unit.factories import ledger


def test_pareto_front_keeps_only_points_nobody_beats_on_both():
    x = np.array([10, 20, 30, 15, 30])
    y = np.array([300, 250, 100, 200, 90])
    assert pareto_front(x, y).tolist() == [True, True, True, False, False]


def test_frontier_marks_the_front_over_every_arm_and_level(tmp_path):
    pts = [  # (arm, c, aggregate tok/s, per-user tok/s)
        ("baseline", 1, 30, 30), ("baseline", 4, 100, 25), ("baseline", 8, 160, 20),
        ("ngram-k4", 1, 45, 45), ("ngram-k4", 4, 110, 28), ("ngram-k4", 8, 140, 18),
    ]
    for i, (arm, c, agg, user) in enumerate(pts):
        write_ledger(tmp_path / f"{i}.json", ledger(arm, c=c, tok_s=agg, per_user=user, mal=3 if arm != "baseline" else None))
    f = frontier(load_ledgers(tmp_path)).set_index(["arm", "concurrency"])
    front = {k for k, v in f["pareto"].items() if v}
    # the drafter owns the interactive end, the baseline the throughput end; ngram at c=8 is beaten
    assert front == {("ngram-k4", 1), ("ngram-k4", 4), ("baseline", 8)}
    assert f.loc[("baseline", 8), "output_tok_s"] == 160 and f.loc[("ngram-k4", 1), "per_user_tok_s"] == 45


def _requests(n: int, ttft_s: float, tpot_s: float, tokens: int = 10) -> pd.DataFrame:
    """n requests one after another on one worker; each emits `tokens` one-token chunks."""
    rows, t = [], 0.0
    for i in range(n):
        first = t + ttft_s
        times = [first + k * tpot_s for k in range(tokens)]
        rows.append({"index": i, "worker": 0, "prompt_id": f"p{i % 4}", "start_s": t, "end_s": times[-1],
                     "first_token_s": first, "chunk_times_s": times, "chunk_tokens": [1] * tokens,
                     "output_tokens": tokens, "error": None, "ttft_s": ttft_s, "tpot_s": tpot_s})
        t = times[-1]
    return pd.DataFrame(rows)


def test_goodput_counts_only_requests_that_meet_every_slo(tmp_path):
    fast = _requests(8, ttft_s=0.1, tpot_s=0.02)  # 50 tok/s per user, TTFT 100 ms
    slow_first = _requests(8, ttft_s=0.9, tpot_s=0.02)  # TTFT 900 ms
    mixed = pd.concat([_requests(4, 0.1, 0.02), _requests(4, 0.1, 0.2).assign(index=lambda d: d["index"] + 4)])
    mixed["start_s"], mixed["end_s"] = range(8), [i + 0.5 for i in range(8)]
    points = [(ledger("baseline", c=1, tok_s=100.0), fast), (ledger("ngram-k4", c=1, tok_s=150.0, mal=3), slow_first),
              (ledger("baseline", c=2, tok_s=180.0), mixed)]
    for i, (led, req) in enumerate(points):
        write_ledger(tmp_path / f"{i}.json", led, req)
    df = load_ledgers(tmp_path)
    g = goodput(df, {"ttft_ms": 500}, n_boot=200).set_index(["arm", "concurrency"])
    assert g.loc[("baseline", 1), "goodput_tok_s"] == pytest.approx(100.0)  # every request good
    assert g.loc[("ngram-k4", 1), "goodput_tok_s"] == 0.0 and g.loc[("ngram-k4", 1), "good_share"] == 0.0
    g = goodput(df, {"decode_tok_s": 20}, n_boot=200).set_index(["arm", "concurrency"])
    assert g.loc[("baseline", 2), "good_share"] == 0.5  # 5 tok/s per user fails a 20 tok/s floor
    assert 0 < g.loc[("baseline", 2), "goodput_tok_s"] < 180.0
    (best,) = best_goodput(goodput(df, {"ttft_ms": 500}, n_boot=200))
    assert (best.arm, best.level, best.goodput_tok_s) == ("baseline", 2.0, pytest.approx(180.0))
    assert best.baseline_goodput_tok_s == pytest.approx(180.0) and best.lo <= 180.0 <= best.hi
    text = format_goodput([best])
    assert text.startswith("copy: with SLO ttft_ms <= 500, best is") and "drafter off:" in text


@pytest.mark.parametrize("bad, needle", [({"ttft": 1}, "unknown SLO 'ttft'"), ({"ttft_ms": 0}, "must be > 0"),
                                         (["e2el_ms=soon"], "not a number")])
def test_bad_slos_are_one_line(bad, needle):
    with pytest.raises(AnalysisError, match=needle):
        parse_slos(bad)
    assert parse_slos(["ttft_ms=2000", "decode_tok_s=20"]) == {"ttft_ms": 2000.0, "decode_tok_s": 20.0}
