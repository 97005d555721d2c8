"""One request's record, and the parser that fills it from the stream the server sent.

The load driver (:mod:`specnb.engine.loadgen`) times every socket read of a response as it
arrives and parses nothing while the point runs; :func:`parse_streams` then turns each raw
response into its :class:`RequestRecord`'s stream fields, with :class:`StreamParser`, which is
pure (lines and their arrival times in, a record out) and tested on canned streams.

The token count of a chunk comes from vLLM's ``continuous_usage_stats`` (cumulative
``completion_tokens`` in every chunk): with speculative decoding one chunk can carry several
tokens, so inter-token latency is computed per token (chunk gap / tokens in the chunk), not per
chunk. When a server does not report usage per chunk, each content chunk counts as one token
and the record says so (``token_count_source``).

A conversation replayed with the model's own answers needs each answer's text before the next
turn: :func:`response_text` parses that one response as soon as it ended (into a throwaway
record; the timing fields are parsed after the point as for every request).

A server started with ``--per-request-spec-decode-metrics summary`` (vLLM >= 0.32) puts each
request's own acceptance counts under ``metrics.speculative_decoding`` in the final usage-only
chunk of the stream (``choices: []``); the parser copies them into the record (``spec_*``
fields, so they land in the Parquet sidecar).
"""

from __future__ import annotations

import hashlib
import json
import multiprocessing
import signal
import sys
from collections.abc import Sequence
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from dataclasses import asdict, dataclass, field
from typing import Any

from specnb.engine import wire
from specnb.engine.hostload import usable_cpus

__all__ = ["RequestRecord", "StreamParser", "parse_streams", "response_text", "parse_forked"]

try:  # orjson parses a chunk about 3x faster than json (the parse after a point: benchmarks/README.md)
    from orjson import loads as _loads
except ImportError:  # pragma: no cover - orjson is a dependency; json gives the same objects
    _loads = json.loads

_BAD = object()


def _lenient(payload: bytes) -> Any:
    """What the standard library reads where orjson refuses (NaN, integers past 64 bits), else _BAD."""
    try:
        return json.loads(payload.decode("utf-8", "replace"))
    except ValueError:
        return _BAD


@dataclass
class RequestRecord:
    """One request, times in seconds relative to the point's start (perf_counter)."""

    index: int
    slot: int  # the connection slot that sent it (a closed loop at concurrency N has N)
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
    # conversation replay: the conversation's position in the point (0, 1, ...: the n-th one any
    # user took) and the turn (1 = its first user turn); slot is the user
    conversation: int | None = None
    turn: int | None = None

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

    @property
    def text(self) -> str:
        """The response's text as streamed so far (content, or reasoning where there was none)."""
        return "".join(self._text)

    def finish(self) -> None:
        """The response's digest, once the stream ended: sha256 of the token ids when the server
        sent them, else of the text (the lossless check compares arms with it)."""
        if self.rec.output_token_ids:
            data = ",".join(map(str, self.rec.output_token_ids)).encode()
            self.rec.output_sha = "ids:" + hashlib.sha256(data).hexdigest()[:24]
        elif self._text:
            self.rec.output_sha = "text:" + hashlib.sha256("".join(self._text).encode()).hexdigest()[:24]

    def feed(self, line: bytes | str, t: float) -> None:
        if isinstance(line, str):
            line = line.encode("utf-8", "surrogatepass")
        line = line.strip()
        if not line.startswith(b"data:"):  # blank lines, comments, other SSE fields
            return
        payload = line[5:].strip()
        if payload == b"[DONE]":
            self.done = True
            return
        try:
            obj = _loads(payload)
        except ValueError:  # json's and orjson's decode errors are ValueErrors
            obj = _lenient(payload)
        if obj is _BAD:
            self.rec.error = f"unparseable SSE data: {payload[:120].decode('utf-8', 'replace')!r}"
            return
        if not isinstance(obj, dict):
            self.rec.error = f"SSE data is not a JSON object: {payload[:120].decode('utf-8', 'replace')!r}"
            return
        rec = self.rec
        choices = obj.get("choices")
        if not choices and "error" in obj:
            err = obj["error"]
            rec.error = err.get("message", str(err)) if isinstance(err, dict) else str(err)
            return
        # the hot path (one call per chunk, millions per GPU point): as few lookups as the fields need
        has_content = False
        for choice in choices or ():
            delta = choice.get("delta")
            if delta:
                text = delta.get("content") or delta.get("reasoning_content") or delta.get("reasoning")
                if text:
                    has_content = True
                    self._text.append(text)
            ids = choice.get("token_ids")
            if ids:
                if rec.output_token_ids is None:
                    rec.output_token_ids = []
                rec.output_token_ids.extend(ids)
            finish = choice.get("finish_reason")
            if finish:
                rec.finish_reason = finish
        metrics = obj.get("metrics")
        if metrics and isinstance(metrics, dict) and isinstance(metrics.get("speculative_decoding"), dict):
            self._spec(metrics["speculative_decoding"])
        usage = obj.get("usage")
        completion = None
        if usage:
            completion = usage.get("completion_tokens")
            prompt = usage.get("prompt_tokens")
            if prompt is not None:
                rec.prompt_tokens = int(prompt)
            details = usage.get("prompt_tokens_details")
            if details and details.get("cached_tokens") is not None:
                rec.cached_prompt_tokens = int(details["cached_tokens"])
        if completion is not None and (self._usage_seen or rec.output_tokens == 0):
            # Cumulative usage in every chunk (vLLM continuous_usage_stats): exact counts.
            self._usage_seen = True
            completion = int(completion)
            self._add(t, completion - self._last_completion)
            self._last_completion = completion
        elif completion is not None:
            # Usage arrives only at the end, after chunks were counted one by one: keep the
            # chunk timing, take the server's total as the token count.
            if has_content:
                self._add(t, 1)
            rec.output_tokens = int(completion)
            rec.token_count_source = "chunks"
        elif has_content:
            rec.token_count_source = "chunks"
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


# Above this many response bytes (about 130k chunks of vLLM's shape) the parse is split over
# worker processes, one per free core up to PARSE_WORKERS_MAX: a GPU point at c=256 holds
# millions of chunks, and the parse after each point is time no measurement shows.
PARALLEL_BYTES = 32 * 2**20
PARSE_WORKERS_MAX = 8


def parse_streams(records: Sequence[RequestRecord], raw: dict[int, wire.Raw], t0: float,
                  workers: int | None = None) -> float:
    """Fill each record's stream fields from its raw response (the socket reads the driver timed
    while the point ran); returns the seconds the parse took. ``workers`` processes share the
    parse (None: :func:`parse_workers` decides from the bytes and the free cores); the records
    come out the same either way, and a pool that cannot start or loses a worker falls back to
    one process."""
    tp = wire.clock()
    n = parse_workers(raw) if workers is None else max(1, workers)
    # a load client's own worker is a daemon process: those may not have children
    if n > 1 and len(records) > 1 and _can_fork() and not multiprocessing.current_process().daemon:
        try:
            parse_forked(records, raw, t0, min(n, len(records)))
        except (OSError, BrokenProcessPool):
            _parse_serial(records, raw, t0)
    else:
        _parse_serial(records, raw, t0)
    return wire.clock() - tp


def _can_fork() -> bool:
    # fork is available on macOS too, but not safe there after system frameworks load
    return sys.platform.startswith("linux") and "fork" in multiprocessing.get_all_start_methods()


def parse_workers(raw: dict[int, wire.Raw]) -> int:
    """1 below PARALLEL_BYTES of responses, else one process per core this one may use (at most
    PARSE_WORKERS_MAX)."""
    size = sum(len(b) for bufs, _, _ in raw.values() for b in bufs)
    if size < PARALLEL_BYTES:
        return 1
    return max(1, min(len(usable_cpus()), PARSE_WORKERS_MAX))


def response_text(raw: wire.Raw, t0: float = 0.0) -> tuple[str, str | None]:
    """The text of one finished response and its error (None when it is a clean answer), parsed
    into a throwaway record: a conversation replayed with the model's own answers needs each
    answer before its next turn. The request's own record is still filled by
    :func:`parse_streams` after the point, so its timing fields are parsed as for every request."""
    rec = RequestRecord(index=-1, slot=-1, prompt_id="", category=None, start_s=0.0)
    parser = StreamParser(rec)
    err = wire.parse_response(parser, raw, t0) or rec.error
    if err is None and rec.output_tokens == 0:
        err = "stream ended without output tokens"
    return parser.text, err


def _parse_serial(records: Sequence[RequestRecord], raw: dict[int, wire.Raw], t0: float) -> None:
    for rec in records:
        r = raw.get(rec.index)
        if r is None:
            continue
        parser = StreamParser(rec)
        failed = rec.error is not None  # a transport error or timeout: keep its text
        err = wire.parse_response(parser, r, t0)
        parser.finish()
        if not failed:
            if err and rec.error is None:
                rec.error = err
            if rec.error is None and rec.output_tokens == 0:
                rec.error = "stream ended without output tokens"


_JOB: tuple[Sequence[RequestRecord], dict[int, wire.Raw], float] | None = None  # a forked worker's own copy


def _worker_init(records: Sequence[RequestRecord], raw: dict[int, wire.Raw], t0: float) -> None:
    """In a forked worker: the job it inherited (fork passes these without pickling them), and
    Ctrl-C left to the parent (a kernel interrupt signals the whole process group)."""
    global _JOB
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    _JOB = (records, raw, t0)


def _parse_part(part: tuple[int, int]) -> list[tuple[int, dict[str, Any]]]:
    """In a forked worker: parse every ``n``-th record from ``i``; their fields go back."""
    i, n = part
    records, raw, t0 = _JOB  # type: ignore[misc]
    mine = list(records[i::n])
    _parse_serial(mine, raw, t0)
    return [(i + k * n, vars(rec)) for k, rec in enumerate(mine)]


def parse_forked(records: Sequence[RequestRecord], raw: dict[int, wire.Raw], t0: float, n: int) -> None:
    """The parse split over ``n`` forked processes: they inherit the raw bytes (nothing is sent
    to them), each sends its records' fields back, and the pool is shut down before returning.
    A worker that dies raises BrokenProcessPool (the caller parses in-process then); no record
    is touched until every part is back."""
    ctx = multiprocessing.get_context("fork")
    with ProcessPoolExecutor(n, mp_context=ctx, initializer=_worker_init, initargs=(records, raw, t0)) as pool:
        parts = list(pool.map(_parse_part, [(i, n) for i in range(n)]))
    for part in parts:
        for pos, fields in part:
            vars(records[pos]).update(fields)
