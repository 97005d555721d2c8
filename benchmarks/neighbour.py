"""How much a busy neighbour slows a vLLM-CPU server, at normal priority and niced: one server (the
test suite's arguments, two processes), greedy non-streamed completions at c=1, measured alone,
beside busy loops run with ``nice -n 19``, and beside the same at normal priority, in turns.

    .venv/bin/python benchmarks/neighbour.py [--rounds 3] [--hogs 2] [--requests 6] [--tokens 96]
        [--endpoint http://127.0.0.1:8000 --served-model-name NAME]   (attach: no server started)

Prints one JSON line per measurement (round, neighbour, output tok/s) and the median per
neighbour. The server binds to 127.0.0.1 and is stopped by its id, also on Ctrl-C; the busy
loops are killed after each measurement. Why it matters: the sweep's host-load check counts a
niced process's CPU as a neighbour's (``specnb.engine.hostload``), and the test suite runs its
unit pass before its real-server pass rather than niced beside it; measured figures:
docs/timing.md (the test suite's time).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

from specnb import paths
from specnb.engine.kernels import machine_dtype
from specnb.engine.server import VllmServer
from specnb.engine.vllm import TWO_PROCESSES_OPT_IN

MODEL = paths.MODELS / "SmolLM2-135M-Instruct"
NEIGHBOURS = {"alone": None, "nice19": ["nice", "-n", "19"], "nice0": []}


def _tok_s(base_url: str, model: str, requests: int, tokens: int) -> float:
    t0, out = time.monotonic(), 0
    for i in range(requests):
        body = {"model": model, "prompt": f"Write a story number {i} about", "max_tokens": tokens,
                "ignore_eos": True, "temperature": 0}
        req = urllib.request.Request(base_url + "/v1/completions", data=json.dumps(body).encode(),
                                     headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=300) as r:
            out += json.loads(r.read())["usage"]["completion_tokens"]
    return out / (time.monotonic() - t0)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=3, help="rounds of alone, nice19, nice0 (default 3)")
    ap.add_argument("--hogs", type=int, default=2, help="busy loops per neighbour (default 2: this machine's cores)")
    ap.add_argument("--requests", type=int, default=6, help="requests per measurement, one at a time")
    ap.add_argument("--tokens", type=int, default=96, help="output tokens per request")
    ap.add_argument("--endpoint", help="measure a running server at this URL instead of starting one")
    ap.add_argument("--served-model-name", default="smol", help="the model name the server answers to")
    a = ap.parse_args(argv)
    if min(a.rounds, a.hogs, a.requests, a.tokens) < 1:
        print("--rounds, --hogs, --requests and --tokens must be at least 1", file=sys.stderr)
        return 2
    if a.endpoint is None and not (MODEL / "config.json").exists():
        print("the CPU model is missing: run `make setup`", file=sys.stderr)
        return 2
    got: dict[str, list[float]] = {k: [] for k in NEIGHBOURS}
    with contextlib.ExitStack() as stack:
        if a.endpoint:
            base_url = a.endpoint.rstrip("/")
        else:
            os.environ.setdefault(TWO_PROCESSES_OPT_IN, "1")  # the test suite's servers: two processes each
            log = Path(tempfile.mkdtemp(prefix="specnb-neighbour-")) / "server.log"
            srv = VllmServer(str(MODEL), args=["--enforce-eager", "--dtype", machine_dtype(), "--max-model-len", "2048"],
                             served_model_name=a.served_model_name, env={"VLLM_CPU_KVCACHE_SPACE": "1"}, log_path=log)
            base_url = stack.enter_context(srv).base_url
        _tok_s(base_url, a.served_model_name, 2, a.tokens)  # warm-up
        for rnd in range(a.rounds):
            for name, prefix in NEIGHBOURS.items():
                hogs = [] if prefix is None else [
                    subprocess.Popen([*prefix, sys.executable, "-c", "while True: pass"]) for _ in range(a.hogs)]
                try:
                    time.sleep(0.5 if hogs else 0)
                    r = _tok_s(base_url, a.served_model_name, a.requests, a.tokens)
                finally:
                    for h in hogs:
                        h.kill()
                        h.wait()
                got[name].append(r)
                print(json.dumps({"round": rnd, "neighbour": name, "tok_s": round(r, 1)}), flush=True)
    print("median tok/s: " + ", ".join(f"{k} {statistics.median(v):.1f}" for k, v in got.items()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
