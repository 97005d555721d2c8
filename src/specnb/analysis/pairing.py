"""Pairs: the only place a speedup is formed, and the rules every analysis shares.

A speedup is a ratio within a pair: the speculative arm's point divided by the baseline's
point of the same sweep, (study, condition,) workload, concurrency and repeat. Pairs must
share the prompts (workload hash), the sampling, the engine build and the kind of machine, or
:class:`PairingError` is raised: otherwise the ratio measures two different servers, not
the drafter. Only *usable* points (:func:`usable`) ever enter a pair.

Three ratios per pair: ``speedup`` (output tok/s in the steady window), ``per_user_speedup``
(mean per-user decode tok/s) and ``computed_speedup`` (uncached prompt + output tokens per
wall second, seed 002). Spread across repeats (each repeat a separate server start) is in
:func:`speedup_table`; intervals are :mod:`specnb.analysis.speedups`'.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import pandas as pd

from specnb.errors import SpecnbError
from specnb.ledger import PLAIN_CONDITION, usable

__all__ = [
    "AnalysisError",
    "PairingError",
    "KEYS",
    "MUST_MATCH",
    "usable",
    "baseline_arm",
    "condition_keys",
    "condition_column",
    "pair_keys",
    "paired",
    "pairing_notes",
    "speedup_table",
    "curve_label",
    "redundant_keys",
    "isna",
]

KEYS = ["sweep", "workload", "concurrency", "repeat"]
# Present only in some frames (study notebooks): a pair never crosses a study or a condition.
CONDITION_KEYS = ["study", "condition"]
# Open-loop points pair at the same offered rate (closed-loop points have none: NaN pairs with NaN).
LOAD_KEYS = ["load_mode", "rate_rps"]
# ``machine``: the hardware in one phrase (CPU model and cores, GPUs and driver): a pair measured on two
# kinds of machine (a fleet's block retried on another node type) would be a ratio of machines
MUST_MATCH = ["workload_hash", "panel_hash", "sampling_key", "engine_version", "machine"]


class AnalysisError(SpecnbError):
    """Bad arguments to an analysis call; the message is one line meant for the user."""


class PairingError(AnalysisError):
    """Two points that would form a ratio do not share prompts, sampling or engine build."""


def isna(v: Any) -> bool:
    return v is None or (isinstance(v, float) and math.isnan(v))


def baseline_arm(df: pd.DataFrame, baseline: str | None = None) -> str:
    """The arm without a drafter that every ratio divides by: ``baseline`` when named (it must
    be in the frame), else the one arm whose points are not speculative."""
    if baseline is not None:
        if baseline not in set(df["arm"]):
            raise PairingError(f"baseline arm {baseline!r} not in ledgers (arms: {sorted(set(df['arm']))})")
        return baseline
    bases = sorted(set(df.loc[~df["speculative"].astype(bool), "arm"]))
    if len(bases) != 1:
        raise PairingError(f"need exactly one arm without a drafter to pair against, found {bases}; "
                           "name one with baseline=")
    return bases[0]


def condition_keys(df: pd.DataFrame) -> list[str]:
    """The study and condition columns where the frame has them (a study's notebook frames)."""
    return [k for k in CONDITION_KEYS if k in df.columns]


def condition_column(df: pd.DataFrame) -> str | None:
    """The column that tells a folder's conditions apart where it holds several (``condition`` in
    a study's frame, else ``sweep``), or None: one condition, nothing to split by."""
    return next((k for k in ("condition", "sweep") if k in df.columns and df[k].nunique() > 1), None)


def pair_keys(df: pd.DataFrame) -> list[str]:
    """The columns two points must share to form a pair: sweep, workload, concurrency, repeat,
    and study / condition and the load shape where the frame has them."""
    return KEYS + condition_keys(df) + [k for k in LOAD_KEYS if k in df.columns]


def paired(df: pd.DataFrame, baseline: str | None = None) -> pd.DataFrame:
    """One row per (speculative arm, workload, concurrency, repeat) with its paired ratios.

    Baseline columns carry a ``_base`` suffix (``output_tok_s_base``, ``path_base``, ...). A pair
    whose two points were measured on two kinds of machine (a fleet's block retried on another
    node type) is no ratio of arms: it is left out, and :func:`pairing_notes` names it.
    """
    return _pairs(df, baseline)[0]


def pairing_notes(df: pd.DataFrame, baseline: str | None = None) -> list[str]:
    """One line per kind of pair the report should know of: pairs left out because their points
    were measured on two kinds of machine, and pairs whose points ran on two nodes of one kind (a
    retried fleet block), which are kept."""
    try:
        merged, dropped = _pairs(df, baseline)
    except AnalysisError:
        return []
    lines = []
    if len(dropped):
        shown = "; ".join(f"{r['arm']} vs {r['baseline_arm']} at {r['workload']} c={r['concurrency']} r={r['repeat']} "
                          f"({r['machine']} vs {r['machine_base']})" for r in dropped.head(5).to_dict("records"))
        lines.append(f"left out: {len(dropped)} pair(s) measured on two kinds of machine, no ratio of arms: {shown}"
                     + ("; ..." if len(dropped) > 5 else ""))
    if len(merged) and {"node_id", "node_id_base"} <= set(merged.columns):
        a, b = merged["node_id"], merged["node_id_base"]
        split = merged[a.notna() & b.notna() & (a.astype(str) != b.astype(str))]
        if len(split):
            shown = "; ".join(f"{r['arm']} at {r['workload']} c={r['concurrency']} r={r['repeat']}"
                              for r in split.head(5).to_dict("records"))
            lines.append(f"{len(split)} pair(s) ran on two nodes of the same kind of machine (a block retried on "
                         f"another node; kept, node-to-node spread is in their ratio): {shown}"
                         + ("; ..." if len(split) > 5 else ""))
    return lines


def _pairs(df: pd.DataFrame, baseline: str | None = None) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(the pairs, the pairs left out for two kinds of machine)."""
    ok = usable(df)
    if ok.empty or "output_tok_s" not in ok.columns:
        return pd.DataFrame(), pd.DataFrame()
    base_name = baseline_arm(ok, baseline)
    base = ok[ok["arm"] == base_name]
    spec = ok[ok["arm"] != base_name]
    keys = pair_keys(ok)
    cols = keys + MUST_MATCH + ["output_tok_s", "per_user_decode_tok_s_mean", "computed_tok_s_wall",
                                "total_tok_s_wall", "prefix_cache_hit_rate", "p50_tpot_ms", "p50_ttft_ms", "path",
                                "startup_decisions", "node_id", "arm_position"]
    cols = [c for c in cols if c in ok.columns]
    # pandas matches null keys with each other: a condition that is None in both arms still pairs
    merged = spec.merge(base[cols], on=keys, suffixes=("", "_base"), how="inner")
    merged["baseline_arm"] = base_name
    dropped = merged.iloc[0:0]
    if "machine" in merged.columns:
        a, b = merged["machine"], merged["machine_base"]
        other = (a.astype(str) != b.astype(str)) & ~(a.isna() & b.isna())
        merged, dropped = merged[~other], merged[other]
    for col in MUST_MATCH:
        if col not in merged.columns or col == "machine":
            continue
        a, b = merged[col], merged[f"{col}_base"]
        bad = merged[(a.astype(str) != b.astype(str)) & ~(a.isna() & b.isna())]
        if len(bad):
            row = bad.iloc[0]
            raise PairingError(
                f"{row['arm']} vs {base_name} at {row['workload']} c={row['concurrency']} "
                f"r={row['repeat']}: {col} differs ({row[col]} vs {row[f'{col}_base']})"
            )
    merged = merged.copy()
    merged["speedup"] = merged["output_tok_s"] / merged["output_tok_s_base"]
    if "per_user_decode_tok_s_mean" in merged.columns:
        merged["per_user_speedup"] = (merged["per_user_decode_tok_s_mean"]
                                      / merged["per_user_decode_tok_s_mean_base"])
    if "computed_tok_s_wall" in merged.columns:
        merged["computed_speedup"] = merged["computed_tok_s_wall"] / merged["computed_tok_s_wall_base"]
    if "total_tok_s_wall" in merged.columns:  # prompt + output tokens over the wall time (seed 002's "total")
        merged["total_speedup"] = merged["total_tok_s_wall"] / merged["total_tok_s_wall_base"]
    return merged, dropped


def speedup_table(df: pd.DataFrame, baseline: str | None = None) -> pd.DataFrame:
    """Per (arm, workload, concurrency): paired speedup across repeats, with its plain spread
    (mean, min, max over repeats; intervals come from :func:`specnb.analysis.speedups.paired_speedups`)."""
    pairs = paired(df, baseline)
    if pairs.empty:
        return pd.DataFrame()
    g = pairs.groupby(["arm", "workload", "concurrency"], sort=True)
    out = g.agg(
        n=("speedup", "size"),
        base_tok_s=("output_tok_s_base", "mean"),
        spec_tok_s=("output_tok_s", "mean"),
        speedup=("speedup", "mean"),
        speedup_min=("speedup", "min"),
        speedup_max=("speedup", "max"),
        per_user_speedup=("per_user_speedup", "mean"),
        acceptance_length=("mean_acceptance_length", "mean"),
        acceptance_rate=("acceptance_rate", "mean"),
    )
    return out.reset_index()


def curve_label(group: dict[str, Any], omit: Sequence[str] = ("sweep",)) -> str:
    """A curve's name from its keys, leaving out ``omit`` and the plain condition."""
    return " / ".join(str(v) for k, v in group.items()
                      if k not in omit and not isna(v) and not (k == "condition" and v == PLAIN_CONDITION))


def redundant_keys(groups: pd.DataFrame) -> list[str]:
    """Curve keys that would only repeat themselves on every line: sweep and condition when
    they take one value, and the sweep when each condition has a sweep of its own (a study)."""
    omit = [k for k in ("sweep", "condition") if k in groups.columns and groups[k].astype(str).nunique() <= 1]
    if "sweep" in groups.columns and "condition" in groups.columns and "sweep" not in omit:
        pairs = groups[["sweep", "condition"]].astype(str).drop_duplicates()
        if pairs["condition"].is_unique:
            omit.append("sweep")
    return omit
