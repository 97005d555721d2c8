"""Request-level terms of a point: what the prompt level of the bootstrap re-weights.

Each metric of a point is a ratio of sums over its requests (tokens over request-seconds in
the steady window, the mean of per-request 1 / TPOT, computed tokens over request-seconds).
Re-forming it with a weight per prompt gives a replicate value anchored at the ledger's:
equal weights return the measured value exactly. The requests come from each ledger's
Parquet sidecar, read once.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from specnb.analysis.pairing import PairingError
from specnb.analysis.window import frame_window, slot_column
from specnb.ledger import load_requests

__all__ = ["RequestTerms", "request_terms", "weight_factors", "prompt_influence", "Sidecars", "pair_terms", "TURN_KEY",
           "UNCATEGORIZED", "by_conversation_turn"]

TURN_KEY = 10_000  # a conversation request's key: conversation * TURN_KEY + turn
UNCATEGORIZED = "(none)"  # a prompt without a category: one stratum of its own


@dataclass(frozen=True)
class RequestTerms:
    """Per-request numerators and denominators of one point's metrics, in request-index order."""

    index: np.ndarray
    prompt_id: np.ndarray
    steady_x: np.ndarray
    steady_d: np.ndarray
    user_u: np.ndarray  # 1 / TPOT, 0 where not valid
    user_ok: np.ndarray  # 1.0 where the request has a TPOT
    comp_x: np.ndarray
    comp_d: np.ndarray
    keyed: bool = False  # index is (conversation, turn) as conversation * TURN_KEY + turn
    category: np.ndarray | None = None  # each request's prompt category (None: the records have none)

    def subset(self, keep: np.ndarray) -> RequestTerms:
        return RequestTerms(*(getattr(self, f)[keep] for f in ("index", "prompt_id", "steady_x", "steady_d", "user_u",
                                                                "user_ok", "comp_x", "comp_d")), keyed=self.keyed,
                            category=None if self.category is None else self.category[keep])


def by_conversation_turn(req: pd.DataFrame) -> pd.DataFrame | None:
    """A conversation point's requests keyed by (conversation, turn), in that order, as ``index``
    (conversation * TURN_KEY + turn); None for any other point. A replay's users interleave their
    turns by timing, so the order they were sent in differs between arms; the key does not."""
    if not ({"conversation", "turn"} <= set(req.columns) and len(req) and req["conversation"].notna().all()):
        return None
    return req.sort_values(["conversation", "turn"]).assign(
        index=lambda r: r["conversation"].astype(int) * TURN_KEY + r["turn"].astype(int))


def request_terms(req: pd.DataFrame, concurrency: int) -> RequestTerms | None:
    need = {"index", slot_column(req), "start_s", "end_s", "chunk_times_s", "chunk_tokens", "output_tokens"}
    if req.empty or not need <= set(req.columns):
        return None
    keyed = by_conversation_turn(req)
    # the unit the prompt level resamples is the prompt: for a conversation, the whole conversation
    req = keyed.reset_index(drop=True) if keyed is not None else req.sort_values("index")
    conversation = keyed is not None
    err = req["error"] if "error" in req.columns else pd.Series([None] * len(req), index=req.index)
    ok = (err.isna() & (req["output_tokens"] > 0)).to_numpy()
    start, end = req["start_s"].to_numpy(float), req["end_s"].to_numpy(float)
    lo, hi = frame_window(req, concurrency)  # the window the load driver counted in
    x = np.zeros(len(req))
    for i, (times, toks) in enumerate(zip(req["chunk_times_s"], req["chunk_tokens"], strict=True)):
        if ok[i] and times is not None and len(times):
            t, k = np.asarray(times, float), np.asarray(toks, float)
            x[i] = k[(t >= lo) & (t <= hi)].sum()
    d = np.clip(np.minimum(end, hi) - np.maximum(start, lo), 0.0, None)
    tpot = req["tpot_s"].to_numpy(float) if "tpot_s" in req.columns else np.full(len(req), np.nan)
    user_ok = ok & np.isfinite(tpot) & (tpot > 0)
    user_u = np.where(user_ok, 1.0 / np.where(user_ok, tpot, 1.0), 0.0)
    prompt = req["prompt_tokens"].fillna(0).to_numpy(float) if "prompt_tokens" in req.columns else 0.0
    cached = (pd.to_numeric(req["cached_prompt_tokens"], errors="coerce").fillna(0).to_numpy(float)
              if "cached_prompt_tokens" in req.columns else 0.0)
    comp_x = np.where(ok, prompt - cached + req["output_tokens"].to_numpy(float), 0.0)
    # the resampling unit is the prompt; without prompt ids each request is its own unit
    pid = (req["prompt_id"].astype(str).to_numpy() if "prompt_id" in req.columns
           else np.array([f"#{i}" for i in req["index"]]))
    cat = (req["category"].fillna(UNCATEGORIZED).astype(str).to_numpy() if "category" in req.columns else None)
    return RequestTerms(req["index"].to_numpy(int), pid, x, d, user_u, user_ok.astype(float), comp_x,
                        np.clip(end - start, 0.0, None), keyed=bool(conversation), category=cat)


def _rate_factor(w: np.ndarray, x: np.ndarray, d: np.ndarray) -> np.ndarray:
    """(sum w x / sum w d) / (sum x / sum d): 1 for the measured sample."""
    sx, sd = x.sum(), d.sum()
    if sx <= 0 or sd <= 0:
        return np.ones(w.shape[:-1])
    wx, wd = w @ x, w @ d
    with np.errstate(divide="ignore", invalid="ignore"):
        f = (wx / wd) / (sx / sd)
    # a draw with no time in the window says nothing: keep the measured value
    return np.where(wd > 0, f, 1.0)


def _mean_factor(w: np.ndarray, u: np.ndarray, valid: np.ndarray) -> np.ndarray:
    n = valid.sum()
    if n == 0 or u.sum() <= 0:
        return np.ones(w.shape[:-1])
    wu, wn = w @ u, w @ valid
    with np.errstate(divide="ignore", invalid="ignore"):
        f = (wu / wn) / (u.sum() / n)
    return np.where(wn > 0, f, 1.0)


def _shares(num: np.ndarray, den: np.ndarray, codes: np.ndarray, m: int) -> np.ndarray:
    """Per prompt: its share of the numerator minus its share of the denominator, the derivative
    of log(sum w num / sum w den) in the prompt's weight at equal weights (0 where a sum is 0)."""
    n_sum, d_sum = num.sum(), den.sum()
    out = np.zeros(m)
    if n_sum > 0:
        out += np.bincount(codes, weights=num, minlength=m) / n_sum
    if d_sum > 0:
        out -= np.bincount(codes, weights=den, minlength=m) / d_sum
    return out


def prompt_influence(spec: RequestTerms, base: RequestTerms) -> tuple[np.ndarray, np.ndarray, dict[str, np.ndarray]]:
    """One pair's prompts (sorted ids), their categories, and per metric each prompt's influence on
    the pair's log ratio: the derivative of log(speculative metric / baseline metric) in the
    prompt's weight, the linearisation behind the estimator's prompt variance
    (:mod:`specnb.analysis.estimator`). Influences sum to 0 over a pair's prompts."""
    ids, codes = np.unique(spec.prompt_id, return_inverse=True)
    base_codes = np.searchsorted(ids, base.prompt_id)
    m = len(ids)
    cats = np.full(m, UNCATEGORIZED, dtype=object)
    if spec.category is not None:
        cats[codes] = spec.category
    out = {}
    for metric, (num, den) in (("speedup", ("steady_x", "steady_d")), ("per_user_speedup", ("user_u", "user_ok")),
                               ("computed_speedup", ("comp_x", "comp_d"))):
        out[metric] = (_shares(getattr(spec, num), getattr(spec, den), codes, m)
                       - _shares(getattr(base, num), getattr(base, den), base_codes, m))
    return ids, cats, out


def weight_factors(t: RequestTerms, w: np.ndarray) -> dict[str, np.ndarray]:
    return {
        "speedup": _rate_factor(w, t.steady_x, t.steady_d),
        "per_user_speedup": _mean_factor(w, t.user_u, t.user_ok),
        "computed_speedup": _rate_factor(w, t.comp_x, t.comp_d),
    }


class Sidecars:
    """Reads each ledger's Parquet sidecar once."""

    def __init__(self) -> None:
        self._cache: dict[str, RequestTerms | None] = {}

    def terms(self, path: Any, concurrency: int) -> RequestTerms | None:
        if path is None or (isinstance(path, float) and np.isnan(path)):
            return None
        key = str(path)
        if key not in self._cache:
            req = load_requests(key, missing_ok=True)
            if req is None:  # the ledger is gone: no terms (and nothing kept, it may come back)
                return None
            self._cache[key] = request_terms(req, concurrency)
        return self._cache[key]


def pair_terms(row: pd.Series, side: Sidecars) -> tuple[RequestTerms, RequestTerms] | None:
    spec = side.terms(row.get("path"), int(row["concurrency"]))
    base = side.terms(row.get("path_base"), int(row["concurrency"]))
    if spec is None or base is None:
        return None
    if spec.keyed and base.keyed and not np.array_equal(spec.index, base.index):
        # conversations whose later turns were never sent in one arm (a failed turn ends its
        # conversation under history = "model"): the requests both arms sent are the pair
        common = np.intersect1d(spec.index, base.index)
        if not len(common):
            return None
        spec, base = spec.subset(np.isin(spec.index, common)), base.subset(np.isin(base.index, common))
    if not (np.array_equal(spec.index, base.index) and np.array_equal(spec.prompt_id, base.prompt_id)):
        raise PairingError(
            f"{row['arm']} vs {row['baseline_arm']} at {row['workload']} c={row['concurrency']} "
            f"r={row['repeat']}: the request records do not send the same prompts in the same order"
        )
    return spec, base
