"""specnb's load generator before issue 14 (src/specnb/engine/loadgen.py at 76070f6), kept
unchanged as the benchmark's "before" client: aiohttp, each SSE line parsed as it arrives.

Closed-loop streaming load against an OpenAI-compatible chat endpoint.

``concurrency`` workers each send one streaming chat completion at a time, back to back,
until the point's request budget is spent, so exactly N requests are in flight between
the moment the last worker started and the moment the first worker ran out of work. That
window is the *steady* window; throughput counted inside it is the number a server at
concurrency N actually delivers, free of ramp-up and drain tails.

Every streamed chunk is timed on arrival. The token count of a chunk comes from vLLM's
``continuous_usage_stats`` (cumulative ``completion_tokens`` in every chunk): with
speculative decoding one chunk can carry several tokens, so inter-token latency is
computed per token (chunk gap / tokens in the chunk), not per chunk. When a server does
not report usage per chunk, each content chunk counts as one token and the record says so.

The client is aiohttp with its own SSE line handling: on these machines it ingests over
100k chunks/s on one core, flat up to c=256, while httpx (and so the ``openai`` client)
falls to 13k at c=256 (design/anchors.md). The load generator must not be the bottleneck.

A server started with ``--per-request-spec-decode-metrics summary`` (vLLM >= 0.32) puts each
request's own acceptance counts under ``metrics.speculative_decoding`` in the final
usage-only chunk of the stream (``choices: []``); the parser copies them into the
request's record (``spec_*`` fields, so they land in the Parquet sidecar), and
:func:`spec_decode_by_category` pools them per prompt category for the point's ledger:
the one place where copy-style and free-form acceptance are seen apart inside one run.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import aiohttp
import numpy as np

from specnb.engine import stats
from specnb.prompts.workload import UNCATEGORIZED

__all__ = [
    "RequestRecord",
    "StreamParser",
    "PointLoad",
    "run_load",
    "run_rate_load",
    "arrival_times",
    "summarize",
    "spec_decode_by_category",
]


@dataclass
class RequestRecord:
    """One request, times in seconds relative to the point's start (perf_counter)."""

    index: int
    worker: int
    prompt_id: str
    category: str | None
    start_s: float
    end_s: float = 0.0
    first_token_s: float | None = None
    chunk_times_s: list[float] = field(default_factory=list)
    chunk_tokens: list[int] = field(default_factory=list)
    output_tokens: int = 0
    prompt_tokens: int | None = None
    cached_prompt_tokens: int | None = None
    finish_reason: str | None = None
    token_count_source: str = "usage"
    http_status: int | None = None
    error: str | None = None
    # vLLM's per-request metrics.speculative_decoding (None when the server sent none)
    spec_mean_acceptance_length: float | None = None
    spec_draft_acceptance_rate: float | None = None
    spec_acceptance_histogram: list[int] | None = None
    spec_num_spec_steps: int | None = None
    spec_num_accepted_draft_tokens: int | None = None
    spec_num_draft_tokens: int | None = None
    spec_num_spec_tokens: int | None = None
    # the response itself, for the lossless check: vLLM's token ids (return_token_ids) when it
    # sent them, and a digest of the token ids (or of the text when there were none)
    output_token_ids: list[int] | None = None
    output_sha: str | None = None
    # open loop: when the request was due (its arrival time); start_s is when it was sent
    scheduled_s: float | None = None

    @property
    def ok(self) -> bool:
        return self.error is None and self.output_tokens > 0

    @property
    def ttft_s(self) -> float | None:
        return None if self.first_token_s is None else self.first_token_s - self.start_s

    @property
    def tpot_s(self) -> float | None:
        """(E2E - TTFT) / (n - 1): mean time per output token after the first."""
        if self.output_tokens < 2 or self.first_token_s is None or not self.chunk_times_s:
            return None
        return (self.chunk_times_s[-1] - self.first_token_s) / (self.output_tokens - 1)

    def itl_per_token_s(self) -> list[float]:
        """Inter-token latency, one value per token after the first chunk."""
        out: list[float] = []
        for i in range(1, len(self.chunk_times_s)):
            n = self.chunk_tokens[i]
            gap = self.chunk_times_s[i] - self.chunk_times_s[i - 1]
            out.extend([gap / n] * n)
        return out

    def as_row(self) -> dict[str, Any]:
        row = asdict(self)
        row["ttft_s"] = self.ttft_s
        row["tpot_s"] = self.tpot_s
        return row


class StreamParser:
    """Turns SSE lines of one chat-completion stream into a :class:`RequestRecord`.

    Pure: it takes lines and their arrival times, so it is tested on canned streams.
    """

    def __init__(self, record: RequestRecord):
        self.rec = record
        self._usage_seen = False
        self._last_completion = 0
        self._text: list[str] = []
        self.done = False

    def finish(self) -> None:
        """The response's digest, once the stream ended: sha256 of the token ids when the server
        sent them, else of the text (the lossless check compares arms with it)."""
        if self.rec.output_token_ids:
            data = ",".join(map(str, self.rec.output_token_ids)).encode()
            self.rec.output_sha = "ids:" + hashlib.sha256(data).hexdigest()[:24]
        elif self._text:
            self.rec.output_sha = "text:" + hashlib.sha256("".join(self._text).encode()).hexdigest()[:24]

    def feed(self, line: bytes | str, t: float) -> None:
        if isinstance(line, bytes):
            line = line.decode("utf-8", "replace")
        line = line.strip()
        if not line or line.startswith(":") or not line.startswith("data:"):
            return
        payload = line[5:].strip()
        if payload == "[DONE]":
            self.done = True
            return
        try:
            obj = json.loads(payload)
        except json.JSONDecodeError:
            self.rec.error = f"unparseable SSE data: {payload[:120]!r}"
            return
        if not isinstance(obj, dict):
            self.rec.error = f"SSE data is not a JSON object: {payload[:120]!r}"
            return
        if "error" in obj and not obj.get("choices"):
            err = obj["error"]
            self.rec.error = err.get("message", str(err)) if isinstance(err, dict) else str(err)
            return
        has_content = False
        for choice in obj.get("choices") or ():
            delta = choice.get("delta") or {}
            text = delta.get("content") or delta.get("reasoning_content") or delta.get("reasoning")
            if text:
                has_content = True
                self._text.append(text)
            ids = choice.get("token_ids")
            if ids:
                if self.rec.output_token_ids is None:
                    self.rec.output_token_ids = []
                self.rec.output_token_ids.extend(ids)
            if choice.get("finish_reason"):
                self.rec.finish_reason = choice["finish_reason"]
        metrics = obj.get("metrics")
        if isinstance(metrics, dict) and isinstance(metrics.get("speculative_decoding"), dict):
            self._spec(metrics["speculative_decoding"])
        usage = obj.get("usage") or {}
        completion = usage.get("completion_tokens")
        if usage.get("prompt_tokens") is not None:
            self.rec.prompt_tokens = int(usage["prompt_tokens"])
        details = usage.get("prompt_tokens_details") or {}
        if details.get("cached_tokens") is not None:
            self.rec.cached_prompt_tokens = int(details["cached_tokens"])
        if completion is not None and (self._usage_seen or self.rec.output_tokens == 0):
            # Cumulative usage in every chunk (vLLM continuous_usage_stats): exact counts.
            self._usage_seen = True
            self._add(t, int(completion) - self._last_completion)
            self._last_completion = int(completion)
        elif completion is not None:
            # Usage arrives only at the end, after chunks were counted one by one: keep the
            # chunk timing, take the server's total as the token count.
            if has_content:
                self._add(t, 1)
            self.rec.output_tokens = int(completion)
            self.rec.token_count_source = "chunks"
        elif has_content:
            self.rec.token_count_source = "chunks"
            self._add(t, 1)

    _SPEC_INT = ("num_spec_steps", "num_accepted_draft_tokens", "num_draft_tokens", "num_spec_tokens")

    def _spec(self, sd: dict[str, Any]) -> None:
        """Copy vLLM's per-request acceptance block; a malformed one is ignored, not fatal
        (the field is marked experimental upstream and may change shape)."""
        try:
            ints = {k: int(sd[k]) for k in self._SPEC_INT}
            hist = [int(x) for x in sd["acceptance_histogram"]]
            mal, rate = float(sd["mean_acceptance_length"]), float(sd["draft_acceptance_rate"])
        except (KeyError, TypeError, ValueError):
            return
        rec = self.rec
        rec.spec_mean_acceptance_length, rec.spec_draft_acceptance_rate = mal, rate
        rec.spec_acceptance_histogram = hist
        rec.spec_num_spec_steps = ints["num_spec_steps"]
        rec.spec_num_accepted_draft_tokens = ints["num_accepted_draft_tokens"]
        rec.spec_num_draft_tokens = ints["num_draft_tokens"]
        rec.spec_num_spec_tokens = ints["num_spec_tokens"]

    def _add(self, t: float, n_new: int) -> None:
        if n_new <= 0:
            return
        if self.rec.first_token_s is None:
            self.rec.first_token_s = t
        self.rec.chunk_times_s.append(t)
        self.rec.chunk_tokens.append(n_new)
        self.rec.output_tokens += n_new


@dataclass
class PointLoad:
    """Everything the load generator observed for one point."""

    concurrency: int
    records: list[RequestRecord]
    wall_start_s: float
    wall_end_s: float
    steady_start_s: float | None
    steady_end_s: float | None
    client_cpu_util: float | None = None  # CPU seconds of this process per wall second
    host_other_cpu_cores: float | None = None  # cores used by other processes (engine.hostload)
    # open loop: the offered rate, and the most requests that were in flight at once
    offered_rate_rps: float | None = None
    peak_in_flight: int | None = None


async def _one_request(
    session: aiohttp.ClientSession,
    url: str,
    body: dict[str, Any],
    rec: RequestRecord,
    t0: float,
) -> None:
    parser = StreamParser(rec)
    try:
        async with session.post(url, json=body) as resp:
            rec.http_status = resp.status
            if resp.status != 200:
                text = (await resp.text())[:300]
                rec.error = f"HTTP {resp.status}: {text}"
                return
            async for line in resp.content:
                parser.feed(line, time.perf_counter() - t0)
                if parser.done:
                    break
        if rec.error is None and rec.output_tokens == 0:
            rec.error = "stream ended without output tokens"
    except (TimeoutError, aiohttp.ClientError, ConnectionError) as exc:
        rec.error = f"{type(exc).__name__}: {exc}"[:300]
    finally:
        rec.end_s = time.perf_counter() - t0
        parser.finish()


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


def _request_params(sampling: dict[str, Any], prompt_index: int) -> dict[str, Any]:
    params = dict(sampling)
    if params.get("seed") is not None:
        # Same prompt -> same seed in every arm, so sampled runs stay paired.
        params["seed"] = int(params["seed"]) + prompt_index
    return params


def _session(request_timeout_s: float) -> aiohttp.ClientSession:
    return aiohttp.ClientSession(
        connector=aiohttp.TCPConnector(limit=0, force_close=False),
        timeout=aiohttp.ClientTimeout(total=request_timeout_s),
    )


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
) -> PointLoad:
    """Run ``num_requests`` streaming requests with exactly ``concurrency`` in flight.

    ``prompts`` are objects with ``id``, ``category``, ``messages`` and an optional
    ``seed`` offset; request i uses prompt ``(prompt_offset + i) % len(prompts)``, so two
    arms given the same arguments send the same prompts in the same order.
    """
    if concurrency < 1 or num_requests < 1:
        raise ValueError("concurrency and num_requests must be >= 1")
    if not prompts:
        raise ValueError("no prompts")
    url = base_url.rstrip("/") + "/v1/chat/completions"
    own = session is None
    if own:
        session = _session(request_timeout_s)
    records: list[RequestRecord] = []
    next_index = 0
    first_starts: list[float] = []
    last_ends: list[float] = []
    t0 = time.perf_counter()

    async def worker(w: int) -> None:
        nonlocal next_index
        first = True
        while next_index < num_requests:
            i = next_index
            next_index += 1
            p = prompts[(prompt_offset + i) % len(prompts)]
            rec = RequestRecord(
                index=i, worker=w, prompt_id=p.id, category=p.category,
                start_s=time.perf_counter() - t0,
            )
            if first:
                first_starts.append(rec.start_s)
                first = False
            records.append(rec)
            params = _request_params(sampling, (prompt_offset + i) % len(prompts))
            body = chat_body(model, p.messages, params, return_token_ids)
            await _one_request(session, url, body, rec, t0)
            if on_done is not None:
                on_done(rec)
        last_ends.append(time.perf_counter() - t0)

    try:
        await asyncio.gather(*(worker(w) for w in range(min(concurrency, num_requests))))
    finally:
        if own:
            await session.close()
    records.sort(key=lambda r: r.index)
    steady_start = max(first_starts) if len(first_starts) == concurrency else None
    steady_end = min(last_ends) if last_ends else None
    if steady_start is not None and steady_end is not None and steady_end <= steady_start:
        steady_start = steady_end = None
    return PointLoad(
        concurrency=concurrency,
        records=records,
        wall_start_s=min(r.start_s for r in records),
        wall_end_s=max(r.end_s for r in records),
        steady_start_s=steady_start,
        steady_end_s=steady_end,
    )



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


async def run_rate_load(
    base_url: str,
    model: str,
    prompts: Sequence[Any],
    rate_rps: float,
    num_requests: int,
    sampling: dict[str, Any],
    *,
    burstiness: float = 1.0,
    max_in_flight: int = 64,
    arrival_seed: int = 0,
    request_timeout_s: float = 600.0,
    session: aiohttp.ClientSession | None = None,
    on_done: Callable[[RequestRecord], None] | None = None,
    return_token_ids: bool = False,
) -> PointLoad:
    """Open-loop arrivals: request i is due at :func:`arrival_times`' i-th time, whether or not
    earlier ones finished, with prompt ``i % len(prompts)``; at most ``max_in_flight`` are in
    flight (an arrival that finds the cap full waits for a free slot). Each record keeps when it
    was due (``scheduled_s``) and when it was sent (``start_s``): the difference is the
    client's lateness, recorded so a schedule the client could not keep is seen. Throughput is
    counted over the whole run (first send to last answer): an open loop has no steady window
    of N requests in flight.
    """
    if num_requests < 1 or max_in_flight < 1:
        raise ValueError("num_requests and max_in_flight must be >= 1")
    if not prompts:
        raise ValueError("no prompts")
    url = base_url.rstrip("/") + "/v1/chat/completions"
    due = arrival_times(num_requests, rate_rps, burstiness, arrival_seed)
    own = session is None
    if own:
        session = _session(request_timeout_s)
    slots = asyncio.Semaphore(max_in_flight)
    records: list[RequestRecord] = []
    in_flight = peak = 0
    t0 = time.perf_counter()

    async def one(i: int) -> None:
        nonlocal in_flight, peak
        wait = due[i] - (time.perf_counter() - t0)
        if wait > 0:
            await asyncio.sleep(wait)
        async with slots:
            p = prompts[i % len(prompts)]
            rec = RequestRecord(index=i, worker=0, prompt_id=p.id, category=p.category,
                                start_s=time.perf_counter() - t0, scheduled_s=float(due[i]))
            records.append(rec)
            in_flight += 1
            peak = max(peak, in_flight)
            body = chat_body(model, p.messages, _request_params(sampling, i % len(prompts)), return_token_ids)
            try:
                await _one_request(session, url, body, rec, t0)
            finally:
                in_flight -= 1
            if on_done is not None:
                on_done(rec)

    try:
        await asyncio.gather(*(one(i) for i in range(num_requests)))
    finally:
        if own:
            await session.close()
    records.sort(key=lambda r: r.index)
    return PointLoad(
        concurrency=max_in_flight,
        records=records,
        wall_start_s=min(r.start_s for r in records),
        wall_end_s=max(r.end_s for r in records),
        steady_start_s=min(r.start_s for r in records),
        steady_end_s=max(r.end_s for r in records),
        offered_rate_rps=rate_rps,
        peak_in_flight=peak,
    )

def summarize(load: PointLoad) -> dict[str, Any]:
    """Per-point aggregates; names carry units. Failed requests count only as errors."""
    ok = [r for r in load.records if r.ok]
    errors = [r for r in load.records if not r.ok]
    wall = load.wall_end_s - load.wall_start_s
    out_tokens = sum(r.output_tokens for r in ok)
    steady_tok_s = None
    if load.steady_start_s is not None and load.steady_end_s is not None:
        lo, hi = load.steady_start_s, load.steady_end_s
        n = sum(k for r in ok for t, k in zip(r.chunk_times_s, r.chunk_tokens, strict=True) if lo <= t <= hi)
        steady_tok_s = n / (hi - lo)
    ttft = [r.ttft_s * 1e3 for r in ok if r.ttft_s is not None]
    tpot = [r.tpot_s * 1e3 for r in ok if r.tpot_s is not None]
    itl = [x * 1e3 for r in ok for x in r.itl_per_token_s()]
    per_user = [1e3 / x for x in tpot if x > 0]
    chunks = sum(len(r.chunk_times_s) for r in ok)
    prompt_tokens = sum(r.prompt_tokens or 0 for r in ok)
    summary: dict[str, Any] = {
        "num_requests": len(load.records),
        "num_ok": len(ok),
        "num_errors": len(errors),
        "error_examples": sorted({r.error or "no output" for r in errors})[:3],
        "duration_s": wall,
        "steady_window_s": (
            None if steady_tok_s is None else load.steady_end_s - load.steady_start_s
        ),
        "output_tokens": out_tokens,
        "prompt_tokens": prompt_tokens,
        "output_tok_s": steady_tok_s if steady_tok_s is not None else (out_tokens / wall if wall > 0 else None),
        "output_tok_s_wall": out_tokens / wall if wall > 0 else None,
        "total_tok_s_wall": (out_tokens + prompt_tokens) / wall if wall > 0 else None,
        "per_user_decode_tok_s_mean": stats.mean(per_user),
        "per_user_decode_tok_s_p50": stats.percentile(per_user, 50),
        "tokens_per_chunk_mean": out_tokens / chunks if chunks else None,
        "token_count_source": sorted({r.token_count_source for r in ok}) or None,
        "finish_reasons": {
            k: sum(1 for r in ok if r.finish_reason == k) for k in sorted({str(r.finish_reason) for r in ok})
        },
    }
    e2el = [(r.end_s - r.start_s) * 1e3 for r in ok]
    for name, values in (("ttft_ms", ttft), ("itl_ms", itl), ("tpot_ms", tpot), ("e2el_ms", e2el)):
        for key, v in stats.percentiles(values).items():
            summary[f"{key}_{name}"] = v
        summary[f"mean_{name}"] = stats.mean(values)
    if load.offered_rate_rps is not None:
        # open loop: did the client keep the schedule, and what rate was served
        late = [(r.start_s - r.scheduled_s) * 1e3 for r in load.records if r.scheduled_s is not None]
        summary.update(
            offered_rate_rps=load.offered_rate_rps,
            achieved_rate_rps=len(ok) / wall if wall > 0 else None,
            peak_in_flight=load.peak_in_flight,
            p50_send_lateness_ms=stats.percentile(late, 50),
            p99_send_lateness_ms=stats.percentile(late, 99),
            max_send_lateness_ms=max(late) if late else None,
        )
    return summary


def spec_decode_by_category(records: Sequence[RequestRecord]) -> dict[str, dict[str, Any]] | None:
    """Per-request acceptance pooled per prompt category (ok requests that reported it).

    Counts are summed and the ratios use vLLM's formulas on the sums (mean acceptance length
    = 1 + accepted / steps, acceptance rate = accepted / draft tokens), as ``/metrics`` does
    for the whole point. ``None`` when no request carried the metrics.
    """
    groups: dict[str, list[RequestRecord]] = {}
    for r in records:
        if r.ok and r.spec_num_spec_steps is not None:
            groups.setdefault(r.category or UNCATEGORIZED, []).append(r)
    if not groups:
        return None
    out: dict[str, dict[str, Any]] = {}
    for cat in sorted(groups):
        rs = groups[cat]
        width = max(len(r.spec_acceptance_histogram or []) for r in rs)
        hist = [0] * width
        for r in rs:
            for j, v in enumerate(r.spec_acceptance_histogram or []):
                hist[j] += v
        steps = sum(r.spec_num_spec_steps or 0 for r in rs)
        drafted = sum(r.spec_num_draft_tokens or 0 for r in rs)
        accepted = sum(r.spec_num_accepted_draft_tokens or 0 for r in rs)
        out_tokens = sum(r.output_tokens for r in rs)
        own = [1.0 + (r.spec_num_accepted_draft_tokens or 0) / r.spec_num_spec_steps
               for r in rs if r.spec_num_spec_steps]
        out[cat] = {
            "requests": len(rs),
            "output_tokens": out_tokens,
            "num_spec_steps": steps,
            "num_draft_tokens": drafted,
            "num_accepted_draft_tokens": accepted,
            "acceptance_histogram": hist,
            "mean_acceptance_length": 1.0 + accepted / steps if steps else None,
            "draft_acceptance_rate": accepted / drafted if drafted else None,
            "accepted_output_share": accepted / out_tokens if out_tokens else None,
            "request_mean_acceptance_length_p50": stats.percentile(own, 50),
        }
    return out
