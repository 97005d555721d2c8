"""The load generator's raw HTTP/1.1 client: framing, timing of reads, failures on the wire."""

from __future__ import annotations

import asyncio
import json

import pytest

from specnb.engine import wire
from specnb.engine.loadgen import run_load
from specnb.engine.records import RequestRecord, StreamParser
from specnb.prompts.workload import Prompt
from tests.unit.fakevllm import RawServer

PROMPTS = [Prompt(id=f"p{k}", category=None, messages=[{"role": "user", "content": f"prompt {k}"}]) for k in range(3)]


def sse(completion: int, text: str = "x") -> bytes:
    obj = {"choices": [{"index": 0, "delta": {"content": text}, "finish_reason": None}],
           "usage": {"prompt_tokens": 5, "completion_tokens": completion}}
    return b"data: " + json.dumps(obj).encode() + b"\n\n"


def chunked(*parts: bytes) -> bytes:
    return b"".join(b"%x\r\n%s\r\n" % (len(p), p) for p in parts) + b"0\r\n\r\n"


def test_dechunk_keeps_each_piece_at_the_time_of_its_read():
    body = chunked(sse(1), sse(3), b"data: [DONE]\n\n")
    cut = [7, len(body) // 2, len(body) - 3]  # a chunk header, a chunk's data and the end split over reads
    bufs = [body[a:b] for a, b in zip([0, *cut], [*cut, len(body)], strict=True)]
    times = [1.0, 2.0, 3.0, 4.0]
    pieces, ptimes, err = wire.dechunk(bufs, times)
    assert err is None
    assert b"".join(pieces) == sse(1) + sse(3) + b"data: [DONE]\n\n"
    rec = RequestRecord(index=0, slot=0, prompt_id="p", category=None, start_s=0.0)
    parser = StreamParser(rec)
    assert wire.parse_response(parser, (bufs, times, True), t0=0.5) is None
    # a line counts from the read that completed it
    assert rec.chunk_tokens == [1, 2] and rec.output_tokens == 3
    assert rec.chunk_times_s == [1.5, 2.5]  # line 1 completes in read 2, line 2 in read 3 (t0 = 0.5)
    assert parser.done
    assert wire.dechunk([b"zz\r\n"], [0.0])[2].startswith("bad chunk header")
    assert wire.dechunk([b"5\r\nab"], [0.0])[2] == "chunked body ended inside a chunk"


OK_HEAD = b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n"


def test_connection_close_after_each_response_reconnects_and_content_length_bodies_parse():
    body = sse(1) + sse(2) + b"data: [DONE]\n\n"

    def reply(i):
        if i % 2:
            return [OK_HEAD + b"Connection: close\r\n\r\n", chunked(sse(1), sse(2), b"data: [DONE]\n\n")]
        return [b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n" % len(body), body]

    srv = RawServer(reply)
    pl = asyncio.run(srv.run(lambda url: run_load(url, "m", PROMPTS, 2, 6, {}, headers={"Authorization": "Bearer s"})))
    assert srv.requests == 6
    assert all(r.ok and r.output_tokens == 2 and r.chunk_tokens == [1, 1] for r in pl.records), pl.records
    assert all(b"Authorization: Bearer s\r\n" in h for h in srv.heads)


def test_a_silent_server_times_out_and_a_dropped_stream_keeps_what_arrived():
    srv = RawServer(lambda i: None)
    pl = asyncio.run(srv.run(lambda url: run_load(url, "m", PROMPTS, 1, 1, {}, request_timeout_s=0.3)))
    (rec,) = pl.records
    assert not rec.ok and rec.error.startswith("TimeoutError") and 0.25 < rec.end_s - rec.start_s < 20  # timed out, not hung

    drop = RawServer(lambda i: [OK_HEAD + b"\r\n", b"%x\r\n%s\r\n" % (len(sse(1)), sse(1)), b"<close>"])
    pl = asyncio.run(drop.run(lambda url: run_load(url, "m", PROMPTS, 1, 1, {})))
    (rec,) = pl.records
    assert rec.error.startswith("ConnectionError") and not rec.ok
    assert rec.chunk_tokens == [1]  # the chunk that did arrive is still timed


def test_http_errors_and_unknown_encodings_are_one_line_errors():
    def reply(i):
        if i == 1:
            return [b"HTTP/1.1 503 Service Unavailable\r\nContent-Length: 4\r\n\r\n", b"busy"]
        return [OK_HEAD + b"Content-Encoding: gzip\r\n\r\n", chunked(b"\x1f\x8b")]

    srv = RawServer(reply)
    pl = asyncio.run(srv.run(lambda url: run_load(url, "m", PROMPTS, 1, 2, {})))
    assert pl.records[0].error == "HTTP 503: busy" and pl.records[0].http_status == 503
    assert "Content-Encoding 'gzip'" in pl.records[1].error


def test_a_bad_base_url_is_refused():
    with pytest.raises(ValueError, match="base URL must be"):
        wire.Target("localhost:8000", "/v1/chat/completions")


def test_the_parse_split_over_processes_fills_the_records_exactly_as_one_process_does():
    from specnb.engine import records as rec_mod
    from specnb.engine.records import parse_streams

    def stream(i: int, n: int) -> wire.Raw:
        body = chunked(*[sse(k + 1, f"w{i}-{k} ") for k in range(n)])
        half = len(body) // 2  # two socket reads, a chunk split across them
        return ([body[:half], body[half:]], [1.0 + i, 1.5 + i], True)

    raw = {i: stream(i, 3 + i % 4) for i in range(9)}
    raw[4] = ([b"5\r\nnot j\r\n0\r\n\r\n"], [2.0], True)  # a bad stream: an error, not a crash
    del raw[6]  # a request whose bytes never came (a transport error recorded elsewhere)

    def fresh() -> list[RequestRecord]:
        out = [RequestRecord(index=i, slot=i % 3, prompt_id=f"p{i}", category=None, start_s=0.5) for i in range(9)]
        out[6].error = "timed out"
        return out

    one, many = fresh(), fresh()
    assert parse_streams(one, raw, 0.5, workers=1) >= 0
    parse_streams(many, raw, 0.5, workers=3)
    assert [r.as_row() for r in many] == [r.as_row() for r in one]
    assert one[0].output_tokens == 3 and one[0].chunk_times_s and one[4].error and one[6].error == "timed out"
    # the default: one process below the size that pays for forking
    assert rec_mod.parse_workers(raw) == 1


def test_a_parse_pool_that_breaks_or_cannot_fork_falls_back_to_one_process(monkeypatch):
    from concurrent.futures.process import BrokenProcessPool

    from specnb.engine import records as rec_mod

    raw = {i: ([chunked(sse(1), sse(2))], [1.0], True) for i in range(3)}

    def broken(*a, **k):
        raise BrokenProcessPool("a worker died")

    monkeypatch.setattr(rec_mod, "parse_forked", broken)
    recs = [RequestRecord(index=i, slot=0, prompt_id="p", category=None, start_s=0.0) for i in range(3)]
    rec_mod.parse_streams(recs, raw, 0.0, workers=2)
    assert [r.output_tokens for r in recs] == [2, 2, 2] and all(r.error is None for r in recs)


def test_bad_utf8_in_a_chunk_is_read_as_before_not_refused():
    rec = RequestRecord(index=0, slot=0, prompt_id="p", category=None, start_s=0.0)
    parser = StreamParser(rec)
    parser.feed(b'data: {"choices": [{"delta": {"content": "a\xff"}}], "usage": {"completion_tokens": 1}}', 0.1)
    assert rec.error is None and rec.output_tokens == 1
