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

A server started with ``--per-request-spec-decode-metrics summary`` (vLLM >= 0.32) puts each
request's own acceptance counts under ``metrics.speculative_decoding`` in the final usage-only
chunk of the stream (``choices: []``); the parser copies them into the record (``spec_*``
fields, so they land in the Parquet sidecar).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from specnb.engine import wire

__all__ = ["RequestRecord", "StreamParser", "parse_streams"]


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


def parse_streams(records: Sequence[RequestRecord], raw: dict[int, wire.Raw], t0: float) -> float:
    """Fill each record's stream fields from its raw response (the socket reads the driver timed
    while the point ran); returns the seconds the parse took."""
    tp = wire.clock()
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
    return wire.clock() - tp
