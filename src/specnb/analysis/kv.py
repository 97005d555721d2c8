"""KV capacity: the drafter also takes seats (seed 000).

Each server reports its KV pool at start (its log, or ``cache_config_info`` when attached).
Across the starts of one arm the pool is read as the median, with the min and max beside
it; the drafter's share is against the baseline arm of the same sweep and condition, and
sessions are the pool divided by one context length.
"""

from __future__ import annotations

import pandas as pd

from specnb.analysis.pairing import AnalysisError, baseline_arm, condition_keys
from specnb.models import theory

__all__ = ["kv_capacity"]


def kv_capacity(df: pd.DataFrame, *, context_tokens: float | None = None,
                baseline: str | None = None) -> pd.DataFrame:
    """KV pool per arm (``kv_cache_tokens``, from the server start log or ``cache_config_info``),
    the share the drafter takes against the baseline arm of the same sweep / condition, and
    the concurrent sessions it holds at ``context_tokens`` (seed 000)."""
    if context_tokens is not None and not context_tokens > 0:
        raise AnalysisError(f"context_tokens must be > 0, got {context_tokens}")
    if df.empty or "kv_cache_tokens" not in df.columns:
        return pd.DataFrame()
    have = df[pd.to_numeric(df["kv_cache_tokens"], errors="coerce").notna()].copy()
    if have.empty:
        return pd.DataFrame()
    have["kv_cache_tokens"] = pd.to_numeric(have["kv_cache_tokens"])
    base_name = baseline_arm(have, baseline)
    by = ["sweep", *condition_keys(have)] if "sweep" in have.columns else condition_keys(have)
    rows = []
    for key, g in have.groupby(by, sort=True, dropna=False):
        key = key if isinstance(key, tuple) else (key,)
        base = g.loc[g["arm"] == base_name, "kv_cache_tokens"]
        base_kv = float(base.median()) if len(base) else None
        for arm, a in g.groupby("arm", sort=True):
            kv = float(a["kv_cache_tokens"].median())
            row = dict(zip(by, key, strict=True))
            row.update(
                arm=arm, speculative=bool(a["speculative"].iloc[0]) if "speculative" in a.columns else None,
                kv_cache_tokens=kv,
                kv_cache_tokens_min=float(a["kv_cache_tokens"].min()),
                kv_cache_tokens_max=float(a["kv_cache_tokens"].max()),
                baseline_kv_cache_tokens=base_kv,
                drafter_kv_share=theory.drafter_kv_share(base_kv, kv) if base_kv else None,
                context_tokens=context_tokens,
                sessions=theory.kv_sessions(kv, context_tokens) if context_tokens else None,
                baseline_sessions=(theory.kv_sessions(base_kv, context_tokens)
                                   if context_tokens and base_kv is not None else None),
            )
            rows.append(row)
    return pd.DataFrame(rows)
