"""Conversation replay, read back: what the prefix cache served turn by turn,
and the drafter's gain on total and on computed tokens (seed 002's two rows).

Seed 002 replayed long agentic conversations with a high prefix-cache hit rate and reported the
speedup on total tokens/s *and* on computed tokens only (uncached prompt + output), because
cached history changes the apparent effect. A conversation point's ledger holds per turn the
prompt tokens, the cached ones (the server's ``usage.prompt_tokens_details``) and the computed
ones (:func:`specnb.ledger.load_turns` reads them); the pairs are the usual ones (same
conversations, same server build, same sampling), here with three ratios side by side.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from specnb.analysis.pairing import paired
from specnb.ledger.names import LoadMode

__all__ = ["turn_table", "conversation_gains", "conversation_lines"]


def turn_table(turns: pd.DataFrame) -> pd.DataFrame:
    """Per arm, conversation set, users and turn position: requests, mean prompt tokens per request, the share the
    prefix cache served, computed prompt tokens per request, summed over points and repeats."""
    if turns.empty:
        return turns
    ok = turns[turns["status"] == "ok"]
    g = ok.groupby(["arm", "workload", "concurrency", "turn"], as_index=False)[
        ["requests", "prompt_tokens", "cached_prompt_tokens", "computed_prompt_tokens"]].sum(min_count=1)
    g["prompt_tokens_per_request"] = g["prompt_tokens"] / g["requests"]
    g["cached_share"] = g["cached_prompt_tokens"] / g["prompt_tokens"].where(g["prompt_tokens"] > 0)
    g["computed_per_request"] = g["computed_prompt_tokens"] / g["requests"]
    return g.rename(columns={"concurrency": "users"})


def conversation_gains(df: pd.DataFrame) -> pd.DataFrame:
    """Per speculative arm, workload and users: the paired ratios over repeats (mean, min, max) of
    output tok/s (the steady window, as every speedup), total tok/s (prompt + output over the
    point's wall time) and computed tok/s (uncached prompt + output), and each arm's prefix-cache
    hit rate (the engine's counters)."""
    if df.empty or "load_mode" not in df.columns:
        return pd.DataFrame()
    conv = df[df["load_mode"] == LoadMode.CONVERSATION.shape]
    if conv.empty:
        return pd.DataFrame()
    pairs = paired(conv)
    if pairs.empty:
        return pd.DataFrame()
    if "prefix_cache_hit_rate" in pairs.columns:
        pairs = pairs.rename(columns={"prefix_cache_hit_rate": "hit_rate", "prefix_cache_hit_rate_base": "hit_rate_base"})
    cols = {"speedup": "output", "total_speedup": "total", "computed_speedup": "computed"}
    have = [c for c in cols if c in pairs.columns]
    named = {f"{cols[c]}_{how}": (c, how) for c in have for how in ("mean", "min", "max")}
    named["repeats"] = ("speedup", "size")
    named.update({c: (c, "mean") for c in ("hit_rate", "hit_rate_base") if c in pairs.columns})
    out = pairs.groupby(["arm", "workload", "concurrency"], as_index=False).agg(**named)
    return out.rename(columns={"concurrency": "users"})


def conversation_lines(df: pd.DataFrame, turns: pd.DataFrame) -> list[str]:
    """The report's lines for conversation points (empty when there are none)."""
    if df.empty or "load_mode" not in df.columns or not (df["load_mode"] == LoadMode.CONVERSATION.shape).any():
        return []
    conv = df[(df["load_mode"] == LoadMode.CONVERSATION.shape) & (df["status"] == "ok")]
    hist = ", ".join(sorted({str(h) for h in conv.get("history", pd.Series(dtype=object)).dropna()})) or "?"
    out = [f"conversation replay: {len(conv)} point(s), each user sending whole conversations turn by turn with the "
           f"history ({hist} answers), the prefix cache emptied once per point"]
    tt = turn_table(turns)
    if len(tt):
        for (arm, wl, users), t in tt.groupby(["arm", "workload", "users"]):
            cells = [f"turn {int(r.turn)} {r.prompt_tokens_per_request:.0f} tok, "
                     + ("cached ?" if pd.isna(r.cached_share) else f"{r.cached_share:.0%} cached")
                     for r in t.itertuples()]
            out.append(f"  {arm} / {wl}, {users} user(s): " + "; ".join(cells))
    gains = conversation_gains(df)
    for r in gains.itertuples():
        def rng(name: str, r=r) -> str:
            m = getattr(r, f"{name}_mean", np.nan)
            if pd.isna(m):
                return f"{name} -"
            return f"{name} {m:.2f}x [{getattr(r, f'{name}_min'):.2f}-{getattr(r, f'{name}_max'):.2f}]"
        hit = getattr(r, "hit_rate", np.nan)
        hit_b = getattr(r, "hit_rate_base", np.nan)
        hits = "" if pd.isna(hit) else f"; prefix-cache hit rate {hit:.0%} (baseline {hit_b:.0%})"
        out.append(f"  {r.arm} / {r.workload}, {r.users} user(s): speedup on {rng('output')}, {rng('total')} "
                   f"(prompt + output), {rng('computed')} (uncached prompt + output); {r.repeats} repeat(s), "
                   f"range over them{hits}")
    return out
