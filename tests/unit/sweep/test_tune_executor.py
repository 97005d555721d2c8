"""``specnb tune`` runs its sweeps through the executor (:func:`specnb.sweep.executor.run_sweep`),
so ``--executor ray`` reaches them; its stop and deploy values keep the strings records hold."""

from __future__ import annotations

import json

from specnb import cli
from specnb.analysis.schedule import Deploy
from specnb.sweep.runner import SweepOutcome
from specnb.sweep.tune import Stop, TuneSpec, run_tune

BASE = dict(name="t", model="/m", workloads=["copy"], concurrency=[1, 2], repeats=1,
            arms=[{"name": "baseline"}, {"name": "k4", "speculative_config": {"method": "ngram",
                  "num_speculative_tokens": 4, "prompt_lookup_max": 4}}])


def test_the_proposal_runs_on_the_executor_it_is_given(tmp_path, monkeypatch):
    import specnb.sweep.executor as sweep_executor

    seen = []

    def fake_sweep(spec, out, progress=True, echo=None, executor=None):
        seen.append((out.name, executor))
        return SweepOutcome(out_dir=out, failed_points=["k4/copy/c001-r0 (ServerError: no)"])

    monkeypatch.setattr(sweep_executor, "run_sweep", fake_sweep)
    got = run_tune(TuneSpec.parse(dict(BASE)), tmp_path / "t", progress=False, echo=lambda s: None, executor="ray")
    assert seen == [("proposal", "ray")]
    assert got.failed_points == ["proposal: k4/copy/c001-r0 (ServerError: no)"] and not got.result


def test_tune_takes_the_executor_options_and_refuses_a_ray_option_without_ray(tmp_path, capsys):
    cfg = tmp_path / "t.toml"
    cfg.write_text('name = "t"\nmodel = "m"\nworkloads = ["copy"]\nconcurrency = [1]\n[[arms]]\nname = "baseline"\n'
                   '[[arms]]\nname = "k4"\nspeculative_config = {method = "ngram", num_speculative_tokens = 4, '
                   'prompt_lookup_max = 4}\n')
    rc = cli.main(["tune", str(cfg), "--out", str(tmp_path / "out"), "--max-blocks", "2"])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(err) == 1 and "add --executor ray" in err[0], err
    assert not (tmp_path / "out").exists()


def test_stop_and_deploy_are_the_strings_records_hold():
    assert json.dumps({"stop": Stop.MAX_ROUNDS, "deploy": Deploy.SCHEDULE}) == '{"stop": "max_rounds", "deploy": "schedule"}'
    assert [s.value for s in Stop] == ["verified", "max_rounds", "budget", "unjudged", "static", "repeated"]
    assert f"{Deploy.STATIC}" == "static"
