"""The tables a notebook draws from: paired speedups with intervals, absolute numbers, per
prompt category, the run's one-line summary and why failed points failed.

Every table is built from a ledger frame (:func:`specnb.ledger.load_ledgers`), never across
conditions: a speedup is a ratio within one condition (same prompts, engine build,
sampling); conditions are compared on their absolute numbers only with their spread shown.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pandas as pd

from specnb.analysis.pairing import condition_keys, usable
from specnb.analysis.speedups import paired_speedups
from specnb.ledger import PLAIN_CONDITION, Flag, has_flag, load_requests
from specnb.ledger.names import Status
from specnb.ledger.timing import overhead_line, total_phases

__all__ = ["summarize", "absolute", "by_category", "run_summary", "failure_reasons", "label_conditions"]


def label_conditions(df: pd.DataFrame, labels: Mapping[str, str] | None = None) -> pd.DataFrame:
    """The frame with a ``condition_label`` column (a condition without a label is its name)."""
    if df.empty:
        return df
    out = df.copy()
    out["condition_label"] = [(labels or {}).get(c, c) for c in out["condition"]]
    return out


def summarize(df: pd.DataFrame, labels: Mapping[str, str] | None = None, **options: Any) -> pd.DataFrame:
    """Paired speedup table per condition, arm, workload and concurrency, with the one interval of
    :func:`specnb.analysis.speedups.paired_speedups` (over server starts and the panel's prompts;
    ``options`` go to it); never forms a ratio across conditions. ``speedup_min``/``speedup_max``
    keep the plain spread over repeats; the :class:`~specnb.analysis.speedups.Speedups` itself is
    kept in ``table.attrs["speedups"]`` (paired contrasts between arms read it)."""
    sp = paired_speedups(df, **options)
    t = sp.table.copy()
    if t.empty:
        return t
    if "condition" not in t:
        t.insert(0, "condition", PLAIN_CONDITION)
    t.insert(list(t.columns).index("condition") + 1, "condition_label",
             [(labels or {}).get(c, c) for c in t["condition"]])
    t.attrs["speedups"] = sp
    return t


def absolute(df: pd.DataFrame, value: str = "output_tok_s") -> pd.DataFrame:
    """Absolute numbers per condition, arm, workload and concurrency: mean, min, max over repeats.

    Absolute values compare across conditions only as far as their spread allows: each
    repeat is a separate server start, and starts differ (up to 1.5x on the CPU machines).
    """
    ok = usable(df)
    if ok.empty:
        return pd.DataFrame()
    keys = [k for k in ("condition", "condition_label", "arm", "workload", "concurrency") if k in ok]
    g = ok.groupby(keys, sort=False)[value]
    out = g.agg(["size", "mean", "min", "max"]).reset_index()
    return out.rename(columns={"size": "n", "mean": value, "min": f"{value}_min", "max": f"{value}_max"})


def by_category(df: pd.DataFrame) -> pd.DataFrame:
    """Per-request results per prompt category, paired per repeat: the per-user decode speedup
    of each category (mean of 1 / TPOT over its requests, drafter on / off).

    Aggregate throughput belongs to the whole point (categories share every batch), so a
    per-category *aggregate* speedup needs one workload per category; per-user decode speed
    is per request and splits cleanly. Points without a request sidecar are skipped.
    """
    rows = []
    for r in usable(df).itertuples():
        req = load_requests(r.path)
        if req.empty or "category" not in req:
            continue
        req = req[req["error"].isna() & (req["tpot_s"] > 0)]
        for cat, g in req.groupby(req["category"].fillna("(none)")):
            rows.append({"condition": r.condition, "arm": r.arm, "speculative": r.speculative,
                         "workload": r.workload, "concurrency": r.concurrency, "repeat": r.repeat,
                         "category": cat, "requests": len(g), "decode_tok_s": float((1 / g["tpot_s"]).mean())})
    per = pd.DataFrame(rows)
    if per.empty:
        return per
    keys = ["condition", "workload", "concurrency", "repeat", "category"]
    base = per[~per["speculative"].astype(bool)][keys + ["decode_tok_s"]]
    spec = per[per["speculative"].astype(bool)]
    pairs = spec.merge(base, on=keys, suffixes=("", "_base"))
    pairs["per_user_speedup"] = pairs["decode_tok_s"] / pairs["decode_tok_s_base"]
    return (pairs.groupby(["condition", "arm", "workload", "concurrency", "category"])
            .agg(n=("per_user_speedup", "size"), requests=("requests", "sum"),
                 per_user_speedup=("per_user_speedup", "mean"), lo=("per_user_speedup", "min"),
                 hi=("per_user_speedup", "max")).reset_index())


def run_summary(folder: Path | str, df: pd.DataFrame, labels: Mapping[str, str] | None = None,
                timings: list[dict] | None = None) -> str:
    """One markdown line: which run, on which engine, what it holds and what to distrust;
    ``timings``: the run's timing records (:func:`specnb.ledger.timing.read_timings`), for where
    its time went."""
    failed = int((df["status"] != Status.OK).sum()) if len(df) else 0
    busy = int(has_flag(df, Flag.HOST_BUSY).sum())
    engines = sorted({str(v) for v in df.get("engine_version", pd.Series(dtype=str)).dropna()})
    parts = [f"Run **{Path(folder).name}**" + (f" (vLLM {', '.join(engines)})" if engines else "")
             + f": {len(df) - failed} measured points, {failed} failure records"]
    if busy:
        parts.append(f"{busy} measured while another process used the CPU (flag `{Flag.HOST_BUSY}`; "
                     "read those points with care)")
    if labels and (len(labels) > 1 or PLAIN_CONDITION not in labels):
        parts.append("conditions: " + ", ".join(labels.values()))
    if timings:
        parts.append(f"sweep time {overhead_line(total_phases(timings))}")
    return "; ".join(parts) + "."


def _text(v: object) -> str | None:
    return v if isinstance(v, str) and v else None


def failure_reasons(df: pd.DataFrame, labels: Mapping[str, str] | None = None) -> pd.DataFrame:
    """One row per condition with failure records: the error types, and the engine's own reason
    (the last error line of the first failure's log tail, or its message)."""
    failed = df[df["status"] != Status.OK] if len(df) else df
    rows = []
    by = condition_keys(failed)[-1:] or None
    groups = failed.groupby(by, sort=False) if by else [(PLAIN_CONDITION, failed)] if len(failed) else []
    for cond, g in groups:
        cond = cond[0] if isinstance(cond, tuple) else cond
        first = g.iloc[0]
        tail = (_text(first.get("error_detail")) or "").strip().splitlines()
        why = next((ln for ln in reversed(tail) if ("Error" in ln or "error" in ln)
                    and "For further information" not in ln),
                   tail[-1] if tail else "")
        rows.append({"condition": cond, "condition_label": (labels or {}).get(cond, cond),
                     "failures": len(g), "error_types": ", ".join(sorted(set(map(str, g["error_type"])))),
                     "reason": why.strip()[:300]})
    return pd.DataFrame(rows, columns=["condition", "condition_label", "failures", "error_types", "reason"])
