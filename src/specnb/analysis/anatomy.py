"""Reading step-anatomy records (``specnb anatomy``; :mod:`specnb.sweep.anatomy` writes them):
one row per profiled window, its mean parts per decode step and their shares, and the seed 004
rule (the drafter's share of the step against its share of the output)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from specnb.ledger.records import ANATOMY_KIND as KIND  # noqa: F401 - re-exported
from specnb.ledger.records import ANATOMY_RUN_KIND as RUN_KIND  # noqa: F401 - re-exported
from specnb.ledger.records import load_anatomy  # noqa: F401 - re-exported

# the parts of a step (specnb.engine.anatomy parses them out of a trace), in stacking order
PARTS = ("prepare_ms", "forward_ms", "logits_ms", "sample_ms", "draft_ms", "bookkeep_ms", "unscoped_ms", "between_ms")
PART_LABELS = {
    "prepare_ms": "input preparation", "forward_ms": "target forward (verification)",
    "logits_ms": "target logits (lm head)", "sample_ms": "sampling / rejection", "draft_ms": "drafting (proposer)",
    "bookkeep_ms": "book-keeping", "unscoped_ms": "unscoped", "between_ms": "engine core (scheduling, between steps)",
}



def anatomy_frame(records: list[dict[str, Any]]) -> pd.DataFrame:
    """One row per profiled window that worked: mean ms per decode step for every part, the
    cycle, shares, tokens per step, the seed 004 numbers and the checks; where the record has
    an unprofiled twin, the profiler's slowdown and the decode cycle it implies unprofiled
    (``unprofiled_cycle_ms``; NaN for older records)."""
    rows = []
    for d in records:
        if d.get("status") != "ok":
            continue
        s, c = d["summary"], d["checks"]
        eng = c.get("engine_counters") or {}
        u = d.get("unprofiled") or {}  # records before the unprofiled twin have none
        sc = d.get("speculative_config") or {}
        steps = d.get("steps") or []
        decode = [x for x in steps if not x.get("context_requests")]
        n_req = (d.get("window") or {}).get("requests") or 0
        rows.append({
            "arm": d["arm"], "workload": d["workload"], "concurrency": d["concurrency"], "repeat": d["repeat"],
            "method": None if not sc else (sc.get("method") or ("draft_model" if sc.get("model") else None)),
            "k": int(sc.get("num_speculative_tokens") or 0),
            # requests decoding in a decode step (the batch), and each request's prompt (every
            # prompt token is prefilled inside the window: the prefix cache is emptied before it)
            "decode_requests_per_step": (np.mean([x.get("generation_requests") or 0 for x in decode])
                                         if decode else np.nan),
            "prompt_tokens_mean": (sum(x.get("context_tokens") or 0 for x in steps) / n_req if n_req else np.nan),
            "decode_steps": s["decode_steps"], "cycle_ms": s["cycle_ms"],
            **{p: s["parts_ms"][p] for p in PARTS}, **{f"share_{p}": s["shares"][p] for p in PARTS},
            "scheduled_tokens_per_step": s["scheduled_tokens_per_step"],
            "drafted_tokens_per_step": s["drafted_tokens_per_step"],
            "emitted_tokens_per_step": s["emitted_tokens_per_step"],
            "accepted_tokens_per_step": s["accepted_tokens_per_step"],
            "draft_share_of_step": s["draft_share_of_step"], "drafter_share_of_output": s["drafter_share_of_output"],
            "coverage": s["coverage"], "emitted_tokens": c["emitted_tokens_in_steps"],
            "profiling_slowdown": u.get("profiling_slowdown", np.nan),
            "unprofiled_cycle_ms": u.get("cycle_ms", np.nan),
            "unprofiled_client_ms_per_token": u.get("ms_per_token", np.nan),
            "output_tokens": c["output_tokens_of_requests"],
            "accepted_tokens": c["accepted_tokens_in_steps"], "engine_accepted_tokens": eng.get("num_accepted_tokens"),
            "drafted_tokens": c["drafted_tokens_in_steps"], "engine_draft_tokens": eng.get("num_draft_tokens"),
            "path": d.get("path"),
        })
    return pd.DataFrame(rows)


def format_anatomy(records: list[dict[str, Any]]) -> str:
    """The records as a plain table: a line per window, then the failed ones."""
    df = anatomy_frame(records)
    lines = []
    if len(df):
        short = {"prepare_ms": "prep", "forward_ms": "fwd", "logits_ms": "logits", "sample_ms": "sample",
                 "draft_ms": "draft", "bookkeep_ms": "book", "unscoped_ms": "unsc", "between_ms": "core"}
        head = f"{'arm':22s} {'workload':10s} {'c':>3s} {'r':>2s} {'steps':>5s} {'cycle ms':>9s} " + " ".join(
            f"{short[p]:>6s}" for p in PARTS) + "   draft/step  drafts/output  slowdown  unprof. ms"
        lines += ["decode steps of profiled windows (ms per step, profiled engine: read the shares)", head]
        for r in df.itertuples():
            out = "-" if r.drafter_share_of_output is None or pd.isna(r.drafter_share_of_output) else \
                f"{r.drafter_share_of_output:.0%}"
            lines.append(f"{r.arm:22s} {r.workload:10s} {r.concurrency:3d} {r.repeat:2d} {r.decode_steps:5d} "
                         f"{r.cycle_ms:9.1f} " + " ".join(f"{getattr(r, p):6.1f}" for p in PARTS)
                         + f"   {r.draft_share_of_step:10.1%}  {out:>13s}"
                         + ("         -           -" if pd.isna(r.profiling_slowdown) else
                            f"  {r.profiling_slowdown:7.2f}x  {r.unprofiled_cycle_ms:10.1f}"))
        lines.append("parts: " + "; ".join(f"{short[p]} = {PART_LABELS[p]}" for p in PARTS))
        lines.append("slowdown: the profiled window's client ms per token over its unprofiled twin's (same requests, "
                     "same server); unprof. ms: the decode cycle over it")
    done = {(d["arm"], d["workload"], d["concurrency"], d["repeat"]) for d in records if d.get("status") == "ok"}
    failed = [d for d in records if d.get("status") != "ok"  # not measured again since, nor an attempt
              and (d["arm"], d["workload"], d["concurrency"], d["repeat"]) not in done  # profiled again at once
              and not str(d.get("path", "")).endswith(".retried.json")]
    for d in failed:
        lines.append(f"failed: {d['arm']}/{d['workload']}/c={d['concurrency']} r{d['repeat']}: {d.get('error', '')[:200]}")
    return "\n".join(lines) if lines else "no step-anatomy records"


def against_baseline(df: pd.DataFrame, baseline: str = "baseline") -> pd.DataFrame:
    """Each arm's decode step beside the baseline's at the same workload and level (means over
    repeats): the step's cost ratio, ms per emitted token and the speedup they imply on the
    profiled engine (``anatomy_speedup`` = baseline ms per token / the arm's: a reading of the
    trace, not a measured speedup), and the seed 004 rule (``draft_pays``: drafting's share of the
    step below the share of output the drafts supplied)."""
    if df.empty:
        return df
    cols = [*PARTS, "cycle_ms", "emitted_tokens_per_step", "accepted_tokens_per_step", "drafted_tokens_per_step",
            "draft_share_of_step", "drafter_share_of_output", "profiling_slowdown", "unprofiled_cycle_ms"]
    df = df.assign(**{c: df[c] if c in df else np.nan for c in ("profiling_slowdown", "unprofiled_cycle_ms")})
    g = df.groupby(["arm", "workload", "concurrency"], as_index=False)[cols].mean()
    g["ms_per_token"] = g["cycle_ms"] / g["emitted_tokens_per_step"].where(g["emitted_tokens_per_step"] > 0)
    base = g[g["arm"] == baseline].set_index(["workload", "concurrency"])
    out = g[g["arm"] != baseline].copy()
    compared = ["baseline_cycle_ms", "baseline_ms_per_token", "step_cost_ratio", "anatomy_speedup",
                "baseline_unprofiled_cycle_ms", "unprofiled_step_cost_ratio", "unprofiled_speedup",
                *(f"extra_{p}" for p in ("forward_ms", "logits_ms", "sample_ms", "draft_ms", "between_ms")),
                "draft_pays"]
    if base.empty or out.empty:
        return out.assign(**dict.fromkeys(compared, np.nan)).reset_index(drop=True)
    key = list(zip(out["workload"], out["concurrency"], strict=True))
    b = base.reindex(key)
    out["baseline_cycle_ms"] = b["cycle_ms"].to_numpy()
    out["baseline_ms_per_token"] = b["ms_per_token"].to_numpy()
    out["step_cost_ratio"] = out["cycle_ms"] / out["baseline_cycle_ms"]
    out["anatomy_speedup"] = out["baseline_ms_per_token"] / out["ms_per_token"]
    # the same on the unprofiled engine (each window's cycle over its own twin's slowdown)
    out["baseline_unprofiled_cycle_ms"] = b["unprofiled_cycle_ms"].to_numpy()
    out["unprofiled_step_cost_ratio"] = out["unprofiled_cycle_ms"] / out["baseline_unprofiled_cycle_ms"]
    out["unprofiled_speedup"] = ((out["baseline_unprofiled_cycle_ms"] / b["emitted_tokens_per_step"].to_numpy())
                                 / (out["unprofiled_cycle_ms"] / out["emitted_tokens_per_step"]))
    for p in ("forward_ms", "logits_ms", "sample_ms", "draft_ms", "between_ms"):
        out[f"extra_{p}"] = out[p] - b[p].to_numpy()
    out["draft_pays"] = out["draft_share_of_step"] < out["drafter_share_of_output"].fillna(0.0)
    return out.reset_index(drop=True)
