"""Paired speedups from ledgers, and the table ``make demo`` prints.

A speedup is a ratio within a pair: the speculative arm's point divided by the baseline's
point of the same sweep, workload, concurrency and repeat. Pairs must share the prompts
(workload hash), the sampling and the engine build, or :class:`PairingError` is raised:
otherwise the ratio measures two different servers, not the drafter. Points flagged
``spec_no_drafts`` (speculation silently off) and failed points never enter a pair.

Spread is reported across repeats (each repeat is a separate server start): mean, min and
max of the per-repeat ratios. One repeat is one run; the table says n.
"""

from __future__ import annotations

import math

import pandas as pd

__all__ = ["PairingError", "pair_keys", "paired", "speedup_table", "format_table", "crossing", "format_crossings",
           "format_category_acceptance"]

KEYS = ["sweep", "workload", "concurrency", "repeat"]
# Present only in some frames (study notebooks): a pair never crosses a study or a condition.
OPTIONAL_KEYS = ["study", "condition"]
MUST_MATCH = ["workload_hash", "sampling_key", "engine_version"]


class PairingError(ValueError):
    """Two points that would form a ratio do not share prompts, sampling or engine build."""


def _baseline_arm(df: pd.DataFrame, baseline: str | None) -> str:
    if baseline is not None:
        if baseline not in set(df["arm"]):
            raise PairingError(f"baseline arm {baseline!r} not in ledgers (arms: {sorted(set(df['arm']))})")
        return baseline
    bases = sorted(set(df.loc[~df["speculative"].astype(bool), "arm"]))
    if len(bases) != 1:
        raise PairingError(f"need exactly one arm without a drafter to pair against, found {bases}; "
                           "name one with baseline=")
    return bases[0]


def pair_keys(df: pd.DataFrame) -> list[str]:
    """The columns two points must share to form a pair: sweep, workload, concurrency, repeat,
    and study / condition where the frame has them."""
    return KEYS + [k for k in OPTIONAL_KEYS if k in df.columns]


def paired(df: pd.DataFrame, baseline: str | None = None) -> pd.DataFrame:
    """One row per (speculative arm, workload, concurrency, repeat) with its paired ratios.

    Baseline columns carry a ``_base`` suffix (``output_tok_s_base``, ``path_base``, ...).
    Ratios: ``speedup`` (steady-window output tok/s), ``per_user_speedup`` (mean per-user
    decode tok/s) and ``computed_speedup`` (uncached prompt + output tokens per wall second).
    """
    if df.empty:
        return pd.DataFrame()
    usable = df[(df["status"] == "ok") & ~df["flags"].fillna("").str.contains("spec_no_drafts")]
    if usable.empty or "output_tok_s" not in usable.columns:
        return pd.DataFrame()
    base_name = _baseline_arm(usable, baseline)
    base = usable[usable["arm"] == base_name]
    spec = usable[usable["arm"] != base_name]
    keys = pair_keys(usable)
    cols = keys + MUST_MATCH + ["output_tok_s", "per_user_decode_tok_s_mean", "computed_tok_s_wall",
                                "p50_tpot_ms", "p50_ttft_ms", "path"]
    cols = [c for c in cols if c in usable.columns]
    # pandas matches null keys with each other: a condition that is None in both arms still pairs
    merged = spec.merge(base[cols], on=keys, suffixes=("", "_base"), how="inner")
    for col in MUST_MATCH:
        if col not in merged.columns:
            continue
        a, b = merged[col].astype(str), merged[f"{col}_base"].astype(str)
        bad = merged[a != b]
        if len(bad):
            row = bad.iloc[0]
            raise PairingError(
                f"{row['arm']} vs {base_name} at {row['workload']} c={row['concurrency']} "
                f"r={row['repeat']}: {col} differs ({row[col]} vs {row[f'{col}_base']})"
            )
    merged["baseline_arm"] = base_name
    merged["speedup"] = merged["output_tok_s"] / merged["output_tok_s_base"]
    if "per_user_decode_tok_s_mean" in merged.columns:
        merged["per_user_speedup"] = (merged["per_user_decode_tok_s_mean"]
                                      / merged["per_user_decode_tok_s_mean_base"])
    if "computed_tok_s_wall" in merged.columns:
        merged["computed_speedup"] = merged["computed_tok_s_wall"] / merged["computed_tok_s_wall_base"]
    return merged


def speedup_table(df: pd.DataFrame, baseline: str | None = None) -> pd.DataFrame:
    """Per (arm, workload, concurrency): paired speedup across repeats, with spread."""
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


def format_table(table: pd.DataFrame) -> str:
    """Plain-text table: speedup per concurrency and workload, with spread and acceptance."""
    if table.empty:
        return "(no paired points)"
    head = (f"{'arm':<12} {'workload':<10} {'c':>3} {'n':>2} {'base tok/s':>10} {'spec tok/s':>10} "
            f"{'speedup':>8} {'[min, max]':>15} {'per-user':>8} {'accept len':>10} {'accept %':>8}")
    lines = [head, "-" * len(head)]
    def f(v, spec=".2f"):
        return "-" if v is None or pd.isna(v) else format(v, spec)

    for row in table.itertuples(index=False):
        rng = f"[{f(row.speedup_min)}, {f(row.speedup_max)}]" if row.n > 1 else "(1 run)"
        rate = None if pd.isna(row.acceptance_rate) else 100 * row.acceptance_rate
        lines.append(
            f"{row.arm:<12} {row.workload:<10} {row.concurrency:>3} {row.n:>2} {f(row.base_tok_s, '.1f'):>10} "
            f"{f(row.spec_tok_s, '.1f'):>10} {f(row.speedup):>7}x {rng:>15} {f(row.per_user_speedup):>7}x "
            f"{f(row.acceptance_length):>10} {f(rate, '.0f'):>8}"
        )
    lines.append("speedup = speculative / baseline output tok/s (steady window), paired per repeat; "
                 "[min, max] over repeats.")
    return "\n".join(lines)


def crossing(concurrency: list[int], speedup: list[float]) -> tuple[str, float | None]:
    """Where a speedup curve first falls through 1.0, interpolated in log2(concurrency).

    Returns ``("crosses", c)``, ``("rises", c)`` for an upward crossing, or ``("above", None)`` /
    ``("below", None)`` when the curve stays on one side over the measured range.
    """
    pts = [(c, v) for c, v in sorted(zip(concurrency, speedup, strict=True)) if v == v]
    found: dict[str, float] = {}
    for (c0, v0), (c1, v1) in zip(pts, pts[1:], strict=False):
        if (v0 - 1.0) * (v1 - 1.0) < 0 or (v1 == 1.0 and v0 != 1.0):
            x0, x1 = math.log2(c0), math.log2(c1)
            found.setdefault("crosses" if v0 > v1 else "rises",
                             2 ** (x0 + (1.0 - v0) * (x1 - x0) / (v1 - v0)))
    # the first fall through 1.0 is the threshold, even after a noisy rise below it
    for kind in ("crosses", "rises"):
        if kind in found:
            return kind, found[kind]
    if not pts:
        return "below", None
    return ("above" if pts[0][1] >= 1.0 else "below"), None


def format_crossings(table: pd.DataFrame) -> str:
    """One line per (arm, workload): where the mean curve crosses 1.0, and where the curves
    through each level's min and max repeat cross it (a spread, not a confidence interval)."""
    lines = []
    by = [k for k in OPTIONAL_KEYS if k in table.columns] + ["arm", "workload"]
    for key, g in table.groupby(by, sort=True, dropna=False):
        label = " / ".join(str(v) for v in key if not pd.isna(v))
        cs = list(g["concurrency"])
        lo_c, hi_c = min(cs), max(cs)
        kind, at = crossing(cs, list(g["speedup"]))
        spans = [crossing(cs, list(g[col])) for col in ("speedup_min", "speedup_max")]
        if kind == "crosses":
            ends = [a for k, a in spans if k == "crosses"]
            spread = (f" (repeat min/max curves: {min(ends):.1f}-{max(ends):.1f})"
                      if len(ends) == 2 else " (the min/max curves do not both cross)")
            text = f"pays below c~{at:.1f}{spread}"
        elif kind == "rises":
            text = f"loses below c~{at:.1f} and pays above it"
        else:
            text = f"{'pays' if kind == 'above' else 'never pays'} over c={lo_c}..{hi_c}"
            if any(k != kind for k, _ in spans):
                text += " (but a repeat's curve crosses 1.0: within the noise)"
        lines.append(f"{label}: {text}")
    return "\n".join(lines)


def format_category_acceptance(cats: pd.DataFrame) -> str:
    """Per prompt category: mean acceptance length and acceptance rate pooled over repeats, from
    :func:`specnb.ledger.load_spec_by_category` (vLLM's per-request metrics)."""
    ok = cats[cats["status"] == "ok"] if "status" in cats.columns else cats
    if ok.empty:
        return "(no per-request acceptance in these ledgers)"
    g = ok.groupby(["arm", "workload", "concurrency", "category"], sort=True)[
        ["requests", "num_spec_steps", "num_draft_tokens", "num_accepted_draft_tokens", "output_tokens"]].sum()
    head = (f"{'arm':<12} {'workload':<14} {'c':>3} {'category':<16} {'requests':>8} {'accept len':>10} "
            f"{'accept %':>8} {'drafted %':>9}")
    lines = [head, "-" * len(head)]
    for (arm, wl, c, cat), r in g.iterrows():
        mal = 1 + r.num_accepted_draft_tokens / r.num_spec_steps if r.num_spec_steps else None
        rate = 100 * r.num_accepted_draft_tokens / r.num_draft_tokens if r.num_draft_tokens else None
        share = 100 * r.num_accepted_draft_tokens / r.output_tokens if r.output_tokens else None
        lines.append(f"{arm:<12} {wl:<14} {c:>3} {cat:<16} {int(r.requests):>8} "
                     f"{'-' if mal is None else f'{mal:.2f}':>10} {'-' if rate is None else f'{rate:.0f}':>8} "
                     f"{'-' if share is None else f'{share:.0f}':>9}")
    lines.append("per prompt category, pooled over requests and repeats (vLLM --per-request-spec-decode-metrics); "
                 "drafted % = accepted draft tokens / output tokens.")
    return "\n".join(lines)
