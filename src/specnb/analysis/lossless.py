"""The lossless check: at temperature 0 a drafter must not change what the model says.

Speculative decoding is exact in theory: the verifier keeps only tokens the target would have
produced. In practice a batch of different shape can flip a near-tie (the numerics differ), so
the check is a measurement, not an assertion. Per pair (drafter arm and baseline, same
workload, level and repeat, same prompts in the same order) it compares each request's output
token ids (vLLM's ``return_token_ids``; a digest of the text where a server sent none) and
reports the share of requests whose outputs are identical and, for those that differ, the
token at which they first part. As a reference for what numerics alone do, the baseline is
compared with itself across server starts (repeat 0 against each later repeat at the same
level): a drafter whose identical share is far below that reference changes outputs.

A pair is flagged when its share of differing requests is above ``threshold`` (default 0.5).
Spec-Bench checks output equality the same way; the load tools do not check it at all.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from specnb.analysis.bootstrap import level_of
from specnb.analysis.pairing import LOAD_KEYS, condition_column, condition_keys, paired, usable
from specnb.ledger import load_requests

__all__ = ["DEFAULT_THRESHOLD", "compare_outputs", "lossless", "lossless_summary"]

DEFAULT_THRESHOLD = 0.5


def _outputs(path: str) -> pd.DataFrame:
    req = load_requests(path)
    if req.empty or "output_sha" not in req.columns:
        return pd.DataFrame()
    req = req[req["error"].isna()] if "error" in req.columns else req
    cols = ["index", "output_sha"] + (["output_token_ids"] if "output_token_ids" in req.columns else [])
    return req[cols].set_index("index")


def _first_difference(a: Any, b: Any) -> float:
    if a is None or b is None or (isinstance(a, float) and np.isnan(a)) or (isinstance(b, float) and np.isnan(b)):
        return np.nan
    a, b = list(a), list(b)
    for i, (x, y) in enumerate(zip(a, b, strict=False)):
        if x != y:
            return float(i)
    return float(min(len(a), len(b)))  # one is a prefix of the other: they part where it ends


def compare_outputs(a_path: str, b_path: str) -> dict[str, Any] | None:
    """Two points' outputs request by request (matched on the request index): how many were
    compared, how many are identical, and the median token where the differing ones part."""
    a, b = _outputs(a_path), _outputs(b_path)
    if a.empty or b.empty:
        return None
    both = a.join(b, how="inner", suffixes=("_a", "_b"))
    both = both[both["output_sha_a"].notna() & both["output_sha_b"].notna()]
    if both.empty:
        return None
    same = both["output_sha_a"] == both["output_sha_b"]
    first = []
    if "output_token_ids_a" in both.columns and "output_token_ids_b" in both.columns:
        first = [_first_difference(x, y) for x, y in
                 zip(both.loc[~same, "output_token_ids_a"], both.loc[~same, "output_token_ids_b"], strict=True)]
        first = [f for f in first if not np.isnan(f)]
    return {"requests": int(len(both)), "identical": int(same.sum()), "identical_share": float(same.mean()),
            "first_difference_p50": float(np.median(first)) if first else None}


def lossless(df: pd.DataFrame, *, threshold: float = DEFAULT_THRESHOLD) -> pd.DataFrame:
    """Per pair at temperature 0: the drafter's outputs against the baseline's, plus one row per
    baseline repeat against the baseline's first repeat (``arm`` = the baseline: the numerics
    reference). Columns: arm, workload, concurrency, repeat, requests, identical_share,
    first_difference_p50, flagged (differing share above ``threshold``), reference."""
    rows: list[dict[str, Any]] = []
    greedy = usable(df)
    if greedy.empty or "temperature" not in greedy.columns:
        return pd.DataFrame()
    greedy = greedy[greedy["temperature"] == 0]
    if greedy.empty:
        return pd.DataFrame()
    # a study's conditions (checkpoints, layouts, pools) are separate sweeps: the reference never
    # compares one condition's baseline with another's
    where = ["sweep"] + condition_keys(greedy) + [k for k in LOAD_KEYS if k in greedy.columns]
    pairs = paired(greedy)
    for r in pairs.to_dict("records"):
        cmp = compare_outputs(r["path"], r["path_base"])
        if cmp:
            rows.append({**{k: r.get(k) for k in where}, "arm": r["arm"], "workload": r["workload"],
                         "concurrency": r["concurrency"], "repeat": r["repeat"], "reference": False, **cmp})
    if not pairs.empty:
        base = greedy[greedy["arm"] == pairs["baseline_arm"].iloc[0]]
        base = base.assign(level=level_of(base))
        for key, g in base.groupby(where + ["workload", "level"], dropna=False, sort=True):
            g = g.sort_values("repeat")
            for _, later in g.iloc[1:].iterrows():
                cmp = compare_outputs(g.iloc[0]["path"], later["path"])
                if cmp:
                    rows.append({**{k: later[k] for k in where}, "arm": later["arm"], "workload": later["workload"],
                                 "concurrency": key[-1], "repeat": later["repeat"], "reference": True, **cmp})
    out = pd.DataFrame(rows)
    if len(out):
        out["flagged"] = (1.0 - out["identical_share"] > threshold) & ~out["reference"]
    return out


def lossless_summary(table: pd.DataFrame, threshold: float = DEFAULT_THRESHOLD) -> str:
    """A few lines for the report: identical share per arm and workload against the baseline's
    own start-to-start reference, and the pairs above the threshold."""
    if table.empty:
        return "(no output token ids in these ledgers at temperature 0: nothing to compare)"
    lines = []
    # one line per condition where the table holds several (a study's checkpoints, layouts, ...)
    cond = condition_column(table)
    by = ([cond] if cond else []) + ["arm", "workload"]
    for key, g in table.groupby(by, sort=True):
        arm, wl = key[-2], key[-1]
        share = g["identical"].sum() / g["requests"].sum()
        first = g["first_difference_p50"].dropna()
        where = f"; differing outputs part at token {first.median():.0f} (median)" if len(first) else ""
        what = "baseline vs its own first start (numerics alone)" if g["reference"].all() else "vs the baseline"
        head = f"{key[0]} / " if cond else ""
        lines.append(f"{head}{arm} / {wl}: {share:.0%} of {int(g['requests'].sum())} requests identical {what}{where}")
    flagged = table[table.get("flagged", False) == True]  # noqa: E712 - pandas mask
    if len(flagged):
        lines.append(f"flagged (more than {threshold:.0%} of outputs differ): "
                     + ", ".join((f"{r[cond]} / " if cond else "") + f"{r['arm']} / {r['workload']} "
                                 f"c={r['concurrency']:g} r={r['repeat']}" for r in flagged.to_dict("records")))
    return "\n".join(lines)
