#!/usr/bin/env python3
"""The parse after a point, alone: synthetic vLLM-shaped streams through parse_streams.

  python benchmarks/bench_parse.py [requests] [chunks per request]     (default 2000 128)

Each response is what vLLM sends with continuous usage stats (a role chunk, token chunks of
1, 3, 2, 4 tokens with cumulative usage, a usage-only chunk, [DONE]), chunked-encoded, two
events per socket read. Prints chunks/s parsed in one process and in two (the records are
checked identical), and the worker count parse_streams would pick. No server, no network.
Run it under the CPU lock on a shared machine: flock /tmp/specnb-cpu.lock python ...
"""

from __future__ import annotations

import sys

from specnb.engine import records
from specnb.engine.records import RequestRecord, parse_streams

WORDS = [b" the", b" model", b" drafts", b" tokens", b" and", b" target", b" verifies", b",", b"."]


def stream(seq: int, n_chunks: int, per_read: int = 2):
    prefix = (b'data: {"id":"chatcmpl-%d","object":"chat.completion.chunk","created":1764600000,'
              b'"model":"smollm2-135m","choices":[{"index":0,"delta":' % seq)
    events = [prefix + b'{"role":"assistant","content":""},"logprobs":null,"finish_reason":null}],'
              b'"usage":{"prompt_tokens":120,"total_tokens":120,"completion_tokens":0}}\n\n']
    done = 0
    for i in range(n_chunks):
        k = (1, 3, 2, 4)[i % 4]
        done += k
        fin = b'"length"' if i == n_chunks - 1 else b"null"
        events.append(prefix + b'{"content":"%b"},"logprobs":null,"finish_reason":%b}],"usage":{"prompt_tokens":120,'
                      b'"total_tokens":%d,"completion_tokens":%d}}\n\n' % (WORDS[i % 9] * k, fin, 120 + done, done))
    events.append(b'data: {"id":"chatcmpl-%d","object":"chat.completion.chunk","created":1764600000,"model":'
                  b'"smollm2-135m","choices":[],"usage":{"prompt_tokens":120,"total_tokens":%d,"completion_tokens":%d}}'
                  b'\n\n' % (seq, 120 + done, done))
    events.append(b"data: [DONE]\n\n")
    bufs, times = [], []
    for j in range(0, len(events), per_read):
        bufs.append(b"".join(b"%x\r\n%b\r\n" % (len(e), e) for e in events[j:j + per_read]))
        times.append(1.0 + j * 0.001)
    bufs[-1] += b"0\r\n\r\n"
    return (bufs, times, True)


def main(argv: list[str]) -> None:
    n_req = int(argv[0]) if argv else 2000
    n_chunks = int(argv[1]) if len(argv) > 1 else 128
    raw = {i: stream(i, n_chunks) for i in range(n_req)}
    size = sum(len(b) for bufs, _, _ in raw.values() for b in bufs)
    first = None
    for workers in (1, 2):
        recs = [RequestRecord(index=i, slot=i % 256, prompt_id=str(i), category=None, start_s=0.0) for i in range(n_req)]
        s = parse_streams(recs, raw, 0.0, workers=workers)
        assert all(r.error is None for r in recs), recs[0].error
        rows = [r.as_row() for r in recs]
        assert first is None or rows == first, "the records differ between one process and two"
        first = rows
        print(f"workers={workers}: {n_req * n_chunks:,} chunks ({size / 2**20:.0f} MiB) parsed in {s:.2f} s: "
              f"{n_req * n_chunks / s:,.0f} chunks/s")
    print(f"parse_streams would use {records.parse_workers(raw)} process(es) for this point")


if __name__ == "__main__":
    main(sys.argv[1:])
