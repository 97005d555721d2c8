"""The adaptive concurrency search's decisions, on hand-made curves with known answers."""

from __future__ import annotations

import json
import math

import pytest

from specnb.analysis import paired_speedups, thresholds
from specnb.analysis.estimator import LOSES, PAYS
from specnb.analysis.thresholds import Threshold, fixed_sequence
from specnb.ledger import load_ledgers, write_ledger
from specnb.sweep.search import DEFAULT_CAP, next_level, next_search_round, search_cap, search_lines
from specnb.sweep.spec import SweepSpec
from tests.unit.factories import ledger


def th(verdicts: dict[float, str | None], at: float | None = None) -> Threshold:
    """A curve's answer across levels from each level's own decision (``pays`` / ``loses`` / None)."""
    seq = fixed_sequence(verdicts)
    pays = [c for c, v in seq.items() if v == PAYS]
    loses = [c for c, v in seq.items() if v == LOSES]
    kind = "crosses" if at is not None else ("above" if pays and max(pays) == max(verdicts) else "below")
    return Threshold(group={"arm": "a", "workload": "copy"}, metric="speedup", kind=kind, concurrency=at,
                     pays_through=max(pays) if pays else None, loses_from=min(loses) if loses else None,
                     lo=max(pays) if pays else -math.inf, hi=min(loses) if loses else math.inf,
                     c_min=min(verdicts), c_max=max(verdicts), n_repeats=4, level=0.95, verdicts=seq,
                     own=dict(verdicts))


LEVELS = [1, 2, 4, 8]
P, L, U = PAYS, LOSES, None


def test_a_bracketed_crossing_is_refined_until_it_is_narrow():
    # pays up to c=2, loses from c=8, c=4 undecided: the estimates cross near 3.8, between 2 and 4
    step = next_level(LEVELS, th({1: P, 2: P, 4: U, 8: L}, at=3.8), cap=256, target_log2_width=1.0)
    assert step.level == 3 and step.reason.startswith("refine")  # round(sqrt(2 * 4)) = 3
    step = next_level([1, 2, 3, 4, 8], th({1: P, 2: P, 3: P, 4: L, 8: L}, at=3.6), cap=256, target_log2_width=1.0)
    assert step.level is None and step.reason.startswith("settled")


def test_a_bracket_of_adjacent_integers_cannot_be_refined():
    step = next_level([1, 2, 3, 4], th({1: P, 2: P, 3: P, 4: L}, at=3.5), cap=256, target_log2_width=0.2)
    assert step.level is None and "adjacent" in step.reason


def test_no_level_known_to_lose_extends_the_grid_up_to_the_cap():
    step = next_level(LEVELS, th({1: P, 2: P, 4: P, 8: P}), cap=256, target_log2_width=1.0)
    assert step.level == 16 and "pays at every level" in step.reason
    step = next_level(LEVELS, th({1: P, 2: P, 4: U, 8: U}, at=7.0), cap=256, target_log2_width=1.0)
    assert step.level == 16 and "no level is known to lose up to c=8" in step.reason
    assert next_level(LEVELS, th({1: P, 2: P, 4: P, 8: P}), cap=12, target_log2_width=1.0).level == 12  # the cap
    step = next_level([1, 2, 4, 8, 12], th({1: P, 2: P, 4: P, 8: P, 12: P}), cap=12, target_log2_width=1.0)
    assert step.level is None and "cap" in step.reason


def test_a_curve_that_never_pays_stops_at_c1_and_looks_lower_otherwise():
    step = next_level(LEVELS, th({1: L, 2: L, 4: L, 8: L}), cap=256, target_log2_width=1.0)
    assert step.level is None and "from c=1" in step.reason
    assert next_level([4, 8, 16], th({4: L, 8: L, 16: L}), cap=256, target_log2_width=1.0).level == 2
    assert next_level(LEVELS, th({1: U, 2: U, 4: L, 8: L}, at=1.5), cap=256, target_log2_width=1.0).level is None


def _noisy(tmp_path, speedups, factors):
    rows = []
    for r, f in enumerate(factors):
        for c, sp in zip(LEVELS, speedups, strict=True):
            rows += [ledger("baseline", c=c, r=r, tok_s=100.0), ledger("ngram-k4", c=c, r=r, tok_s=100 * sp * f, mal=3)]
    for i, led in enumerate(rows):
        write_ledger(tmp_path / f"{i:03d}.json", led)
    return load_ledgers(tmp_path)


def test_a_noisy_curve_does_not_stop_early(tmp_path):
    # the estimates cross near c~3, but one start's luck moves every level by 30 %: no level is
    # known to lose, so the search must look further, not stop
    df = _noisy(tmp_path, [1.3, 1.1, 0.97, 0.95], factors=[0.75, 1.0, 1.3, 1.0])
    (t,) = thresholds(paired_speedups(df, scope="panel"))
    assert t.kind == "crosses" and t.hi == math.inf
    step = next_level(LEVELS, t, cap=256, target_log2_width=1.0)
    assert step.level == 16
    # the same curve measured without the start-to-start noise is bracketed inside the grid
    quiet = _noisy(tmp_path / "q", [1.3, 1.1, 0.8, 0.7], factors=[0.99, 1.0, 1.01, 1.0])
    (t,) = thresholds(paired_speedups(quiet, scope="panel"))
    assert (t.lo, t.hi) == (2, 4) and 2 < t.concurrency < 4


def _spec(**kw):
    base = dict(name="s", model="m", concurrency=[1, 2, 4, 8], repeats=1, workloads=["copy"],
                arms=[{"name": "baseline"}, {"name": "ngram-k4", "speculative_config": {
                    "method": "ngram", "num_speculative_tokens": 4}}], search={})
    base.update(kw)
    return SweepSpec.parse(base)


def test_the_cap_comes_from_the_arguments_the_kv_pool_or_the_default(tmp_path):
    leds = [ledger("baseline", c=1, kv_tokens=46592), ledger("ngram-k4", c=1, mal=3, kv_tokens=23296)]
    for i, led in enumerate(leds):
        led.results.update(prompt_tokens=8 * 200, output_tokens=8 * 50)
        write_ledger(tmp_path / f"{i}.json", led)
    df = load_ledgers(tmp_path)
    cap, why = search_cap(_spec(), df, "copy")
    assert cap == 23296 // (200 + 64) and "KV pool 23,296 tokens" in why  # the drafter's smaller pool
    cap, why = search_cap(_spec(server_args=["--max-num-seqs", "16"]), df, "copy")
    assert (cap, why) == (16, "--max-num-seqs 16")
    assert search_cap(_spec(search={"max_concurrency": 12}), df, "copy")[0] == 12
    assert search_cap(_spec(), df.iloc[0:0], "copy") == (DEFAULT_CAP, f"default cap {DEFAULT_CAP}")


def test_a_round_is_decided_once_written_and_replayed(tmp_path):
    df_rows = []
    for c, sp in zip(LEVELS, [1.5, 1.4, 1.3, 1.2], strict=True):
        df_rows += [ledger("baseline", c=c, tok_s=100.0), ledger("ngram-k4", c=c, tok_s=100 * sp, mal=3)]
    for i, led in enumerate(df_rows):
        write_ledger(tmp_path / "points" / f"{i:03d}.json", led)
    said = []
    levels = next_search_round(_spec(), tmp_path, 1, elapsed_s=10, echo=said.append)
    # one repeat: no level is decided, so nothing is known to lose and the search looks higher
    assert levels == {"copy": [(16.0, "ngram-k4: no level is known to lose up to c=8: extend to c=16")]}
    record = json.loads((tmp_path / "search" / "round-01.json").read_text())
    assert record["curves"][0]["cap_from"] and said
    # the record is what a resumed run follows, even if the data would now say otherwise
    write_ledger(tmp_path / "points" / "late.json", ledger("ngram-k4", c=16, tok_s=10.0, mal=3))
    assert next_search_round(_spec(), tmp_path, 1, elapsed_s=999) == levels
    # rounds and the time budget bound it
    assert next_search_round(_spec(search={"max_rounds": 1}), tmp_path, 2, elapsed_s=0) == {}
    assert "max_rounds" in json.loads((tmp_path / "search" / "round-02.json").read_text())["stopped"]
    # the factory's servers took 20 s to start and its points record no duration (30 s assumed):
    # a round of one new level costs 2 blocks x (20 + 30) s
    assert next_search_round(_spec(search={"budget_s": 60}), tmp_path, 3, elapsed_s=50) == {}
    rec = json.loads((tmp_path / "search" / "round-03.json").read_text())
    assert "time budget" in rec["stopped"] and rec["estimated_s"] == pytest.approx(100.0)
    assert next_search_round(_spec(search={"budget_s": 200}), tmp_path, 4, elapsed_s=50) != {}


def test_the_report_says_why_each_search_stopped_and_what_it_left_unmeasured(tmp_path):
    run = tmp_path / "run"
    sweep = run / "default"
    for c, sp in zip(LEVELS, [1.5, 1.4, 1.3, 1.2], strict=True):
        for i, led in enumerate([ledger("baseline", c=c, tok_s=100.0), ledger("ngram-k4", c=c, tok_s=100 * sp, mal=3)]):
            write_ledger(sweep / "points" / f"{c}-{i}.json", led)
    assert search_lines(run) == []  # no search: no lines
    next_search_round(_spec(), sweep, 1, elapsed_s=10, echo=lambda _: None)
    lines = search_lines(run)
    assert "ended during round 1" in lines[0] and "cut short" in lines[0]  # no stop decision yet
    assert "extend to c=16" in lines[1] and "not measured" not in lines[1]
    next_search_round(_spec(search={"budget_s": 60}), sweep, 2, elapsed_s=50, echo=lambda _: None)
    lines = search_lines(run)
    assert lines[0].startswith("search (default): 2 round(s) decided, stopped before round 2: time budget")
    assert "c=16 not measured: the search stopped" in lines[1]
    (sweep / "search" / "round-03.json").write_text("{not json")
    assert "round-03.json unreadable" in search_lines(run)[0]


@pytest.mark.parametrize("bad, needle", [
    (dict(load="rate", rates=[1.0], concurrency=[], search={}), "needs load = 'concurrency'"),
    (dict(search={"target_log2_width": 0}), "target_log2_width"),
    (dict(search={"max_concurrency": 1}), "max_concurrency"),
])
def test_bad_search_settings_are_one_line(bad, needle):
    from specnb.sweep.spec import SweepError

    with pytest.raises(SweepError) as exc:
        _spec(**bad)
    assert needle in str(exc.value) and "\n" not in str(exc.value)
