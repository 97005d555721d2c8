"""One real paired sweep shared by the sweep and per-category tests, and two servers shared by
every test that only attaches to one (server starts are most of the integration suite's time on
2 cores).

A baseline, an n-gram arm and an arm whose server cannot start, at c=1 and c=2, on one workload
that mixes copy-style and free-form categories (two prompts of each of four), so the same run
answers what a sweep must write and what the per-category acceptance must add up to.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from specnb.engine.server import started_together
from specnb.prompts.workload import bundled
from specnb.sweep import SweepSpec, run_sweep
from tests.conftest import record_server_start
from tests.hang import guard

# the server arguments and the shared pair live in a harness module; named here too, where the
# real-server tests take them from
from tests.shared_pair import (
    DTYPE,
    MODEL,
    NGRAM,
    PAIR_CLAIMED,
    SERVER_ARGS,
    K,
    Shared,
    make_pair,
    release_launcher,
    take_early_pair,
)

__all__ = ["DTYPE", "K", "MODEL", "NGRAM", "SERVER_ARGS", "Shared", "CATEGORIES", "mixed_prompts", "sweep_spec",
           "RealSweep"]

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
        # no warm-up request: nothing the attaching tests check depends on a warm server (the shared
        # sweep below asks for one, and its test checks that it ran)
        warmup_requests=0, sampling={"max_tokens": 32}, ready_timeout_s=guard("vllm_start"), request_timeout_s=120,
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


@pytest.fixture(scope="session")
def _shared_pair(tmp_path_factory) -> Iterator[dict[str, Shared]]:
    """Both shared servers, launched side by side on the first request for either (or already
    launched after collection: launch_pair_early): a start is mostly one core importing torch and
    vLLM, so two starting together take about as long as one (an idle server burns no CPU until
    the tests that need it run)."""
    if not (MODEL / "config.json").exists():
        pytest.fail(f"{MODEL} missing: run `make setup` (make test does it)")
    PAIR_CLAIMED.append(True)
    servers = take_early_pair()
    early = bool(servers)
    servers = servers or make_pair(tmp_path_factory)
    try:
        with started_together(servers, launched=early) as eps:
            yield {name: Shared(servers[name], ep) for name, ep in eps.items()}
    finally:
        release_launcher()


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
                      start_together=True, warmup_requests=1)
    out = tmp / "out"
    t0 = time.monotonic()
    outcome = run_sweep(spec, out, progress=False)
    # the suite's unit of time: this sweep's servers, launched side by side with nothing else running
    # (the shared pair may start beside the browser tests), from launch to the last one ready
    starts = [s for t in outcome.timings for s in json.loads(t.read_text())["server_starts"] if s["ok"]]
    if starts:
        record_server_start(max(s["ready_s"] for s in starts))
    return RealSweep(out=out, spec=spec, outcome=outcome, elapsed_s=time.monotonic() - t0)
