"""A stand-in for ``python -m vllm.entrypoints.openai.api_server``: the routes a sweep uses,
with faults on demand, so fault handling is tested in seconds without an engine.

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
from pathlib import Path

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


def _arg(args: list[str], flag: str) -> str | None:
    for i, a in enumerate(args):
        if a == flag and i + 1 < len(args):
            return args[i + 1]
        if a.startswith(flag + "="):
            return a.split("=", 1)[1]
    return None


def main(args: list[str]) -> None:  # pragma: no cover - runs in the server's process
    from aiohttp import web

    port = int(_arg(args, "--port"))
    name = _arg(args, "--served-model-name") or "fake"
    key = _arg(args, "--api-key") or os.environ.get("VLLM_API_KEY")
    env = os.environ
    state = Path(env.get("FAKE_VLLM_STATE", "."))
    starts_file = state / "starts"
    starts = int(starts_file.read_text()) + 1 if starts_file.exists() else 1
    starts_file.write_text(str(starts))
    die_after = int(env.get("FAKE_VLLM_DIE_AFTER", "0"))
    if starts > 1 and env.get("FAKE_VLLM_DIE_ALWAYS") != "1":
        die_after = 0
    fail_every = int(env.get("FAKE_VLLM_FAIL_EVERY", "0"))
    slow_every, slow_s = int(env.get("FAKE_VLLM_SLOW_EVERY", "0")), float(env.get("FAKE_VLLM_SLOW_S", "0"))
    if env.get("FAKE_VLLM_START_FAIL") == "1":
        print("ValueError: the fake was told not to start", flush=True)
        sys.exit(1)
    # the "engine core": a child in the server's process group that outlives an abrupt exit
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
                if (state / "exit-now").exists():
                    (state / "exit-now").unlink()
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
    web.run_app(app, host="127.0.0.1", port=port, print=None, handle_signals=True)


if __name__ == "__main__":
    main(sys.argv[1:])
