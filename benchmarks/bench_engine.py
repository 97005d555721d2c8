"""make bench's real-server figures, each with its spread over runs: specnb's load client against
vLLM's own (``vllm bench serve``) on one server, and the torch profiler's slowdown of a step-anatomy
window (its profiled window's client ms per token over its unprofiled twin's).

These are measurements, printed and written to ``<outdir>/<stamp>/engine.json`` and ``engine.md``;
nothing here passes or fails on them (``make test`` keeps the exact token and request totals of
both clients and the anatomy's structure). On the CPU engine by default (the model ``make setup``
builds, this machine's dtype); ``--model`` names another, ``--smoke`` runs nothing (``make bench
BENCH_ARGS=--smoke`` is the stub-server part's smoke mode).

  python benchmarks/bench_engine.py [--runs 4] [--rounds 3] [--windows 3] [--outdir benchmarks/results/engine]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import vllm_bench_client as vb  # noqa: E402

ROOT = HERE.parent
DEFAULT_MODEL = ROOT / "models" / "SmolLM2-135M-Instruct"
NGRAM = {"method": "ngram", "num_speculative_tokens": 4, "prompt_lookup_min": 2, "prompt_lookup_max": 4}
LOCK = "/tmp/specnb-cpu.lock"  # the machine is shared: one measurement at a time (bench_clients.py's lock)
# how long a wait may take before it is called hung: a server start, a bench client's round
WAIT_S = 900.0


@contextlib.contextmanager
def cpu_lock(held: bool):
    """fcntl.flock on LOCK, the lock `flock /tmp/specnb-cpu.lock cmd` takes, for the whole run."""
    if held:
        yield
        return
    import fcntl

    with open(LOCK, "a") as fh:
        try:
            fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            print(f"   (waiting for {LOCK})", flush=True)
            fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def spread(values: list[float]) -> dict:
    vals = [v for v in values if v is not None and math.isfinite(v)]
    if not vals:
        return {"n": 0}
    return {"n": len(vals), "median": statistics.median(vals), "mean": statistics.fmean(vals),
            "sd": statistics.stdev(vals) if len(vals) > 1 else None, "min": min(vals), "max": max(vals)}


def spread_line(name: str, s: dict) -> str:
    if not s.get("n"):
        return f"{name}: no value"
    sd = f", sd {s['sd']:.3f}" if s.get("sd") is not None else ""
    return (f"{name}: median {s['median']:.3f}, mean {s['mean']:.3f}{sd}, range {s['min']:.3f}-{s['max']:.3f} "
            f"over {s['n']}")


def server_args(model: Path) -> list[str]:
    from specnb.engine.kernels import machine_dtype

    return ["--enforce-eager", "--dtype", machine_dtype(), "--max-model-len", "2048"]


def agreement(model: Path, runs: int, rounds: int, folder: Path) -> dict:
    """``runs`` times: a fresh server, ``rounds`` alternating rounds of both clients on it."""
    from specnb.engine.server import VllmServer

    per_run = []
    for run in range(runs):
        where = folder / f"agreement-{run}"
        where.mkdir(parents=True)
        srv = VllmServer(str(model), args=server_args(model), served_model_name=vb.SERVED,
                         log_path=where / "server.log", ready_timeout_s=WAIT_S)
        with srv as ep, vb.BenchClient({**srv.environment(), "HF_HUB_OFFLINE": "1"}, where / "vllm-bench.log",
                                       wait_s=WAIT_S) as bench:
            rows = vb.alternating_rounds(bench, ep, where, model, rounds)
        r = vb.ratios(rows)
        print(f"run {run + 1}/{runs}: specnb / vllm bench output tok/s per round {', '.join(f'{x:.3f}' for x in r)}"
              f"; median {statistics.median(r):.3f}", flush=True)
        per_run.append({"rows": rows, "ratios": r, "median": statistics.median(r)})
    return {"runs": per_run, "per_round": spread([x for p in per_run for x in p["ratios"]]),
            "run_medians": spread([p["median"] for p in per_run]),
            "totals_equal": all(len({row["output_tokens"] for row in p["rows"]}) == 1 for p in per_run)}


def profiling(model: Path, windows: int, folder: Path) -> dict:
    """``specnb anatomy``: ``windows`` repeats of one n-gram window at c=2, each with its twin."""
    from specnb import cli
    from specnb.analysis.anatomy import load_anatomy

    cfg = folder / "anatomy.toml"
    args = json.dumps(server_args(model))
    cfg.write_text(
        f'name = "bench-anatomy"\nmodel = "{model}"\nserved_model_name = "{vb.SERVED}"\nserver_args = {args}\n'
        f'workloads = ["copy"]\nconcurrency = [2]\nrepeats = {windows}\npanel_size = 4\nwarmup_requests = 1\n'
        f'ready_timeout_s = {WAIT_S}\n[env]\nVLLM_CPU_KVCACHE_SPACE = "1"\n[sampling]\nmax_tokens = 16\n'
        '[[arms]]\nname = "ngram-k4"\nspeculative_config = '
        + json.dumps(NGRAM).replace(": ", " = ") + "\n")
    out = folder / "anatomy"
    rc = cli.main(["anatomy", str(cfg), "--out", str(out), "--no-progress"])
    recs = [r for r in load_anatomy(out) if r.get("status") == "ok"] if out.exists() else []
    slow = [r["unprofiled"]["profiling_slowdown"] for r in recs if r.get("unprofiled")]
    for i, s in enumerate(slow):
        print(f"window {i + 1}/{len(slow)}: profiled / unprofiled client ms per token {s:.3f}", flush=True)
    return {"exit": rc, "windows": len(recs), "slowdowns": slow, "spread": spread(slow)}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", type=Path, default=DEFAULT_MODEL, help="the served model's folder")
    ap.add_argument("--runs", type=int, default=4, help="fresh servers for the client agreement (default 4)")
    ap.add_argument("--rounds", type=int, default=3, help="alternating rounds of both clients per run (default 3)")
    ap.add_argument("--windows", type=int, default=3, help="profiled anatomy windows, each with its twin (default 3)")
    ap.add_argument("--outdir", type=Path, default=HERE / "results" / "engine")
    ap.add_argument("--smoke", action="store_true", help="run nothing: the engine figures need a real server")
    ap.add_argument("--lock-held", action="store_true", help=f"the caller holds {LOCK} (flock ... make bench)")
    a, _ = ap.parse_known_args(argv)  # make bench passes its stub-server arguments along
    if a.smoke:
        print("bench_engine: smoke mode runs no server; `make bench` without --smoke measures the engine figures")
        return 0
    for name in ("runs", "rounds", "windows"):
        if getattr(a, name) < 1:
            ap.error(f"--{name} must be at least 1")
    if not (a.model / "config.json").exists():
        ap.error(f"{a.model}: no model there (make setup builds the CPU default)")
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    out = a.outdir / stamp
    out.mkdir(parents=True)
    with cpu_lock(a.lock_held), tempfile.TemporaryDirectory(prefix="bench-engine-") as tmp:
        agree = agreement(a.model, a.runs, a.rounds, Path(tmp))
        prof = profiling(a.model, a.windows, Path(tmp))
    from specnb.ledger.provenance import cpu_isa

    doc = {"kind": "bench-engine", "stamp": stamp, "model": str(a.model), "cpu_isa": cpu_isa()[0],
           "command": "python benchmarks/bench_engine.py " + " ".join(argv if argv is not None else sys.argv[1:]),
           "clients": {"concurrency": vb.CONCURRENCY, "prompts": vb.PROMPTS, "max_tokens": vb.MAX_TOKENS, **agree},
           "profiling": prof}
    (out / "engine.json").write_text(json.dumps(doc, indent=1) + "\n")
    lines = [f"# Engine figures, {stamp} ({doc['cpu_isa']}, {a.model.name})", "",
             f"- {spread_line('specnb / vllm bench serve output tok/s, per round', agree['per_round'])}",
             f"- {spread_line('the same, median of each run', agree['run_medians'])}",
             f"- output token totals equal in every round: {agree['totals_equal']}",
             f"- {spread_line('profiling slowdown (profiled / unprofiled client ms per token)', prof['spread'])}", ""]
    (out / "engine.md").write_text("\n".join(lines))
    print("\n".join(lines) + f"written to {out}")
    return 0 if agree["totals_equal"] and prof["exit"] == 0 else 1


if __name__ == "__main__":
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    sys.exit(main())
