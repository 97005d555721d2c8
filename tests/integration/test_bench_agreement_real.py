"""specnb's load generator against vLLM's own client (``vllm bench serve``) on the session's shared
vLLM-CPU baseline server: both send the same prompts at the same concurrency, greedy, with
``ignore_eos`` and the same ``max_tokens`` (benchmarks/vllm_bench_client.py), so each completes
every request and their output token totals are equal by construction and must match exactly.

Their throughput ratio is a measurement, printed here from one round and measured with its spread
over runs by ``make bench`` (benchmarks/bench_engine.py): the machine's speed moves from one round
to the next by more than any tolerance a test could hold it to (per-round ratios 0.89-1.22 over 24
rounds, 2026-12-01).
"""

from __future__ import annotations

import importlib.util
import sys

import pytest

from specnb import paths
from tests.hang import guard

sys.path.insert(0, str(paths.ROOT / "benchmarks"))
import vllm_bench_client as vb  # noqa: E402

MODEL = paths.MODELS / "SmolLM2-135M-Instruct"


@pytest.fixture(scope="module")
def server(baseline_server):
    """The session's shared baseline server (SERVER_ARGS, served as "smol")."""
    if importlib.util.find_spec("vllm.benchmarks") is None:
        pytest.fail("vLLM's bench client (vllm.benchmarks) is not installed: run `make setup`")
    return baseline_server.server, baseline_server.endpoint


def test_specnb_and_vllm_bench_serve_send_and_count_the_same_work(server, tmp_path):
    srv, ep = server
    with vb.BenchClient({**srv.environment(), "HF_HUB_OFFLINE": "1"}, tmp_path / "vllm-bench.log",
                        wait_s=guard("vllm_child")) as bench:
        rows = vb.alternating_rounds(bench, ep, tmp_path, MODEL, rounds=1)
    print(f"\nspecnb vs vllm bench serve: c={vb.CONCURRENCY}, {vb.PROMPTS} prompts x {vb.MAX_TOKENS} tokens, "
          "ignore_eos, greedy, same server (one round: a measurement, `make bench` gives its spread)")
    print("\n".join(vb.table(rows)))
    print(f"specnb / vllm bench output tok/s: {', '.join(f'{x:.3f}' for x in vb.ratios(rows))}")
    assert sorted(r["client"] for r in rows) == ["specnb", "vllm-bench"]
    expected = vb.PROMPTS * vb.MAX_TOKENS
    for r in rows:  # ignore_eos + max_tokens: every request completes with exactly max_tokens tokens
        assert (r["completed"], r["errors"], r["output_tokens"]) == (vb.PROMPTS, 0, expected), r
        assert r["output_tok_s"] > 0 and r["duration_s"] > 0, r
