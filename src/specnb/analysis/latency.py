"""Latency-aware answers: the throughput-interactivity frontier, goodput under SLOs, and
latency against offered rate.

The crossing of 1.0 answers "does the drafter raise aggregate throughput at concurrency c".
Operators ask "at my latency target, which configuration serves the most traffic?":

- **Frontier** (:func:`frontier`): per arm and level, the per-user decode speed (mean of each
  request's 1 / TPOT: what one user sees) against aggregate output tok/s (what the server
  delivers), and the Pareto front over every arm and level of a workload: the points no other
  point beats on both. vLLM's ``bench sweep`` plots the same trade-off with tokens per user
  taken as aggregate / users; here it is measured per request.
- **Goodput** (:func:`goodput`, :func:`best_goodput`): output tokens per second counting only
  requests that met every SLO, vLLM bench's definition (a request is good when it meets each
  given bound: ``ttft_ms``, ``itl_p99_ms`` (its own 99th-percentile inter-token latency),
  ``e2el_ms``, and a floor on its decode speed ``decode_tok_s``). The interval resamples
  server starts and prompts as the speedups' bootstrap does: the same ratio estimator over the
  steady window, with good requests' tokens in the numerator.
- **Rate** (:func:`latency_by_rate`, :func:`latency_threshold`): in an open-loop sweep, TTFT and
  TPOT percentiles against offered rate per arm, the achieved rate and peak in flight, and the
  rate above which the drafter stops lowering per-token latency (the per-user speedup's
  crossing of 1.0 over rate, with its interval).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from specnb.analysis.bootstrap import DEFAULT_N_BOOT, DEFAULT_SEED, quantiles
from specnb.analysis.estimator import DEFAULT_CONFIDENCE
from specnb.analysis.pairing import AnalysisError, baseline_arm, condition_keys, usable
from specnb.analysis.speedups import paired_speedups
from specnb.analysis.thresholds import Threshold, thresholds
from specnb.analysis.window import frame_window
from specnb.ledger import load_requests

__all__ = ["SLO_KEYS", "parse_slos", "frontier", "pareto_front", "goodput", "best_goodput", "BestGoodput",
           "format_goodput", "latency_by_rate", "latency_threshold", "format_latency_threshold"]

SLO_KEYS = {
    "ttft_ms": "time to first token, ms (at most)",
    "itl_p99_ms": "a request's own 99th-percentile inter-token latency, ms (at most)",
    "e2el_ms": "end-to-end latency, ms (at most)",
    "decode_tok_s": "a request's decode speed, 1 / TPOT, tok/s (at least)",
}


def parse_slos(items: Mapping[str, float] | list[str] | None) -> dict[str, float]:
    """SLOs from a mapping or ``["ttft_ms=2000", ...]``; unknown keys and non-positive bounds
    are refused in one line."""
    if not items:
        return {}
    pairs = items.items() if isinstance(items, Mapping) else [
        (i.split("=", 1) if "=" in i else (i, "")) for i in items]
    out = {}
    for k, v in pairs:
        k = str(k).strip()
        if k not in SLO_KEYS:
            raise AnalysisError(f"unknown SLO {k!r}; known: {', '.join(f'{n} ({d})' for n, d in SLO_KEYS.items())}")
        try:
            out[k] = float(v)
        except (TypeError, ValueError):
            raise AnalysisError(f"SLO {k}: {v!r} is not a number") from None
        if not out[k] > 0:
            raise AnalysisError(f"SLO {k} must be > 0, got {out[k]}")
    return out


def _keys(df: pd.DataFrame) -> list[str]:
    return condition_keys(df) + ["workload"]


# ---------------------------------------------------------------- frontier


def pareto_front(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """True for points no other point beats on both x and y (at least as good on both, better on one)."""
    x, y = np.asarray(x, float), np.asarray(y, float)
    front = np.ones(len(x), dtype=bool)
    for i in range(len(x)):
        better = (x >= x[i]) & (y >= y[i]) & ((x > x[i]) | (y > y[i]))
        front[i] = not better.any()
    return front


def frontier(df: pd.DataFrame) -> pd.DataFrame:
    """Per (condition,) workload, arm and level: per-user decode tok/s and aggregate output tok/s
    (means over repeats, with min and max), and whether the point is on the workload's Pareto
    front over every arm and level."""
    ok = usable(df)
    if ok.empty:
        return pd.DataFrame()
    keys = _keys(ok) + ["arm", "concurrency"] + (["rate_rps"] if "rate_rps" in ok.columns else [])
    g = ok.groupby(keys, sort=True, dropna=False)
    out = g.agg(per_user_tok_s=("per_user_decode_tok_s_mean", "mean"),
                per_user_tok_s_min=("per_user_decode_tok_s_mean", "min"),
                per_user_tok_s_max=("per_user_decode_tok_s_mean", "max"),
                output_tok_s=("output_tok_s", "mean"), output_tok_s_min=("output_tok_s", "min"),
                output_tok_s_max=("output_tok_s", "max"), n=("output_tok_s", "size")).reset_index()
    out["pareto"] = False
    for _, idx in out.groupby(_keys(out), sort=False, dropna=False).groups.items():
        sub = out.loc[idx]
        out.loc[idx, "pareto"] = pareto_front(sub["per_user_tok_s"].to_numpy(), sub["output_tok_s"].to_numpy())
    return out


# ---------------------------------------------------------------- goodput


def _good(req: pd.DataFrame, slos: Mapping[str, float]) -> np.ndarray:
    ok = req["error"].isna().to_numpy() & (req["output_tokens"].to_numpy() > 0)
    good = ok.copy()
    if "ttft_ms" in slos:
        good &= (req["ttft_s"].fillna(np.inf).to_numpy() * 1e3) <= slos["ttft_ms"]
    if "e2el_ms" in slos:
        good &= ((req["end_s"] - req["start_s"]).to_numpy() * 1e3) <= slos["e2el_ms"]
    if "decode_tok_s" in slos:
        tpot = req["tpot_s"].to_numpy(float)
        # vLLM bench counts TPOT as 0 for one-token answers: they meet any decode bound
        good &= np.where(np.isfinite(tpot) & (tpot > 0), 1.0 / np.where(tpot > 0, tpot, 1.0), np.inf) \
            >= slos["decode_tok_s"]
    if "itl_p99_ms" in slos:
        p99 = []
        for times, toks in zip(req["chunk_times_s"], req["chunk_tokens"], strict=True):
            t, k = np.asarray(times if times is not None else [], float), np.asarray(toks if toks is not None else [])
            per_token = np.repeat(np.diff(t) / k[1:], k[1:].astype(int)) if t.size > 1 else np.array([])
            p99.append(np.percentile(per_token, 99) * 1e3 if per_token.size else 0.0)
        good &= np.asarray(p99) <= slos["itl_p99_ms"]
    return good


def _window_terms(req: pd.DataFrame, concurrency: int, good: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per request: good tokens inside the steady window, all tokens inside it, and the
    request-seconds it spent there (the same window :mod:`specnb.analysis.requests` uses)."""
    start, end = req["start_s"].to_numpy(float), req["end_s"].to_numpy(float)
    lo, hi = frame_window(req, concurrency)
    x = np.zeros(len(req))
    for i, (times, toks) in enumerate(zip(req["chunk_times_s"], req["chunk_tokens"], strict=True)):
        if times is not None and len(times):
            t, k = np.asarray(times, float), np.asarray(toks, float)
            x[i] = k[(t >= lo) & (t <= hi)].sum()
    d = np.clip(np.minimum(end, hi) - np.maximum(start, lo), 0.0, None)
    return np.where(good, x, 0.0), x, d


def goodput(df: pd.DataFrame, slos: Mapping[str, float], *, n_boot: int = DEFAULT_N_BOOT,
            seed: int = DEFAULT_SEED, confidence: float = DEFAULT_CONFIDENCE) -> pd.DataFrame:
    """Per (condition,) workload, arm and level: goodput tok/s (output tok/s in the steady window
    counting only requests that met every SLO), the share of requests that met them, and a
    bootstrap interval over server starts and prompts. Points need request sidecars."""
    slos = parse_slos(dict(slos))
    if not slos:
        raise AnalysisError("goodput needs at least one SLO (" + ", ".join(SLO_KEYS) + ")")
    ok = usable(df)
    if ok.empty:
        return pd.DataFrame()
    keys = _keys(ok) + ["arm", "concurrency"] + (["rate_rps"] if "rate_rps" in ok.columns else [])
    rows = []
    for key, g in ok.groupby(keys, sort=True, dropna=False):
        key = key if isinstance(key, tuple) else (key,)
        per_repeat, shares, ids, terms = [], [], [], []
        for r in g.sort_values("repeat").itertuples():
            req = load_requests(r.path)
            if req.empty or "chunk_times_s" not in req.columns:
                continue
            req = req.sort_values("index")
            good = _good(req, slos)
            gx, x, d = _window_terms(req, int(r.concurrency), good)
            measured = r.output_tok_s * (gx.sum() / x.sum()) if x.sum() > 0 else 0.0
            per_repeat.append(measured)
            shares.append(float(good[req["error"].isna().to_numpy()].mean()) if len(good) else np.nan)
            terms.append((gx, d, measured, req["prompt_id"].astype(str).to_numpy()))
            ids += list(req["prompt_id"].astype(str))
        if not per_repeat:
            continue
        prompt_ids = sorted(set(ids))
        col = {p: j for j, p in enumerate(prompt_ids)}
        rng = np.random.default_rng([seed, len(rows)])
        w = rng.multinomial(len(prompt_ids), np.full(len(prompt_ids), 1.0 / len(prompt_ids)), size=n_boot)
        reps = np.empty((len(terms), n_boot))
        for k, (gx, d, measured, pid) in enumerate(terms):
            wk = w[:, [col[p] for p in pid]].astype(float)
            sx, sd = gx.sum(), d.sum()
            with np.errstate(divide="ignore", invalid="ignore"):
                f = np.where((wk @ d) > 0, ((wk @ gx) / (wk @ d)) / (sx / sd), 1.0) if sx > 0 and sd > 0 else 1.0
            reps[k] = measured * f
        draw = rng.integers(0, len(terms), size=(len(terms), n_boot))
        boot = reps[draw, np.arange(n_boot)].mean(axis=0)
        lo, hi = quantiles(boot, confidence)
        rows.append({**dict(zip(keys, key, strict=True)), "speculative": bool(g["speculative"].iloc[0]),
                     "goodput_tok_s": float(np.mean(per_repeat)),
                     "goodput_tok_s_lo": float(lo), "goodput_tok_s_hi": float(hi),
                     "good_share": float(np.nanmean(shares)), "output_tok_s": float(g["output_tok_s"].mean()),
                     "n_repeats": len(per_repeat)})
    out = pd.DataFrame(rows)
    if len(out):
        out.attrs["slos"] = slos
    return out


@dataclass(frozen=True)
class BestGoodput:
    """The arm and level with the most goodput under the SLOs, and the best without a drafter."""

    group: dict[str, Any]
    arm: str
    level: float
    goodput_tok_s: float
    lo: float
    hi: float
    baseline_arm: str
    baseline_level: float | None
    baseline_goodput_tok_s: float | None
    slos: dict[str, float]


def best_goodput(table: pd.DataFrame, baseline: str | None = None) -> list[BestGoodput]:
    """Per (condition,) workload: the point with the most goodput, and the baseline's best."""
    if table.empty:
        return []
    out = []
    level_col = "rate_rps" if "rate_rps" in table.columns and table["rate_rps"].notna().any() else "concurrency"
    for key, g in table.groupby(_keys(table), sort=True, dropna=False):
        key = key if isinstance(key, tuple) else (key,)
        base = baseline_arm(g, baseline)
        top = g.loc[g["goodput_tok_s"].idxmax()]
        b = g[g["arm"] == base]
        btop = b.loc[b["goodput_tok_s"].idxmax()] if len(b) else None
        out.append(BestGoodput(
            group=dict(zip(_keys(table), key, strict=True)), arm=str(top["arm"]), level=float(top[level_col]),
            goodput_tok_s=float(top["goodput_tok_s"]), lo=float(top["goodput_tok_s_lo"]),
            hi=float(top["goodput_tok_s_hi"]), baseline_arm=base,
            baseline_level=None if btop is None else float(btop[level_col]),
            baseline_goodput_tok_s=None if btop is None else float(btop["goodput_tok_s"]),
            slos=dict(table.attrs.get("slos", {}))))
    return out


def format_goodput(best: list[BestGoodput], level_name: str = "c") -> str:
    """'with SLO X, best is arm A at c=N: G tok/s of goodput (drafter off: G0)' per workload."""
    if not best:
        return "(no request records to count goodput from)"
    lines = []
    for b in best:
        slo = ", ".join(f"{k} {'>=' if k == 'decode_tok_s' else '<='} {v:g}" for k, v in b.slos.items())
        where = " / ".join(str(v) for k, v in b.group.items() if k != "study" and v not in (None, "default"))
        base = ("no baseline point met the SLO" if b.baseline_goodput_tok_s is None else
                f"drafter off: {b.baseline_goodput_tok_s:.1f} tok/s at {level_name}={b.baseline_level:g}")
        lines.append(f"{where}: with SLO {slo}, best is {b.arm} at {level_name}={b.level:g}: "
                     f"{b.goodput_tok_s:.1f} tok/s of goodput [95% CI {b.lo:.1f}, {b.hi:.1f}] ({base})")
    return "\n".join(lines)


# ---------------------------------------------------------------- open loop


def latency_by_rate(df: pd.DataFrame) -> pd.DataFrame:
    """Per (condition,) workload, arm and offered rate: TTFT and TPOT p50/p99 (means over
    repeats, with min and max), achieved rate, peak requests in flight and send lateness."""
    ok = usable(df)
    if ok.empty or "rate_rps" not in ok.columns or ok["rate_rps"].isna().all():
        return pd.DataFrame()
    ok = ok[ok["rate_rps"].notna()]
    cols = {c: c for c in ("p50_ttft_ms", "p99_ttft_ms", "p50_tpot_ms", "p99_tpot_ms", "p50_e2el_ms",
                            "p99_e2el_ms", "achieved_rate_rps", "peak_in_flight", "p99_send_lateness_ms")
            if c in ok.columns}
    g = ok.groupby(_keys(ok) + ["arm", "rate_rps"], sort=True, dropna=False)
    out = g[list(cols)].mean()
    for c in ("p50_ttft_ms", "p99_ttft_ms", "p50_tpot_ms", "p99_tpot_ms"):
        if c in cols:
            out[f"{c}_min"], out[f"{c}_max"] = g[c].min(), g[c].max()
    out["n"] = g.size()
    return out.reset_index()


def latency_threshold(df: pd.DataFrame, confidence: float | None = None) -> list[Threshold]:
    """Per drafter and workload of an open-loop sweep: what holds across its offered rates for its
    per-user speedup (baseline TPOT / drafter TPOT, paired per repeat, with the one interval): it
    lowers per-token latency at every rate up to r_L and raises it from r_H, family-wise
    (:mod:`specnb.analysis.thresholds`)."""
    rate = df[df["rate_rps"].notna()] if "rate_rps" in df.columns else df.iloc[0:0]
    if rate.empty:
        return []
    return thresholds(paired_speedups(rate, confidence=confidence), "per_user_speedup")


def format_latency_threshold(th: Threshold) -> str:
    who = " / ".join(str(th.group.get(k)) for k in ("arm", "workload") if th.group.get(k) is not None)
    lowers, raises, open_ = th.at("pays"), th.at("loses"), th.at("undecided")
    if lowers and not raises and not open_:
        return f"{who}: lowers per-token latency at every offered rate measured ({th.c_min:g}-{th.c_max:g} req/s)"
    if raises and not lowers and not open_:
        return f"{who}: raises per-token latency at every offered rate measured ({th.c_min:g}-{th.c_max:g} req/s)"
    parts = ([f"lowers per-token latency at every rate up to {th.pays_through:g} req/s"] if lowers else []) + (
        [f"raises it from {th.loses_from:g} req/s up"] if raises else []) + (
        [f"undecided at {', '.join(f'{r:g}' for r in open_)} req/s"] if open_ else [])
    near = (f" (the estimates cross 1.0 near {th.concurrency:.2g} req/s, interpolated)"
            if th.concurrency is not None else "")
    return f"{who}: " + "; ".join(parts) + near
