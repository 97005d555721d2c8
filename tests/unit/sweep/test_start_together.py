"""``start_together``: a repeat's servers launched side by side before its first point, then
measured one at a time, each stopped after its block (against the fake vLLM launched like the
real one). What must hold: no server starts while a point is measured, every server is stopped
after its own block (or at once when the run dies), a server that cannot start costs its own
points only, and the start records say which starts were shared."""

from __future__ import annotations

import json
import time

import pytest

import specnb.sweep.servers as servers
from specnb.ledger import load_ledgers, read_ledger
from specnb.sweep import SweepSpec, run_sweep
from specnb.sweep.measure import PointMeasurer
from tests.hang import guard
from tests.unit.fakevllm import group_members

QUIET = lambda s: None  # noqa: E731
NGRAM = {"method": "ngram", "num_speculative_tokens": 2, "prompt_lookup_max": 2}


def _spec(fake, arms=None, **kw) -> SweepSpec:
    base = dict(
        name="t", model=str(fake.model), served_model_name="fake", workloads=["freeform"], concurrency=[1, 2],
        repeats=2, panel_size=2, work_floor_tokens=None, warmup_requests=1, request_timeout_s=5,
        metrics_interval_s=0.05, ready_timeout_s=30, sampling={"max_tokens": 4}, start_together=True,
        env={"FAKE_VLLM_STATE": str(fake.state)},
        arms=arms or [{"name": "baseline"}, {"name": "ngram", "speculative_config": NGRAM}],
    )
    base.update(kw)
    return SweepSpec.parse(base)


@pytest.fixture
def events(fake_vllm, monkeypatch):
    """Every launch, ready, stop and point of the run, in order: (what, arm, repeat)."""
    log: list[tuple[str, str, int]] = []
    fixture_server = servers.VllmServer

    class Recorded(fixture_server):
        def __init__(self, *a, **kw):
            super().__init__(*a, **kw)
            # logs/<arm>-rNN.log names the block the server was made for
            stem = self.log_path.stem
            self.block = (stem.rsplit("-r", 1)[0], int(stem.rsplit("-r", 1)[1]))

        def launch(self):
            log.append(("launch", *self.block))
            super().launch()

        def wait_ready(self):
            ep = super().wait_ready()
            log.append(("ready", *self.block))
            return ep

        def stop(self):
            if self.proc is not None and not self.stopped:
                log.append(("stop", *self.block))
            super().stop()

    real_point = PointMeasurer.run_point

    def run_point(self, pt, *a, **kw):
        log.append(("point", pt.arm.name, pt.repeat))
        return real_point(self, pt, *a, **kw)

    monkeypatch.setattr(servers, "VllmServer", Recorded)
    monkeypatch.setattr(PointMeasurer, "run_point", run_point)
    fake_vllm.events = log
    return fake_vllm


def _nothing_left(fake) -> None:
    for srv in fake.started:
        assert srv.proc is not None and srv.proc.poll() is not None, srv.log_path
        assert not group_members(srv.proc.pid), srv.log_path


def test_a_repeats_servers_start_before_its_first_point_and_stop_after_their_block(events, tmp_path):
    out = tmp_path / "out"
    outcome = run_sweep(_spec(events), out, progress=False, echo=QUIET)
    assert outcome.ok and len(outcome.written) == 8, outcome.summary()
    ev = events.events
    for r, order in ((0, ["baseline", "ngram"]), (1, ["ngram", "baseline"])):  # ABBA
        mine = [e for e in ev if e[2] == r]
        # both launched before either is waited for, both ready before the repeat's first point
        assert [w for w, _, _ in mine[:2]] == ["launch", "launch"]
        first_point = next(i for i, e in enumerate(mine) if e[0] == "point")
        assert {e[1] for e in mine[:first_point] if e[0] == "launch"} == set(order)
        assert {e[1] for e in mine[:first_point] if e[0] == "ready"} == set(order)
        # then block by block: its points, then its server's stop; nothing launched meanwhile
        rest = mine[first_point:]
        assert [e for e in rest if e[0] in ("launch", "ready")] == []
        assert [(w, a) for w, a, _ in rest] == [("point", order[0]), ("point", order[0]), ("stop", order[0]),
                                               ("point", order[1]), ("point", order[1]), ("stop", order[1])]
    # repeat 1's servers were launched only after repeat 0's were stopped
    last_r0 = max(i for i, e in enumerate(ev) if e[2] == 0)
    assert min(i for i, e in enumerate(ev) if e[2] == 1) > last_r0
    _nothing_left(events)
    # each start recorded as its own, and as shared with one other
    (timing,) = outcome.timings
    starts = json.loads(timing.read_text())["server_starts"]
    assert sorted((s["arm"], s["repeat"]) for s in starts) == [("baseline", 0), ("baseline", 1), ("ngram", 0),
                                                               ("ngram", 1)]
    assert all(s["ok"] and s["started_together"] == 2 and s["mode"] == "launched" and s["ready_s"] > 0
               for s in starts)
    df = load_ledgers(out)
    assert (df["status"] == "ok").sum() == 8 and set(df["server_mode"]) == {"launched"}


def test_a_server_that_cannot_start_costs_only_its_own_points(events, tmp_path):
    arms = [{"name": "baseline"},
            {"name": "ngram", "speculative_config": NGRAM, "env": {"FAKE_VLLM_START_FAIL": "1"}}]
    outcome = run_sweep(_spec(events, arms=arms, repeats=1), tmp_path / "out", progress=False, echo=QUIET)
    assert not outcome.ok
    assert sorted(read_ledger(p).arm.name for p in outcome.written) == ["baseline", "baseline"]
    failed = [read_ledger(p) for p in outcome.failed]
    assert sorted(f.point_id for f in failed) == ["ngram/freeform/c001-r0", "ngram/freeform/c002-r0"]
    assert all(f.failure.error_type == "ServerStartError" and "exited with code 1" in f.failure.message
               for f in failed)
    assert all("told not to start" in f.failure.log_tail for f in failed)  # its own log says why
    _nothing_left(events)
    starts = json.loads(outcome.timings[0].read_text())["server_starts"]
    assert sorted((s["arm"], s["ok"], s["started_together"]) for s in starts) == [("baseline", True, 2),
                                                                                  ("ngram", False, 2)]
    assert [e[:2] for e in events.events if e[0] == "launch"] == [("launch", "baseline"), ("launch", "ngram")]


def test_ctrl_c_in_the_first_block_stops_every_server_of_the_repeat(events, tmp_path, monkeypatch):
    real = PointMeasurer.run_point

    def interrupted(self, pt, *a, **kw):
        real(self, pt, *a, **kw)
        raise KeyboardInterrupt

    monkeypatch.setattr(PointMeasurer, "run_point", interrupted)
    t0 = time.monotonic()
    with pytest.raises(KeyboardInterrupt):
        run_sweep(_spec(events), tmp_path / "out", progress=False, echo=QUIET)
    assert len(events.started) == 2  # both of repeat 0's, the second never measured
    _nothing_left(events)
    assert time.monotonic() - t0 < guard("fake_sweep")
    # the point measured before the interrupt is kept; the timing record says how it ended
    (timing,) = (tmp_path / "out" / "timings").iterdir()
    assert json.loads(timing.read_text())["ended"] == "interrupted"
    assert len([p for p in (tmp_path / "out").rglob("c00*-r00.json")]) == 1


def test_an_attached_arm_is_not_started_and_a_lone_launched_arm_starts_as_before(events, tmp_path):
    """Only launched arms start together; one launched arm in a repeat has nobody to start with."""
    theirs = servers.VllmServer.__mro__[1]  # the fake, without the event log
    srv = theirs(str(events.model), served_model_name="fake", log_path=tmp_path / "theirs.log",
                 env={"FAKE_VLLM_STATE": str(events.state)}, ready_timeout_s=30)
    with srv as ep:
        arms = [{"name": "baseline", "endpoint": ep.base_url},
                {"name": "ngram", "speculative_config": NGRAM}]
        outcome = run_sweep(_spec(events, arms=arms, repeats=1), tmp_path / "out", progress=False, echo=QUIET)
        assert srv.alive()  # an attached server is never stopped by the sweep
    assert outcome.ok and len(outcome.written) == 4, outcome.summary()
    starts = json.loads(outcome.timings[0].read_text())["server_starts"]
    assert [(s["arm"], s["mode"], s.get("started_together")) for s in starts] == [
        ("baseline", "attached", None), ("ngram", "launched", None)]
    ngram = [e[0] for e in events.events if e[1] == "ngram"]
    assert ngram == ["launch", "ready", "point", "point", "stop"]


def test_a_server_that_dies_while_it_waits_for_its_block_is_started_again(events, tmp_path, monkeypatch):
    """The second arm's server, started with the first, dies while the first measures: its block
    restarts it (recorded as a restart) and measures every point."""
    own = tmp_path / "ngram-state"
    own.mkdir()
    arms = [{"name": "baseline"},
            {"name": "ngram", "speculative_config": NGRAM, "env": {"FAKE_VLLM_STATE": str(own)}}]
    real = PointMeasurer.run_point

    def first_point_kills_the_other(self, pt, *a, **kw):
        if pt.arm.name == "baseline" and not (own / "told").exists():
            (own / "told").write_text("")
            (own / "exit-now").write_text("")
            for _ in range(100):  # until the idle server is gone
                if not (own / "exit-now").exists():
                    break
                time.sleep(0.05)
        return real(self, pt, *a, **kw)

    monkeypatch.setattr(PointMeasurer, "run_point", first_point_kills_the_other)
    outcome = run_sweep(_spec(events, arms=arms, repeats=1), tmp_path / "out", progress=False, echo=QUIET)
    assert outcome.ok and len(outcome.written) == 4 and outcome.restarts == 1, outcome.summary()
    starts = json.loads(outcome.timings[0].read_text())["server_starts"]
    assert [(s["arm"], s["ok"], s["restart"]) for s in starts if s["arm"] == "ngram"] == [
        ("ngram", True, False), ("ngram", True, True)]
    _nothing_left(events)


def test_fakes_started_at_once_count_their_starts_without_losing_one(tmp_path):
    """The fake's start counter, which servers launched side by side update at the same moment:
    unlocked, a read between another start's truncation and its write found an empty file and
    the fake died at start (this module's first test failed so, now and then, in CI). Two
    processes count 200 starts each, at once: every number from 1 to 400 comes out once."""
    import subprocess
    import sys

    from specnb import paths

    code = ("import sys\nfrom pathlib import Path\nfrom tests.unit.fakevllm import count_start\n"
            "print(' '.join(str(count_start(Path(sys.argv[1]))) for _ in range(200)))")
    procs = [subprocess.Popen([sys.executable, "-c", code, str(tmp_path)], cwd=paths.ROOT, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True) for _ in range(2)]
    got = []
    for p in procs:
        out, err = p.communicate(timeout=guard("fake_sweep"))
        assert p.returncode == 0, err[-2000:]
        got += [int(x) for x in out.split()]
    assert sorted(got) == list(range(1, 401))  # none lost, none failed
