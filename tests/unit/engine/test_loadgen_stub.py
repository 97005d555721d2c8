"""run_load against benchmarks/stub_server.py: what the client counts, its clock, client processes,
client_busy.

The stub is an OpenAI-compatible SSE server on 127.0.0.1 in its own process that logs when it
wrote each chunk (CLOCK_MONOTONIC, the load generator's clock). With an injected inter-step
delay and multi-token chunks (speculative decoding's shape), these check correctness: every chunk
counted once, per-token (not per-chunk) gaps, one clock shared with the server (no chunk read
before it was written), latencies of the stub's order. The bounds are generous on purpose (a
machine ten times slower passes them; a per-chunk ITL, 2.5x off here, or a foreign clock does
not): how close the client comes to the server's own log, and to ``vllm bench serve`` on the same
stub, is measured by ``make bench`` (benchmarks/README.md), side by side in one run, not asserted
here. Exact per-token arithmetic on canned streams is in test_loadgen.py.
"""

from __future__ import annotations

import asyncio
import json
import os
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import numpy as np
import pytest

from specnb.analysis.point import summarize_point as summarize
from specnb.engine import clients
from specnb.engine.loadgen import CLIENT_BUSY, run_load
from specnb.prompts.workload import Prompt
from tests.hang import guard

ROOT = Path(__file__).resolve().parents[3]
STUB = ROOT / "benchmarks" / "stub_server.py"
PROMPTS = [Prompt(id=f"p{k}", category="copy" if k % 2 else "freeform",
                  messages=[{"role": "user", "content": f"prompt {k}"}]) for k in range(7)]
SAMPLING = {"temperature": 0.0, "max_tokens": 64, "seed": 0}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _get(url: str, method: str = "GET"):
    req = urllib.request.Request(url, method=method, data=b"" if method == "POST" else None)
    with urllib.request.urlopen(req, timeout=30) as resp:
        return json.loads(resp.read() or b"null")


class Stub:
    def __init__(self, *args: str):
        self.port = _free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.proc = subprocess.Popen([sys.executable, str(STUB), "--host", "127.0.0.1", "--port", str(self.port),
                                      *args], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        deadline = time.monotonic() + guard("child_start")
        while True:
            try:
                _get(self.url + "/health")
                return
            except OSError:
                if self.proc.poll() is not None or time.monotonic() > deadline:
                    self.close()
                    raise RuntimeError(f"stub did not start: {self.proc.stderr.read().decode()[-500:]}") from None
                time.sleep(0.05)

    def log(self) -> dict:
        return _get(self.url + "/stub/log")

    def stats(self) -> dict:
        return _get(self.url + "/stub/stats")

    def reset(self) -> None:
        _get(self.url + "/stub/reset", "POST")

    def close(self) -> None:
        if self.proc.poll() is None:
            # SIGTERM, not SIGINT: a test run started in the background hands its children an
            # ignored SIGINT, and each stub then sat out the 5 s wait below (25 s per suite)
            self.proc.terminate()
            try:
                self.proc.wait(5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)


@pytest.fixture
def stub_factory():
    stubs: list[Stub] = []

    def make(*args: str) -> Stub:
        s = Stub(*args)
        stubs.append(s)
        return s

    yield make
    for s in stubs:
        s.close()


def _stub_truth(log: dict) -> tuple[float, float, int]:
    """The stub's own per-token ITL p50 and TPOT p50 (ms) from its emission log, and its chunks."""
    req = np.asarray(log["req"])
    t = np.asarray(log["t_ns"], dtype=np.float64) / 1e9
    k = np.asarray(log["tokens"])
    itl, tpot = [], []
    for r in np.unique(req):
        m = req == r
        tt, kk = t[m], k[m]
        order = np.argsort(tt)
        tt, kk = tt[order], kk[order]
        itl.append(np.repeat(np.diff(tt) / kk[1:], kk[1:]))
        if kk.sum() >= 2:
            tpot.append((tt[-1] - tt[0]) / (kk.sum() - 1))
    return float(np.median(np.concatenate(itl)) * 1e3), float(np.median(tpot) * 1e3), int(req.size)


def _within(value: float, truth: float, factor: float) -> bool:
    return truth / factor <= value <= truth * factor


@pytest.mark.parametrize("concurrency,num_requests", [(1, 4), (64, 128)])
def test_itl_and_tpot_follow_the_servers_emission_log(stub_factory, concurrency, num_requests):
    stub = stub_factory("--delay-ms", "10", "--chunks", "40", "--tokens-per-chunk", "1,3,2,4", "--spec-metrics",
                        "--spin-us", "1500")
    pl = asyncio.run(run_load(stub.url, "stub", PROMPTS, concurrency, num_requests, SAMPLING))
    s = summarize(pl)
    log = stub.log()
    itl_truth, tpot_truth, chunks = _stub_truth(log)
    assert s["num_ok"] == num_requests
    assert sum(len(r.chunk_times_s) for r in pl.records) == chunks  # every chunk the stub wrote, counted once
    assert s["tokens_per_chunk_mean"] == pytest.approx(2.5)  # 1,3,2,4 cycled: per-token ITL, not per chunk
    # one clock: in time order, the i-th chunk read came after the i-th chunk written (a read
    # stamps every chunk it completes once, after the stub wrote them), and not long after (a
    # foreign clock is off by hours; the stub stamps a chunk as it writes it: 5 ms of slack)
    assert pl.clock_zero_s is not None
    read = np.sort([t + pl.clock_zero_s for r in pl.records for t in r.chunk_times_s])
    wrote = np.sort(np.asarray(log["t_ns"], dtype=np.float64) / 1e9)
    assert (read - wrote).min() > -0.005 and (read - wrote).max() < 60
    # per token, of the stub's order: a per-chunk figure would be 2.5x the truth
    assert _within(s["p50_itl_ms"], itl_truth, 2.0), (s["p50_itl_ms"], itl_truth)
    assert _within(s["p50_tpot_ms"], tpot_truth, 2.0), (s["p50_tpot_ms"], tpot_truth)
    assert all(r.spec_num_spec_steps is not None for r in pl.records)


def test_two_client_processes_share_one_counter_and_one_clock(stub_factory):
    stub = stub_factory("--delay-ms", "10", "--chunks", "20", "--tokens-per-chunk", "1,3")
    sampling = {**SAMPLING, "seed": 100}
    pl = asyncio.run(clients.run_load_in_processes(stub.url, "stub", PROMPTS, 8, 40, sampling, prompt_offset=2, processes=2,
                              headers={"Authorization": "Bearer k"}))
    assert pl.processes == 2 and len(pl.process_cpu_util) == 2
    assert pl.client_cpu_util == max(pl.process_cpu_util)
    assert [r.index for r in pl.records] == list(range(40))  # each index sent once, over both processes
    assert [r.prompt_id for r in pl.records] == [f"p{(2 + i) % 7}" for i in range(40)]
    assert sorted({r.slot for r in pl.records}) == list(range(8))
    assert all(r.ok and r.output_tokens == 40 for r in pl.records)
    assert pl.steady_start_s is not None and pl.steady_start_s < pl.steady_end_s
    # one clock: the processes' first requests start together (a process that started on its own
    # clock, or did not wait for the other, would be a process start or hours apart; a bound a
    # machine ten times slower passes), and the stub's log agrees with every record
    assert max(r.start_s for r in pl.records if r.index < 8) < 1.0
    itl_truth, _, chunks = _stub_truth(stub.log())
    assert sum(len(r.chunk_times_s) for r in pl.records) == chunks
    # per token, of the stub's order: counting per chunk instead would be 2x the truth here (1,3)
    assert _within(summarize(pl)["p50_itl_ms"], itl_truth, 1.6)
    assert stub.stats()["requests"] == 40


def _client_busy(pl) -> bool:
    """The sweep runner's client_busy rule (specnb.sweep.ledgers.point_flags) on a point's summary."""
    s = summarize(pl)
    return max(pl.client_cpu_util or 0, s["client_loop_busy"] or 0) > CLIENT_BUSY


# the work a saturating client does per request: a deliberate busy period, not a bound on time
WORK_PER_REQUEST_S = 0.03


def test_client_busy_fires_when_the_client_is_saturated_and_not_when_idle(stub_factory):
    # a client that waits 0.2 s between chunks is idle on any machine (ten times slower included)
    stub = stub_factory("--delay-ms", "200", "--chunks", "5")
    idle = asyncio.run(run_load(stub.url, "stub", PROMPTS, 2, 4, SAMPLING))
    assert idle.client_loop_busy < 0.3 and idle.client_cpu_util < 0.3
    assert not _client_busy(idle)

    def busy(_rec) -> None:  # a client with 30 ms of work per request: it cannot keep up with the stub
        until = time.monotonic() + WORK_PER_REQUEST_S
        while time.monotonic() < until:
            pass

    # the loop never waits: busy whether or not this test got a whole core (the host may be shared);
    # against a stub that streams every 20 ms, 30 ms of work per request is more than the loop has
    quick = stub_factory("--delay-ms", "20", "--chunks", "10")
    saturated = asyncio.run(run_load(quick.url, "stub", PROMPTS, 16, 64, SAMPLING, on_done=busy))
    assert saturated.client_loop_busy > 0.9
    assert _client_busy(saturated)
    # in client processes the busiest one decides, and the figures come from the children
    fast = stub_factory("--delay-ms", "0", "--chunks", "64", "--burst", "8", "--no-log")
    pl = asyncio.run(clients.run_load_in_processes(fast.url, "stub", PROMPTS, 16, 400, SAMPLING, processes=2))
    assert pl.client_cpu_util == max(pl.process_cpu_util) > 0.05
    assert pl.client_loop_busy is not None and 0 < pl.client_loop_busy <= 1


@pytest.mark.skipif(not hasattr(os, "sched_getaffinity"), reason="Linux only")
def test_a_bad_process_count_is_one_clear_error():
    with pytest.raises(ValueError, match="processes must be >= 1"):
        asyncio.run(clients.run_load_in_processes("http://127.0.0.1:9", "stub", PROMPTS, 4, 4, SAMPLING, processes=0))
    with pytest.raises(ValueError, match="base URL"):
        asyncio.run(run_load("127.0.0.1:9", "stub", PROMPTS, 4, 4, SAMPLING))
