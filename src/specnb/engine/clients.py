"""One closed-loop point spread over several client processes: one counter, one clock.

A fast GPU server can stream more chunks per second than one client core ingests. With
``run_load_in_processes(..., processes=P)`` the ``concurrency`` in-flight slots are split over P client
processes (``spawn``: safe from a program that already runs threads or an event loop; slot ids
stay global, process p runs slots ``[offset_p, offset_p + share_p)``), and every slot in every
process takes the next request index from ONE shared counter, so the semantics are those of
one process: N requests in flight until the indices run out, request i gets prompt
``(prompt_offset + i) % len(prompts)``. Each process drives the load driver's own closed loop
(:func:`specnb.engine.loadgen.closed_loop`).

One clock: ``time.monotonic`` is ``CLOCK_MONOTONIC``, one system-wide clock on Linux (not a
per-process one), so the parent picks a start instant once every process has connected its
slots, all processes start at it and time their records from it. Each process parses its
own streams after the point (in parallel), and returns its records and its CPU seconds per
wall second; the parent merges them, and the steady window is computed as in one process
over all slots. ``client_cpu_util`` is the busiest process's, so ``client_busy`` fires when
any one of them was saturated.
"""

from __future__ import annotations

import asyncio
import multiprocessing as mp
import queue
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from specnb.engine import loadgen, wire
from specnb.engine.records import parse_streams

__all__ = ["drive", "run_load_in_processes", "shares"]

READY_TIMEOUT_S = 120.0
START_DELAY_S = 0.1  # after the last process is ready: time for every one to see the start


@dataclass(frozen=True)
class _Prompt:
    """What a client process needs of a prompt (any prompt object pickles down to this)."""

    id: str
    category: str | None
    messages: list[dict[str, Any]]


def shares(slots: int, processes: int) -> list[int]:
    """In-flight slots per process, as even as they go (the first ones get one more)."""
    return [slots // processes + (1 if p < slots % processes else 0) for p in range(processes)]


def _child(p: int, args: dict[str, Any], counter: Any, ready_q: Any, start_q: Any, out_q: Any) -> None:
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

        async def go() -> loadgen.LoopResult:
            target = wire.Target(args["base_url"], loadgen.CHAT_PATH, args["headers"])
            requests = loadgen.RequestBuilder(target, args["model"], args["prompts"], args["sampling"],
                                              args["return_token_ids"])
            return await loadgen.closed_loop(
                requests, args["share"], take, prompt_offset=args["prompt_offset"], timeout_s=args["timeout_s"],
                first_slot=args["offset"], ready=ready, num_requests=n)

        res = asyncio.run(go())
        parse_s = parse_streams(res.records, res.raw, res.t0)
        out_q.put((p, res.records, (res.cpu_util, res.loop_busy), parse_s, None))
    except BaseException as exc:  # noqa: BLE001 - reported to the parent, which raises it
        out_q.put((p, None, None, None, f"{type(exc).__name__}: {exc}"))


def _run_blocking(base_url: str, model: str, prompts: Sequence[Any], concurrency: int, num_requests: int,
                  sampling: dict[str, Any], processes: int, timeout_s: float, headers: Mapping[str, str],
                  prompt_offset: int, return_token_ids: bool) -> loadgen.PointLoad:
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
                raise RuntimeError(f"a load client process did not get ready in {READY_TIMEOUT_S:g} s"
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
                    raise RuntimeError(f"load client process {dead[0].name} died (exit code {dead[0].exitcode})") from None
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
        raise RuntimeError(f"a load client process failed: {errors[0]}")
    records, utils, busy, parse = [], [], [], []
    for p in range(processes):
        recs, util, parse_s, _ = results[p]
        records += recs
        utils.append(util[0])
        busy.append(util[1])
        parse.append(parse_s)
    known = [b for b in busy if b is not None]
    return loadgen.point_load(concurrency, records, max(utils), max(parse), processes=processes,
                              process_cpu_util=utils, loop_busy=max(known) if known else None)


def _drain(q: Any, into: dict[int, tuple]) -> None:
    while True:
        try:
            item = q.get_nowait()
        except queue.Empty:
            return
        into[item[0]] = item[1:]


async def drive(target: loadgen.ChatTarget, load: loadgen.Load, items: Sequence[Any], sampling: dict[str, Any],
                on_done: Callable[[Any], None] | None = None) -> loadgen.PointLoad:
    """One point of any load shape (:func:`specnb.engine.loadgen.drive`), a closed loop's slots
    split over its ``processes`` client processes when it asks for more than one."""
    processes = getattr(load, "processes", 1)
    if processes > 1:
        return await run_load_in_processes(
            target.base_url, target.model, items, load.concurrency, load.num_requests, sampling,
            processes=processes, request_timeout_s=target.timeout_s, headers=target.headers, on_done=on_done,
            prompt_offset=load.prompt_offset, return_token_ids=target.return_token_ids)
    return await loadgen.drive(target, load, items, sampling, on_done)


async def run_load_in_processes(
    base_url: str, model: str, prompts: Sequence[Any], concurrency: int, num_requests: int,
    sampling: dict[str, Any], *, processes: int = 1, request_timeout_s: float = 600.0,
    session: Any = None, headers: Mapping[str, str] | None = None,
    on_done: Callable[[Any], None] | None = None, prompt_offset: int = 0, return_token_ids: bool = False,
) -> loadgen.PointLoad:
    """:func:`specnb.engine.loadgen.run_load` over ``processes`` client processes (one: that
    function itself). The waiting runs in a thread, so the caller's event loop (a metrics
    sampler) goes on; ``on_done`` is called for every record once the point is over."""
    if processes < 1:
        raise ValueError(f"processes must be >= 1, got {processes}")
    n_slots = min(concurrency, num_requests)
    if processes == 1 or n_slots == 1:
        return await loadgen.run_load(base_url, model, prompts, concurrency, num_requests, sampling,
                                      request_timeout_s=request_timeout_s, session=session, on_done=on_done,
                                      prompt_offset=prompt_offset, return_token_ids=return_token_ids, headers=headers)
    if concurrency < 1 or num_requests < 1 or not prompts:
        raise ValueError("concurrency and num_requests must be >= 1, with prompts")
    if sys.platform == "win32":  # pragma: no cover - CLOCK_MONOTONIC is the premise
        raise RuntimeError("several load client processes need one system-wide monotonic clock (Linux, macOS)")
    hdrs, timeout_s = loadgen.request_settings(session, headers, request_timeout_s)
    pl = await asyncio.to_thread(_run_blocking, base_url, model, prompts, concurrency, num_requests, sampling,
                                 min(processes, n_slots), timeout_s, hdrs, prompt_offset, return_token_ids)
    if on_done is not None:
        for rec in pl.records:
            on_done(rec)
    return pl
