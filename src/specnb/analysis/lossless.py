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

from specnb.analysis.pairing import LOAD_KEYS, condition_column, condition_keys, paired, usable
from specnb.analysis.requests import by_conversation_turn
from specnb.analysis.speedups import level_of
from specnb.ledger import load_requests
from specnb.ledger.records import MARGINS_DIR, MARGINS_KIND, load_margins  # noqa: F401 - re-exported

__all__ = ["DEFAULT_THRESHOLD", "MARGINS_DIR", "MARGINS_KIND", "compare_outputs", "divergence_margin", "load_margins",
           "lossless", "lossless_summary", "top_gaps", "request_outputs"]

DEFAULT_THRESHOLD = 0.5

# specnb predict's records of the baseline's logprobs at each first difference:
# <condition>/predicted/margins/<arm>/<workload>/<point>.json


def request_outputs(path: str) -> pd.DataFrame:
    req = load_requests(path)
    if req.empty or "output_sha" not in req.columns:
        return pd.DataFrame()
    in_flight = _in_flight_at(req)
    req = req.assign(in_flight=[in_flight.get(int(i)) for i in req["index"]])
    keyed = by_conversation_turn(req)  # a conversation's request is its (conversation, turn) in both arms
    req = keyed if keyed is not None else req
    req = req[req["error"].isna()] if "error" in req.columns else req
    cols = ["index", "output_sha", "in_flight"] + [c for c in ("output_token_ids", "prompt_id") if c in req.columns]
    return req[cols].set_index("index")


def _in_flight_at(req: pd.DataFrame) -> dict[int, Any]:
    """Per request index, a function of an output position: how many of the point's requests were
    in flight when this request's token at that position arrived (its batch, as the client saw it)."""
    need = {"start_s", "end_s", "chunk_times_s", "chunk_tokens", "index"}
    if not need <= set(req.columns):
        return {}
    starts, ends = req["start_s"].to_numpy(float), req["end_s"].to_numpy(float)
    out: dict[int, Any] = {}
    for r in req.to_dict("records"):
        times, toks = r["chunk_times_s"], r["chunk_tokens"]
        if times is None or toks is None or len(times) == 0:
            continue
        cum = np.cumsum(np.asarray(toks, dtype=int))
        times = np.asarray(times, dtype=float)

        def at(pos: int, cum=cum, times=times) -> int | None:
            j = int(np.searchsorted(cum, pos, side="right"))
            if j >= len(times):
                return None
            t = times[j]
            return int(((starts <= t) & (ends >= t)).sum())

        out[int(r["index"])] = at
    return out


def _first_difference(a: Any, b: Any) -> float:
    if a is None or b is None or (isinstance(a, float) and np.isnan(a)) or (isinstance(b, float) and np.isnan(b)):
        return np.nan
    a, b = list(a), list(b)
    for i, (x, y) in enumerate(zip(a, b, strict=False)):
        if x != y:
            return float(i)
    return float(min(len(a), len(b)))  # one is a prefix of the other: they part where it ends


def compare_outputs(a_path: str, b_path: str, *, divergences: bool = False) -> dict[str, Any] | None:
    """Two points' outputs request by request (matched on the request index): how many were
    compared, how many are identical, the median token where the differing ones part and how
    many requests the second point had in flight when its first differing token arrived (median).
    ``divergences``: also the list of differing requests (index, prompt id, position, the two
    tokens there, in flight in each point)."""
    a, b = request_outputs(a_path), request_outputs(b_path)
    if a.empty or b.empty:
        return None
    both = a.join(b, how="inner", suffixes=("_a", "_b"))
    both = both[both["output_sha_a"].notna() & both["output_sha_b"].notna()]
    if both.empty:
        return None
    same = both["output_sha_a"] == both["output_sha_b"]
    rows = []
    if "output_token_ids_a" in both.columns and "output_token_ids_b" in both.columns:
        for idx, r in both[~same].iterrows():
            x, y = r["output_token_ids_a"], r["output_token_ids_b"]
            f = _first_difference(x, y)
            if np.isnan(f):
                continue
            i = int(f)
            fa, fb = r.get("in_flight_a"), r.get("in_flight_b")
            rows.append({"index": int(idx), "prompt_id": r.get("prompt_id_a"), "position": i,
                         "token_a": int(x[i]) if i < len(x) else None, "token_b": int(y[i]) if i < len(y) else None,
                         "in_flight_a": fa(i) if callable(fa) else None, "in_flight_b": fb(i) if callable(fb) else None})
    first = [d["position"] for d in rows]
    flights = [d["in_flight_b"] for d in rows if d["in_flight_b"] is not None]
    out = {"requests": int(len(both)), "identical": int(same.sum()), "identical_share": float(same.mean()),
           "first_difference_p50": float(np.median(first)) if first else None,
           "in_flight_at_difference_p50": float(np.median(flights)) if flights else None}
    if divergences:
        out["divergences"] = rows
    return out


def lossless(df: pd.DataFrame, *, threshold: float = DEFAULT_THRESHOLD, divergences: bool = False) -> pd.DataFrame:
    """Per pair at temperature 0: the drafter's outputs against the baseline's, plus one row per
    baseline repeat against the baseline's first repeat (``arm`` = the baseline: the numerics
    reference). Columns: arm, workload, concurrency, repeat, requests, identical_share,
    first_difference_p50, in_flight_at_difference_p50, flagged (differing share above
    ``threshold``), reference, path (the point compared) and path_ref (the baseline point it is
    compared with); ``divergences``: also each pair's differing requests (a list per row)."""
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
        cmp = compare_outputs(r["path_base"], r["path"], divergences=divergences)
        if cmp:
            rows.append({**{k: r.get(k) for k in where}, "arm": r["arm"], "workload": r["workload"],
                         "concurrency": r["concurrency"], "repeat": r["repeat"], "reference": False, **cmp,
                         "path": r["path"], "path_ref": r["path_base"]})
    if not pairs.empty:
        base = greedy[greedy["arm"] == pairs["baseline_arm"].iloc[0]]
        base = base.assign(level=level_of(base))
        for key, g in base.groupby(where + ["workload", "level"], dropna=False, sort=True):
            g = g.sort_values("repeat")
            for _, later in g.iloc[1:].iterrows():
                cmp = compare_outputs(g.iloc[0]["path"], later["path"], divergences=divergences)
                if cmp:
                    rows.append({**{k: later[k] for k in where}, "arm": later["arm"], "workload": later["workload"],
                                 "concurrency": key[-1], "repeat": later["repeat"], "reference": True, **cmp,
                                 "path": later["path"], "path_ref": g.iloc[0]["path"]})
    out = pd.DataFrame(rows)
    if len(out):
        out["flagged"] = (1.0 - out["identical_share"] > threshold) & ~out["reference"]
    return out


def divergence_margin(base_token: int, other_token: int | None, at: dict[int, float] | None) -> dict[str, Any]:
    """At a first differing position, from the baseline's raw logprobs there (``at``: token ->
    logprob, the top k and the baseline's own token): how far the baseline's token sits above
    the other arm's (nats; a lower bound when the other is not in the top k), and whether the
    baseline's token is the argmax of this pass (a pass of another batch shape may disagree)."""
    at = at or {}
    top = max(at, key=at.get) if at else None
    out = {"margin": None, "margin_is_bound": False, "argmax_is_base": top == base_token,
           "argmax_is_other": top == other_token}
    if base_token in at:
        if other_token is not None and other_token in at:
            out["margin"] = at[base_token] - at[other_token]
        elif other_token is not None and at:
            out["margin"], out["margin_is_bound"] = at[base_token] - min(at.values()), True
    return out


def top_gaps(path_lp: list[dict[int, float] | None], start: int) -> np.ndarray:
    """The gap between the two most likely tokens (nats) at every position from ``start`` on: how
    close an ordinary step of this text comes to a tie."""
    gaps = []
    for at in path_lp[start:]:
        if at and len(at) >= 2:
            a, b = sorted(at.values(), reverse=True)[:2]
            gaps.append(a - b)
    return np.asarray(gaps, dtype=float)


def _margin_line(m: pd.DataFrame) -> str:
    got = m[m["margin"].notna()]
    if got.empty:
        return ""
    gap = got["margin"].abs()
    share = float(got["as_close_share"].median()) if got["as_close_share"].notna().any() else float("nan")
    flips = int((got["argmax_is_base"] == False).sum())  # noqa: E712 - None (no token there) is not a flip
    far = int((gap > 1.0).sum())
    return (f"; at the first differing token the two candidates are {gap.median():.2f} nats apart in the baseline's "
            f"own logits (median of {len(got)}; {share:.1%} of the text's ordinary positions are as close; "
            f"{far} more than 1 nat apart; {flips} where a full-sequence pass ranks the other token first)")


def lossless_summary(table: pd.DataFrame, threshold: float = DEFAULT_THRESHOLD,
                     margins: pd.DataFrame | None = None) -> str:
    """A few lines for the report: identical share per arm and workload against the baseline's
    own start-to-start reference, where and in what batch differing outputs part, and the pairs
    above the threshold; with ``margins`` (:func:`specnb.sweep.predict` records) also how close
    to a tie the first differing tokens were in the baseline's own logits."""
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
        flight = g["in_flight_at_difference_p50"].dropna() if "in_flight_at_difference_p50" in g.columns else []
        if len(flight):
            where += f" with {flight.median():.0f} request(s) in flight"
        what = "baseline vs its own first start (numerics alone)" if g["reference"].all() else "vs the baseline"
        head = f"{key[0]} / " if cond else ""
        if margins is not None and not margins.empty:
            sel = (margins["arm"] == arm) & (margins["workload"] == wl)
            if cond and cond in margins.columns:
                sel &= margins[cond] == key[0]
            elif cond:  # the margins do not say which of several sweeps: none is attributed
                sel &= False
            where += _margin_line(margins[sel])
        lines.append(f"{head}{arm} / {wl}: {share:.0%} of {int(g['requests'].sum())} requests identical {what}{where}")
    flagged = table[table.get("flagged", False) == True]  # noqa: E712 - pandas mask
    if len(flagged):
        lines.append(f"flagged (more than {threshold:.0%} of outputs differ): "
                     + ", ".join((f"{r[cond]} / " if cond else "") + f"{r['arm']} / {r['workload']} "
                                 f"c={r['concurrency']:g} r={r['repeat']}" for r in flagged.to_dict("records")))
    return "\n".join(lines)
