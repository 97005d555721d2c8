"""The tune loop on hand-made frames with known answers: a round's verdict, thrash, the
re-derivation (K = 0 bands raised, unreachable levels named), boundaries in batch units, the
claim, the settings refused in one line, and the whole loop with the sweeps faked (resumed too)."""

from __future__ import annotations

import json

import pandas as pd
import pytest

from specnb.analysis.schedule import derive_schedule
from specnb.analysis.tables import summarize
from specnb.analysis.tune import claim_text, rederive, round_check, schedule_levels, thrash_levels
from specnb.ledger import ArmRecord, load_ledgers, write_ledger
from tests.unit.factories import ledger

NGRAM = {"method": "ngram", "num_speculative_tokens": 4, "prompt_lookup_max": 4}
SCHED = {**NGRAM, "num_speculative_tokens_per_batch_size": [[1, 2, 4], [3, 256, 0]]}


def _led(arm, cfg, c, r, tok_s, running=None):
    led = ledger(arm, c=c, r=r, tok_s=tok_s, mal=3.0 if cfg else None)
    upd = {"arm": ArmRecord(name=arm, speculative_config=cfg)}
    if running is not None:
        upd["server_samples"] = {"num_requests_running_mean": running}
    return led.model_copy(update=upd)


def _round(folder, levels, arms: dict[str, tuple[dict | None, list[float]]], factors=(0.98, 1.0, 1.02, 1.0)):
    """Baseline at 100 c^0.8 tok/s per level; every other arm at that x its speedup x the start's factor."""
    i = 0
    for r, f in enumerate(factors):
        for j, c in enumerate(levels):
            base = 100.0 * c ** 0.8
            write_ledger(folder / f"{i:03d}.json", _led("baseline", None, c, r, base, running=0.95 * c))
            i += 1
            for name, (cfg, sp) in arms.items():
                write_ledger(folder / f"{i:03d}.json", _led(name, cfg, c, r, base * sp[j] * f, running=0.95 * c))
                i += 1
    return load_ledgers(folder)


def _check(df, static="static"):
    return round_check(summarize(df), df, static=static)


def test_a_k0_band_that_costs_more_than_the_baseline_is_raised_to_the_static_k(tmp_path):
    # the committed CPU verification: the schedule turns drafting off at c>=3 and runs 0.8x there,
    # while static K=4 holds 1.25x: the next round's K is 4 everywhere, i.e. the static config
    levels = [1, 2, 3, 4, 8]
    df = _round(tmp_path, levels, {"static": (NGRAM, [1.4, 1.4, 1.3, 1.3, 1.25]),
                                   "tuned": (SCHED, [1.45, 1.42, 0.80, 0.80, 0.82])})
    check = _check(df).set_index("concurrency")
    assert check["k_scheduled"].to_dict() == {1: 4, 2: 4, 3: 0, 4: 0, 8: 0}
    assert not check.loc[[1, 2], "short"].any() and check.loc[[3, 4, 8], "short"].all()
    red = rederive(check["k_scheduled"].to_dict(), check.reset_index(), static_k=4)
    assert red.k == {1: 4, 2: 4, 3: 4, 4: 4, 8: 4} and red.changed and not red.unreachable
    assert any(a.startswith("c=3:") and "K=0 -> K=4" in a for a in red.actions)
    claim = claim_text(check.reset_index(), SCHED, 4, static_is_candidate=False)
    assert "at c=1, 2, and not at c=3" in claim and "static K=4" in claim


def test_where_no_drafter_config_beats_the_baseline_the_level_is_named_unreachable(tmp_path):
    # at c=8 static K=4 runs 0.85x and the schedule's K = 0 runs 0.80x: neither reaches the
    # baseline; the faster one (static K) is kept and the level named
    levels = [1, 2, 4, 8]
    df = _round(tmp_path, levels, {"static": (NGRAM, [1.4, 1.3, 1.2, 0.85]),
                                   "tuned": (SCHED, [1.4, 1.3, 0.8, 0.80])})
    check = _check(df)
    red = rederive(dict(zip(check.concurrency, check.k_scheduled, strict=True)), check, static_k=4)
    assert red.unreachable == [8] and red.k[8] == 4 and red.k[4] == 4
    assert any("endpoint without a drafter" in a or "no drafter config beats the baseline" in a for a in red.actions)
    claim = claim_text(check, SCHED, 4, static_is_candidate=False)
    assert "c=8" in claim.split("not at", 1)[1] and "the baseline" in claim.split("not at", 1)[1]


def test_a_verified_candidate_claims_every_level(tmp_path):
    df = _round(tmp_path, [1, 2, 4], {"static": (NGRAM, [1.3, 1.2, 1.1]), "tuned": (SCHED, [1.32, 1.22, 1.12])})
    check = _check(df)
    assert not check["short"].any()
    assert claim_text(check, SCHED, 4, static_is_candidate=False).startswith(
        "at every measured level (c=1, 2, 4) the schedule [[1, 2, 4], [3, 256, 0]] is shown within 2% of static K=4 "
        "or better, and faster than the baseline")


def test_a_dip_below_both_neighbours_is_thrash():
    check = pd.DataFrame({"concurrency": [1, 2, 3, 4, 8], "policy_tok_s": [20.0, 40.0, 30.0, 60.0, 90.0]})
    noisy = check.assign(policy=1.0, policy_lo=0.7, policy_hi=1.4)  # 30 x 1.4 = 42 > 40 x 0.7: inside the noise
    assert thrash_levels(noisy) == []
    assert thrash_levels(check) == [3]
    assert thrash_levels(check.assign(policy_tok_s=[20.0, 40.0, 50.0, 60.0, 90.0])) == []


def test_a_thrashing_level_inside_the_envelope_is_still_short(tmp_path):
    # c=3 sits at the switch: static K runs 0.5x there and the schedule's K = 0 1.03x, shown above
    # the baseline (the envelope there); but its throughput dips below both neighbours' beyond the
    # noise: short, and the re-derivation says so without inventing a change
    levels = [1, 2, 3, 4]
    df = _round(tmp_path, levels, {"static": (NGRAM, [1.1, 1.1, 0.5, 1.1]), "tuned": (SCHED, [1.5, 1.5, 1.03, 1.5])},
                factors=(0.995, 1.0, 1.005, 1.0))
    check = _check(df)
    row = check.set_index("concurrency").loc[3]
    assert bool(row["thrash"]) and bool(row["meets_envelope"]) and bool(row["short"])
    red = rederive(dict(zip(check.concurrency, check.k_scheduled, strict=True)), check, static_k=4)
    assert red.k[3] == 0 and not red.unreachable and any("still reaches the baseline" in a for a in red.actions)


def test_a_level_at_the_baseline_is_not_shown_to_beat_it(tmp_path):
    # the same level at exactly 1.0x: "not shown worse" is not "verified": short, the test named
    df = _round(tmp_path, [1, 2, 3, 4], {"static": (NGRAM, [1.1, 1.1, 0.5, 1.1]), "tuned": (SCHED, [1.5, 1.5, 1.0, 1.5])})
    row = _check(df).set_index("concurrency").loc[3]
    assert not row["meets_envelope"] and row["noninferior"] and not row["beats_baseline"]
    assert "not shown above the baseline" in row["failed"]


def test_a_candidate_a_little_slower_than_static_is_not_verified(tmp_path):
    # 5 % slower than static K at c=2, with little noise: outside the 2 % margin, and the check says so
    df = _round(tmp_path, [1, 2], {"static": (NGRAM, [1.3, 1.3]), "tuned": (SCHED, [1.3, 1.235])})
    check = _check(df).set_index("concurrency")
    assert check.loc[1, "meets_envelope"] and not check.loc[2, "meets_envelope"]
    assert check.loc[2, "vs_static"] == pytest.approx(0.95) and "not shown within 2% of static" in check.loc[2, "failed"]
    loose = round_check(summarize(df), df, static="static", margin=0.06).set_index("concurrency")
    assert loose.loc[2, "meets_envelope"]  # a 6 % margin takes it


def test_boundaries_are_placed_in_batch_units():
    # a closed loop at c=8 ran a batch of 6 on average: the switch between c=4 (batch 3.6) and
    # c=8 sits at sqrt(3.6 x 6) = 4.6 -> 4, not at sqrt(4 x 8) = 5.7 -> 5
    chosen = pd.DataFrame({"concurrency": [1, 4, 8], "k": [4, 4, 0], "batch": [1.0, 3.6, 6.0]})
    assert derive_schedule(chosen, 64) == [[1, 4, 4], [5, 64, 0]]
    assert derive_schedule(chosen.drop(columns="batch"), 64) == [[1, 5, 4], [6, 64, 0]]
    # a boundary never swallows the next level's batch, and never makes an empty range
    tight = pd.DataFrame({"concurrency": [1, 2], "k": [4, 0], "batch": [1.0, 1.4]})
    assert derive_schedule(tight, 8) == [[1, 1, 4], [2, 8, 0]]
    # a level keeps its own band even when the next level ran no larger a batch (capped, or noise)
    same = pd.DataFrame({"concurrency": [4, 8], "k": [4, 0], "batch": [7.5, 6.0]})
    assert derive_schedule(same, 64) == [[1, 7, 4], [8, 64, 0]]
    assert schedule_levels({1: 4, 2: 4, 4: 2}, {1: 1.0, 2: 1.9, 4: 3.8}, 16) == [[1, 2, 4], [3, 16, 2]]


# --------------------------------------------------------------------------- settings
from specnb.sweep.tune import TuneError, TuneSpec  # noqa: E402

BASE = dict(name="t", model="/m", workloads=["copy"], concurrency=[1, 2], repeats=1,
            arms=[{"name": "baseline"}, {"name": "k2", "speculative_config": {**NGRAM, "num_speculative_tokens": 2}},
                  {"name": "k4", "speculative_config": NGRAM}])


def test_the_proposal_gets_an_off_arm_of_the_largest_k():
    spec = TuneSpec.parse(dict(BASE))
    off = [a for a in spec.proposal.arms if a.name == "ngram-off"]
    assert len(off) == 1 and off[0].speculative_config["num_speculative_tokens"] == 4
    assert off[0].speculative_config["num_speculative_tokens_per_batch_size"] == [[1, 256, 0]]
    assert [a.name for a in TuneSpec.parse(dict(BASE), {"tune.off_arm": False}).proposal.arms] == ["baseline", "k2", "k4"]
    seqs = TuneSpec.parse({**BASE, "server_args": ["--max-num-seqs", "32"]})
    assert seqs.proposal.arms[-1].speculative_config["num_speculative_tokens_per_batch_size"] == [[1, 32, 0]]


@pytest.mark.parametrize("change, needle", [
    ({"server_args": ["--data-parallel-size", "2"]}, "data-parallel-size 2"),
    ({"arms": [{"name": "baseline", "server_args": ["-dp", "2"]}, {"name": "k4", "speculative_config": NGRAM}]},
     "data-parallel-size 2"),
    ({"tune": {"max_round": 2}}, "max_round"),
    ({"tune": {"method": "eagle3"}}, "no drafter arm's method"),
    ({"arms": [{"name": "k4", "speculative_config": NGRAM}]}, "without a drafter"),
    ({"arms": [{"name": "baseline"}, {"name": "k4", "speculative_config": NGRAM},
               {"name": "e3", "speculative_config": {"method": "eagle3", "model": "/e", "num_speculative_tokens": 3}}]},
     "2 methods"),
    ({"load": "rate", "concurrency": [], "rates": [1.0]}, "closed-loop"),
    ({"tune": {"proposal": "/nonexistent/run"}}, "not a folder"),
])
def test_bad_tune_settings_are_one_line(change, needle):
    with pytest.raises(TuneError, match=needle) as exc:
        TuneSpec.parse({**BASE, **change})
    assert "\n" not in str(exc.value)


# --------------------------------------------------------------------------- the loop, sweeps faked
LEVELS = [1, 2, 4, 8]


def _fake_sweeps(monkeypatch, truth, round_off=0.8, dip=None):
    """run_sweep replaced by hand-made ledgers: each arm at 100 c^0.8 tok/s x truth[K] at the
    nearest proposal level; K = 0 inside a schedule at truth["off"] in the proposal and at
    ``round_off`` in the rounds (the engine's real cost); ``dip``: (round folder, level, speedup)."""
    import specnb.sweep.executor as sweep_executor
    from specnb.sweep.runner import SweepOutcome

    calls = []

    def fake_sweep(spec, out, progress=True, echo=None, executor=None):
        calls.append((out.name, [a.name for a in spec.arms], spec.levels()))
        out.mkdir(parents=True, exist_ok=True)
        for r in range(spec.repeats):
            f = (0.98, 1.0, 1.02, 1.0)[r % 4]
            for c in spec.levels():
                base = 100.0 * c ** 0.8
                j = min(range(len(LEVELS)), key=lambda x: abs(LEVELS[x] - c))
                for a in spec.arms:
                    cfg = a.speculative_config
                    if cfg is None:
                        sp = 1.0
                    elif a.schedule:
                        k = next(kk for lo, hi, kk in cfg["num_speculative_tokens_per_batch_size"] if lo <= c <= hi)
                        sp = (truth["off"][j] if out.name == "proposal" else round_off) if k == 0 else truth[k][j]
                        if dip and out.name == dip[0] and c == dip[1]:
                            sp = dip[2]
                    else:
                        sp = truth[cfg["num_speculative_tokens"]][j]
                    path = out / a.name / f"c{c}-r{r}.json"
                    if not path.exists():  # as the runner: a finished point is not measured again
                        write_ledger(path, _led(a.name, cfg, c, r, base * sp * (f if cfg else 1.0), running=0.95 * c))
        return SweepOutcome(out_dir=out)

    monkeypatch.setattr(sweep_executor, "run_sweep", fake_sweep)
    return calls


def test_the_loop_moves_a_thrashing_boundary_verifies_the_next_schedule_and_resumes(tmp_path, monkeypatch):
    """The proposal yields K=4 up to c~5 and K=2 above (K=2 beats static K=4 at c=8); in round 1
    the level just past the switch (c=6) thrashes; round 2 measures the boundary moved past it
    and verifies; a rerun measures nothing and reads the answer back."""
    from specnb.analysis.tune import tune_lines
    from specnb.ledger.runs import read_tune
    from specnb.sweep.tune import TuneSpec, run_tune

    calls = _fake_sweeps(monkeypatch, {4: [1.5, 1.4, 1.2, 0.85], 2: [1.2, 1.15, 1.1, 1.05], "off": [0.99] * 4},
                         dip=("round-01", 6, 0.7))
    spec = TuneSpec.parse({**BASE, "concurrency": LEVELS, "repeats": 4, "tune": {"max_rounds": 4}})
    out = tmp_path / "tune-run"
    outcome = run_tune(spec, out, progress=False, echo=lambda s: None)
    assert [c[0] for c in calls] == ["proposal", "round-01", "round-02"]
    assert "ngram-off" in calls[0][1] and calls[1][1] == ["baseline", "static", "tuned"]
    r1 = json.loads((out / "tune" / "round-01.json").read_text())
    assert r1["kind"] == "tune_round" and not r1["verified"] and r1["thrash"] == [6]
    assert r1["speculative_config"]["num_speculative_tokens_per_batch_size"] == [[1, 5, 4], [6, 256, 2]]
    assert calls[1][2] == [1, 2, 4, 5, 6, 8]  # both sides of the switch measured
    assert any(a.startswith("c=6:") and "K=2 -> K=4" in a for a in r1["actions"])
    r2 = json.loads((out / "tune" / "round-02.json").read_text())
    assert r2["verified"] and r2["speculative_config"]["num_speculative_tokens_per_batch_size"] == [[1, 6, 4], [7, 256, 2]]
    res = outcome.result
    assert res["deploy"] == "schedule" and res["verified"] and res["verified_in"] == "round-02"
    assert res["claim"].startswith("at every measured level")
    text = "\n".join(tune_lines(read_tune(out)))
    assert "round 1:" in text and "thrash at c=6" in text and "deploy (schedule, verified against the envelope in round-02)" in text
    calls.clear()
    again = run_tune(spec, out, progress=False, echo=lambda s: None)
    assert calls == [] and again.result["speculative_config"] == res["speculative_config"]


def test_the_loop_lands_on_the_static_k_when_off_costs_more_than_the_baseline_and_names_what_it_cannot_reach(
        tmp_path, monkeypatch):
    """The CPU case: in the proposal the off arm looks free at c=8, where K=4 loses (0.85x), so the
    first schedule turns drafting off there; in the round K = 0 inside the schedule costs 20 %:
    below static K=4 as well as the baseline. The next config is static K=4, measured in that
    very round: the tune stops and deploys it, naming c=8 as traffic for an endpoint without a drafter."""
    from specnb.sweep.tune import TuneSpec, run_tune

    calls = _fake_sweeps(monkeypatch, {4: [1.5, 1.4, 1.2, 0.85], 2: [1.2, 1.1, 1.0, 0.8], "off": [0.99] * 4})
    spec = TuneSpec.parse({**BASE, "concurrency": LEVELS, "repeats": 4})
    out = tmp_path / "tune-run"
    res = run_tune(spec, out, progress=False, echo=lambda s: None).result
    assert [c[0] for c in calls] == ["proposal", "round-01"]
    r1 = json.loads((out / "tune" / "round-01.json").read_text())
    assert r1["speculative_config"]["num_speculative_tokens_per_batch_size"][-1][2] == 0
    assert 8 in r1["unreachable"] and r1["stop"] == "static" and r1["next_config"] is None
    assert res["deploy"] == "static" and res["speculative_config"] == NGRAM and not res["verified"]
    assert "c=8" in res["claim"].split("not at", 1)[1] and "the baseline" in res["claim"]


def test_a_static_answer_from_the_proposal_is_verified_against_the_baseline_alone(tmp_path, monkeypatch):
    from specnb.sweep.tune import TuneSpec, run_tune

    calls = _fake_sweeps(monkeypatch, {4: [1.5, 1.4, 1.3, 1.2], 2: [1.2, 1.1, 1.0, 0.9], "off": [0.8] * 4})
    spec = TuneSpec.parse({**BASE, "concurrency": LEVELS, "repeats": 4})
    res = run_tune(spec, tmp_path / "t", progress=False, echo=lambda s: None).result
    assert calls[1][1] == ["baseline", "tuned"] and res["verified"] and res["deploy"] == "static"
    assert res["claim"].startswith("at every measured level (c=1, 2, 4, 8) static K=4")


# --------------------------------------------------------------------------- the committed tune files
from specnb import paths  # noqa: E402

TUNE_FILES = sorted((paths.ROOT / "configs").glob("*tune*.toml"))


@pytest.mark.parametrize("path", TUNE_FILES, ids=lambda p: p.stem)
def test_every_tune_file_parses_with_its_off_arm(path):
    spec = TuneSpec.from_toml(path)
    offs = [a for a in spec.proposal.arms if a.schedule]
    assert len(offs) == 1 and all(r[2] == 0 for r in offs[0].speculative_config["num_speculative_tokens_per_batch_size"])
    assert {a.speculative_config.get("method") for a in spec.proposal.arms if a.speculative_config} == {spec.settings.method}
    assert spec.settings.workload in [str(w) for w in spec.proposal.workloads]


def test_the_gpu_tune_files_cover_ngram_and_eagle3_within_the_engine_floor():
    import re
    import tomllib

    from specnb.engine.releases import parse_version, required_release

    gpu = [TuneSpec.from_toml(p) for p in TUNE_FILES if p.stem.startswith("gpu-")]
    assert {s.settings.method for s in gpu} == {"ngram", "eagle3"}
    extras = tomllib.loads((paths.ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    floor = next(re.search(r"vllm>=([\d.]+)", d).group(1) for d in extras["gpu"] if d.startswith("vllm"))
    need, _ = required_release(a.speculative_config for s in gpu for a in s.proposal.arms if a.speculative_config)
    assert need <= parse_version(floor)
    for s in gpu:
        for a in s.proposal.arms:
            if (a.speculative_config or {}).get("method") == "ngram":
                assert a.speculative_config["prompt_lookup_min"] < a.speculative_config["prompt_lookup_max"]


def test_a_round_with_failed_points_is_not_judged_and_a_rerun_measures_it(tmp_path, monkeypatch):
    import specnb.sweep.executor as sweep_executor
    from specnb.sweep.tune import TuneSpec, run_tune

    calls = _fake_sweeps(monkeypatch, {4: [1.5, 1.4, 1.3, 1.2], 2: [1.2, 1.1, 1.0, 0.9], "off": [0.8] * 4})
    good = sweep_executor.run_sweep

    def flaky(spec, out, progress=True, echo=None, executor=None):
        o = good(spec, out, progress, echo)
        if out.name == "round-01" and len(calls) == 2:
            o.failed_points = ["tuned/copy/c008-r00 (EngineDied)"]
        return o

    monkeypatch.setattr(sweep_executor, "run_sweep", flaky)
    spec = TuneSpec.parse({**BASE, "concurrency": LEVELS, "repeats": 4})
    out = tmp_path / "t"
    first = run_tune(spec, out, progress=False, echo=lambda s: None)
    assert first.failed_points and not first.result and "unfinished" in first.summary()
    assert not (out / "tune" / "round-01.json").exists() and (out / "tune" / "candidate-01.json").exists()
    again = run_tune(spec, out, progress=False, echo=lambda s: None)
    assert not again.failed_points and again.result["verified"]
    assert [c[0] for c in calls] == ["proposal", "round-01", "proposal", "round-01"]  # resumed, same candidate


def test_a_round_without_a_usable_arm_is_unjudged_not_a_crash(tmp_path):
    from specnb.sweep.tune import judge_tuned

    df = _round(tmp_path, [1, 2], {"static": (NGRAM, [1.2, 1.1])})  # no tuned arm
    check, why = judge_tuned(df)
    assert check is None and "tuned" in why


def test_the_ledgers_root_is_not_a_tune_run(tmp_path):
    from specnb.ledger.runs import is_tune_run

    (tmp_path / "tune" / "cpu" / "run1" / "tune").mkdir(parents=True)
    (tmp_path / "tune" / "cpu" / "run1" / "tune" / "candidate-01.json").write_text("{}")
    assert not is_tune_run(tmp_path) and is_tune_run(tmp_path / "tune" / "cpu" / "run1")


def test_a_set_that_an_existing_proposal_run_fixes_is_refused_in_one_line(tmp_path):
    """With tune.proposal naming a run, the sweep settings are that run's: `--set concurrency=...`
    was dropped without a word; it is refused, and what the tune may still set is applied."""
    import json

    from specnb.sweep.spec import SweepSpec

    run = tmp_path / "proposal"
    run.mkdir()
    spec = SweepSpec.parse({k: v for k, v in BASE.items() if k != "tune"})
    (run / "sweep.json").write_text(json.dumps({"spec": spec.model_dump(mode="json")}))
    base = {**BASE, "tune": {**BASE.get("tune", {}), "proposal": str(run)}}
    with pytest.raises(TuneError, match=r"^--set concurrency: tune.proposal .* fixes every sweep setting") as exc:
        TuneSpec.parse(dict(base), {"concurrency": [1, 2]})
    assert "\n" not in str(exc.value)
    ok = TuneSpec.parse(dict(base), {"repeats": 5, "name": "again", "tune.max_rounds": 1})
    assert ok.proposal.repeats == 5 and ok.proposal.name == "again" and ok.settings.max_rounds == 1
    assert ok.proposal.load == spec.load


def test_a_tune_run_recorded_under_the_earlier_rule_is_read_again_with_the_current_one():
    """The committed AVX-512 tune run's record says its round verified (the candidate's interval
    reached the baseline); read with non-inferiority on the one interval, two starts show no level
    above the baseline: the report prints both, and names the test that failed."""
    from specnb.analysis.report import format_run_report
    from specnb.ledger.records import load_run

    text = format_run_report(load_run(paths.ROOT / "ledgers" / "tune" / "cpu" / "20261201T122357Z"))
    assert "(verified)" in text  # the record, kept as it was written
    line = next(ln for ln in text.splitlines() if "read with the current rule" in ln)
    assert ": short:" in line and "not shown above the baseline" in line
