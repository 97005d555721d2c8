"""Per-category acceptance on a real vLLM-CPU server (about a minute: two server starts).

A baseline and an n-gram arm measure one workload that mixes copy-style and free-form
categories. The speculative arm's server gets ``--per-request-spec-decode-metrics summary``
(the baseline's must not: vLLM refuses it without a drafter), every response carries its
own acceptance counts, and the ledger pools them per category. Asserted: what a
measurement must satisfy (counts consistent with each other and with ``/metrics``), never
generated text or which category accepts more.
"""

from __future__ import annotations

import json

import jsonschema
import pytest

from specnb import paths
from specnb.engine.vllm import engine_supports_flag
from specnb.ledger import SCHEMA_VERSION, load_requests, load_spec_by_category, read_ledger
from specnb.prompts.workload import bundled
from specnb.sweep import SweepSpec, run_sweep
from specnb.sweep.runner import PER_REQUEST_SPEC_FLAG

MODEL = paths.MODELS / "SmolLM2-135M-Instruct"
K = 4
CATEGORIES = {"fix-json": "copy", "list-transform": "copy", "chat": "freeform", "creative": "freeform"}


@pytest.fixture(scope="module")
def swept(tmp_path_factory):
    if not (MODEL / "config.json").exists():
        pytest.fail(f"{MODEL} missing: run `make setup` (make test does it)")
    if not engine_supports_flag(PER_REQUEST_SPEC_FLAG):
        pytest.skip("the installed vLLM has no --per-request-spec-decode-metrics")
    tmp = tmp_path_factory.mktemp("categories")
    # two prompts of each category, interleaved so the 8 requests cover all four kinds
    rows = []
    for i in range(2):
        for cat, set_name in CATEGORIES.items():
            p = [q for q in bundled(set_name).prompts if q.category == cat][i]
            rows.append({"id": p.id, "category": cat, "messages": p.messages})
    prompts = tmp / "mixed.jsonl"
    prompts.write_text("".join(json.dumps(r) + "\n" for r in rows))
    spec = SweepSpec.parse(dict(
        name="categories", model=str(MODEL), served_model_name="smol",
        server_args=["--enforce-eager", "--dtype", "bfloat16", "--max-model-len", "2048"],
        workloads=[str(prompts)], concurrency=[2], repeats=1, panel_size=8, work_floor_tokens=None,
        warmup_requests=1, sampling={"max_tokens": 32}, ready_timeout_s=300, request_timeout_s=120,
        env={"VLLM_CPU_KVCACHE_SPACE": "1"},
        arms=[{"name": "baseline"},
              {"name": "ngram-k4", "speculative_config": {"method": "ngram", "num_speculative_tokens": K,
                                                          "prompt_lookup_max": 4}}],
    ))
    out = tmp / "out"
    outcome = run_sweep(spec, out, progress=False)
    assert len(outcome.written) == 2 and not outcome.failed, outcome.summary()
    leds = {read_ledger(p).arm.name: (p, read_ledger(p)) for p in outcome.written}
    return out, leds


def test_only_the_speculative_server_gets_the_flag(swept):
    _, leds = swept
    assert PER_REQUEST_SPEC_FLAG in leds["ngram-k4"][1].server.argv
    assert PER_REQUEST_SPEC_FLAG not in leds["baseline"][1].server.argv
    assert leds["baseline"][1].spec_decode_by_category is None


def test_per_category_block_is_present_and_consistent(swept):
    _, leds = swept
    path, led = leds["ngram-k4"]
    assert led.status == "ok" and led.results["num_errors"] == 0
    by = led.spec_decode_by_category
    assert by is not None and set(by) == set(CATEGORIES)
    assert sum(b.requests for b in by.values()) == led.num_requests
    for cat, b in by.items():
        assert b.requests == 2, cat
        assert len(b.acceptance_histogram) == K + 1
        assert sum(b.acceptance_histogram) == b.num_spec_steps
        assert sum(j * n for j, n in enumerate(b.acceptance_histogram)) == b.num_accepted_draft_tokens
        assert 0 <= b.num_accepted_draft_tokens <= b.num_draft_tokens <= K * b.num_spec_steps
        assert 0 < b.output_tokens <= 2 * 32
        assert 0 <= b.accepted_output_share < 1  # every step emits at least one token of its own
        if b.num_spec_steps:
            assert 1 <= b.mean_acceptance_length <= K + 1
            assert 0 <= b.draft_acceptance_rate <= 1
    # the per-request counts add up to the server's own counters for the point
    sd = led.spec_decode
    assert sum(b.num_spec_steps for b in by.values()) == sd.num_drafts
    assert sum(b.num_draft_tokens for b in by.values()) == sd.num_draft_tokens
    assert sum(b.num_accepted_draft_tokens for b in by.values()) == sd.num_accepted_tokens


def test_requests_carry_their_own_acceptance_in_the_sidecar(swept):
    out, leds = swept
    path, led = leds["ngram-k4"]
    frame = load_requests(path)
    assert frame["spec_num_spec_steps"].notna().all()
    assert (frame["spec_num_spec_tokens"] == K).all()
    assert load_requests(leds["baseline"][0])["spec_num_spec_steps"].isna().all()
    table = load_spec_by_category(out)
    assert set(table["category"]) == set(CATEGORIES) and set(table["arm"]) == {"ngram-k4"}


def test_ledgers_match_the_committed_schema(swept):
    _, leds = swept
    schema = json.loads((paths.SCHEMAS / f"point-ledger.v{SCHEMA_VERSION}.json").read_text())
    for path, _ in leds.values():
        jsonschema.validate(json.loads(path.read_text()), schema)
