#!/usr/bin/env python3
"""A fast OpenAI-compatible streaming stub, to measure load generators (not servers).

It speaks just enough HTTP/1.1 (keep-alive, chunked transfer encoding) on raw asyncio
protocols (uvloop when installed) to serve:

* ``POST /v1/chat/completions``: a streaming chat completion shaped like vLLM's: a role
  chunk and the first token chunk in one write, then one token chunk per engine *step*, the
  last one with ``finish_reason``; usage in every chunk when the request asks for
  ``stream_options.continuous_usage_stats`` (or ``--always-usage``), the final usage-only
  chunk (``choices: []``) when it asks for ``include_usage`` (with vLLM 0.32's per-request
  ``metrics.speculative_decoding`` when ``--spec-metrics``), then ``data: [DONE]``.
  Non-streaming requests get one JSON body.
* ``GET /v1/models``, ``GET /health``, ``GET /metrics`` (a few vLLM-named Prometheus series).
* ``GET /stub/stats`` (counters, this process's CPU seconds, the clock), ``POST /stub/reset``
  (counters and emission log to zero), ``GET /stub/log`` (the emission log as JSON).

Timing model: one engine loop, like vLLM's scheduler: every ``--delay-ms`` it emits one chunk
to every running stream (absolute schedule, so the period does not drift with the work done
in a step). ``--delay-ms 0`` steps as fast as the loop turns, ``--burst`` chunks per stream
per step (the ingestion-ceiling setting). A stream whose socket is full (the transport paused
writing) skips steps until it drains, so a slow client is never buried under buffered data.
``--tokens-per-chunk`` is a comma pattern cycled over a stream's chunks (``1`` plain decoding,
``1,3,2,4`` what speculative decoding produces).

Emission log: per token chunk, the stream's sequence number, ``time.perf_counter_ns()`` just
before the write (CLOCK_MONOTONIC, the same clock as every client's ``perf_counter`` on this
host), and its token count. A client's chunk count, ITL and TPOT can be checked against it.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import resource
import sys
import time
from array import array
from urllib.parse import parse_qs, urlsplit

try:
    import orjson

    def _loads(b: bytes):
        return orjson.loads(b)

    def _dumps(o) -> bytes:
        return orjson.dumps(o)
except ImportError:  # pragma: no cover
    import json

    def _loads(b: bytes):
        return json.loads(b)

    def _dumps(o) -> bytes:
        return json.dumps(o, separators=(",", ":")).encode()


perf_ns = time.perf_counter_ns

WORDS = [b" the", b" model", b" drafts", b" tokens", b" and", b" the", b" target", b" verifies",
         b" them", b" in", b" one", b" step", b",", b" so", b" several", b" arrive", b" together", b"."]


def _usage(prompt: int, done: int) -> bytes:
    return b'{"prompt_tokens":%d,"total_tokens":%d,"completion_tokens":%d}' % (prompt, prompt + done, done)


class Stream:
    """One streaming chat completion in flight."""

    __slots__ = ("conn", "seq", "prefix", "prompt", "usage_every", "usage_final", "pattern",
                 "n_chunks", "sent", "tokens", "due_ns", "close_after", "started_ns", "error_at")

    def __init__(self, conn, seq, prefix, prompt, usage_every, usage_final, pattern, n_chunks,
                 due_ns, close_after):
        self.conn = conn
        self.seq = seq
        self.prefix = prefix  # b'data: {"id":...,"model":...,"choices":[{"index":0,"delta":'
        self.prompt = prompt
        self.usage_every = usage_every
        self.usage_final = usage_final
        self.pattern = pattern
        self.n_chunks = n_chunks
        self.sent = 0
        self.tokens = 0
        self.due_ns = due_ns
        self.close_after = close_after
        self.started_ns = perf_ns()
        self.error_at = 0  # > 0: an in-stream error event after this many chunks (vLLM's shape)


class Engine:
    def __init__(self, args):
        self.args = args
        self.delay_ns = int(args.delay_ms * 1e6)
        self.ttft_ns = int(args.ttft_ms * 1e6)
        self.burst = max(1, args.burst) if self.delay_ns == 0 else 1
        self.spin_ns = int(args.spin_us * 1e3)
        self.pattern = tuple(int(x) for x in args.tokens_per_chunk.split(","))
        self.active: list[Stream] = []
        self.wake = asyncio.Event()
        self.log = args.log
        self.reset()

    def reset(self):
        self.seq = 0
        self.requests = 0
        self.finished = 0
        self.chunks = 0  # token-bearing chunks (what a client should count as tokens' arrival)
        self.events = 0  # every SSE event incl. role chunk, usage chunk, [DONE]
        self.tokens = 0
        self.prompt_tokens = 0
        self.steps = 0
        self.log_req = array("q")
        self.log_t = array("q")
        self.log_tok = array("q")
        self.req_log: list[tuple[int, int, int, int]] = []  # seq, start_ns, end_ns, tokens

    def add(self, s: Stream):
        self.active.append(s)
        self.requests += 1
        self.wake.set()

    # ---- chunk bytes -------------------------------------------------------------------
    def _token_event(self, s: Stream, k: int, last: bool) -> bytes:
        w = WORDS[(s.seq + s.sent) % len(WORDS)]
        content = w * k if k > 1 else w
        fin = b'"length"' if last else b"null"
        if s.usage_every:
            return b'%b{"content":"%b"},"logprobs":null,"finish_reason":%b}],"usage":%b}\n\n' % (
                s.prefix, content, fin, _usage(s.prompt, s.tokens))
        return b'%b{"content":"%b"},"logprobs":null,"finish_reason":%b}]}\n\n' % (s.prefix, content, fin)

    def _spec_block(self, s: Stream) -> bytes:
        steps = s.sent
        accepted = s.tokens - steps
        kmax = max(self.pattern) - 1
        drafted = steps * kmax
        hist = [0] * (kmax + 1)
        for i in range(s.sent):
            hist[self.pattern[(s.seq + i) % len(self.pattern)] - 1] += 1
        return (b',"metrics":{"speculative_decoding":{"mean_acceptance_length":%.4f,'
                b'"draft_acceptance_rate":%.4f,"acceptance_histogram":%b,"num_spec_steps":%d,'
                b'"num_accepted_draft_tokens":%d,"num_draft_tokens":%d,"num_spec_tokens":%d}}') % (
            1 + accepted / max(steps, 1), accepted / max(drafted, 1),
            _dumps(hist), steps, accepted, drafted, kmax)

    def _emit(self, s: Stream, now: int) -> bool:
        """Write this step's chunk(s) of ``s``; True when the stream is finished."""
        parts = []
        if s.sent == 0:
            role = b'%b{"role":"assistant","content":""},"logprobs":null,"finish_reason":null}]%b}\n\n' % (
                s.prefix, (b',"usage":' + _usage(s.prompt, 0)) if s.usage_every else b"")
            parts.append(role)
            self.events += 1
        finished = False
        pat = self.pattern
        log = self.log
        for _ in range(self.burst):
            k = pat[(s.seq + s.sent) % len(pat)]
            s.tokens += k
            s.sent += 1
            last = s.sent >= s.n_chunks
            parts.append(self._token_event(s, k, last))
            self.chunks += 1
            self.events += 1
            self.tokens += k
            if log:
                self.log_req.append(s.seq)
                self.log_t.append(now)
                self.log_tok.append(k)
            if last:
                finished = True
                break
        if s.error_at and s.sent >= s.error_at and not finished:
            parts.append(b'data: {"error":{"object":"error","message":"stub in-stream error","type":"InternalServerError","param":null,"code":500}}\n\n')
            finished = True
            s.usage_final = False
        if finished:
            if s.usage_final:
                u = b'{"prompt_tokens":%d,"total_tokens":%d,"completion_tokens":%d,"prompt_tokens_details":{"cached_tokens":0}}' % (
                    s.prompt, s.prompt + s.tokens, s.tokens)
                spec = self._spec_block(s) if self.args.spec_metrics else b""
                parts.append(b'%b' % s.prefix.replace(b'"choices":[{"index":0,"delta":', b'"choices":[],"usage":')
                             + u + spec + b"}\n\n")
                self.events += 1
            parts.append(b"data: [DONE]\n\n")
            self.events += 1
        body = b"".join(parts)
        if finished:
            s.conn.write_chunk_last(body, s.close_after)
            self.finished += 1
            if log:
                self.req_log.append((s.seq, s.started_ns, now, s.tokens))
        else:
            s.conn.write_chunk(body)
        return finished

    # ---- the loop --------------------------------------------------------------------------
    async def run(self):
        delay = self.delay_ns
        next_step = perf_ns()
        while True:
            if not self.active:
                self.wake.clear()
                await self.wake.wait()
                next_step = perf_ns()
            now = perf_ns()
            progressed = False
            keep = []
            for s in self.active:
                conn = s.conn
                if conn.closed:
                    continue
                if conn.paused or s.due_ns > now:
                    keep.append(s)
                    continue
                progressed = True
                if not self._emit(s, now):
                    keep.append(s)
            self.active = keep
            self.steps += 1
            if delay:
                next_step += delay
                wait = next_step - perf_ns()
                if wait > 0:
                    spin = self.spin_ns
                    if wait > spin:
                        await asyncio.sleep((wait - spin) / 1e9)
                    if spin:
                        # the loop's timers are ms-granular (epoll/libuv): spin the rest so the
                        # step lands on its deadline (the gaps are then tight, p50 is stable)
                        while perf_ns() < next_step:
                            pass
                else:
                    next_step = perf_ns()  # behind: do not try to catch up with a burst
                    await asyncio.sleep(0)
            elif progressed:
                await asyncio.sleep(0)
            else:
                # every stream is blocked on its client (or not due yet): sleep until one
                # drains instead of spinning on this core
                self.wake.clear()
                if self.ttft_ns and any(s.due_ns > now for s in self.active):
                    try:
                        await asyncio.wait_for(self.wake.wait(), self.ttft_ns / 1e9)
                    except TimeoutError:
                        pass
                else:
                    await self.wake.wait()


class Conn(asyncio.Protocol):
    """One client connection: parses requests, writes responses (chunked for streams)."""

    __slots__ = ("srv", "transport", "buf", "paused", "closed", "busy")

    def __init__(self, srv: Server):
        self.srv = srv
        self.transport = None
        self.buf = bytearray()
        self.paused = False
        self.closed = False
        self.busy = False  # a streaming response is in progress

    def connection_made(self, transport):
        self.transport = transport
        transport.set_write_buffer_limits(high=256 * 1024)

    def connection_lost(self, exc):
        self.closed = True
        self.srv.engine.wake.set()

    def pause_writing(self):
        self.paused = True

    def resume_writing(self):
        self.paused = False
        self.srv.engine.wake.set()

    def write_chunk(self, body: bytes):
        self.transport.write(b"%x\r\n%b\r\n" % (len(body), body))

    def write_chunk_last(self, body: bytes, close: bool):
        self.transport.write(b"%x\r\n%b\r\n0\r\n\r\n" % (len(body), body))
        self.busy = False
        if close:
            self.transport.close()
        elif self.buf:
            self._parse()

    def data_received(self, data: bytes):
        self.buf += data
        if not self.busy:
            self._parse()

    def _parse(self):
        while not self.busy:
            end = self.buf.find(b"\r\n\r\n")
            if end < 0:
                return
            head = bytes(self.buf[:end]).decode("latin-1").split("\r\n")
            method, target, version = head[0].split(" ", 2)
            headers = {}
            for line in head[1:]:
                k, _, v = line.partition(":")
                headers[k.strip().lower()] = v.strip()
            n = int(headers.get("content-length", "0") or 0)
            if len(self.buf) < end + 4 + n:
                return
            body = bytes(self.buf[end + 4:end + 4 + n])
            del self.buf[:end + 4 + n]
            close = headers.get("connection", "").lower() == "close" or version == "HTTP/1.0"
            self.srv.handle(self, method, target, body, close)

    def respond(self, status: str, ctype: bytes, payload: bytes, close: bool):
        self.transport.write(
            b"HTTP/1.1 %b\r\ncontent-type: %b\r\ncontent-length: %d\r\nconnection: %b\r\n\r\n%b" % (
                status.encode(), ctype, len(payload), b"close" if close else b"keep-alive", payload))
        if close:
            self.transport.close()


STREAM_HEAD = (b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream; charset=utf-8\r\n"
               b"cache-control: no-cache\r\ntransfer-encoding: chunked\r\nconnection: %b\r\n\r\n")


class Server:
    def __init__(self, args):
        self.args = args
        self.engine = Engine(args)
        self.t_start_ns = perf_ns()

    def _prompt_tokens(self, body: dict) -> int:
        n = 0
        for m in body.get("messages") or ():
            c = m.get("content")
            if isinstance(c, str):
                n += len(c.split()) + 4
            elif isinstance(c, list):
                for part in c:
                    if isinstance(part, dict) and isinstance(part.get("text"), str):
                        n += len(part["text"].split())
                n += 4
        return max(n, 1)

    def handle(self, conn: Conn, method: str, target: str, body: bytes, close: bool):
        path, _, query = target.partition("?")
        eng = self.engine
        if method == "POST" and path in ("/v1/chat/completions", "/v1/completions"):
            try:
                req = _loads(body)
            except Exception as exc:  # noqa: BLE001
                conn.respond("400 Bad Request", b"application/json",
                             _dumps({"error": {"message": f"bad JSON: {exc}", "type": "BadRequestError", "code": 400}}), close)
                return
            eng.seq += 1
            seq = eng.seq
            if self.args.http_error_every and seq % self.args.http_error_every == 0:
                eng.requests += 1
                conn.respond("500 Internal Server Error", b"application/json", _dumps(
                    {"object": "error", "message": f"stub failure for request {seq}", "type": "InternalServerError",
                     "param": None, "code": 500}), close)
                return
            prompt = self._prompt_tokens(req)
            eng.prompt_tokens += prompt
            n_chunks = self.args.chunks
            if self.args.honor_max_tokens:
                mt = req.get("max_completion_tokens") or req.get("max_tokens")
                if mt:
                    # chunks until the pattern's tokens reach max_tokens (the last may overshoot)
                    pat = eng.pattern
                    tok = k = 0
                    while tok < int(mt):
                        tok += pat[(seq + k) % len(pat)]
                        k += 1
                    n_chunks = k
            model = str(req.get("model") or self.args.model)
            created = int(time.time())
            if not req.get("stream"):
                toks = sum(eng.pattern[(seq + i) % len(eng.pattern)] for i in range(n_chunks))
                out = {"id": f"chatcmpl-{seq}", "object": "chat.completion", "created": created, "model": model,
                       "choices": [{"index": 0, "message": {"role": "assistant", "content": " x" * toks},
                                    "finish_reason": "length"}],
                       "usage": {"prompt_tokens": prompt, "total_tokens": prompt + toks, "completion_tokens": toks}}
                eng.requests += 1
                eng.finished += 1
                eng.tokens += toks
                conn.respond("200 OK", b"application/json", _dumps(out), close)
                return
            so = req.get("stream_options") or {}
            include = bool(so.get("include_usage"))
            every = self.args.always_usage or (include and bool(so.get("continuous_usage_stats")))
            prefix = (b'data: {"id":"chatcmpl-%d","object":"chat.completion.chunk","created":%d,"model":%b,'
                      b'"choices":[{"index":0,"delta":') % (seq, created, _dumps(model))
            conn.busy = True
            conn.transport.write(STREAM_HEAD % (b"close" if close else b"keep-alive"))
            now = perf_ns()
            st = Stream(conn, seq, prefix, prompt, every, include or self.args.always_usage,
                        eng.pattern, n_chunks, now + eng.ttft_ns, close)
            if self.args.stream_error_every and seq % self.args.stream_error_every == 0:
                st.error_at = 3
            eng.add(st)
            return
        if method == "GET" and path == "/v1/models":
            conn.respond("200 OK", b"application/json", _dumps({"object": "list", "data": [
                {"id": self.args.model, "object": "model", "created": 0, "owned_by": "stub",
                 "root": self.args.model, "max_model_len": 1 << 20}]}), close)
            return
        if method == "GET" and path in ("/health", "/ping"):
            conn.respond("200 OK", b"text/plain", b"", close)
            return
        if method == "GET" and path == "/metrics":
            lab = '{model_name="' + self.args.model + '"}'
            lines = [
                f"vllm:num_requests_running{lab} {len(eng.active)}",
                f"vllm:num_requests_waiting{lab} 0",
                f"vllm:request_success_total{lab} {eng.finished}",
                f"vllm:generation_tokens_total{lab} {eng.tokens}",
                f"vllm:prompt_tokens_total{lab} {eng.prompt_tokens}",
                f"stub_chunks_sent_total {eng.chunks}",
            ]
            conn.respond("200 OK", b"text/plain; version=0.0.4", ("\n".join(lines) + "\n").encode(), close)
            return
        if path == "/stub/stats":
            ru = resource.getrusage(resource.RUSAGE_SELF)
            conn.respond("200 OK", b"application/json", _dumps({
                "t_ns": perf_ns(), "cpu_s": ru.ru_utime + ru.ru_stime, "requests": eng.requests,
                "finished": eng.finished, "chunks": eng.chunks, "events": eng.events, "tokens": eng.tokens,
                "steps": eng.steps, "active": len(eng.active), "delay_ms": self.args.delay_ms,
                "tokens_per_chunk": self.args.tokens_per_chunk, "chunks_per_request": self.args.chunks,
                "burst": eng.burst, "pid": os.getpid()}), close)
            return
        if path == "/stub/reset" and method == "POST":
            eng.reset()
            conn.respond("200 OK", b"application/json", b'{"ok":true}', close)
            return
        if path == "/stub/log":
            since = int(parse_qs(urlsplit(target).query).get("since", ["0"])[0])
            i0 = 0
            if since:
                # log_t is non-decreasing: first index at or after since
                lo, hi = 0, len(eng.log_t)
                while lo < hi:
                    mid = (lo + hi) // 2
                    if eng.log_t[mid] < since:
                        lo = mid + 1
                    else:
                        hi = mid
                i0 = lo
            conn.respond("200 OK", b"application/json", _dumps({
                "req": eng.log_req[i0:].tolist(), "t_ns": eng.log_t[i0:].tolist(), "tokens": eng.log_tok[i0:].tolist(),
                "requests": [r for r in eng.req_log if r[2] >= since]}), close)
            return
        conn.respond("404 Not Found", b"application/json",
                     _dumps({"error": {"message": f"no route {method} {path}", "code": 404}}), close)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, default=8765)
    ap.add_argument("--model", default="stub")
    ap.add_argument("--delay-ms", type=float, default=0.0, help="engine step period (inter-chunk gap); 0 = as fast as possible")
    ap.add_argument("--ttft-ms", type=float, default=0.0, help="wait before a new stream's first step")
    ap.add_argument("--chunks", type=int, default=128, help="token chunks per request (the stub decides the length)")
    ap.add_argument("--honor-max-tokens", action="store_true", help="stop at the request's max_(completion_)tokens instead")
    ap.add_argument("--tokens-per-chunk", default="1", help="comma pattern cycled over chunks, e.g. 1,3,2,4")
    ap.add_argument("--spin-us", type=float, default=0.0,
                    help="with --delay-ms: sleep until this long before each step's deadline, then spin to it")
    ap.add_argument("--burst", type=int, default=1, help="chunks per stream per step when --delay-ms 0")
    ap.add_argument("--always-usage", action="store_true", help="usage in every chunk even if the client did not ask")
    ap.add_argument("--spec-metrics", action="store_true", help="metrics.speculative_decoding in the final usage chunk")
    ap.add_argument("--no-log", dest="log", action="store_false", help="no per-chunk emission log")
    ap.add_argument("--http-error-every", type=int, default=0, help="every k-th request: HTTP 500 (tests)")
    ap.add_argument("--stream-error-every", type=int, default=0, help="every k-th request: in-stream error event (tests)")
    ap.add_argument("--no-uvloop", action="store_true")
    args = ap.parse_args(argv)

    if not args.no_uvloop:
        try:
            import uvloop
            uvloop.install()
        except ImportError:
            pass

    async def amain():
        srv = Server(args)
        loop = asyncio.get_running_loop()
        server = await loop.create_server(lambda: Conn(srv), args.host, args.port, backlog=4096, reuse_address=True)
        eng_task = asyncio.ensure_future(srv.engine.run())
        print(f"stub listening on http://{args.host}:{args.port} pid={os.getpid()} "
              f"delay_ms={args.delay_ms} chunks={args.chunks} tokens_per_chunk={args.tokens_per_chunk} "
              f"loop={type(loop).__module__}", flush=True)
        try:
            await server.serve_forever()
        finally:
            eng_task.cancel()

    try:
        asyncio.run(amain())
    except KeyboardInterrupt:
        pass


if __name__ == "__main__":
    sys.exit(main())
