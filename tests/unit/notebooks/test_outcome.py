"""A measuring notebook that ends with failed points makes the runner (``make measure-<axis>``)
exit 1 and name them: the study reports them to a file the runner names for its kernel."""

from __future__ import annotations

from pathlib import Path

from specnb.ledger.runs import OUTCOME_FILE_ENV, read_failed_points
from specnb.notebooks import runner
from tests.unit.sweep.test_study import make

PROBE = '''# %% tags=["parameters"]
points = []  # what the notebook reports as failed

# %%
from specnb.ledger.runs import report_failed_points

report_failed_points(points)
'''


def test_failed_points_reach_the_runner_through_the_kernel(tmp_path, capsys):
    nb = tmp_path / "99_probe.py"
    nb.write_text(PROBE)
    rc = runner.main([str(nb), str(tmp_path / "a.ipynb"), "-p", "points", '["default: b/copy/c1-r0 (ServerError: x)"]'])
    err = capsys.readouterr().err
    assert rc == 1, err
    assert "99_probe.py: 1 point(s) failed: default: b/copy/c1-r0 (ServerError: x)" in err
    assert runner.main([str(nb), str(tmp_path / "b.ipynb")]) == 0


def test_a_study_reports_what_its_sweeps_could_not_measure(tmp_path, monkeypatch):
    import specnb.sweep.runner as sweep_runner
    from specnb.sweep.executor import SweepJob

    calls = []

    class FakeRun:
        def __init__(self, job, repeats):
            self.out, self.repeats = job.out, repeats or job.spec.repeats

        def run(self):
            calls.append(self.repeats)
            # repeat 0 left a point; repeat 1 (which retries it) measured it but lost another
            missing = ["b/copy/c1-r0 (ServerError)"] if self.repeats == 1 else ["b/copy/c4-r1 (ErrorShare)"]
            return sweep_runner.SweepOutcome(out_dir=Path(self.out), failed_points=missing)

    monkeypatch.setattr(SweepJob, "check", lambda self: None)
    monkeypatch.setattr(SweepJob, "start", lambda self, checked, echo, again=False: None)
    monkeypatch.setattr(SweepJob, "runs", lambda self, started, *, progress, echo, repeats=None: FakeRun(self, repeats))
    target = tmp_path / "outcome.jsonl"
    monkeypatch.setenv(OUTCOME_FILE_ENV, str(target))
    study = make(repeats=2, conditions={"a": {}, "b": {}})
    _, outcomes = study.run(tmp_path / "ledgers", "r1", progress=False)
    assert calls == [1, 1, 2, 2]  # repeat-major over two conditions
    assert outcomes[0].failed_points == ["b/copy/c4-r1 (ErrorShare)"] and not outcomes[0].ok
    assert read_failed_points(target) == ["a: b/copy/c4-r1 (ErrorShare)", "b: b/copy/c4-r1 (ErrorShare)"]
    # one condition: one sweep over every repeat, reported alike
    target.unlink()
    calls.clear()
    make(repeats=1).run(tmp_path / "ledgers", "r2", progress=False)
    assert calls == [1] and read_failed_points(target) == ["default: b/copy/c1-r0 (ServerError)"]
