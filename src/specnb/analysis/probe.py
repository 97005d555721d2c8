"""The step-time probe set beside the engine: a probe ledger's step times (:mod:`specnb.probe`,
torch alone) against the steps a profiled vLLM took (``specnb anatomy``, :mod:`specnb.engine.anatomy`)
for the same model on the same machine.

An engine step is comparable with a probe cell when every sequence in it had the same number of
new tokens q: a decode step (no prefill in it, no drafts: q = 1) or a verification step in which
every sequence carried all K drafts (q = K + 1). The engine's time is the model's part of the step,
``forward_ms + logits_ms`` (the probe times the forward pass and the logits of every new token;
neither side's sampling, drafting or scheduling is in it). Both are medians over steps; the engine's
come from a profiled server (the profiler's slowdown is measured by ``make bench-engine``).
"""

from __future__ import annotations

import statistics
from collections.abc import Iterable, Sequence

__all__ = ["engine_cells", "beside_engine", "format_beside"]


def _uniform_q(step: dict, k: int | None) -> int | None:
    """The step's new tokens per sequence where they are the same for every sequence, else None."""
    b = step.get("generation_requests") or 0
    if b == 0 or step.get("context_requests"):
        return None
    drafted = step.get("drafted_tokens") or 0
    if drafted == 0 and step.get("scheduled_tokens") == b:
        return 1
    if k and drafted == b * k and step.get("scheduled_tokens") == b * (k + 1):
        return k + 1
    return None


def engine_cells(anatomy: Iterable[dict]) -> dict[tuple[str, int, int], list[float]]:
    """(arm, b, q) -> the model's time of each comparable step (ms), from ``step_anatomy`` records
    (:func:`specnb.ledger.records.load_anatomy`); failed windows are left out. Kept per arm: a
    drafter's server does more around the same forward pass than the baseline's."""
    out: dict[tuple[str, int, int], list[float]] = {}
    for doc in anatomy:
        if doc.get("status") != "ok":
            continue
        k = (doc.get("speculative_config") or {}).get("num_speculative_tokens")
        for step in doc.get("steps") or []:
            q = _uniform_q(step, k)
            if q is not None:
                key = (doc["arm"], step["generation_requests"], q)
                out.setdefault(key, []).append(step["forward_ms"] + step["logits_ms"])
    return out


def beside_engine(probe: dict, anatomy: Sequence[dict], length: int | None = None,
                  min_steps: int = 3) -> list[dict]:
    """One row per (arm, b, q) measured on both sides: the probe's median at cached length
    ``length`` (default: the probe's shortest), the engine's median over at least ``min_steps``
    steps of that arm, their ratio, and each side's verification/decode ratio T(b, q) / T(b, 1)
    (the engine's within the arm, or over the baseline's decode step where the arm has none: a draft
    model's server drafts at every step) where both have q = 1."""
    lengths = sorted({c["L"] for c in probe["cells"]})
    if not lengths:
        return []
    length = lengths[0] if length is None else length
    mine = {(c["b"], c["q"]): c["median_ms"] for c in probe["cells"] if c["L"] == length}
    theirs = {key: (statistics.median(v), len(v)) for key, v in engine_cells(anatomy).items() if len(v) >= min_steps}
    plain = {doc["arm"] for doc in anatomy if not doc.get("speculative_config")}
    baseline = "baseline" if "baseline" in plain else min(plain, default=None)
    rows = []
    for (arm, b, q) in sorted(theirs, key=lambda x: (x[0] != "baseline", x)):
        if (b, q) not in mine:
            continue
        e, n = theirs[(arm, b, q)]
        row = {"arm": arm, "b": b, "q": q, "L": length, "probe_ms": mine[(b, q)], "engine_ms": e, "engine_steps": n,
               "probe_over_engine": mine[(b, q)] / e, "probe_ratio": None, "engine_ratio": None,
               "engine_decode_arm": None}
        decode = next((d for d in (arm, baseline) if (d, b, 1) in theirs), None)
        if q > 1 and (b, 1) in mine and decode is not None:
            row["probe_ratio"] = mine[(b, q)] / mine[(b, 1)]
            row["engine_ratio"] = e / theirs[(decode, b, 1)][0]
            row["engine_decode_arm"] = decode
        rows.append(row)
    return rows


def format_beside(rows: Sequence[dict]) -> str:
    """The rows as a Markdown table (the one docs/gpu.md quotes)."""
    def r(x: float | None) -> str:
        return "" if x is None else f"{x:.2f}"

    def of(x: dict) -> str:
        d = x.get("engine_decode_arm")
        return f" (over {d}'s decode)" if d and d != x["arm"] else ""

    lines = ["| vLLM arm | b | q | probe, ms | vLLM-CPU, ms (steps) | probe / vLLM | T(b,q)/T(b,1) probe "
             "| T(b,q)/T(b,1) vLLM |",
             "|---|---:|---:|---:|---:|---:|---:|---:|"]
    lines += [f"| {x['arm']} | {x['b']} | {x['q']} | {x['probe_ms']:.1f} | {x['engine_ms']:.1f} ({x['engine_steps']}) | "
              f"{x['probe_over_engine']:.2f} | {r(x['probe_ratio'])} | {r(x['engine_ratio'])}{of(x)} |" for x in rows]
    return "\n".join(lines)
