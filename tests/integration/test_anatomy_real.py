"""One real profiled CPU point: ``specnb anatomy --executor ray`` runs its one block as a task on
a local Ray, which starts an n-gram server with vLLM's torch profiler, profiles one window at c=2
and sends the driver a step-anatomy record whose steps add up, whose streamed tokens are all
placed on steps, whose accepted drafts match the engine's counters, and whose unprofiled twin
gives the profiler's slowdown, with its trace and log. A rerun here (the local executor) finds
the window done."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from specnb import cli
from specnb.analysis.anatomy import PARTS, anatomy_frame, load_anatomy
from tests.conftest import require
from tests.hang import guard
from tests.integration.conftest import MODEL, NGRAM, SERVER_ARGS

try:
    import ray
except ImportError:  # fails under CI=true, skips elsewhere
    ray = None

pytestmark = pytest.mark.integration


def test_one_profiled_ngram_point_on_the_real_server(tmp_path, capsys):
    cfg = tmp_path / "a.toml"
    cfg.write_text(
        f'name = "anat"\nmodel = "{MODEL}"\nserved_model_name = "smol"\nserver_args = {json.dumps(SERVER_ARGS)}\n'
        'workloads = ["copy"]\nconcurrency = [2]\nrepeats = 1\npanel_size = 4\nwarmup_requests = 1\n'
        f'ready_timeout_s = {guard("vllm_start")}\nrequest_timeout_s = 120\n[env]\nVLLM_CPU_KVCACHE_SPACE = "1"\n'
        '[sampling]\nmax_tokens = 16\n'
        f'[[arms]]\nname = "ngram-k4"\nspeculative_config = {json.dumps(NGRAM)}\n'.replace(': ', ' = ')
    )
    out = tmp_path / "out"
    require(ray is not None, "ray (the Ray executor's tests)", "the dev extra installs it: make setup")
    # a Ray of this machine's two CPUs and a small object store (the servers need the memory)
    ray.init(num_cpus=2, object_store_memory=100 * 2**20, include_dashboard=False, log_to_driver=False,
             logging_level="ERROR")
    try:
        rc = cli.main(["anatomy", str(cfg), "--out", str(out), "--no-progress", "--executor", "ray"])
    finally:
        ray.shutdown()
    printed = capsys.readouterr()
    assert rc == 0, printed.err[-3000:]
    assert "decode steps of profiled windows" in printed.out
    recs = load_anatomy(out)
    ok = [r for r in recs if r["status"] == "ok"]
    assert len(ok) == 1, [(r["status"], r["path"], r.get("error")) for r in recs]
    (rec,) = ok
    # a window whose stream came in one burst (seen under Ray on a busy 2-core host) is kept as a
    # retried attempt and profiled again at once: any other record is such an attempt, and says so
    for r in recs:
        if r is not rec:
            assert r["status"] == "failed" and r["path"].endswith(".retried.json"), r["path"]
            assert "one burst" in r["error"], r["error"]
    assert rec["status"] == "ok" and rec["arm"] == "ngram-k4" and rec["concurrency"] == 2
    ex = rec["provenance"]["executor"]
    assert ex["kind"] == "ray" and ex["block"] == "anat/r0/ngram-k4" and ex["node_id"]
    trace = Path(rec["profiler"]["trace"])  # the trace came to the driver, where the record says (a /tmp path)
    assert trace.is_file() and out.resolve() in trace.parents, trace
    # no field names the node's scratch folder, which is gone: the profiler's folder is the driver's
    assert "specnb-block-" not in json.dumps([rec["server"]["argv"], rec["profiler"]])
    assert str(trace.parent) in rec["profiler"]["config"]["torch_profiler_dir"]
    assert (out / "logs" / "ngram-k4-r00.log").read_text().count("# specnb: ") == 1
    assert not (out / "invocations").exists() or len(list((out / "invocations").iterdir())) == 1  # the driver's own
    assert "VLLM_CUSTOM_SCOPES_FOR_PROFILING" in rec["profiler"]["env"]
    assert "--profiler-config" in rec["server"]["argv"]
    steps, checks, sm = rec["steps"], rec["checks"], rec["summary"]
    assert len(steps) >= 4 and sm["decode_steps"] >= 2
    for s in steps[:-1]:  # the parts make each step's cycle
        assert sum(s[p] for p in PARTS) == pytest.approx(s["cycle_ms"], abs=1e-6)
        assert s["forward_ms"] > 0 and s["draft_ms"] > 0  # the proposer runs every step
    # every streamed token lands on a step of the trace, on one clock
    assert checks["chunks_placed"]["before"] == 0 and checks["chunks_placed"]["after"] == 0
    assert checks["emitted_tokens_in_steps"] == checks["output_tokens_of_requests"] == 2 * 16
    assert checks["trace_window_s"] == pytest.approx(checks["client_window_s"], rel=0.1, abs=0.3)
    # what the steps say was drafted and accepted is what the engine counted over the window
    eng = checks["engine_counters"]
    assert eng is not None
    assert checks["drafted_tokens_in_steps"] == eng["num_draft_tokens"]
    # accepted: the engine also counts drafts accepted past a request's max_tokens, which the
    # stream never delivers (at most K per request)
    assert 0 <= checks["accepted_not_delivered"] <= 2 * NGRAM["num_speculative_tokens"]
    assert checks["accepted_tokens_in_steps"] <= eng["num_accepted_tokens"]
    assert checks["steps_agree"], checks["span_agreement"]  # the parts against the client's clock, within 5 %
    assert checks["span_agreement"]["requests"] == 2
    assert [len(r["chunks"]) for r in rec["requests"]] == [len([c for c in r["chunks"] if c[2] is not None])
                                                           for r in rec["requests"]]
    df = anatomy_frame([rec])
    assert df.iloc[0]["share_forward_ms"] > 0.3  # the target's forward is most of a CPU step
    # the unprofiled twin: the same requests on the same server, every one streamed, and the
    # profiler's slowdown, a ratio of the two windows' client ms per token: a measurement (noisy for
    # windows of a second), whose spread `make bench` gives (benchmarks/bench_engine.py)
    u = rec["unprofiled"]
    assert u["requests"] == u["ok"] == 2 and u["tokens_after_first"] > 0
    assert math.isfinite(u["profiling_slowdown"]) and u["profiling_slowdown"] > 0, u
    assert u["cycle_ms"] == pytest.approx(sm["cycle_ms"] / u["profiling_slowdown"])
    assert df.iloc[0]["unprofiled_cycle_ms"] == pytest.approx(u["cycle_ms"])
    trace = out / "traces" / "ngram-k4-r00"
    assert list(trace.glob("rank*.pt.trace.json*"))
    # a rerun profiles nothing again
    rc = cli.main(["anatomy", str(cfg), "--out", str(out), "--no-progress"])
    assert rc == 0 and "0 window(s) profiled, 1 already done" in capsys.readouterr().err
