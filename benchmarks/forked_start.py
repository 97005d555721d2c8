"""What the fork server saves (``specnb.engine.forkserver``): the same vLLM-CPU server started by
``VllmServer`` with ``SPECNB_FORK_API_SERVER=1`` (its API server forked from a process that has
imported vLLM, and vLLM's engine core forked from that API server) and without it (a fresh ``vllm serve``,
which spawns its engine core),
alternating (fork, exec, fork, ...). Two-process layout (``SPECNB_CPU_TWO_PROCESSES=1``, as the test
suite's servers) or, with ``--three-processes``, vLLM's default (where the engine core spawns its
worker either way), the bundled SmolLM2-135M.

    .venv/bin/python benchmarks/forked_start.py [--rounds 2] [--requests 3] [--max-tokens 128]
                                                [--concurrency 1] [--three-processes]

For each start: the wall time from launch to ready (``Endpoint.ready_s``), the machine's busy
core-seconds over it (``specnb.engine.hostload.busy_seconds``: run it with nothing else running),
and a greedy decode's tok/s after it (``--concurrency`` streams of ``--requests`` requests each, a
fixed prompt, ``ignore_eos``, after one unrecorded request; start-to-start spread on these machines
is large, so a few requests say little). The first
forked start also pays the fork server's own imports (printed apart). One JSON line per start and a
summary per kind. Servers bind to 127.0.0.1 and each is stopped by its process group, also on errors
and Ctrl-C.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from specnb import paths
from specnb.engine import forkserver
from specnb.engine.hostload import busy_seconds
from specnb.engine.kernels import machine_dtype
from specnb.engine.server import VllmServer
from specnb.engine.vllm import TWO_PROCESSES_OPT_IN

MODEL = paths.MODELS / "SmolLM2-135M-Instruct"
PROMPT = "List 30 fruits, separated by commas."


def _decode(base_url: str, requests: int, max_tokens: int, concurrency: int = 1) -> float:
    body = json.dumps({"model": "smol", "messages": [{"role": "user", "content": PROMPT}], "max_tokens": max_tokens,
                       "temperature": 0, "ignore_eos": True}).encode()

    def one() -> int:
        req = urllib.request.Request(f"{base_url}/v1/chat/completions", data=body,
                                     headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=300) as r:
            return json.loads(r.read())["usage"]["completion_tokens"]

    def stream(_: int) -> int:
        return sum(one() for _ in range(requests))

    one()  # unrecorded: the first request's shapes
    t0 = time.monotonic()
    with ThreadPoolExecutor(concurrency) as pool:
        tokens = sum(pool.map(stream, range(concurrency)))
    return tokens / (time.monotonic() - t0)


def one_start(kind: str, folder: Path, requests: int, max_tokens: int, first: bool, concurrency: int = 1) -> dict:
    os.environ[forkserver.OPT_IN] = "1" if kind == "fork" else "0"
    srv = VllmServer(str(MODEL), served_model_name="smol", log_path=folder / f"{kind}-{time.time_ns()}.log",
                     args=["--enforce-eager", "--dtype", machine_dtype(), "--max-model-len", "2048"])
    busy0 = busy_seconds()
    with srv as ep:
        busy = busy_seconds() - busy0
        if (srv.launcher or "").startswith("fork-server") != (kind == "fork"):
            raise RuntimeError(f"asked for {kind}, launched by {srv.launcher}: {srv.log_path}")
        tok_s = _decode(ep.base_url, requests, max_tokens, concurrency)
    return {"kind": kind, "launcher": srv.launcher, "wall_s": round(ep.ready_s, 1), "busy_core_s": round(busy, 1), "tok_s": round(tok_s, 1),
            "with_fork_server_imports": first}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--rounds", type=int, default=2, help="fork/exec pairs (default 2)")
    p.add_argument("--requests", type=int, default=3, help="greedy requests after each start (default 3)")
    p.add_argument("--max-tokens", type=int, default=128)
    p.add_argument("--concurrency", type=int, default=1, help="requests in flight while decoding (default 1)")
    p.add_argument("--three-processes", action="store_true", help="vLLM's default layout (a worker process)")
    a = p.parse_args(argv)
    if min(a.rounds, a.requests, a.max_tokens, a.concurrency) < 1:
        p.error("--rounds, --requests, --max-tokens and --concurrency must be at least 1")
    if not (MODEL / "config.json").is_file():
        p.error(f"{MODEL} missing: make setup builds it")
    os.environ[TWO_PROCESSES_OPT_IN] = "0" if a.three_processes else "1"
    folder = Path(tempfile.mkdtemp(prefix="specnb-forked-start-"))
    rows = []
    try:
        for i in range(a.rounds):
            for kind in ("fork", "exec"):
                rows.append(one_start(kind, folder, a.requests, a.max_tokens, first=kind == "fork" and i == 0,
                                     concurrency=a.concurrency))
                print(json.dumps(rows[-1]), flush=True)
    finally:
        forkserver.close_all()
    for kind in ("fork", "exec"):
        mine = [r for r in rows if r["kind"] == kind and not r["with_fork_server_imports"]] or \
            [r for r in rows if r["kind"] == kind]
        med = {k: statistics.median(r[k] for r in mine) for k in ("wall_s", "busy_core_s", "tok_s")}
        print(f"{kind}: median {med['wall_s']:.1f} s to ready, {med['busy_core_s']:.1f} core-s, "
              f"{med['tok_s']:.1f} tok/s after ({len(mine)} starts; logs in {folder})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
