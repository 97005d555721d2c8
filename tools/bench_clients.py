"""How many streamed chunks per second each load client ingests: specnb's aiohttp load generator
against the official openai client (httpx), on one core, against a zero-delay stub server.

A zero-delay OpenAI-compatible SSE stub runs in its own process pinned to core 1 and answers
every chat completion with ``--chunks`` one-token chunks and a usage chunk; the client under test
runs pinned to core 0 with ``--concurrency`` requests in flight. A zero-delay stream is the
client's best case: whatever a client cannot ingest here it cannot ingest from a real server.

    .venv/bin/python tools/bench_clients.py --concurrency 8 64 256 --repeats 3

Prints chunks/s per client and concurrency (median of the repeats) and checks each client's
chunk count against the requests it completed. Run it on a quiet machine (the README's numbers
were taken under flock /tmp/specnb-cpu.lock, with no vLLM server running).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing
import os
import socket
import statistics
import sys
import time


def _pin(core: int) -> None:
    try:
        os.sched_setaffinity(0, {core % os.cpu_count()})
    except (AttributeError, OSError):
        pass


def _stub(port: int, chunks: int, ready) -> None:
    from aiohttp import web

    _pin(1)
    head = {"id": "c", "object": "chat.completion.chunk", "created": 0, "model": "stub"}
    piece = ("data: " + json.dumps({**head, "choices": [{"index": 0, "delta": {"content": "x"},
                                                         "finish_reason": None}]}) + "\n\n").encode()
    tail = ("data: " + json.dumps({**head, "choices": [], "usage": {"prompt_tokens": 4, "completion_tokens": chunks,
                                                                  "total_tokens": chunks + 4}}) + "\n\n"
            + "data: [DONE]\n\n").encode()

    async def chat(request: web.Request) -> web.StreamResponse:
        await request.read()
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        for _ in range(chunks):
            await resp.write(piece)
        await resp.write(tail)
        await resp.write_eof()
        return resp

    async def models(_request: web.Request) -> web.Response:
        return web.json_response({"object": "list", "data": [{"id": "stub", "object": "model", "created": 0,
                                                              "owned_by": "t"}]})

    app = web.Application()
    app.router.add_post("/v1/chat/completions", chat)
    app.router.add_get("/v1/models", models)
    ready.set()
    web.run_app(app, host="127.0.0.1", port=port, print=None, access_log=None)


class _Prompt:
    id, category, messages = "p", None, [{"role": "user", "content": "hi"}]


async def _specnb(url: str, concurrency: int, n: int) -> tuple[int, int, float]:
    from specnb.engine.loadgen import run_load

    t0 = time.perf_counter()
    load = await run_load(url, "stub", [_Prompt()], concurrency, n, {"max_tokens": 128, "temperature": 0.0})
    wall = time.perf_counter() - t0
    ok = [r for r in load.records if r.ok]
    return sum(len(r.chunk_times_s) for r in ok), len(ok), wall


async def _openai(url: str, concurrency: int, n: int) -> tuple[int, int, float]:
    import openai

    client = openai.AsyncOpenAI(base_url=url + "/v1", api_key="EMPTY", max_retries=0, timeout=600)
    left, chunks, done = n, 0, 0

    async def worker() -> None:
        nonlocal left, chunks, done
        while left > 0:
            left -= 1
            stream = await client.chat.completions.create(
                model="stub", messages=_Prompt.messages, max_tokens=128, temperature=0.0, stream=True,
                stream_options={"include_usage": True})
            async for chunk in stream:
                if chunk.choices:
                    chunks += 1
            done += 1

    t0 = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(concurrency)))
    wall = time.perf_counter() - t0
    await client.close()
    return chunks, done, wall


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--concurrency", type=int, nargs="+", default=[8, 64, 256])
    p.add_argument("--requests", type=int, default=1024, help="requests per run")
    p.add_argument("--chunks", type=int, default=128, help="one-token chunks per response")
    p.add_argument("--repeats", type=int, default=3)
    a = p.parse_args(argv)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    ctx = multiprocessing.get_context("spawn")
    ready = ctx.Event()
    server = ctx.Process(target=_stub, args=(port, a.chunks, ready), daemon=True)
    server.start()
    ready.wait(30)
    time.sleep(1.0)
    _pin(0)
    url = f"http://127.0.0.1:{port}"
    print(f"{'client':<28} {'c':>4} {'chunks/s (median of ' + str(a.repeats) + ')':>26}  runs")
    try:
        for c in a.concurrency:
            for name, fn in (("specnb run_load (aiohttp)", _specnb), ("openai AsyncOpenAI (httpx)", _openai)):
                rates = []
                for _ in range(a.repeats):
                    chunks, done, wall = asyncio.run(fn(url, c, a.requests))
                    if chunks != done * a.chunks:
                        print(f"{name}: counted {chunks} chunks for {done} requests", file=sys.stderr)
                    rates.append(chunks / wall)
                print(f"{name:<28} {c:>4} {statistics.median(rates):>26,.0f}  "
                      + " / ".join(f"{r / 1e3:.1f}k" for r in rates), flush=True)
    finally:
        server.terminate()
        server.join(5)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
