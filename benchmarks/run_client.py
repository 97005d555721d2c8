#!/usr/bin/env python3
"""Run ONE client for one point (closed loop, c in flight, n requests) and save the normalized
result (common.save_result). bench_clients.py runs this pinned to a core.

Clients:
  specnb          specnb.engine.loadgen.run_load of this checkout (``--procs`` > 1: over that many client
                  processes, specnb.engine.clients.run_load_in_processes)
  specnb-before   specnb's load generator as committed at ``--commit`` (default BEFORE_COMMIT, the aiohttp
                  client before the raw-connection one), built from git into out/src-<commit>/: git keeps
                  the old client, nothing is copied into the tree
"""

from __future__ import annotations

import argparse
import asyncio
import io
import json
import os
import resource
import subprocess
import sys
import tarfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)

import common  # noqa: E402

# the last commit whose load generator was aiohttp with each SSE line parsed as it arrived
BEFORE_COMMIT = "76070f6"


def source_at(commit: str) -> str:
    """``src/`` of the repository at ``commit``, extracted once into out/src-<commit>/ (git archive)."""
    dest = os.path.join(HERE, "out", f"src-{commit}")
    if not os.path.isdir(os.path.join(dest, "src", "specnb")):
        data = subprocess.run(["git", "archive", "--format=tar", commit, "src/specnb"], cwd=ROOT,
                              capture_output=True, check=True).stdout
        os.makedirs(dest, exist_ok=True)
        with tarfile.open(fileobj=io.BytesIO(data)) as tar:
            tar.extractall(dest, filter="data")
    return os.path.join(dest, "src")


def _cpu() -> float:
    ru = resource.getrusage(resource.RUSAGE_SELF)
    return ru.ru_utime + ru.ru_stime


def main(argv=None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--client", required=True, choices=["specnb", "specnb-before"])
    ap.add_argument("--commit", default=BEFORE_COMMIT, help="specnb-before: the commit to build it from")
    ap.add_argument("--url", default="http://127.0.0.1:8765")
    ap.add_argument("--model", default="stub")
    ap.add_argument("-c", "--concurrency", type=int, required=True)
    ap.add_argument("-n", "--num-requests", type=int, required=True)
    ap.add_argument("--procs", type=int, default=1)
    ap.add_argument("--out", required=True)
    args = ap.parse_args(argv)

    prompts = common.load_prompts()
    meta = {"client": args.client, "concurrency": args.concurrency, "num_requests": args.num_requests,
            "procs": args.procs, "pid": os.getpid()}
    if args.client == "specnb":
        sys.path.insert(0, os.path.join(ROOT, "src"))
        from specnb.engine import clients

        run = clients.run_load_in_processes
        kw = {"processes": args.procs}
        meta["source"] = "this checkout"
    else:
        sys.path.insert(0, source_at(args.commit))
        from specnb.engine import loadgen

        run = loadgen.run_load
        kw = {}
        meta["source"] = f"src/specnb/engine/loadgen.py at {args.commit}"
    cpu0, w0 = _cpu(), time.perf_counter()
    pl = asyncio.run(run(args.url, args.model, prompts, args.concurrency, args.num_requests,
                         dict(common.SAMPLING), **kw))
    w1, cpu1 = time.perf_counter(), _cpu()
    # records are relative to the client's own start instant, which it does not return: only
    # differences (windows, gaps) are used, so any offset will do
    t0 = w0
    meta.update(wall_s=w1 - w0, cpu_s=cpu1 - cpu0, cpu_util=(cpu1 - cpu0) / (w1 - w0),
                client_cpu_util=getattr(pl, "client_cpu_util", None),
                client_loop_busy=getattr(pl, "client_loop_busy", None),
                process_cpu_util=getattr(pl, "process_cpu_util", None),
                steady_start_s=pl.steady_start_s, steady_end_s=pl.steady_end_s, t0=t0,
                parse_s=getattr(pl, "parse_s", None))
    meta["errors"] = sum(1 for r in pl.records if r.error is not None)
    meta["error_examples"] = sorted({r.error for r in pl.records if r.error})[:3]
    norm = common.from_records(pl.records, t0)
    common.save_result(args.out, meta=meta, **norm)
    print(json.dumps({k: meta[k] for k in ("client", "procs", "concurrency", "wall_s", "cpu_util", "errors")}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
