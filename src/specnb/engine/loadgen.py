"""The load driver: streaming chat requests against an OpenAI-compatible endpoint, arriving by
one of three policies, over one set of connections.

A point's load is one of three frozen shapes, each with its own driver (:func:`drive` picks it
by the shape's type; no mode strings are compared), and its requests go to one
:class:`ChatTarget` (the server's URL, the model, the headers and timeout):

- **Closed loop** (:class:`ClosedLoop`, :func:`run_load`): ``concurrency`` connection *slots*
  each send one streaming request at a time, back to back, until the point's request budget is
  spent, so exactly N requests are in flight inside the steady window
  (:mod:`specnb.analysis.window`).
- **Open loop** (:class:`OpenLoop`, :func:`drive_open`): request i is due at the i-th of
  gamma-distributed arrival times (:func:`arrival_times`), whether or not earlier ones
  finished, at most ``max_in_flight`` at once.

Both share what makes a measurement trustworthy, written once: the slots' connections are
opened and every request's bytes built before the clock starts (:class:`SlotPool`,
:class:`RequestBuilder`), a connection the server closed is reopened inside the request that
needs it, and the client's own CPU share and event-loop busy share are measured while the
requests run, with the garbage collector paused (:class:`ClientMeter`).

- **Conversation replay** (:class:`ConversationReplay`, :func:`drive_conversations`): a
  third arrival policy. N *users*
  (one slot each) take the next conversation of the point's panel, send its turns one after
  another with the whole history in front of each, wait for every answer (and an optional
  think time) before the next turn, then take the next conversation, until the point's
  conversations are spent. The history's assistant turns are the set's recorded answers (every
  request's bytes built before the clock) or the model's own (each answer parsed as soon as it
  ended, :func:`specnb.engine.records.response_text`, and the next turn's bytes built then).

The requests go over raw keep-alive connections (:mod:`specnb.engine.wire`): every socket read
is timed as it arrives and the streams are parsed after the point
(:func:`specnb.engine.records.parse_streams`), so the client ingests about twice the chunks per
second of ``vllm bench serve`` on one core (benchmarks/README.md). Hosts whose server outruns
one client core split a closed loop over several client processes with one clock
(:mod:`specnb.engine.clients`, which drives :func:`closed_loop` in each). The client's CPU share
is kept (``client_cpu_util``; above :data:`CLIENT_BUSY` the point is flagged ``client_busy``):
the load generator must not be the bottleneck.
"""

from __future__ import annotations

import asyncio
import gc
import itertools
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar

import aiohttp
import numpy as np

from specnb.analysis.window import steady_window
from specnb.engine import wire
from specnb.engine.records import RequestRecord, parse_streams, response_text
from specnb.ledger.names import LoadMode

__all__ = [
    "ChatTarget",
    "ClosedLoop",
    "OpenLoop",
    "ConversationReplay",
    "Load",
    "drive",
    "PointLoad",
    "LoopResult",
    "RequestBuilder",
    "SlotPool",
    "ClientMeter",
    "closed_loop",
    "point_load",
    "drive_closed",
    "drive_open",
    "drive_conversations",
    "run_load",
    "arrival_times",
    "chat_body",
    "request_settings",
    "CLIENT_BUSY",
    "CHAT_PATH",
]

CHAT_PATH = "/v1/chat/completions"
# share of one core above which the client itself may be the bottleneck (flag client_busy)
CLIENT_BUSY = 0.8


@dataclass
class PointLoad:
    """Everything the load driver observed for one point."""

    concurrency: int
    records: list[RequestRecord]
    wall_start_s: float
    wall_end_s: float
    steady_start_s: float | None
    steady_end_s: float | None
    # CPU seconds of the client per wall second while the requests ran (the busiest client
    # process when there are several): above CLIENT_BUSY the client may have limited the point.
    # Parsing the streams after the point is not counted (parse_s).
    client_cpu_util: float | None = None
    host_other_cpu_cores: float | None = None  # cores used by other processes (engine.hostload)
    host_busy_threshold: float | None = None  # the cores they may use before the point is flagged (on its CPUs)
    # open loop: the offered rate, and the most requests that were in flight at once
    offered_rate_rps: float | None = None
    peak_in_flight: int | None = None
    processes: int = 1  # client processes the slots were split over (engine.clients)
    process_cpu_util: list[float] | None = None  # per process, when processes > 1
    parse_s: float | None = None  # seconds spent parsing the streams after the point
    # share of the wall the client's event loop was not waiting for I/O (the busiest process's):
    # 1 when the client had work all along, even on a core it shared (engine.wire.LoopWaits)
    client_loop_busy: float | None = None
    # the wire.clock() instant the records' times count from (one client process; None otherwise):
    # what lines a point's chunks up with another clock (the engine profiler's, engine.anatomy)
    clock_zero_s: float | None = None
    # conversation replay: conversations sent, and turns never sent because an earlier turn of
    # their conversation failed (history = "model": there was no answer to carry on with)
    conversations: int | None = None
    turns_skipped: int | None = None


def chat_body(
    model: str,
    messages: list[dict[str, Any]],
    sampling: dict[str, Any],
    return_token_ids: bool = False,
) -> dict[str, Any]:
    """One streaming chat request. ``messages`` go out exactly as given (system, earlier
    assistant and tool turns of a multi-turn conversation included); sampling keys are
    added, ``None`` values left out. ``return_token_ids`` asks vLLM for each chunk's token
    ids (an extension of the OpenAI API: leave it off for other servers)."""
    body: dict[str, Any] = {
        "model": model,
        "messages": messages,
        "stream": True,
        "stream_options": {"include_usage": True, "continuous_usage_stats": True},
    }
    body.update({k: v for k, v in sampling.items() if v is not None})
    if return_token_ids:
        body["return_token_ids"] = True
    return body


def request_settings(session: aiohttp.ClientSession | None, headers: Mapping[str, str] | None,
                     request_timeout_s: float) -> tuple[dict[str, str], float]:
    """The headers (an endpoint's API key rides on its session) and the timeout a caller's
    aiohttp session carries: the requests themselves go over :mod:`specnb.engine.wire`."""
    out: dict[str, str] = {}
    timeout = request_timeout_s
    if session is not None:
        out.update({str(k): str(v) for k, v in session.headers.items()})
        total = getattr(session.timeout, "total", None)
        if total:
            timeout = float(total)
    out.update(headers or {})
    return out, timeout


@dataclass(frozen=True)
class ChatTarget:
    """Where a point's requests go: the server's base URL, the model it answers to, the headers
    every request carries (an endpoint's API key), the request timeout, and whether to ask for
    each chunk's token ids (a vLLM extension: off for other servers)."""

    base_url: str
    model: str
    headers: Mapping[str, str] = field(default_factory=dict)
    timeout_s: float = 600.0
    return_token_ids: bool = False

    @classmethod
    def of(cls, base_url: str, model: str, *, session: aiohttp.ClientSession | None = None,
           headers: Mapping[str, str] | None = None, request_timeout_s: float = 600.0,
           return_token_ids: bool = False) -> ChatTarget:
        """A target from a caller's aiohttp ``session`` (its headers and timeout, as
        :func:`request_settings` reads them) and ``headers`` added to them."""
        hdrs, timeout_s = request_settings(session, headers, request_timeout_s)
        return cls(base_url, model, hdrs, timeout_s, return_token_ids)

    def route(self) -> wire.Target:
        """The chat route's raw-connection target (raises ValueError on a malformed URL)."""
        return wire.Target(self.base_url, CHAT_PATH, self.headers)

    def requests(self, prompts: Sequence[Any], sampling: dict[str, Any]) -> RequestBuilder:
        return RequestBuilder(self.route(), self.model, prompts, sampling, self.return_token_ids)


@dataclass(frozen=True)
class ClosedLoop:
    """A closed loop's point: ``num_requests`` requests, exactly ``concurrency`` in flight;
    request i uses prompt ``(prompt_offset + i) % len(prompts)``; ``processes``: client processes
    the slots are split over (:func:`specnb.engine.clients.drive`; this module's driver runs one)."""

    mode: ClassVar[LoadMode] = LoadMode.CONCURRENCY
    concurrency: int
    num_requests: int
    prompt_offset: int = 0
    processes: int = 1


@dataclass(frozen=True)
class OpenLoop:
    """An open loop's point: ``num_requests`` arrivals at ``rate_rps`` (gamma gaps of shape
    ``burstiness`` drawn from ``arrival_seed``), at most ``max_in_flight`` in flight."""

    mode: ClassVar[LoadMode] = LoadMode.RATE
    rate_rps: float
    num_requests: int
    burstiness: float = 1.0
    max_in_flight: int = 64
    arrival_seed: int = 0


@dataclass(frozen=True)
class ConversationReplay:
    """A conversation replay's point: ``users`` users sending ``num_conversations``
    conversations turn by turn, with the ``history`` (``"recorded"`` or ``"model"``) before each
    turn and ``think_time_s`` between an answer and the next turn."""

    mode: ClassVar[LoadMode] = LoadMode.CONVERSATION
    users: int
    num_conversations: int
    history: str = "recorded"
    think_time_s: float = 0.0


Load = ClosedLoop | OpenLoop | ConversationReplay
OnDone = Callable[[RequestRecord], None] | None


class RequestBuilder:
    """Request bytes per prompt index, built once; the seed follows the prompt, so a sampled
    request is the same in every arm."""

    def __init__(self, target: wire.Target, model: str, prompts: Sequence[Any], sampling: dict[str, Any],
                 return_token_ids: bool):
        self.target, self.model, self.prompts = target, model, prompts
        self.sampling, self.return_token_ids = sampling, return_token_ids
        self._cache: dict[int, bytes] = {}

    def get(self, pidx: int) -> bytes:
        data = self._cache.get(pidx)
        if data is None:
            params = dict(self.sampling)
            if params.get("seed") is not None:
                params["seed"] = int(params["seed"]) + pidx
            body = chat_body(self.model, self.prompts[pidx].messages, params, self.return_token_ids)
            data = self._cache[pidx] = self.target.request(body)
        return data

    def prebuild(self, first: int, count: int) -> None:
        """Build the bytes of ``count`` requests from prompt index ``first`` on, before the clock."""
        for i in range(min(len(self.prompts), count)):
            self.get((first + i) % len(self.prompts))


class SlotPool:
    """The connections a point's requests go over, opened before the clock starts (TCP set-up
    is part of no request); a connection the server closed after its last response is reopened
    inside the request that needs it, as any client would."""

    def __init__(self, target: wire.Target, timeout_s: float, n: int):
        self.timeout_s = timeout_s
        self.raw: dict[int, wire.Raw] = {}  # request index -> its body's socket reads and their times
        self.conns = [wire.Connection(target, timeout_s, self.raw) for _ in range(n)]

    async def open(self) -> None:
        await asyncio.gather(*(c.connect() for c in self.conns))

    def send(self, conn: wire.Connection, rec: RequestRecord, data: bytes, t0: float,
             on_end: Callable[[wire.Connection, RequestRecord], None]) -> None:
        """Send ``data`` for ``rec`` on ``conn``; ``on_end(conn, rec)`` when it ended (answered,
        failed, timed out, or the connection could not be reopened: the record says which)."""
        if conn.usable:
            conn.send(rec, data, t0, on_end)
        else:
            asyncio.get_running_loop().create_task(self._reopen_and_send(conn, rec, data, t0, on_end))

    async def _reopen_and_send(self, conn: wire.Connection, rec: RequestRecord, data: bytes, t0: float,
                               on_end: Callable[[wire.Connection, RequestRecord], None]) -> None:
        start_s = rec.start_s
        try:
            await asyncio.wait_for(conn.connect(), self.timeout_s)
        except Exception as exc:  # noqa: BLE001 - any failure to reconnect ends the request, never the loop
            rec.error = f"{type(exc).__name__}: {exc}"[:300]
            rec.end_s = wire.clock() - t0
            on_end(conn, rec)
            return
        conn.send(rec, data, t0, on_end)
        rec.start_s = start_s  # the new connection's set-up is part of this request

    def close(self) -> None:
        for c in self.conns:
            c.close()


class ClientMeter:
    """While the requests run: the client's CPU seconds per wall second and its event loop's
    busy share, with the garbage collector paused (a collection stalls every stream at once)."""

    def __enter__(self) -> ClientMeter:
        self._loop = asyncio.get_running_loop()
        self._waits = wire.LoopWaits(self._loop)
        self._cpu0, self._wall0 = time.process_time(), wire.clock()
        self._gc_was = gc.isenabled()
        gc.disable()
        return self

    def __exit__(self, *exc: object) -> None:
        if self._gc_was:
            gc.enable()
        self.loop_busy = self._waits.busy_share()
        self.cpu_util = (time.process_time() - self._cpu0) / max(wire.clock() - self._wall0, 1e-9)


@dataclass
class LoopResult:
    """A closed loop's records (stream fields not yet parsed), their raw responses, the clock's
    zero and the client's meter readings."""

    records: list[RequestRecord]
    raw: dict[int, wire.Raw]
    t0: float
    cpu_util: float
    loop_busy: float | None = None


async def _start_together(start_at: float | None, ready: Callable[[], float] | None) -> float:
    """The clock's zero: now, or an instant several client processes agreed on."""
    if ready is not None:
        start_at = await asyncio.get_running_loop().run_in_executor(None, ready)
    if start_at is not None:
        while wire.clock() < start_at - 0.002:
            await asyncio.sleep(min(0.05, start_at - wire.clock() - 0.001))
        while wire.clock() < start_at:
            pass
        return start_at
    return wire.clock()


async def closed_loop(
    requests: RequestBuilder, n_slots: int, take: Callable[[], int | None], *, prompt_offset: int = 0,
    timeout_s: float, on_done: Callable[[RequestRecord], None] | None = None, first_slot: int = 0,
    start_at: float | None = None, ready: Callable[[], float] | None = None, num_requests: int | None = None,
) -> LoopResult:
    """``n_slots`` slots, each sending the next request (``take()``: its index, None when the
    point's requests are spent) the moment its previous one ended, from the callback that saw
    it end. Request i uses prompt ``(prompt_offset + i) % len(prompts)``. Slot ids start at
    ``first_slot`` (several processes number their slots apart); ``start_at`` (a
    :data:`wire.clock` instant) or ``ready`` (called once connected, returns that instant)
    start several processes together."""
    prompts = requests.prompts
    pool = SlotPool(requests.target, timeout_s, n_slots)
    await pool.open()
    requests.prebuild(prompt_offset, num_requests if num_requests is not None else len(prompts))
    t0 = await _start_together(start_at, ready)
    records: list[RequestRecord] = []
    done = asyncio.get_running_loop().create_future()
    left = [n_slots]
    slot_of = {id(c): first_slot + s for s, c in enumerate(pool.conns)}

    def ended(conn: wire.Connection, rec: RequestRecord) -> None:
        if on_done is not None:
            on_done(rec)
        nxt(conn)

    def nxt(conn: wire.Connection) -> None:
        i = take()
        if i is None:
            left[0] -= 1
            if left[0] == 0 and not done.done():
                done.set_result(None)
            return
        pidx = (prompt_offset + i) % len(prompts)
        p = prompts[pidx]
        rec = RequestRecord(index=i, slot=slot_of[id(conn)], prompt_id=p.id, category=p.category,
                            start_s=wire.clock() - t0)
        records.append(rec)
        pool.send(conn, rec, requests.get(pidx), t0, ended)

    try:
        with ClientMeter() as meter:
            for c in pool.conns:
                nxt(c)
            if left[0]:
                await done
    finally:
        pool.close()
    return LoopResult(records, pool.raw, t0, meter.cpu_util, meter.loop_busy)


def point_load(concurrency: int, records: list[RequestRecord], cpu_util: float | None, parse_s: float | None, *,
               processes: int = 1, process_cpu_util: list[float] | None = None,
               loop_busy: float | None = None) -> PointLoad:
    """A closed loop's point from its records (of every process), with its steady window (none
    when fewer requests than ``concurrency`` were sent: N were never in flight at once)."""
    records.sort(key=lambda r: r.index)
    win = steady_window([r.slot for r in records], [r.start_s for r in records], [r.end_s for r in records],
                        concurrency)
    return PointLoad(
        concurrency=concurrency, records=records,
        wall_start_s=min(r.start_s for r in records), wall_end_s=max(r.end_s for r in records),
        steady_start_s=None if win is None else win[0], steady_end_s=None if win is None else win[1],
        client_cpu_util=cpu_util, processes=processes, process_cpu_util=process_cpu_util, parse_s=parse_s,
        client_loop_busy=loop_busy,
    )


def _check(prompts: Sequence[Any], num_requests: int, in_flight: int) -> None:
    if in_flight < 1 or num_requests < 1:
        raise ValueError("the requests in flight and num_requests must be >= 1")
    if not prompts:
        raise ValueError("no prompts")


Driver = Callable[[ChatTarget, Any, Sequence[Any], dict[str, Any], OnDone], Awaitable[PointLoad]]
_DRIVERS: dict[type, Driver] = {}


def _drives(shape: type) -> Callable[[Driver], Driver]:
    """Register a driver as the one that runs points of ``shape``."""
    def register(fn: Driver) -> Driver:
        _DRIVERS[shape] = fn
        return fn
    return register


async def drive(target: ChatTarget, load: Load, items: Sequence[Any], sampling: dict[str, Any],
                on_done: OnDone = None) -> PointLoad:
    """One point: ``load``'s driver sends ``items`` (prompts, or conversations for a
    :class:`ConversationReplay`) to ``target``; ``on_done`` sees each record when its request
    ends. The stream's fields are filled before it returns."""
    return await _DRIVERS[type(load)](target, load, items, sampling, on_done)


def _from_streams(concurrency: int, records: list[Any], raw: Any, t0: float, cpu_util: Any,
                  loop_busy: Any) -> PointLoad:
    """A closed loop's point (a conversation replay's too): the raw streams parsed into their
    records, then the load over them, its clock's zero at ``t0``."""
    parse_s = parse_streams(records, raw, t0)
    pl = point_load(concurrency, records, cpu_util, parse_s, loop_busy=loop_busy)
    pl.clock_zero_s = t0
    return pl


@_drives(ClosedLoop)
async def drive_closed(target: ChatTarget, load: ClosedLoop, prompts: Sequence[Any], sampling: dict[str, Any],
                       on_done: OnDone = None) -> PointLoad:
    """Closed loop: ``load.num_requests`` streaming requests with exactly ``load.concurrency`` in
    flight (as :func:`run_load`)."""
    _check(prompts, load.num_requests, load.concurrency)
    requests = target.requests(prompts, sampling)
    counter = iter(range(load.num_requests))
    res = await closed_loop(requests, min(load.concurrency, load.num_requests), lambda: next(counter, None),
                            prompt_offset=load.prompt_offset, timeout_s=target.timeout_s, on_done=on_done,
                            num_requests=load.num_requests)
    return _from_streams(load.concurrency, res.records, res.raw, res.t0, res.cpu_util, res.loop_busy)


async def run_load(
    base_url: str,
    model: str,
    prompts: Sequence[Any],
    concurrency: int,
    num_requests: int,
    sampling: dict[str, Any],
    *,
    request_timeout_s: float = 600.0,
    session: aiohttp.ClientSession | None = None,
    on_done: Callable[[RequestRecord], None] | None = None,
    prompt_offset: int = 0,
    return_token_ids: bool = False,
    headers: Mapping[str, str] | None = None,
) -> PointLoad:
    """Closed loop: ``num_requests`` streaming requests with exactly ``concurrency`` in flight.

    ``prompts`` are objects with ``id``, ``category`` and ``messages``; request i uses prompt
    ``(prompt_offset + i) % len(prompts)``, so two arms given the same arguments send the same
    prompts in the same order. ``session`` (aiohttp) is read for its headers (an endpoint's API
    key) and timeout; ``headers`` adds to them. ``on_done`` sees each record when its request
    ends, with index, slot, prompt, times, HTTP status and transport errors; the stream's fields
    (chunks, tokens, finish reason, acceptance, in-stream errors) are filled before ``run_load``
    returns. Several client processes: :func:`specnb.engine.clients.run_load_in_processes`. The keyword form
    of :func:`drive_closed`.
    """
    _check(prompts, num_requests, concurrency)
    target = ChatTarget.of(base_url, model, session=session, headers=headers, request_timeout_s=request_timeout_s,
                           return_token_ids=return_token_ids)
    return await drive_closed(target, ClosedLoop(concurrency, num_requests, prompt_offset), prompts, sampling, on_done)


def arrival_times(n: int, rate_rps: float, burstiness: float = 1.0, seed: int = 0) -> np.ndarray:
    """When each of ``n`` open-loop requests is due, in seconds from the first (which is at 0).

    As vLLM bench: gaps are gamma-distributed with shape ``burstiness`` and mean 1 / rate
    (``burstiness = 1`` is a Poisson process; below 1 burstier, above 1 more regular), drawn
    from ``seed`` so every arm of a sweep sees the same schedule.
    """
    if n < 1 or not rate_rps > 0 or not burstiness > 0:
        raise ValueError("arrivals need n >= 1, rate > 0 and burstiness > 0")
    gaps = np.random.default_rng(seed).gamma(shape=burstiness, scale=1.0 / (rate_rps * burstiness), size=n - 1)
    return np.concatenate([[0.0], np.cumsum(gaps)])


class _FreeSlots:
    """An open loop's connections not carrying a request, and the most that were busy at once."""

    def __init__(self, pool: SlotPool):
        self.queue: asyncio.Queue[wire.Connection] = asyncio.Queue()
        self.slot_of: dict[int, int] = {}
        for s, c in enumerate(pool.conns):
            self.queue.put_nowait(c)
            self.slot_of[id(c)] = s
        self.in_flight = self.peak = 0

    async def take(self) -> wire.Connection:
        """A free connection, once one is (an arrival that finds every slot busy waits)."""
        return await self.queue.get()

    def busy(self) -> None:
        self.in_flight += 1
        self.peak = max(self.peak, self.in_flight)

    def free(self, conn: wire.Connection) -> None:
        self.in_flight -= 1
        self.queue.put_nowait(conn)


@_drives(OpenLoop)
async def drive_open(target: ChatTarget, load: OpenLoop, prompts: Sequence[Any], sampling: dict[str, Any],
                     on_done: OnDone = None) -> PointLoad:
    """Open loop: request i is due at :func:`arrival_times`' i-th time, whether or not earlier
    ones finished, with prompt ``i % len(prompts)``; at most ``load.max_in_flight`` are in flight
    (an arrival that finds every slot busy waits for a free one). Each record keeps when it was
    due (``scheduled_s``) and when it was sent (``start_s``): the difference is the client's
    lateness, recorded so a schedule the client could not keep is seen. Throughput is counted
    over the whole run (first send to last answer): an open loop has no steady window of N
    requests in flight."""
    n = load.num_requests
    _check(prompts, n, load.max_in_flight)
    requests = target.requests(prompts, sampling)
    due = arrival_times(n, load.rate_rps, load.burstiness, load.arrival_seed)
    loop = asyncio.get_running_loop()
    pool = SlotPool(requests.target, target.timeout_s, min(load.max_in_flight, n))
    await pool.open()
    slots = _FreeSlots(pool)
    requests.prebuild(0, n)
    records: list[RequestRecord] = []
    t0 = wire.clock()

    async def one(i: int) -> None:
        wait = due[i] - (wire.clock() - t0)
        if wait > 0:
            await asyncio.sleep(wait)
        conn = await slots.take()
        p = prompts[i % len(prompts)]
        rec = RequestRecord(index=i, slot=slots.slot_of[id(conn)], prompt_id=p.id, category=p.category,
                            start_s=wire.clock() - t0, scheduled_s=float(due[i]))
        records.append(rec)
        slots.busy()
        ended: asyncio.Future[None] = loop.create_future()
        try:
            pool.send(conn, rec, requests.get(i % len(prompts)), t0, lambda _c, _r: ended.set_result(None))
            await ended
        finally:
            slots.free(conn)
            if on_done is not None:
                on_done(rec)

    try:
        with ClientMeter() as meter:
            await asyncio.gather(*(one(i) for i in range(n)))
    finally:
        pool.close()
    parse_s = parse_streams(records, pool.raw, t0)
    records.sort(key=lambda r: r.index)
    return PointLoad(
        concurrency=load.max_in_flight, records=records,
        wall_start_s=min(r.start_s for r in records), wall_end_s=max(r.end_s for r in records),
        steady_start_s=min(r.start_s for r in records), steady_end_s=max(r.end_s for r in records),
        client_cpu_util=meter.cpu_util, offered_rate_rps=load.rate_rps, peak_in_flight=slots.peak, parse_s=parse_s,
        client_loop_busy=meter.loop_busy,
    )


def _check_replay(conversations: Sequence[Any], load: ConversationReplay) -> None:
    if load.users < 1 or load.num_conversations < 1:
        raise ValueError("users and num_conversations must be >= 1")
    if not conversations:
        raise ValueError("no conversations")
    if load.history not in ("recorded", "model"):
        raise ValueError(f"history must be 'recorded' or 'model', got {load.history!r}")
    if load.history == "recorded" and not all(c.recorded for c in conversations):
        raise ValueError("history = 'recorded' needs a recorded answer after every turn but the last of every "
                         "conversation; use history = 'model'")
    if load.think_time_s < 0:
        raise ValueError("think_time_s must be >= 0")


class TurnBuilder:
    """A conversation turn's request bytes, its whole history in front; the seed follows the
    turn's place in a pass over the conversations, so a sampled turn is the same in every arm.
    With the recorded history every turn's bytes are built before the clock, as a closed loop's."""

    def __init__(self, target: ChatTarget, route: wire.Target, conversations: Sequence[Any],
                 sampling: dict[str, Any]):
        self.target, self.route, self.conversations, self.sampling = target, route, conversations, sampling
        self.offsets = [0, *itertools.accumulate(len(c.turns) for c in conversations)]
        self.prebuilt: dict[tuple[int, int], bytes] = {}

    def build(self, cidx: int, turn: int, answers: list[str] | None) -> bytes:
        params = dict(self.sampling)
        if params.get("seed") is not None:
            params["seed"] = int(params["seed"]) + self.offsets[cidx] + turn
        body = chat_body(self.target.model, self.conversations[cidx].messages(turn, answers), params,
                         self.target.return_token_ids)
        return self.route.request(body)

    def prebuild(self, num_conversations: int) -> None:
        """Every turn of the conversations a point sends, with their recorded answers."""
        for cidx in range(min(len(self.conversations), num_conversations)):
            for turn in range(len(self.conversations[cidx].turns)):
                self.prebuilt[cidx, turn] = self.build(cidx, turn, None)

    def get(self, cidx: int, turn: int, answers: list[str]) -> bytes:
        return self.prebuilt.get((cidx, turn)) or self.build(cidx, turn, answers)


class _Replay:
    """The users of one conversation replay: each takes the next conversation and sends its
    turns one after another over its own connection, every record kept."""

    def __init__(self, load: ConversationReplay, conversations: Sequence[Any], turns: TurnBuilder, pool: SlotPool,
                 on_done: OnDone):
        self.load, self.conversations, self.turns, self.pool, self.on_done = load, conversations, turns, pool, on_done
        self.records: list[RequestRecord] = []
        self.taken = iter(range(load.num_conversations))  # shared by the users: each takes the next conversation
        self.index = itertools.count()
        self.skipped = 0
        self.t0 = 0.0  # the clock's zero, read just before the users start

    async def run(self) -> None:
        await asyncio.gather(*(self.user(s, c) for s, c in enumerate(self.pool.conns)))

    async def send(self, conn: wire.Connection, rec: RequestRecord, data: bytes) -> None:
        ended: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self.pool.send(conn, rec, data, self.t0, lambda _c, _r: ended.set_result(None))
        await ended
        if self.on_done is not None:
            self.on_done(rec)

    async def user(self, slot: int, conn: wire.Connection) -> None:
        for k in self.taken:
            await self.conversation(slot, conn, k)

    async def conversation(self, slot: int, conn: wire.Connection, k: int) -> None:
        """Conversation ``k``'s turns in order; with the model's own history a turn that got no
        answer ends it (its later turns counted as skipped)."""
        cidx = k % len(self.conversations)
        conv = self.conversations[cidx]
        answers: list[str] = []
        for turn in range(len(conv.turns)):
            if turn and self.load.think_time_s > 0:
                await asyncio.sleep(self.load.think_time_s)
            data = self.turns.get(cidx, turn, answers)
            rec = RequestRecord(index=next(self.index), slot=slot, prompt_id=conv.id, category=conv.category,
                                start_s=wire.clock() - self.t0, conversation=k, turn=turn + 1)
            self.records.append(rec)
            await self.send(conn, rec, data)
            if self.load.history == "model" and turn + 1 < len(conv.turns):
                text = self.answer(rec)
                if text is None:
                    self.skipped += len(conv.turns) - turn - 1
                    return
                answers.append(text)

    def answer(self, rec: RequestRecord) -> str | None:
        """The model's answer to a finished turn, parsed as soon as it ended; None when it failed
        or is empty (there is nothing to carry on with)."""
        text, err = (("", rec.error) if rec.error is not None
                     else response_text(self.pool.raw.get(rec.index, ([], [], False)), self.t0))
        return None if err is not None or not text else text


@_drives(ConversationReplay)
async def drive_conversations(target: ChatTarget, load: ConversationReplay, conversations: Sequence[Any],
                              sampling: dict[str, Any], on_done: OnDone = None) -> PointLoad:
    """Conversation replay: ``load.users`` users, each taking the next of ``load.num_conversations``
    conversations (conversation k is ``conversations[k % len(conversations)]``, objects with
    ``id``, ``category``, ``turns``, ``recorded`` and ``messages(turn, answers)``, as
    :class:`specnb.prompts.conversation.Conversation`) and sending its turns in order, each with
    the whole history, the next only once the previous one's answer is complete and
    ``load.think_time_s`` has passed. A user never has two requests in flight.

    ``load.history = "recorded"``: the history holds the recorded answers (every conversation must
    have them), so every arm sends the same bytes; a failed turn does not stop its conversation.
    ``load.history = "model"``: the history holds the model's own answers; a turn that failed ends
    its conversation (its later turns are counted in ``turns_skipped``, never sent). The seed of
    a request follows its place in a pass over the conversations (the same in every arm). Each
    record carries its conversation (``k``) and turn (1 = the first); its slot is its user. The
    steady window is the span every user was inside its conversations (from the last user's
    first send to the first user's last answer). ``on_done``: as :func:`run_load`.
    """
    _check_replay(conversations, load)
    route = target.route()
    turns = TurnBuilder(target, route, conversations, sampling)
    if load.history == "recorded":  # the same bytes in every arm: built before the clock, as a closed loop's
        turns.prebuild(load.num_conversations)
    pool = SlotPool(route, target.timeout_s, min(load.users, load.num_conversations))
    await pool.open()
    replay = _Replay(load, conversations, turns, pool, on_done)
    replay.t0 = wire.clock()
    try:
        with ClientMeter() as meter:
            await replay.run()
    finally:
        pool.close()
    pl = _from_streams(load.users, replay.records, pool.raw, replay.t0, meter.cpu_util, meter.loop_busy)
    pl.conversations = load.num_conversations
    pl.turns_skipped = replay.skipped
    return pl
