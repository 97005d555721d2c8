"""One closed-loop point spread over several client processes: one counter, one clock.

A fast GPU server can stream more chunks per second than one client core ingests. With
``run_load(..., workers=P)`` the ``concurrency`` in-flight slots are split over P processes
(``spawn``: safe from a program that already runs threads or an event loop; worker ids stay
global, process p runs ids ``[offset_p, offset_p + share_p)``), and every slot in every
process takes the next request index from ONE shared counter, so the semantics are those of
one process: N requests in flight until the indices run out, request i gets prompt
``(prompt_offset + i) % len(prompts)``.

One clock: ``time.monotonic`` is ``CLOCK_MONOTONIC``, one system-wide clock on Linux (not a
per-process one), so the parent picks a start instant once every process has connected its
slots, all processes start at it and time their records from it. Each process parses its
own streams after the point (in parallel), and returns its records, its slots' first starts
and last ends and its CPU seconds per wall second; the parent merges them, and the steady
window is computed as in one process over all slots. ``client_cpu_util`` is the busiest
process's, so ``client_busy`` fires when any one of them was saturated.
"""

from __future__ import annotations

import asyncio
import multiprocessing as mp
import queue
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from specnb.engine import wire

__all__ = ["run_load_processes", "shares"]

READY_TIMEOUT_S = 120.0
START_DELAY_S = 0.1  # after the last process is ready: time for every one to see the start


@dataclass(frozen=True)
class _Prompt:
    """What a worker process needs of a prompt (any prompt object pickles down to this)."""

    id: str
    category: str | None
    messages: list[dict[str, Any]]


def shares(slots: int, processes: int) -> list[int]:
    """In-flight slots per process, as even as they go (the first ones get one more)."""
    return [slots // processes + (1 if p < slots % processes else 0) for p in range(processes)]


def _child(p: int, args: dict[str, Any], counter: Any, ready_q: Any, start_q: Any, out_q: Any) -> None:
    from specnb.engine import loadgen

    try:
        n = args["num_requests"]

        def take() -> int | None:
            with counter.get_lock():
                i = counter.value
                if i >= n:
                    return None
                counter.value = i + 1
                return i

        def ready() -> float:
            ready_q.put(p)
            return start_q.get()

        async def go() -> loadgen._LoopResult:
            target = wire.Target(args["base_url"], "/v1/chat/completions", args["headers"])
            requests = loadgen._Requests(target, args["model"], args["prompts"], args["sampling"],
                                         args["return_token_ids"])
            return await loadgen._closed_loop(
                target, requests, args["prompts"], args["share"], take, prompt_offset=args["prompt_offset"],
                timeout_s=args["timeout_s"], on_done=None, worker_offset=args["offset"], ready=ready,
                num_requests=n)

        res = asyncio.run(go())
        parse_s = loadgen._parse_records(res.records, res.raw, res.t0)
        out_q.put((p, res.records, res.first_starts, res.last_ends, (res.cpu_util, res.loop_busy), parse_s, None))
    except BaseException as exc:  # noqa: BLE001 - reported to the parent, which raises it
        out_q.put((p, None, None, None, None, None, f"{type(exc).__name__}: {exc}"))


def _run_blocking(base_url: str, model: str, prompts: Sequence[Any], concurrency: int, num_requests: int,
                  sampling: dict[str, Any], processes: int, timeout_s: float, headers: Mapping[str, str],
                  prompt_offset: int, return_token_ids: bool) -> Any:
    from specnb.engine import loadgen

    ctx = mp.get_context("spawn")
    counter = ctx.Value("q", 0, lock=True)
    ready_q, start_q, out_q = ctx.Queue(), ctx.Queue(), ctx.Queue()
    slots = min(concurrency, num_requests)
    share = shares(slots, processes)
    offsets = [sum(share[:p]) for p in range(processes)]
    plain = [_Prompt(str(x.id), x.category, x.messages) for x in prompts]
    base = dict(base_url=base_url, model=model, prompts=plain, num_requests=num_requests, sampling=dict(sampling),
                timeout_s=timeout_s, headers=dict(headers), prompt_offset=prompt_offset,
                return_token_ids=return_token_ids)
    children = [ctx.Process(target=_child, daemon=True, name=f"specnb-load-{p}",
                            args=(p, {**base, "share": share[p], "offset": offsets[p]}, counter, ready_q, start_q,
                                  out_q)) for p in range(processes)]
    results: dict[int, tuple] = {}
    try:
        for ch in children:
            ch.start()
        for _ in range(processes):
            try:
                ready_q.get(timeout=READY_TIMEOUT_S)
            except queue.Empty:
                _drain(out_q, results)
                errs = [r[-1] for r in results.values() if r[-1]]
                raise RuntimeError(f"a load worker process did not get ready in {READY_TIMEOUT_S:g} s"
                                   f"{': ' + errs[0] if errs else ''}") from None
        start_at = wire.clock() + START_DELAY_S
        for _ in range(processes):
            start_q.put(start_at)
        while len(results) < processes:
            try:
                item = out_q.get(timeout=1.0)
            except queue.Empty:
                dead = [ch for ch in children if not ch.is_alive() and ch.exitcode not in (0, None)]
                if dead and out_q.empty():
                    raise RuntimeError(f"load worker process {dead[0].name} died (exit code {dead[0].exitcode})") from None
                continue
            results[item[0]] = item[1:]
    finally:
        for ch in children:
            ch.join(timeout=10)
            if ch.is_alive():
                ch.kill()
                ch.join(timeout=5)
    errors = [r[-1] for r in results.values() if r[-1]]
    if errors:
        raise RuntimeError(f"a load worker process failed: {errors[0]}")
    records, first_starts, last_ends, utils, busy, parse = [], [], [], [], [], []
    for p in range(processes):
        recs, fs, le, util, parse_s, _ = results[p]
        records += recs
        first_starts += fs
        last_ends += le
        utils.append(util[0])
        busy.append(util[1])
        parse.append(parse_s)
    known = [b for b in busy if b is not None]
    return loadgen._point(concurrency, records, first_starts, last_ends, max(utils), max(parse),
                          workers=processes, worker_cpu_util=utils, loop_busy=max(known) if known else None)


def _drain(q: Any, into: dict[int, tuple]) -> None:
    while True:
        try:
            item = q.get_nowait()
        except queue.Empty:
            return
        into[item[0]] = item[1:]


async def run_load_processes(
    base_url: str, model: str, prompts: Sequence[Any], concurrency: int, num_requests: int,
    sampling: dict[str, Any], *, processes: int, timeout_s: float, headers: Mapping[str, str],
    on_done: Callable[[Any], None] | None, prompt_offset: int, return_token_ids: bool,
) -> Any:
    """:func:`specnb.engine.loadgen.run_load` over ``processes`` worker processes (its
    ``workers=``); the waiting runs in a thread, so the caller's event loop (a metrics
    sampler) goes on. ``on_done`` is called for every record once the point is over."""
    if processes < 1:
        raise ValueError(f"processes must be >= 1, got {processes}")
    if sys.platform == "win32":  # pragma: no cover - CLOCK_MONOTONIC is the premise
        raise RuntimeError("several load worker processes need one system-wide monotonic clock (Linux, macOS)")
    pl = await asyncio.to_thread(_run_blocking, base_url, model, prompts, concurrency, num_requests, sampling,
                                 processes, timeout_s, headers, prompt_offset, return_token_ids)
    if on_done is not None:
        for rec in pl.records:
            on_done(rec)
    return pl
