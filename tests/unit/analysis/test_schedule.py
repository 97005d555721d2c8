"""From a K sweep to vLLM's dynamic speculation schedule: derivation on hand-made frames with
known answers, the rule, validation, and the policy arm."""

from __future__ import annotations

import json

import pandas as pd
import pytest

from specnb.analysis import paired_speedups
from specnb.analysis.proposal import fit_alpha, k_choice, k_model
from specnb.analysis.schedule import (
    ScheduleError,
    check_schedule,
    choose_k,
    derive_policy,
    derive_schedule,
    k_at,
)
from specnb.ledger import ArmRecord, load_ledgers, write_ledger
from specnb.models.theory import acceptance_length
from tests.unit.factories import ledger

LEVELS = [1, 2, 4, 8]


def _k_sweep(tmp_path, speedups: dict[int, list[float]], factors=(0.98, 1.0, 1.02, 1.0), eagle: dict | None = None,
             off: list[float] | None = None):
    """Baseline at 100 tok/s; arm k<K> at 100 x speedup[K][level] x the start's factor; ``eagle``
    adds EAGLE-3 arms (e<K>) the same way; ``off`` an n-gram arm loaded with K = 0 at every batch size."""
    i = 0
    for r, f in enumerate(factors):
        for j, c in enumerate(LEVELS):
            write_ledger(tmp_path / f"{i:03d}.json", ledger("baseline", c=c, r=r, tok_s=100.0))
            i += 1
            for k, sp in speedups.items():
                led = ledger(f"k{k}", c=c, r=r, tok_s=100.0 * sp[j] * f, mal=3.0)
                led = led.model_copy(update={"arm": ArmRecord(name=f"k{k}", speculative_config={
                    "method": "ngram", "num_speculative_tokens": k, "prompt_lookup_max": 4})})
                write_ledger(tmp_path / f"{i:03d}.json", led)
                i += 1
            if off is not None:
                led = ledger("k0-sched", c=c, r=r, tok_s=100.0 * off[j] * f, mal=1.0)
                led = led.model_copy(update={"arm": ArmRecord(name="k0-sched", speculative_config={
                    "method": "ngram", "num_speculative_tokens": 4, "prompt_lookup_max": 4,
                    "num_speculative_tokens_per_batch_size": [[1, 256, 0]]})})
                write_ledger(tmp_path / f"{i:03d}.json", led)
                i += 1
            for k, sp in (eagle or {}).items():
                led = ledger(f"e{k}", c=c, r=r, tok_s=100.0 * sp[j] * f, mal=3.0)
                led = led.model_copy(update={"arm": ArmRecord(name=f"e{k}", speculative_config={
                    "method": "eagle3", "model": "/models/eagle3-head", "num_speculative_tokens": k})})
                write_ledger(tmp_path / f"{i:03d}.json", led)
                i += 1
    return load_ledgers(tmp_path)


SWEEP = {1: [1.20, 1.15, 1.05, 0.97], 2: [1.35, 1.25, 1.02, 0.90], 4: [1.50, 1.30, 0.96, 0.80]}


def test_the_best_k_moves_left_as_concurrency_rises_and_the_schedule_follows(tmp_path):
    df = _k_sweep(tmp_path, SWEEP)
    choice = k_choice(paired_speedups(df, scope="panel"), df)
    best = choice[choice["best"]].set_index("concurrency")["k"].to_dict()
    assert best == {1: 4, 2: 4, 4: 1, 8: 0}
    # the best option's margin over the runner-up, paired repeat by repeat: K=4 over K=2 at c=1
    # (1.50 / 1.35, the starts' luck cancelling), the baseline over K=1 at c=8 (1 / 0.97)
    margin = choice[choice["best"]].set_index("concurrency")
    assert margin.loc[1, "runner_up"] == "k2" and margin.loc[1, "margin"] == pytest.approx(1.5 / 1.35)
    assert margin.loc[1, "margin_lo"] > 1.0
    assert margin.loc[8, "runner_up"] == "k1" and margin.loc[8, "margin"] == pytest.approx(1 / 0.97, rel=1e-3)
    chosen = choose_k(choice).set_index("concurrency")["k"].to_dict()
    assert chosen == {1: 4, 2: 4, 4: 1, 8: 0}
    schedule = derive_schedule(choose_k(choice), max_batch=256)
    assert schedule == [[1, 2, 4], [3, 5, 1], [6, 256, 0]]  # boundaries at sqrt(2*4)=2.8, sqrt(4*8)=5.7
    assert [k_at(schedule, b) for b in (1, 2, 3, 5, 6, 100)] == [4, 4, 1, 1, 0, 0]


def test_the_lower_bound_rule_keeps_a_k_only_where_it_surely_pays(tmp_path):
    noisy = _k_sweep(tmp_path, {4: [1.50, 1.04, 0.96, 0.80]}, factors=(0.85, 1.0, 1.15, 1.0))
    choice = k_choice(paired_speedups(noisy, scope="panel"), noisy)
    by_rule = {rule: choose_k(choice, rule).set_index("concurrency")["k"].to_dict() for rule in ("lower_bound", "point")}
    assert by_rule["point"][2] == 4 and by_rule["lower_bound"][2] == 0  # 1.04x inside the noise: off
    assert by_rule["lower_bound"][1] == 4
    with pytest.raises(ScheduleError, match="unknown rule"):
        choose_k(choice, "optimistic")


def test_a_level_with_no_lower_bound_is_undecided_not_turned_off(tmp_path):
    """A NaN lower bound (an interval that could not be estimated) used to fall to K = 0 as if the
    rule had decided it: the level is reported undecided, with K = 0 only as the fallback."""
    df = _k_sweep(tmp_path, SWEEP)
    choice = k_choice(paired_speedups(df, scope="panel"), df)
    choice.loc[(choice["concurrency"] == 1) & (choice["k"] == 4), ["speedup_lo", "family_lo"]] = float("nan")
    rows = choose_k(choice).set_index("concurrency")
    assert not rows.loc[1, "decided"] and rows.loc[1, "k"] == 0
    assert rows.loc[1, "reason"].startswith("undecided: k4 has no lower bound")
    assert rows.loc[[2, 4, 8], "decided"].all() and rows.loc[2, "k"] == 4  # the others as before
    assert choose_k(choice, "point").loc[0, "k"] == 4  # the point rule needs no interval


def test_derive_policy_writes_a_config_vllm_takes(tmp_path):
    df = _k_sweep(tmp_path, SWEEP)
    config, chosen, doc = derive_policy(df, max_batch=64, source="run")
    assert config["method"] == "ngram" and config["num_speculative_tokens"] == 4
    assert config["num_speculative_tokens_per_batch_size"] == [[1, 2, 4], [3, 5, 1], [6, 64, 0]]
    parsed = json.loads(doc)
    assert parsed["rule"] == "lower_bound" and len(parsed["levels"]) == 4 and parsed["derived_from"] == "run"


def test_two_drafter_methods_give_one_schedule_each_never_one_methods_k_on_anothers_config(tmp_path):
    # EAGLE-3 K=3 beats n-gram at every level: a derivation across methods would pick K=3 and take
    # the first row with that K as the base config, whichever method it is
    eagle = {3: [1.90, 1.80, 1.60, 1.30]}
    df = _k_sweep(tmp_path, {3: [1.10, 1.05, 0.95, 0.85], 4: [1.50, 1.30, 0.96, 0.80]}, eagle=eagle)
    with pytest.raises(ScheduleError, match=r"2 methods \(eagle3, ngram\).*one per method"):
        derive_policy(df)
    ngram, _, _ = derive_policy(df, method="ngram", max_batch=64)
    e3, _, _ = derive_policy(df, method="eagle3", max_batch=64)
    assert ngram["method"] == "ngram" and "model" not in ngram and ngram["num_speculative_tokens"] == 4
    assert e3["method"] == "eagle3" and e3["model"] == "/models/eagle3-head" and e3["num_speculative_tokens"] == 3
    assert "num_speculative_tokens_per_batch_size" not in e3  # it pays everywhere: deployed as it is, static K=3
    with pytest.raises(ScheduleError, match="no drafter arm with method 'mtp'"):
        derive_policy(df, method="mtp")
    from specnb import paths
    from specnb.analysis.report import ReportOptions, format_run_report
    from specnb.ledger.records import RunRecords

    text = format_run_report(RunRecords(paths.ROOT, df), ReportOptions(n_boot=200))  # the report derives one schedule per method
    assert "(eagle3):" in text and "(ngram):" in text and '"method": "eagle3"' in text


def test_without_an_off_arm_a_schedule_that_turns_drafting_off_where_a_static_k_may_pay_is_not_deployed(tmp_path):
    # the committed CPU case: K=8 pays at c=1..4 and is undecided at c=8; the lower-bound rule
    # turns drafting off at c=8, but K = 0 inside a schedule was never measured (it measured
    # 0.77x-0.82x in the policy run): the answer is the static K, with why
    df = _k_sweep(tmp_path, {8: [1.80, 1.75, 1.80, 1.30]}, factors=(0.7, 1.0, 1.3, 1.0))
    config, chosen, doc = derive_policy(df, max_batch=64)
    assert chosen.set_index("concurrency")["k"].to_dict()[8] == 0 and not chosen["off_measured"].any()
    assert chosen.attrs["deploy"] == "static" and "num_speculative_tokens_per_batch_size" not in config
    assert config["num_speculative_tokens"] == 8
    assert "no arm measuring K = 0 inside a schedule" in chosen.attrs["claim"]
    assert json.loads(doc)["deploy"] == "static"


def test_an_off_arm_that_costs_more_than_the_baseline_is_what_k_is_compared_with(tmp_path):
    # K=4 wins at low concurrency and falls below 1 at c=8; K=1 holds 0.97x there; drafting off
    # inside a schedule costs 0.85x: the schedule keeps K=1 at c=8 (it beats off, though not the
    # baseline), and says that traffic is better served without a drafter
    df = _k_sweep(tmp_path, {1: [1.20, 1.15, 1.05, 0.97], 4: [1.50, 1.30, 0.96, 0.80]},
                  off=[0.85, 0.85, 0.85, 0.85])
    config, chosen, _ = derive_policy(df, max_batch=64)
    assert chosen.set_index("concurrency")["k"].to_dict() == {1: 4, 2: 4, 4: 1, 8: 1}
    assert chosen["off_measured"].all() and "K=0 in a schedule (k0-sched, measured 0.85x" in chosen["reason"].iloc[3]
    assert chosen["reason"].iloc[3].startswith("k1 loses least")
    assert chosen.attrs["deploy"] == "schedule"
    assert config["num_speculative_tokens_per_batch_size"] == [[1, 2, 4], [3, 64, 1]]
    assert "is shown faster than k4 (the best static K)" in chosen.attrs["claim"] and "c=8 no drafter config beats the baseline" in chosen.attrs["claim"]


def test_an_uncertain_k_is_not_turned_off_for_an_off_arm_known_to_cost_more(tmp_path):
    # the committed tune proposal (ledgers/tune/cpu/20261201T120741Z): at c=8 K=8 ran 0.85x
    # [0.66, 1.15] and the off arm 0.70x [0.64, 0.76]; comparing K=8's lower bound with the off
    # arm's point estimate turned drafting off for the option known to be worse
    df = _k_sweep(tmp_path, {8: [1.60, 1.45, 0.95, 0.85]}, factors=(0.8, 1.0, 1.2, 1.0), off=[0.75, 0.75, 0.72, 0.70])
    config, chosen, _ = derive_policy(df, max_batch=64)
    row = chosen.set_index("concurrency").loc[8]
    assert row["k"] == 8 and row["speedup_lo"] < 0.70 and "loses least" in row["reason"]
    assert chosen.attrs["deploy"] == "static" and config["num_speculative_tokens"] == 8
    _, point, _ = derive_policy(df, max_batch=64, rule="point")
    assert point.set_index("concurrency")["k"].to_dict() == {1: 8, 2: 8, 4: 8, 8: 8}


def test_with_a_cheap_off_arm_the_schedule_switches_off_where_every_k_loses(tmp_path):
    df = _k_sweep(tmp_path, SWEEP, off=[0.99, 0.99, 0.99, 0.99])
    config, chosen, _ = derive_policy(df, max_batch=64)
    assert chosen.set_index("concurrency")["k"].to_dict() == {1: 4, 2: 4, 4: 1, 8: 0}
    assert chosen.attrs["deploy"] == "schedule" and config["num_speculative_tokens_per_batch_size"][-1] == [6, 64, 0]


@pytest.mark.parametrize("bad, needle", [
    ([], "non-empty"), ([[1, 2]], "three integers"), ([[0, 2, 1]], "1 <= lo <= hi"), ([[3, 2, 1]], "1 <= lo <= hi"),
    ([[1, 4, 5]], "0..num_speculative_tokens"), ([[1, 4, -1]], "0..num_speculative_tokens"),
    ([[1, 4, 2], [4, 8, 0]], "overlaps"), ([[2, 4, 2]], "start at batch size 1"), ([[1, 2.5, 1]], "three integers"),
])
def test_schedules_vllm_would_refuse_are_one_line(bad, needle):
    with pytest.raises(ScheduleError, match=needle):
        check_schedule(bad, 4)
    assert check_schedule([[1, 2, 4], [5, 8, 0]], 4) == [[1, 2, 4], [5, 8, 0]]  # a gap carries K on, as in vLLM


def test_a_policy_arm_takes_its_config_from_the_file_and_is_checked(tmp_path):
    from specnb.sweep.arm import Arm
    from specnb.sweep.spec import SweepError, SweepSpec

    good = tmp_path / "p.json"
    good.write_text(json.dumps({"speculative_config": {"method": "ngram", "num_speculative_tokens": 4,
                                                       "num_speculative_tokens_per_batch_size": [[1, 2, 4], [3, 256, 0]]}}))
    arm = Arm(name="policy", speculative_config={"policy_file": str(good)})
    assert arm.schedule == [[1, 2, 4], [3, 256, 0]] and arm.speculative
    for text, needle in [("{}", "no 'speculative_config'"), ("{", "not JSON")]:
        (tmp_path / "bad.json").write_text(text)
        with pytest.raises(SweepError, match=needle):
            SweepSpec.parse({"name": "s", "model": "m", "concurrency": [1],
                             "arms": [{"name": "p", "speculative_config": {"policy_file": str(tmp_path / "bad.json")}}]})
    with pytest.raises(SweepError, match="No such file"):
        SweepSpec.parse({"name": "s", "model": "m", "concurrency": [1],
                         "arms": [{"name": "p", "speculative_config": {"policy_file": "missing.json"}}]})


def test_dp_and_old_engines_are_refused_before_start(monkeypatch):
    import specnb.sweep.preflight as preflight
    from specnb.sweep.spec import SweepError, SweepSpec

    sched = {"method": "ngram", "num_speculative_tokens": 4, "num_speculative_tokens_per_batch_size": [[1, 2, 4], [3, 9, 0]]}
    spec = SweepSpec.parse({"name": "s", "model": "some/hub-id", "concurrency": [1], "workloads": ["copy"],
                            "arms": [{"name": "b"}, {"name": "p", "speculative_config": sched}]})
    monkeypatch.setattr(preflight, "installed_vllm", lambda: {"dist": "vllm", "version": "0.31.2", "cpu_build": False})
    with pytest.raises(SweepError, match=r"needs vLLM >= 0\.32\.0.*installed: vllm 0\.31\.2"):
        preflight.prepare(spec)
    monkeypatch.setattr(preflight, "installed_vllm", lambda: {"dist": "vllm", "version": "0.32.1", "cpu_build": False})
    dp = spec.model_copy(update={"server_args": ["--data-parallel-size", "2"]})
    with pytest.raises(SweepError, match="data-parallel-size 2"):
        preflight.prepare(dp)


def test_measured_acceptance_against_the_model(tmp_path):
    assert fit_alpha([0.8, 0.64, 0.512]) == pytest.approx(0.8, abs=0.002)
    assert fit_alpha([]) is None
    df = _k_sweep(tmp_path, SWEEP)
    df["per_position_acceptance"] = [[0.8, 0.64, 0.512, 0.41][: int(k)] if s else None for k, s in
                                     zip(df["num_speculative_tokens"].fillna(0), df["speculative"], strict=True)]
    choice = k_choice(paired_speedups(df, scope="panel"), df)
    model = k_model(choice, df)
    row = model[(model["k"] == 4) & (model["concurrency"] == 1)].iloc[0]
    assert row["alpha"] == pytest.approx(0.8, abs=0.01)
    assert row["mal_model"] == pytest.approx(acceptance_length(0.8, 4), rel=0.02)
    assert row["step_cost"] == pytest.approx(3.0 / 1.5, rel=0.02)  # tokens per step / speedup
    assert pd.notna(row["overhead"])


def test_the_schedule_is_read_under_either_of_vllms_names_and_sent_under_the_engines(tmp_path, monkeypatch):
    """vLLM is renaming num_speculative_tokens_per_batch_size to speculative_token_schedule (PR
    #48944, with an alias): a config may give either, specnb keeps one name, and a launched server
    gets the one the installed engine's SpeculativeConfig declares."""
    from specnb.analysis.schedule import SCHEDULE_KEY, SCHEDULE_KEY_NEW, canonical_schedule, with_schedule_key
    from specnb.engine import vllm
    from specnb.sweep.arm import Arm

    sched = [[1, 2, 4], [3, 256, 0]]
    new = {"method": "ngram", "num_speculative_tokens": 4, "prompt_lookup_max": 4, SCHEDULE_KEY_NEW: sched}
    arm = Arm(name="policy", speculative_config=new)
    assert arm.schedule == sched and SCHEDULE_KEY_NEW not in arm.speculative_config
    with pytest.raises(ScheduleError, match="give the schedule once"):
        canonical_schedule({**new, SCHEDULE_KEY: sched})
    with pytest.raises(ValueError, match="give the schedule once"):
        Arm(name="p", speculative_config={**new, SCHEDULE_KEY: sched})
    assert with_schedule_key(arm.speculative_config, SCHEDULE_KEY_NEW)[SCHEDULE_KEY_NEW] == sched
    assert with_schedule_key(arm.speculative_config, SCHEDULE_KEY) == arm.speculative_config
    # which name the installed engine takes, from its source
    root = tmp_path / "vllm"
    (root / "config").mkdir(parents=True)
    monkeypatch.setattr(vllm, "vllm_package_dirs", lambda: [root])
    (root / "config" / "speculative.py").write_text(
        "class SpeculativeConfig:\n    num_speculative_tokens_per_batch_size: list | None = None\n")
    assert vllm.engine_schedule_key() == SCHEDULE_KEY
    (root / "config" / "speculative.py").write_text(
        "class SpeculativeConfig:\n    speculative_token_schedule: list | None = None\n"
        "    # num_speculative_tokens_per_batch_size: deprecated alias\n")
    assert vllm.engine_schedule_key() == SCHEDULE_KEY_NEW
    monkeypatch.setattr(vllm, "vllm_package_dirs", lambda: [])
    assert vllm.engine_schedule_key() == SCHEDULE_KEY  # no vLLM here: the name 0.32 takes


def test_the_best_of_several_k_is_read_at_a_level_split_over_them(tmp_path):
    """Picking the best of three K and reading its own 95 % bound would claim "pays" for one of
    three tests: the rule reads the bound with the error split over the level's arms."""
    df = _k_sweep(tmp_path, SWEEP)
    choice = k_choice(paired_speedups(df, scope="panel"), df)
    k4 = choice[(choice["k"] == 4)].set_index("concurrency")
    assert k4["family_confidence"].tolist() == pytest.approx([1 - 0.05 / 3] * 4)
    assert (k4["family_lo"] < k4["speedup_lo"]).all() and (k4["family_hi"] > k4["speedup_hi"]).all()
    reason = choose_k(choice).set_index("concurrency").loc[1, "reason"]
    assert "98.33 %: the best of 3 arms at this level" in reason
