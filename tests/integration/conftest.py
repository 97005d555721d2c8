"""One real paired sweep shared by the sweep and per-category tests, and two servers shared by
every test that only attaches to one (server starts are most of the integration suite's time on
2 cores).

A baseline, an n-gram arm and an arm whose server cannot start, at c=1 and c=2, on one workload
that mixes copy-style and free-form categories (two prompts of each of four), so the same run
answers what a sweep must write and what the per-category acceptance must add up to.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from specnb import paths
from specnb.engine.kernels import machine_dtype
from specnb.engine.server import VllmServer, started_together
from specnb.prompts.workload import bundled
from specnb.sweep import SweepSpec, run_sweep
from specnb.sweep.runner import PROMPT_DETAILS_FLAG
from tests.conftest import record_server_start

MODEL = paths.MODELS / "SmolLM2-135M-Instruct"
K = 4
NGRAM = {"method": "ngram", "num_speculative_tokens": K, "prompt_lookup_max": 4}
# Every server of the suite serves in the dtype this CPU has a oneDNN kernel for: bf16 on AVX-512,
# fp32 on an AVX2-only CPU, where bf16 runs on torch's fallback linear (the baseline 2.1x slower at
# c=4 there, an n-gram arm up to 3.4x: docs/cpu.md). The tests check what specnb does, and the
# fallback made the AVX2 machines' suite 2.7x the AVX-512 ones'. The fallback route itself is
# tested through the probe (test_checkpoints_real.py) and the emulated quantization notebook.
# SPECNB_TEST_DTYPE=float32 runs the AVX2 machines' choice on any machine.
DTYPE = os.environ.get("SPECNB_TEST_DTYPE") or machine_dtype()
SERVER_ARGS = ["--enforce-eager", "--dtype", DTYPE, "--max-model-len", "2048"]
CATEGORIES = {"fix-json": "copy", "list-transform": "copy", "chat": "freeform", "creative": "freeform"}


def mixed_prompts(folder: Path) -> Path:
    """Two prompts of each category, interleaved so every pass covers all four kinds."""
    rows = []
    for i in range(2):
        for cat, set_name in CATEGORIES.items():
            p = [q for q in bundled(set_name).prompts if q.category == cat][i]
            rows.append({"id": p.id, "category": cat, "messages": p.messages})
    path = folder / "mixed.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def sweep_spec(**kw) -> SweepSpec:
    base = dict(
        name="it", model=str(MODEL), served_model_name="smol", server_args=SERVER_ARGS,
        workloads=["copy"], concurrency=[1, 2], repeats=1, panel_size=4, work_floor_tokens=None,
        warmup_requests=1, sampling={"max_tokens": 32}, ready_timeout_s=300, request_timeout_s=120,
        metrics_interval_s=0.5,
        arms=[
            {"name": "baseline"},
            {"name": "ngram-k4", "speculative_config": NGRAM},
            # a server that cannot start: its points become failure records, the sweep goes on
            {"name": "broken", "speculative_config": NGRAM, "server_args": ["--max-model-len", "not-a-number"]},
        ],
    )
    base.update(kw)
    return SweepSpec.parse(base)


@dataclass
class Shared:
    """A server several test modules attach to (started once per session, stopped at its end)."""

    server: Any
    endpoint: Any


def _server(tmp_path_factory, name: str, speculative_config: dict | None,
            env: dict[str, str] | None = None) -> VllmServer:
    # per-request cached prompt tokens in the usage (the conversation replay's per-turn counts)
    return VllmServer(str(MODEL), args=[*SERVER_ARGS, PROMPT_DETAILS_FLAG], speculative_config=speculative_config,
                      served_model_name="smol", env={"VLLM_CPU_KVCACHE_SPACE": "1", **(env or {})},
                      log_path=tmp_path_factory.mktemp(f"shared-{name}") / "server.log", ready_timeout_s=300)


def _pair(tmp_path_factory) -> dict[str, VllmServer]:
    return {
        # vLLM's own three-process layout; every other server of the suite runs two (tests/conftest.py)
        "baseline": _server(tmp_path_factory, "baseline", None, env={"VLLM_ENABLE_V1_MULTIPROCESSING": "1"}),
        "ngram": _server(tmp_path_factory, "ngram", NGRAM),
    }


# the shared pair when launched before the first test (launch_pair_early), until _shared_pair takes
# it; "claimed" once the session fixture made or took its pair (no second one is launched then)
EARLY: dict[str, VllmServer] = {}
PAIR_CLAIMED: list[bool] = []


def launch_pair_early(tmp_path_factory) -> None:
    """Launch the shared pair now, without waiting: ``make test``'s second pass calls it after
    collection when the browser tests run first (they start no vLLM), so the pair's start runs
    beside them instead of before the first real-server test that needs it."""
    if EARLY or PAIR_CLAIMED or not (MODEL / "config.json").exists():
        return
    EARLY.update(_pair(tmp_path_factory))
    try:
        for srv in EARLY.values():
            srv.launch()
    except BaseException:
        stop_early_pair()
        raise


def stop_early_pair() -> None:
    """The session's end: stop a pair launched early that no test took (stopped by its ids)."""
    while EARLY:
        EARLY.popitem()[1].stop()


@pytest.fixture(scope="session")
def _shared_pair(tmp_path_factory) -> Iterator[dict[str, Shared]]:
    """Both shared servers, launched side by side on the first request for either (or already
    launched after collection: launch_pair_early): a start is mostly one core importing torch and
    vLLM, so two starting together take about as long as one (an idle server burns no CPU until
    the tests that need it run)."""
    if not (MODEL / "config.json").exists():
        pytest.fail(f"{MODEL} missing: run `make setup` (make test does it)")
    PAIR_CLAIMED.append(True)
    early = bool(EARLY)
    servers = dict(EARLY) if early else _pair(tmp_path_factory)
    EARLY.clear()
    with started_together(servers, launched=early) as eps:
        yield {name: Shared(servers[name], ep) for name, ep in eps.items()}


@pytest.fixture(scope="session")
def baseline_server(_shared_pair) -> Shared:
    """A plain server (SERVER_ARGS, 1 GiB KV, served as "smol") for every test that only
    attaches to a baseline: the bench agreement, the schedule tests' baseline, the prediction.
    It runs vLLM's own three-process layout (API server, engine core, worker), where every other
    server of the suite runs two (tests/conftest.py), so both layouts start on every run; the
    baseline's speed does not depend on the layout (ledgers/drafter/startup/20261201T182903Z)."""
    return _shared_pair["baseline"]


@pytest.fixture(scope="session")
def ngram_server(_shared_pair) -> Shared:
    """The same with the n-gram drafter (NGRAM), for the tests that attach to a drafting server."""
    return _shared_pair["ngram"]


@dataclass
class RealSweep:
    out: Path
    spec: SweepSpec
    outcome: object
    elapsed_s: float


@pytest.fixture(scope="session")
def real_sweep(tmp_path_factory) -> RealSweep:
    if not (MODEL / "config.json").exists():
        pytest.fail(f"{MODEL} missing: run `make setup` (make test does it)")
    tmp = tmp_path_factory.mktemp("real-sweep")
    # two processes like the suite's other launched servers (tests/conftest.py); the shared
    # baseline server runs vLLM's three. The three arms' servers start side by side (the broken one
    # fails among them), then measure one at a time: the start-together path on the real engine,
    # and the tune round made from this sweep inherits it
    spec = sweep_spec(workloads=[str(mixed_prompts(tmp))], panel_size=8, env={"VLLM_CPU_KVCACHE_SPACE": "1"},
                      start_together=True)
    out = tmp / "out"
    t0 = time.monotonic()
    outcome = run_sweep(spec, out, progress=False)
    # the suite's unit of time: this sweep's servers, launched side by side with nothing else running
    # (the shared pair may start beside the browser tests), from launch to the last one ready
    starts = [s for t in outcome.timings for s in json.loads(t.read_text())["server_starts"] if s["ok"]]
    if starts:
        record_server_start(max(s["ready_s"] for s in starts))
    return RealSweep(out=out, spec=spec, outcome=outcome, elapsed_s=time.monotonic() - t0)
