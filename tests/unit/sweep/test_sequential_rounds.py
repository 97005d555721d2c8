"""A sequential sweep's rounds: one more repeat for the levels still open, decided once and replayed,
bounded by the last look and the time budget; the report says where each level stopped."""

from __future__ import annotations

import json

import pandas as pd
import pytest

from specnb.analysis.estimator import per_look_alpha
from specnb.ledger import write_ledger
from specnb.ledger.runs import sequential_lines
from specnb.sweep.plan import round_blocks, round_repeats
from specnb.sweep.sequential import next_sequential_round
from specnb.sweep.spec import SweepError, SweepSpec
from tests.unit.factories import ledger

# per level, one start's ratio in each repeat: c=1 pays clearly, c=8 is a coin toss, c=4 loses
RATIOS = {1: [1.80, 1.75, 1.85, 1.78], 4: [0.70, 0.72, 0.69, 0.71], 8: [1.30, 0.90, 1.10, 1.00]}


def _spec(**kw):
    base = dict(name="s", model="m", concurrency=[1, 4, 8], repeats=4, workloads=["copy"],
                sequential={"max_repeats": 6, "alpha": 0.05},
                arms=[{"name": "baseline"}, {"name": "ngram-k4", "speculative_config": {
                    "method": "ngram", "num_speculative_tokens": 4}}])
    base.update(kw)
    return SweepSpec.parse(base)


def _write(folder, ratios, duration_s=30.0):
    i = 0
    for c, rs in ratios.items():
        for r, ratio in enumerate(rs):
            for led in (ledger("baseline", c=c, r=r, tok_s=100.0), ledger("ngram-k4", c=c, r=r, tok_s=100 * ratio, mal=3)):
                led.results["duration_s"] = duration_s
                write_ledger(folder / "points" / f"{i:03d}.json", led)
                i += 1


def test_only_the_open_level_gets_the_next_repeat_and_the_record_is_replayed(tmp_path):
    _write(tmp_path, RATIOS)
    said: list[str] = []
    levels = next_sequential_round(_spec(), tmp_path, 1, elapsed_s=100, echo=said.append)
    assert list(levels) == ["copy"] and [c for c, _ in levels["copy"]] == [8.0]
    assert "open" in levels["copy"][0][1] and "repeat 5 of at most 6" in levels["copy"][0][1]
    rec = json.loads((tmp_path / "sequential" / "round-01.json").read_text())
    states = {(lk["level"]): lk["state"] for lk in rec["looks"]}
    assert states == {1.0: "decided: pays", 4.0: "decided: loses", 8.0: "open"}
    assert rec["rule"]["looks"] == [4, 6] and rec["rule"]["per_look_alpha"] == pytest.approx(
        per_look_alpha((4, 6), 0.05), abs=1e-6) and said
    # no request records here: the looks cover this panel, and the record says the starts are all there is
    assert rec["looks"][0]["look"]["scope"] == "panel" and rec["spend"]
    # a resumed run follows the record, whatever the ledgers say now
    _write(tmp_path / "late", {8: [5.0, 5.0, 5.0, 5.0]})
    assert next_sequential_round(_spec(), tmp_path, 1, elapsed_s=999) == levels
    # the round's blocks are that one repeat (index 4), both arms, in the repeat's A B order
    blocks = round_blocks(_spec(), {"copy": _Wl()}, levels, 1)
    assert [(b[0].repeat, b[0].arm.name) for b in blocks] == [(4, "baseline"), (4, "ngram-k4")]
    assert round_repeats(_spec(), 0) == [0, 1, 2, 3] and round_repeats(_spec(sequential=None), 2) == [0, 1, 2, 3]


def test_a_level_between_two_looks_stays_open_for_its_balancing_repeat(tmp_path):
    # five repeats at c=1, all paying: 5 is no look (3 A B, 2 B A), so the level is still read at
    # its look after 4 repeats, and the round after it measures the sixth
    _write(tmp_path, {8: [1.30, 0.90, 1.10, 1.00, 1.2]})
    levels = next_sequential_round(_spec(concurrency=[8]), tmp_path, 2, elapsed_s=0)
    assert [c for c, _ in levels["copy"]] == [8.0] and "repeat 6 of at most 6" in levels["copy"][0][1]
    rec = json.loads((tmp_path / "sequential" / "round-02.json").read_text())
    assert rec["looks"][0]["look"]["n"] == 4 and rec["looks"][0]["state"] == "open"


class _Wl:
    name = "copy"


def test_the_last_look_ends_the_rounds(tmp_path):
    _write(tmp_path, {8: [1.30, 0.90, 1.10, 1.2, 0.95, 1.05]})
    assert next_sequential_round(_spec(concurrency=[8]), tmp_path, 3, elapsed_s=0) == {}
    rec = json.loads((tmp_path / "sequential" / "round-03.json").read_text())
    assert "last look" in rec["stopped"] and rec["looks"][0]["state"] == "open at the last look"
    lines = sequential_lines(tmp_path)
    assert "looks after 4, 6 repeats" in lines[0] and "undecided at the last look" in lines[-1]


def test_the_budget_keeps_the_levels_nearest_a_decision_and_stops_when_none_fits(tmp_path):
    ratios = {1: [1.30, 0.90, 1.10, 1.0], 4: [1.25, 1.15, 1.05, 1.1], 8: [1.02, 0.98, 1.00, 1.0]}
    _write(tmp_path, ratios, duration_s=30.0)
    # one repeat of one level: one start per arm at the factory's 20 s plus 30 s per arm's point =
    # 100 s, and a level at its first look needs two repeats to reach the next: 200 s
    levels = next_sequential_round(_spec(budget_s=350), tmp_path, 1, elapsed_s=100)
    assert [c for c, _ in levels["copy"]] == [4.0]  # the nearest to a decision; two levels would need 320 s
    rec = json.loads((tmp_path / "sequential" / "round-01.json").read_text())
    assert {d["level"] for d in rec["left_out"]} == {1.0, 8.0} and rec["estimated_s"] == pytest.approx(220.0)
    assert next_sequential_round(_spec(budget_s=350), tmp_path, 2, elapsed_s=300) == {}
    stopped = json.loads((tmp_path / "sequential" / "round-02.json").read_text())["stopped"]
    assert "time budget" in stopped and "needs 2 more repeat(s) to its next look" in stopped
    lines = sequential_lines(tmp_path)
    assert any("undecided when the rounds stopped (time budget" in ln for ln in lines)


def test_the_report_says_which_levels_stopped_early(tmp_path):
    _write(tmp_path, RATIOS)
    next_sequential_round(_spec(), tmp_path, 1, elapsed_s=0)
    (tmp_path / "sequential" / "round-02.json").write_text(json.dumps({
        **json.loads((tmp_path / "sequential" / "round-01.json").read_text()), "round": 2, "levels": {},
        "stopped": "every level decided or at its last look"}))
    text = "\n".join(sequential_lines(tmp_path))
    assert "ngram-k4 / copy c=1: pays after 4 repeats: stopped early, 2 repeat(s) not needed" in text
    assert "ngram-k4 / copy c=4: loses" in text and "[" not in text  # no second interval: the table has it


@pytest.mark.parametrize(("bad", "needle"), [
    (dict(search={}), "use one of them"),
    (dict(repeats=1), "repeats >= 2"),
    (dict(sequential={"max_repeats": 2}), "below repeats"),
    (dict(repeats=3, sequential={"max_repeats": 3}), "give max_repeats an even number"),
    (dict(sequential={"alpha": 0.7}), "alpha"),
    (dict(budget_s=0), "budget_s"),
    (dict(arms=[{"name": "baseline"}, {"name": "other"}]), "exactly one such arm"),
    (dict(arms=[{"name": "baseline", "endpoint": "http://127.0.0.1:8000"}, {"name": "ngram-k4", "speculative_config": {
        "method": "ngram", "num_speculative_tokens": 4}}]), "attach to an endpoint"),
])
def test_bad_sequential_settings_are_one_line(bad, needle):
    with pytest.raises(SweepError) as e:
        _spec(**bad)
    assert needle in str(e.value) and "\n" not in str(e.value)


def test_a_sequential_sweep_measures_one_more_repeat_of_its_open_levels_then_stops(fake_vllm, tmp_path, monkeypatch):
    """The whole life cycle on the fake engine (two arms of equal speed: every level stays open):
    the first two repeats (a look with one degree of freedom for the starts), one more for every
    open level (no look: 3 is unbalanced), then the last look ends the rounds. Round 1 is told
    the prompts dominate (the fake engine's prompts are alike): its repeat sends a panel twice as
    large (one prompt per category to two), the old one inside it, and the round after keeps it."""
    from specnb.ledger import load_ledgers
    from specnb.sweep import run_sweep

    spec = SweepSpec.parse(dict(
        name="t", model=str(fake_vllm.model), served_model_name="fake", workloads=["freeform"], concurrency=[1, 2],
        repeats=2, sequential={"max_repeats": 4, "max_panel": 10}, budget_s=3600, panel_size=5, work_floor_tokens=16,
        warmup_requests=1, request_timeout_s=5, metrics_interval_s=0.05, ready_timeout_s=30, sampling={"max_tokens": 8},
        env={"FAKE_VLLM_STATE": str(fake_vllm.state)}, arms=[{"name": "baseline"}, {"name": "ngram", "speculative_config": {
            "method": "ngram", "num_speculative_tokens": 4, "prompt_lookup_max": 4}}]))
    import specnb.sweep.sequential as seq

    real = seq.grown_panels
    monkeypatch.setattr(seq, "grown_panels", lambda spec, df, looks, before, workloads=None: (
        real(spec, df, [{**lk, "noise": {"dominant": "prompts"}} for lk in looks], before, workloads)))
    said: list[str] = []
    out = run_sweep(spec, tmp_path / "out", progress=False, echo=said.append)
    assert out.ok, out.summary()
    run = tmp_path / "out"
    for arm in ("baseline", "ngram"):
        assert sorted(p.name for p in (run / arm / "freeform").glob("c*.json")) == [
            f"c00{c}-r0{r}.json" for c in (1, 2) for r in range(4)]
    assert sorted(p.name for p in (run / "sequential").iterdir()) == ["round-01.json", "round-02.json", "round-03.json"]
    rounds = [json.loads((run / "sequential" / f"round-0{k}.json").read_text()) for k in (1, 2, 3)]
    assert "last look" in rounds[2]["stopped"] and rounds[0]["panel"] == {"freeform": 10} == rounds[1]["panel"]
    assert "sends a panel of 10 (was 5)" in rounds[0]["spend"][0]
    df = load_ledgers(run)
    sizes = df.groupby("repeat")["panel_size"].unique().map(list).to_dict()
    assert sizes == {0: [5], 1: [5], 2: [10], 3: [10]}, sizes  # the grown panel, paired in both arms
    plan = next(s for s in said if s.startswith("plan:"))
    assert "then up to 2 more repeat(s)" in plan and "looks after 2, 4 repeats" in plan and "budget 1h00m" in plan, plan
    assert any(s.startswith("sequential round 1: repeat 3 for 2 open level(s)") for s in said), said
    assert len(fake_vllm.started) == 8  # four repeats of two arms, each a fresh start
    from specnb.analysis import paired_speedups

    # the fake engine's n-gram arm makes no drafts (spec_no_drafts): no pair to read here; a grown
    # panel's reading is tests/unit/analysis/test_speedups.py's
    assert paired_speedups(df).table.empty


def _two_drafters(**kw):
    return _spec(arms=[{"name": "baseline"},
                       {"name": "a", "speculative_config": {"method": "ngram", "num_speculative_tokens": 4}},
                       {"name": "b", "speculative_config": {"method": "ngram", "num_speculative_tokens": 2}}], **kw)


def _write_arms(folder, ratios_by_arm, c=1, duration_s=30.0, start=0):
    i = start
    n = max(len(v) for v in ratios_by_arm.values())
    for r in range(n):
        led = ledger("baseline", c=c, r=r, tok_s=100.0)
        led.results["duration_s"] = duration_s
        write_ledger(folder / "points" / f"{i:03d}.json", led)
        i += 1
        for arm, rs in ratios_by_arm.items():
            if r < len(rs) and rs[r] is not None:
                led = ledger("ngram-k4", c=c, r=r, tok_s=100 * rs[r], mal=3)
                led.arm.name = arm
                led.point_id = f"{arm}/copy/c{c}-r{r}"
                led.results["duration_s"] = duration_s
                write_ledger(folder / "points" / f"{i:03d}.json", led)
                i += 1
    return i


def test_a_drafter_without_a_pair_keeps_its_level_open(tmp_path):
    # b's points at c=1 all failed: a alone is decided there, but the level is not
    _write_arms(tmp_path, {"a": [1.80, 1.75, 1.85, 1.78], "b": []})
    levels = next_sequential_round(_two_drafters(concurrency=[1]), tmp_path, 1, elapsed_s=0)
    assert [c for c, _ in levels["copy"]] == [1.0]
    rec = json.loads((tmp_path / "sequential" / "round-01.json").read_text())
    assert {lk["arm"]: lk["state"] for lk in rec["looks"]} == {"a": "decided: pays", "b": "open: no paired repeat yet"}


def test_a_decision_stands_once_made_and_the_report_says_the_level_went_on(tmp_path):
    # a is decided at the first look (4 repeats); b keeps the level open to the sixth, where a's
    # look would widen
    _write_arms(tmp_path, {"a": [1.80, 1.75, 1.85, 1.78, 0.9, 3.0], "b": [1.3, 0.9, 1.1, 1.0, 1.2, 0.95]})
    assert next_sequential_round(_two_drafters(concurrency=[1]), tmp_path, 3, elapsed_s=0) == {}
    rec = json.loads((tmp_path / "sequential" / "round-03.json").read_text())
    states = {lk["arm"]: (lk["state"], lk["look"]["n"]) for lk in rec["looks"]}
    assert states == {"a": ("decided: pays", 4), "b": ("open at the last look", 6)}
    text = "\n".join(sequential_lines(tmp_path))
    assert "a / copy c=1: pays after 4 repeats" in text and "its level went on to 6 repeats for another arm" in text
    assert "stopped early" not in text and "b / copy c=1: undecided at the last look" in text


def test_refused_drafters_and_a_missing_baseline_stop_the_rounds_with_a_reason(tmp_path):
    from specnb.ledger import REFUSED_ERROR
    from specnb.ledger.schema import Failure

    led = ledger("ngram-k4", c=1, r=0, status="failed", mal=3)
    led.failure = Failure(error_type=REFUSED_ERROR, message="this build cannot serve it")
    write_ledger(tmp_path / "points" / "0.json", led)
    base = ledger("baseline", c=1, r=0)
    write_ledger(tmp_path / "points" / "1.json", base)
    assert next_sequential_round(_spec(concurrency=[1]), tmp_path, 1, elapsed_s=0) == {}
    assert "no drafter arm" in json.loads((tmp_path / "sequential" / "round-01.json").read_text())["stopped"]
    only = tmp_path / "nobase"
    write_ledger(only / "points" / "0.json", ledger("ngram-k4", c=1, r=0, mal=3))
    assert next_sequential_round(_spec(concurrency=[1]), only, 1, elapsed_s=0) == {}
    assert "nothing to pair" in json.loads((only / "sequential" / "round-01.json").read_text())["stopped"]


def test_a_resume_under_another_rule_is_refused_in_one_line(tmp_path):
    _write(tmp_path, RATIOS)
    next_sequential_round(_spec(), tmp_path, 1, elapsed_s=0)
    for changed in (dict(repeats=2), dict(sequential={"max_repeats": 8})):
        with pytest.raises(SweepError) as e:
            next_sequential_round(_spec(**changed), tmp_path, 1, elapsed_s=0)
        assert "measure into a new folder" in str(e.value) and "\n" not in str(e.value)


def test_a_level_without_a_measured_point_is_costed_at_the_runs_mean_point(tmp_path):
    _write(tmp_path, {1: [1.3, 0.9, 1.1, 1.0]}, duration_s=30.0)
    # c=4 has no point at all: one start per arm (2 x 20 s) + the mean point (30 s) per arm for each
    # level; c=1 needs two repeats to its next look (200 s), c=4 needs its first four
    levels = next_sequential_round(_spec(concurrency=[1, 4], budget_s=100 + 200), tmp_path, 1, elapsed_s=100)
    rec = json.loads((tmp_path / "sequential" / "round-01.json").read_text())
    assert rec["estimated_s"] == pytest.approx(40 + 60 + 60) and len(levels["copy"]) == 1 and rec["left_out"]


def test_the_round_says_which_part_of_an_open_levels_interval_to_spend_on():
    from specnb.sweep.sequential import noise_parts, spend_text

    prompts = noise_parts(0.0004, 0.004, 4)
    assert prompts["dominant"] == "prompts"
    # the old prompts keep their weight in the four old starts: the prompts' part shrinks to 26/36
    assert prompts["se_after_2_more_repeats"] == pytest.approx((0.0004 * 4 / 6 + 0.004) ** 0.5, abs=1e-6)
    assert prompts["se_after_2_more_repeats_twice_the_panel"] == pytest.approx(
        (0.0004 * 4 / 6 + 0.004 * 26 / 36) ** 0.5, abs=1e-6)
    starts = noise_parts(0.01, 0.001, 4)
    assert starts["dominant"] == "starts"
    assert noise_parts(0.01, None, 4) == {"start_var": 0.01, "prompt_var": None, "dominant": "starts"}
    assert "the starts dominate" in spend_text([{"noise": starts}])
    assert "does not grow" in spend_text([{"noise": prompts}])
    assert "too few repeats" in spend_text([{"noise": None}])


def test_a_round_grows_the_panel_where_the_prompts_dominate_up_to_its_cap(tmp_path):
    from specnb.prompts import bundled
    from specnb.sweep.sequential import grown_panels, round_panels

    df = pd.DataFrame({"workload": ["copy", "freeform"], "panel_size": [10, 10]})
    looks = [{"workload": "copy", "noise": {"dominant": "prompts"}}, {"workload": "freeform", "noise": {"dominant": "starts"}}]
    grow, why = grown_panels(_spec(), df, looks, {})
    assert grow == {"copy": 20} and "copy: the panel's prompts dominate" in why[0]
    assert grown_panels(_spec(), df, looks, {"copy": 40})[0] == {}  # at max_panel (40)
    assert grown_panels(_spec(sequential={"max_repeats": 6, "max_panel": 30}), df, looks, {})[0] == {"copy": 20}
    assert grown_panels(_spec(sequential={"max_repeats": 6, "grow_panel": False}), df, looks, {}) == ({}, [])
    # the categories' mix must not move: the bundled copy set doubles 10 -> 20 in proportion (2 -> 4
    # per category); a panel of 3 over 5 categories cannot double in proportion
    copy = bundled("copy")
    assert grown_panels(_spec(), df, looks, {}, {"copy": copy})[0] == {"copy": 20}
    grow, why = grown_panels(_spec(panel_size=3), df.assign(panel_size=3), looks, {}, {"copy": copy})
    assert grow == {} and "would change the categories' mix" in why[0]
    (tmp_path / "sequential").mkdir()
    (tmp_path / "sequential" / "round-01.json").write_text(json.dumps({"panel": {"copy": 20}}))
    (tmp_path / "sequential" / "round-02.json").write_text(json.dumps({}))
    assert round_panels(tmp_path, 2) == {"copy": 20} and round_panels(tmp_path, 0) == {}


def _timing(folder, name, doc):
    (folder / "timings").mkdir(parents=True, exist_ok=True)
    (folder / "timings" / name).write_text(json.dumps({"kind": "timing", "schema_version": 1, **doc}))


def test_a_resumed_sweeps_budget_counts_its_earlier_invocations(tmp_path):
    """The budget is the sweep's time: a resume with 200 s already spent has 50 s of a 250 s budget
    left, which no repeat fits; the plan line says what earlier invocations spent."""
    from specnb.ledger.timing import spent_s
    from specnb.sweep.clock import PhaseClock
    from specnb.sweep.plan import TimeLeft
    from specnb.sweep.rounds import Rounds

    _write(tmp_path, {1: [1.30, 0.90, 1.10, 1.0], 4: [1.25, 1.15, 1.05, 1.1]}, duration_s=30.0)
    _timing(tmp_path, "a.json", {"wall_s": 120.0, "ended": "interrupted"})  # a local invocation cut short
    _timing(tmp_path, "b.json", {"wall_s": 50.0, "executor": {"kind": "ray", "role": "driver", "elapsed_s": 80.0}})
    _timing(tmp_path, "c.json", {"wall_s": 999.0, "executor": {"kind": "ray", "node_id": "n1"}})  # a block: in its driver's
    _timing(tmp_path, "d.json", {"wall_s": "not a number"})
    assert spent_s(tmp_path) == pytest.approx(200.0)
    junk = tmp_path.parent / f"{tmp_path.name}-junk"
    _timing(junk, "a.json", {"wall_s": 7.0})
    (junk / "timings" / "b.json").write_text("{not json")  # unreadable: not a timing record
    assert spent_s(junk) == pytest.approx(7.0) and spent_s(tmp_path / "none") == 0.0
    spec = _spec(concurrency=[1, 4], budget_s=250)
    rounds = Rounds(spec, tmp_path, {"copy": None}, PhaseClock(), lambda _: None)
    assert rounds.advance(0.0) is False  # 200 s spent + two repeats of one level (200 s) > 250 s
    rec = json.loads((tmp_path / "sequential" / "round-01.json").read_text())
    assert "time budget: 200 s spent of 250 s" in rec["stopped"] and rec["elapsed_s"] == pytest.approx(200.0)
    fresh = tmp_path.parent / f"{tmp_path.name}-fresh"
    _write(fresh, {1: [1.30, 0.90, 1.10, 1.0], 4: [1.25, 1.15, 1.05, 1.1]}, duration_s=30.0)
    assert Rounds(spec, fresh, {"copy": None}, PhaseClock(), lambda _: None).advance(0.0) is True  # nothing spent
    text = TimeLeft(_spec(budget_s=720), None, None, spent_s=580.0).sequential_text(120.0)
    assert "budget 12m00s, 9m40s of it spent by earlier invocations" in text
    assert "room for about 0 more repeat(s)" in text  # (720 - 580 - 120) s: under one 40 s repeat
    fresh_text = TimeLeft(_spec(budget_s=720), None, None).sequential_text(120.0)
    assert "spent" not in fresh_text and "room for about 2 more repeat(s)" in fresh_text
