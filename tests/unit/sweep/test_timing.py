"""Where a sweep's time goes: the phase clock, the write-once timing record beside the ledgers
(against a fake vLLM launched like the real one), and a server start-up read from vLLM's log."""

from __future__ import annotations

import json
import time

import pytest

from specnb import cli
from specnb.analysis.tables import run_summary
from specnb.engine.startup import MILESTONES, startup_breakdown
from specnb.ledger import ledger_files, load_ledgers
from specnb.ledger.timing import PHASES, overhead_line, read_timings, startup_line
from specnb.sweep import SweepSpec, run_sweep
from specnb.sweep.clock import PhaseClock

QUIET = lambda s: None  # noqa: E731


@pytest.fixture
def fake(fake_vllm):
    return fake_vllm


def _spec(fake, **kw) -> SweepSpec:
    base = dict(
        name="t", model=str(fake.model), served_model_name="fake", workloads=["freeform"], concurrency=[1, 2],
        repeats=2, panel_size=4, work_floor_tokens=16, warmup_requests=2, request_timeout_s=5,
        metrics_interval_s=0.05, ready_timeout_s=30, sampling={"max_tokens": 8},
        env={"FAKE_VLLM_STATE": str(fake.state)}, arms=[{"name": "baseline"}],
    )
    base.update(kw)
    return SweepSpec.parse(base)


def test_clock_gives_every_second_to_one_phase():
    now = [0.0]
    clock = PhaseClock(now=lambda: now[0])
    with clock.phase("server_start"):
        now[0] += 3
    with clock.phase("measuring"):
        now[0] += 5
        with clock.phase("host_wait"):  # nested: paused the point, not counted twice
            now[0] += 2
        now[0] += 1
    now[0] += 4  # no phase: other
    t = clock.totals()
    assert t["server_start"] == 3 and t["measuring"] == 6 and t["host_wait"] == 2 and t["other"] == 4
    assert sum(t.values()) == clock.wall() == 15
    assert set(t) == set(PHASES)
    with pytest.raises(ValueError, match="unknown phase"):
        with clock.phase("lunch"):
            pass


def test_sweep_writes_one_timing_record_per_invocation_and_frames_skip_it(fake, tmp_path, capsys):
    out = tmp_path / "out"
    t0 = time.monotonic()
    first = run_sweep(_spec(fake), out, progress=False, echo=QUIET)
    outside = time.monotonic() - t0
    assert first.ok and len(first.written) == 4
    (path,) = first.timings
    assert path.parent == out / "timings" and list((out / "timings").iterdir()) == [path]
    doc = json.loads(path.read_text())
    assert doc["kind"] == "timing" and doc["ended"] == "complete" and doc["points"] == 4
    phases = doc["phases_s"]
    assert set(phases) == set(PHASES)
    assert abs(sum(phases.values()) - doc["wall_s"]) < 0.05  # every second in exactly one phase
    assert 0.8 * outside <= doc["wall_s"] <= outside + 0.05
    for name in ("preflight", "server_start", "server_stop", "warmup", "sizing", "measuring"):
        assert phases[name] > 0, name  # each phase this sweep went through was counted
    assert phases["search"] == 0 and phases["host_wait"] == 0
    assert phases["other"] < 0.5 * doc["wall_s"]
    assert doc["overhead_share"] == pytest.approx(1 - phases["measuring"] / doc["wall_s"], abs=5e-3)
    # two repeats: two starts of the same arm, each a fresh server, each with its own breakdown
    starts = doc["server_starts"]
    assert [(s["arm"], s["repeat"], s["ok"], s["restart"]) for s in starts] == [
        ("baseline", 0, True, False), ("baseline", 1, True, False)]
    assert sum(s["server_start_s"] for s in starts) == pytest.approx(phases["server_start"], abs=0.02)
    for s in starts:
        assert s["ready_s"] > 0 and s["startup"]["milestones_s"]["ready"] == round(s["ready_s"], 1)
    assert "measuring" in first.summary() and "wall " in first.summary()

    # the frame reads the four points and nothing else; strict reading does not stop at the record
    assert len(load_ledgers(out)) == 4 and path not in ledger_files(out)

    # resumed with nothing to do: no server, no point, no record
    again = run_sweep(_spec(fake), out, progress=False, echo=QUIET)
    assert len(again.skipped) == 4 and not again.timings
    # resumed with a new level: a record of its own, the first one untouched (write-once)
    before = path.read_bytes()
    more = run_sweep(_spec(fake, concurrency=[1, 2, 4]), out, progress=False, echo=QUIET)
    assert len(more.written) == 2 and len(more.timings) == 1 and more.timings[0] != path
    assert path.read_bytes() == before and len(list((out / "timings").iterdir())) == 2
    assert len(read_timings(out)) == 2

    assert cli.main(["report", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "sweep time (2 invocation(s)): wall " in printed and "measuring" in printed
    assert "server start(s): median" in printed
    assert "sweep time wall " in run_summary(out, load_ledgers(out), timings=read_timings(out))


def test_a_timing_record_outside_timings_is_still_not_a_ledger(tmp_path):
    (tmp_path / "odd.json").write_text(json.dumps({"kind": "timing", "phases_s": {}}))
    assert ledger_files(tmp_path) == []
    assert load_ledgers(tmp_path).empty


def test_overhead_line_groups_phases():
    line = overhead_line({"server_start": 20, "server_stop": 10, "warmup": 5, "sizing": 5, "measuring": 55,
                          "preflight": 2, "other": 3})
    assert line == "wall 1m40s: servers 30%, warmup 5%, sizing 5%, measuring 55%, other 5%"


# vLLM 0.32 (CPU build) start-up, abridged from a real server log; colours as vLLM writes them
LOG = """# specnb: vllm serve models/SmolLM2-135M-Instruct --port 53445 --enforce-eager
Triton is installed, but doesn't include CPU backend. Disabling Triton.
\x1b[0;36m(APIServer pid=23614)\x1b[0;0m \x1b[32mINFO\x1b[0m \x1b[90m11-30 17:28:12\x1b[0m \x1b[90m[api_utils.py:347]\x1b[0m version 0.32.0
(APIServer pid=23614) INFO 11-30 17:28:12 [model.py:733] Resolved architecture: LlamaForCausalLM
(EngineCore pid=23627) INFO 11-30 17:28:20 [core.py:133] Initializing a V1 LLM engine (v0.32.0) with config: ...
(Worker pid=23638) INFO 11-30 17:28:28 [cpu_model_runner.py:68] Starting to load model models/SmolLM2-135M-Instruct...
(Worker pid=23638) INFO 11-30 17:28:28 [default_loader.py:501] Loading weights took 0.16 seconds
(EngineCore pid=23627) INFO 11-30 17:28:29 [kv_cache_utils.py:2327] CPU KV cache size: 46,592 tokens, ...
(EngineCore pid=23627) INFO 11-30 17:28:29 [core.py:402] init engine (profile, create kv cache, warmup model) took 0.25 s
(APIServer pid=23614) INFO 11-30 17:28:31 [entry.py:140] Starting vLLM server on http://127.0.0.1:53445
INFO:     Application startup complete.
"""


def test_startup_breakdown_reads_vllm_log_milestones():
    launched = time.mktime(time.strptime("2026-11-30 17:28:04", "%Y-%m-%d %H:%M:%S"))  # local time, as vLLM logs
    b = startup_breakdown(LOG, launched, ready_s=27.3)
    assert b["milestones_s"] == {"api_server_up": 8.0, "engine_core_up": 16.0, "model_load_started": 24.0,
                                 "weights_loaded": 24.0, "engine_ready": 25.0, "api_listening": 27.0, "ready": 27.3}
    assert list(b["segments_s"]) == list(MILESTONES)
    assert sum(b["segments_s"].values()) == pytest.approx(27.3)
    assert b["dominant"] == "api_server_up"  # three process starts of 8 s each: the first of equals
    assert b["stated_s"] == {"weights_s": 0.16, "init_engine_s": 0.25}
    rec = {"server_starts": [{"mode": "launched", "ok": True, "ready_s": 27.3, "startup": b}]}
    assert startup_line([rec]).startswith("1 server start(s): median 27 s to ready; longest part: api_server_up")


def test_startup_breakdown_without_vllm_lines_keeps_the_ready_time():
    b = startup_breakdown("nothing vLLM wrote\n", time.time(), ready_s=3.0)
    assert b["milestones_s"] == {"ready": 3.0} and b["dominant"] == "ready"


def test_checks_run_ahead_of_an_invocation_count_in_its_preflight(tmp_path):
    """run_jobs checks every job before any writes a file: the invocation that follows counts
    those checks in its preflight phase and its wall time, from when they began."""
    from specnb.prompts.workload import Prompt, Workload
    from specnb.sweep import SweepSpec
    from specnb.sweep.preflight import PreflightResult
    from specnb.sweep.runner import Checked, preflight

    spec = SweepSpec.parse({"name": "t", "model": "some/hub-id", "concurrency": [1], "workloads": ["copy"],
                            "arms": [{"name": "baseline"}]})
    wl = Workload(name="copy", source="test", prompts=[Prompt(id="p0", category="copy", messages=[])])
    checked = Checked(PreflightResult("some/hub-id", {"copy": wl}, {}, {}, {}), "2026-12-06T00:00:00+00:00", 5.0)
    pre = preflight(spec, tmp_path / "out", checked)
    totals = pre.clock.totals()
    assert totals["preflight"] >= 5.0 and pre.clock.wall() >= 5.0 and pre.started_at == checked.started_at
    assert pre.identity == json.loads((tmp_path / "out" / "sweep.json").read_text())["identity_hash"]
    again = preflight(spec, tmp_path / "out", checked.again())  # a later invocation: nothing counted twice
    assert again.clock.totals()["preflight"] < 5.0 and again.identity == pre.identity
