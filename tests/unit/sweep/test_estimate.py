"""How long a sweep will take: the estimator's arithmetic, its priors from an earlier run, and
what a sweep against the fake server prints (the plan before the first start, the time left)."""

from __future__ import annotations

import json

import pytest

from specnb.sweep import SweepSpec, run_sweep
from specnb.sweep.clock import PhaseClock
from specnb.sweep.estimate import Costs, PlannedPoint, costs_from_run, estimate_s, plan_line, prior_costs


def test_points_take_their_own_level_else_the_nearest_scaled_by_the_level_ratio():
    c = Costs()
    c.add_point("base", "copy", 1, duration_s=40.0, requests=10)  # 4 s per request at c=1
    c.add_point("base", "copy", 1, duration_s=60.0, requests=10)  # median of 4 and 6: 5 s
    c.add_point("spec", "copy", 4, duration_s=8.0, requests=20)  # 0.4 s per request at c=4
    assert c.point(PlannedPoint("base", "copy", 1, 20)) == pytest.approx(100.0)
    # c=2 for base: its only level is 1 -> 5 s x 1/2 per request
    assert c.point(PlannedPoint("base", "copy", 2, 10)) == pytest.approx(25.0)
    # an arm never measured: the nearest level of any arm (c=4 is nearer to 8 than c=1)
    assert c.point(PlannedPoint("other", "copy", 8, 10)) == pytest.approx(0.4 * 4 / 8 * 10)
    assert c.point(PlannedPoint("base", "freeform", 1, 10)) is None  # nothing on that workload


def test_estimate_needs_a_cost_for_every_part():
    c = Costs()
    c.add_point("base", "copy", 1, 10.0, 10)
    blocks = [[PlannedPoint("base", "copy", 1, 10)], [PlannedPoint("base", "copy", 1, 10)]]
    assert estimate_s(c, blocks) is None  # no block (start + warm-up) measured yet
    c.add_block(30.0)
    c.add_block(40.0)
    assert estimate_s(c, blocks) == pytest.approx(2 * (35.0 + 10.0))
    c.sizing_s = 12.0
    assert estimate_s(c, blocks, sizing=True) == pytest.approx(2 * 45.0 + 12.0)
    assert estimate_s(None, blocks) is None
    assert estimate_s(c, [[], []]) == 0.0  # nothing left


def test_this_run_overrides_the_prior_where_it_has_measured():
    prior = Costs(source="run A")
    prior.add_block(50.0)
    prior.add_point("base", "copy", 1, 40.0, 10)
    live = Costs()
    assert live.merged_over(prior).source == "run A" and live.merged_over(prior).block() == 50.0
    live.add_block(20.0)
    merged = live.merged_over(prior)
    assert merged.source == "this run" and merged.block() == 20.0
    assert merged.point(PlannedPoint("base", "copy", 1, 10)) == pytest.approx(40.0)  # still the prior's


def test_the_prior_is_rescaled_to_this_machine_per_arm_once_points_are_measured():
    prior = Costs(source="run A on a faster machine")
    prior.add_block(50.0)
    for lv, per in ((1, 1.0), (2, 0.6), (4, 0.4)):
        prior.add_point("base", "copy", lv, per * 10, 10)
        prior.add_point("spec", "copy", lv, per * 8, 10)
    live = Costs()
    live.add_block(60.0)
    live.add_point("base", "copy", 1, 30.0, 10)  # 3x the prior's base
    merged = live.merged_over(prior)
    assert live.speed_ratio(prior) == {"base": pytest.approx(3.0), None: pytest.approx(3.0)}
    assert merged.point(PlannedPoint("base", "copy", 4, 10)) == pytest.approx(3 * 0.4 * 10)
    assert merged.point(PlannedPoint("spec", "copy", 2, 10)) == pytest.approx(3 * 0.48 * 10)  # no spec point: overall
    live.add_point("spec", "copy", 1, 16.0, 10)  # 2x the prior's spec
    merged = live.merged_over(prior)
    assert merged.point(PlannedPoint("spec", "copy", 4, 10)) == pytest.approx(2 * 0.32 * 10)  # spec: its own ratio
    assert merged.point(PlannedPoint("base", "copy", 2, 10)) == pytest.approx(3 * 0.6 * 10)
    assert merged.point(PlannedPoint("base", "copy", 1, 10)) == pytest.approx(30.0)  # measured: its own
    assert Costs().speed_ratio(prior) == {} and Costs().merged_over(prior).per_request_s == prior.per_request_s


def test_only_the_same_arm_workload_and_level_are_compared():
    """A prior without this arm, or without this level, says nothing of this machine's speed:
    comparing against another arm's or a level-model guess would rescale what the prior measured."""
    prior = Costs()
    prior.add_point("baseline", "copy", 1, 10.0, 10)
    prior.add_point("baseline", "copy", 2, 10.0, 20)
    live = Costs()
    live.add_point("eagle", "copy", 1, 5.0, 10)  # another arm, same machine
    assert live.speed_ratio(prior) == {}
    assert live.merged_over(prior).point(PlannedPoint("baseline", "copy", 2, 20)) == pytest.approx(10.0)
    live = Costs()
    live.add_point("baseline", "copy", 1, 10.0, 10)  # as before
    live.add_point("baseline", "copy", 8, 17.0, 80)  # a new level: its cost is not the 1/level guess
    assert live.speed_ratio(prior) == {"baseline": pytest.approx(1.0), None: pytest.approx(1.0)}
    assert live.merged_over(prior).point(PlannedPoint("baseline", "copy", 2, 20)) == pytest.approx(10.0)


def _replay_errors(learn: bool, seed: int) -> list[float]:
    """The demo's shape (baseline and n-gram, c = 1 to 32, two repeats, a block per arm and repeat)
    on a machine 2-3x slower than its prior's, the arms slowed unequally and each part +-10 %:
    replayed part by part, the relative error of the time-left estimate once a quarter of the
    run's time is spent (until the last 5 %)."""
    import random

    rng = random.Random(seed)
    levels, arms = (1, 2, 4, 8, 16, 32), ("baseline", "ngram-k4")
    fast = {"baseline": 0.5, "ngram-k4": 0.4}
    slow = {"baseline": 2.0 + rng.random(), "ngram-k4": 2.0 + rng.random()}
    prior = Costs(source="run A")
    prior.add_block(40.0)
    for a in arms:
        for lv in levels:
            prior.add_point(a, "copy", lv, fast[a] * 8 / lv * 10 * lv, 10 * lv)
    blocks = [[(a, lv) for lv in levels] for _ in range(2) for a in arms]
    truth: list[tuple[object, float]] = []  # what the run pays, in order: a start, then its points
    for block in blocks:
        truth.append(("block", 40.0 * 1.3 * rng.uniform(0.9, 1.1)))
        truth += [((a, lv), slow[a] * fast[a] * 8 / lv * 10 * lv * rng.uniform(0.9, 1.1)) for a, lv in block]
    total = sum(t for _, t in truth)
    live, spent, errors = Costs(), 0.0, []
    for i, (what, sec) in enumerate(truth):
        spent += sec
        if what == "block":
            live.add_block(sec)
        else:
            live.add_point(what[0], "copy", what[1], sec, 10 * what[1])
        costs = live.merged_over(prior) if learn else Costs(
            block_s=live.block_s or prior.block_s, per_request_s={**prior.per_request_s, **live.per_request_s})
        left, planned = truth[i + 1:], []
        for kind, _ in left:
            if kind == "block":
                planned.append([])
            elif planned:
                planned[-1].append(PlannedPoint(kind[0], "copy", kind[1], 10 * kind[1]))
            else:  # the block being measured: its start is paid
                planned.append([PlannedPoint(kind[0], "copy", kind[1], 10 * kind[1])])
        est = estimate_s(costs, planned)
        if left and left[0][0] != "block":
            est -= costs.block()
        if spent >= total / 4 and total - spent > 0.05 * total:
            errors.append(abs(est - (total - spent)) / (total - spent))
    return errors


@pytest.mark.parametrize("seed", range(5))
def test_time_left_is_within_a_fifth_of_the_truth_from_the_first_quarter_on(seed):
    learned = _replay_errors(True, seed)
    assert learned and max(learned) <= 0.20, max(learned)
    assert max(_replay_errors(False, seed)) > 0.20  # without learning the same replay is off: the check can fail


def test_plan_line_says_what_and_how_long_or_that_it_cannot_yet():
    assert plan_line(20, 4, 560, 850.0, "run X on Y") == (
        "plan: 20 point(s), 4 server start(s), 560 request(s); about 14m10s (costs from run X on Y)")
    line = plan_line(2, 2, 20, None, None, {"budget_s": 600})
    assert "search rounds while the budget lasts (10m00s)" in line and "no estimate yet" in line


def test_clock_move_gives_time_measured_inside_one_phase_to_another():
    now = [0.0]
    clock = PhaseClock(now=lambda: now[0])
    with clock.phase("measuring"):
        now[0] += 10
        clock.move(3.0, "measuring", "parsing")  # timed by the load driver inside the point
        clock.move(None, "measuring", "parsing")
    t = clock.totals()
    assert t["measuring"] == 7 and t["parsing"] == 3 and sum(t.values()) == clock.wall() == 10
    with pytest.raises(ValueError, match="unknown phase"):
        clock.move(1.0, "measuring", "lunch")


def _spec(fake, **kw) -> SweepSpec:
    base = dict(
        name="t", model=str(fake.model), served_model_name="fake", workloads=["freeform"], concurrency=[1, 2],
        repeats=2, panel_size=4, work_floor_tokens=16, warmup_requests=2, request_timeout_s=5,
        metrics_interval_s=0.05, ready_timeout_s=30, sampling={"max_tokens": 8},
        env={"FAKE_VLLM_STATE": str(fake.state)},
        arms=[{"name": "baseline"}, {"name": "other", "speculative_config": {"method": "ngram", "num_speculative_tokens": 2}}],
    )
    base.update(kw)
    return SweepSpec.parse(base)


def test_a_sweep_prints_its_plan_and_the_time_left_and_times_its_parse(fake_vllm, tmp_path, capsys):
    study = tmp_path / "study"
    said: list[str] = []
    first = run_sweep(_spec(fake_vllm), study / "run-1", progress=True, echo=said.append)
    assert first.ok and len(first.written) == 8
    plan = [s for s in said if s.startswith("plan: ")]
    assert plan == ["plan: 8 point(s), 4 server start(s), 32 request(s); no estimate yet (no earlier run of this study "
                    "to go on: one follows the first start)"]
    err = capsys.readouterr().err  # the progress lines: the time left once a cost is known
    assert " left)" in err and err.rstrip().splitlines()[-1].endswith("t: done")
    doc = json.loads(first.timings[0].read_text())
    parsed = [json.loads(p.read_text())["results"]["client_parse_s"] for p in first.written]
    assert all(s > 0 for s in parsed)  # each point's parse, in its ledger, is the timing record's phase
    assert doc["phases_s"]["parsing"] == pytest.approx(sum(parsed), abs=0.02)

    # the next run of the same study starts from the first one's costs
    prior = prior_costs(study / "run-2")
    assert prior is not None and prior.source.startswith("run run-1")
    measured = costs_from_run(study / "run-1")
    assert len(measured.block_s) == 4 and len(measured.per_request_s) == 4  # 2 arms x 2 levels
    said.clear()
    run_sweep(_spec(fake_vllm), study / "run-2", progress=False, echo=said.append)
    (plan,) = [s for s in said if s.startswith("plan: ")]
    assert "; about " in plan and "(costs from run run-1" in plan


def test_the_prior_is_the_folder_itself_then_the_same_condition_of_an_earlier_run(tmp_path):
    def run(folder, block_s):
        (folder / "timings").mkdir(parents=True)
        (folder / "sweep.json").write_text("{}")
        (folder / "timings" / "t.json").write_text(json.dumps({
            "kind": "timing", "phases_s": {"warmup": 0.0},
            "server_starts": [{"mode": "launched", "ok": True, "server_start_s": block_s}]}))

    study = tmp_path / "study"
    run(study / "20260101T000000Z" / "bf16", 10.0)
    run(study / "20260101T000000Z" / "fp32", 99.0)  # another condition of that run: not the same one
    run(study / "20260201T000000Z" / "fp32", 50.0)
    new = study / "20260301T000000Z" / "bf16"
    assert prior_costs(new).block() == 10.0 and prior_costs(new).source.startswith("run 20260101T000000Z")
    run(new, 7.0)  # resumed: its own earlier invocation comes first
    assert prior_costs(new).block() == 7.0 and prior_costs(new).source.startswith("this folder's")
    # odd JSON and folders no sweep wrote are passed over, not fatal
    (study / "20260301T000000Z" / "junk").mkdir()
    (study / "20260301T000000Z" / "junk" / "x.json").write_text('{"status": "ok", "results": {}, "load": 3}')
    assert costs_from_run(study / "20260301T000000Z" / "junk") is None
    assert prior_costs(tmp_path / "nowhere" / "x") is None
    # a sweep in a scratch folder (/tmp/<anything>/out) reads a neighbour's "out" only when it is the
    # same sweep (its name): another job's sweep is not this one's prior
    run(tmp_path / "scratch" / "other-job" / "out", 3.0)
    (tmp_path / "scratch" / "other-job" / "out" / "sweep.json").write_text('{"spec": {"name": "other"}}')
    assert prior_costs(tmp_path / "scratch" / "mine" / "out", name="mine") is None
    assert prior_costs(tmp_path / "scratch" / "mine" / "out", name="other").block() == 3.0
