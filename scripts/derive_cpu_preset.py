"""Derive the ``cpu-demo`` hardware preset from this machine and the committed demo ledgers.

Why a script: the preset's numbers must come from measurements, and anyone should be able to
redo them. Steps:

1. memory bandwidth: 2 torch threads (the engine's own library and thread count) sum a 1 GiB
   float32 tensor; bytes read / best time of 3 x 10 (the STREAM convention: the best time is
   the one least disturbed by other work on a shared machine);
2. FLOP/s and fixed step overhead: :func:`specnb.models.calibration.calibrate` on the baseline points of
   the demo ledgers, with that bandwidth held fixed (the sweep never reaches a memory-bound
   step, so it cannot determine bandwidth itself: the profile written to the record shows it);
3. write ``src/specnb/models/data/cpu-demo-calibration.json`` and the numbers into ``hardware.toml``.

Run from the repository root: ``python scripts/derive_cpu_preset.py [--ledgers DIR]``.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import time
from pathlib import Path

import numpy as np

import specnb
from specnb import paths
from specnb.models.calibration import calibrate
from specnb.models.stepcost import TargetModel

DATA = paths.ROOT / "src" / "specnb" / "models" / "data"
LEDGER_DIRS = ["ledgers/concurrency/cpu/20261129-cpu-demo"]
MODEL = "models/SmolLM2-135M-Instruct"


def read_bandwidth_bytes_s(threads: int = 2, gib: float = 1.0, repeats: int = 10, rounds: int = 3) -> dict:
    import torch

    torch.set_num_threads(threads)
    x = torch.ones(int(gib * 2**30) // 4, dtype=torch.float32)
    x.sum()  # first touch
    times = []
    for r in range(rounds):  # rounds apart in time: the machine is shared, other work steals cycles
        if r:
            time.sleep(5.0)
        for _ in range(repeats):
            t = time.perf_counter()
            x.sum()
            times.append(time.perf_counter() - t)
    return {
        "method": f"torch {torch.__version__}, {threads} threads, sum of a {gib:g} GiB float32 tensor, "
                  f"bytes read / best of {rounds} rounds x {repeats} times, 5 s apart",
        "bytes_read": x.nbytes,
        "best_s": min(times),
        "median_s": float(np.median(times)),
        "bandwidth_bytes_s": x.nbytes / min(times),
        "bandwidth_bytes_s_median": x.nbytes / float(np.median(times)),
    }


def cpu_model() -> str:
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("model name"):
            return line.split(":", 1)[1].strip()
    return "unknown"


def mem_total_gib() -> float:
    for line in Path("/proc/meminfo").read_text().splitlines():
        if line.startswith("MemTotal:"):
            return int(line.split()[1]) * 1024 / 2**30
    raise RuntimeError("no MemTotal in /proc/meminfo")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ledgers", default=None, help="demo ledger folder (default: the committed one)")
    args = ap.parse_args()
    folder = Path(args.ledgers) if args.ledgers else next(
        (paths.ROOT / d for d in LEDGER_DIRS if (paths.ROOT / d).is_dir()), None)
    if folder is None or not folder.is_dir():
        raise SystemExit(f"no demo ledgers at {args.ledgers or LEDGER_DIRS}")
    target = TargetModel.from_hf_config(paths.ROOT / MODEL)
    df = specnb.load_ledgers(folder)
    bw = read_bandwidth_bytes_s()
    fit = calibrate(df, target, fixed={"bandwidth_bytes_s": bw["bandwidth_bytes_s"]}, name="cpu-demo")
    free = calibrate(df, target, name="cpu-demo-free")
    profile = []
    for gb_s in (4, 8, 16, 32, 64, 128, 256):
        c = calibrate(df, target, fixed={"bandwidth_bytes_s": gb_s * 1e9}, spec_terms=())
        profile.append({"bandwidth_gb_s": gb_s, "flop_s": c.hardware.flop_s,
                        "step_overhead_ms": 1e3 * c.hardware.step_overhead_s,
                        "baseline_rms_log_error": c.baseline.rms_log_error})
    hw = fit.hardware
    record = {
        "preset": "cpu-demo",
        "derived_with": "scripts/derive_cpu_preset.py",
        "machine": {"cpu": cpu_model(), "cores": os.cpu_count(),
                    "mem_total_gib": round(mem_total_gib(), 2)},
        "ledgers": str(folder.relative_to(paths.ROOT)),
        "ledger_files": int(len(df)),
        "baseline_points": int((~df["speculative"].astype(bool)).sum()),
        "target": {"name": target.name, "params": target.params, "weight_bytes": target.weight_bytes,
                   "kv_bytes_per_token": target.kv_bytes_per_token,
                   "from": f"{MODEL}/config.json via TargetModel.from_hf_config"},
        "bandwidth_measurement": bw,
        "fit": {
            "fixed": ["bandwidth_bytes_s"],
            "bandwidth_bytes_s": hw.bandwidth_bytes_s,
            "flop_s": hw.flop_s,
            "step_overhead_s": hw.step_overhead_s,
            "baseline_quality": vars(fit.baseline),
            "spec_predicted_quality": vars(fit.spec_predicted) if fit.spec_predicted else None,
            "ngram_drafting": {"fitted": ["step_overhead_s", "per_token_s"],
                               "step_overhead_s": fit.drafter.step_overhead_s,
                               "per_token_s": fit.drafter.per_token_s,
                               "quality": vars(fit.spec_fitted) if fit.spec_fitted else None},
            "one_sigma_factors": {k: (v if math.isfinite(v) else None) for k, v in fit.uncertainty.items()},
        },
        "free_fit_all_three_terms": {
            "flop_s": free.hardware.flop_s, "step_overhead_s": free.hardware.step_overhead_s,
            "bandwidth_bytes_s": free.hardware.bandwidth_bytes_s,
            "baseline_quality": vars(free.baseline),
            "undetermined": free.unidentified(),
        },
        "bandwidth_profile": profile,
    }
    (DATA / "cpu-demo-calibration.json").write_text(json.dumps(record, indent=2) + "\n")
    toml = DATA / "hardware.toml"
    text = toml.read_text()
    head, sep, section = text.partition("[cpu-demo]")
    values = {"memory_bandwidth_tb_s": f"{hw.bandwidth_bytes_s / 1e12:.4g}",
              "dense_bf16_tflop_s": f"{hw.flop_s / 1e12:.4g}",
              "memory_gib": f"{mem_total_gib():.3g}",
              "step_overhead_ms": f"{1e3 * hw.step_overhead_s:.4g}"}
    for key, val in values.items():
        section = re.sub(rf"(?m)^{key} = .*$", f"{key} = {val}", section)
    toml.write_text(head + sep + section)
    print(fit.summary())
    print("free fit:", free.summary().splitlines()[0], "| undetermined:", free.unidentified())
    print("wrote", DATA / "cpu-demo-calibration.json", "and", toml, values)


if __name__ == "__main__":
    main()
