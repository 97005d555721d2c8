"""What a serving condition changes, paired like an arm: one condition against a reference.

A study's conditions (a start-up lever, a dtype, compiled vs eager) each run every arm on the
same prompts, repeat by repeat (repeat-major: repeat r of every condition back to back). The
question "does this condition change throughput or acceptance?" is then the drafter question
turned sideways: each condition is an *arm* and the reference condition its *baseline*, paired
per (arm, workload, concurrency, repeat), with the same two-level bootstrap (server starts and
prompts) as every speedup (:mod:`specnb.analysis.bootstrap`). :func:`condition_effects` builds
that frame and returns the ratios; :func:`neutral` reads "within the interval".

The pairing rules still hold: two conditions pair only where they share prompts, sampling and
engine build (:class:`~specnb.analysis.pairing.PairingError` otherwise). A condition that
changes the prompts or the sampling (a temperature study) is not a serving condition.
"""

from __future__ import annotations

import pandas as pd

from specnb.analysis.bootstrap import DEFAULT_N_BOOT, DEFAULT_SEED, bootstrap_speedups
from specnb.analysis.pairing import AnalysisError, usable

__all__ = ["condition_effects", "neutral", "condition_lines"]

COLUMNS = ["arm", "condition", "reference", "workload", "concurrency", "n_repeats", "ref_tok_s", "tok_s", "ratio",
           "ratio_lo", "ratio_hi", "acceptance_rate", "acceptance_rate_ref"]


def condition_effects(df: pd.DataFrame, reference: str, *, n_boot: int = DEFAULT_N_BOOT,
                      seed: int = DEFAULT_SEED) -> pd.DataFrame:
    """Per (arm, condition, workload, concurrency): each condition's output tok/s over the
    reference condition's (``ratio`` with a bootstrap ``[ratio_lo, ratio_hi]``), and the arm's
    acceptance rate under both (speculative arms)."""
    if "condition" not in df.columns:
        raise AnalysisError("condition_effects needs a study frame with a condition column")
    ok = usable(df)
    if "load_mode" in ok.columns:  # closed-loop levels only (an open-loop point's concurrency is its cap)
        ok = ok[ok["load_mode"] != "rate"]
    conds = sorted(set(ok["condition"].dropna()))
    if reference not in conds:
        raise AnalysisError(f"reference condition {reference!r} not in the frame (conditions: {conds})")
    rows = []
    for arm, part in ok.groupby("arm", sort=False):
        # sideways: the condition is the arm, the arm a constant; one sweep name so pairs form
        side = part.assign(arm=part["condition"], speculative=part["condition"] != reference,
                           condition=str(arm), sweep="conditions")
        if side["arm"].nunique() < 2 or reference not in set(side["arm"]):
            continue  # nothing to compare this arm with (it was not measured under the reference)
        boot = bootstrap_speedups(side, baseline=reference, n_boot=n_boot, seed=seed)
        t = boot.table
        acc = (part.groupby(["condition", "workload", "concurrency"])["acceptance_rate"].mean()
               if "acceptance_rate" in part.columns else None)
        for _, r in t.iterrows():
            key = (r["workload"], r["concurrency"])
            rows.append({
                "arm": arm, "condition": r["arm"], "reference": reference, "workload": r["workload"],
                "concurrency": r["concurrency"], "n_repeats": r["n_repeats"], "ref_tok_s": r["base_tok_s"],
                "tok_s": r["spec_tok_s"], "ratio": r["speedup"], "ratio_lo": r["speedup_lo"],
                "ratio_hi": r["speedup_hi"],
                "acceptance_rate": None if acc is None else acc.get((r["arm"], *key)),
                "acceptance_rate_ref": None if acc is None else acc.get((reference, *key)),
            })
    return pd.DataFrame(rows, columns=COLUMNS)


def neutral(effects: pd.DataFrame) -> pd.Series:
    """Rows whose interval contains 1.0: no change the measurement can tell apart from none."""
    return (effects["ratio_lo"] <= 1.0) & (effects["ratio_hi"] >= 1.0)


def condition_lines(effects: pd.DataFrame, labels: dict[str, str] | None = None) -> list[str]:
    """One line per row: ``ngram-k4 / copy c=4: 2 processes 1.03x [0.95, 1.10] of 3 processes (neutral);
    acceptance 81 % vs 82 %``."""
    labels = labels or {}
    out = []
    flags = neutral(effects) if len(effects) else pd.Series(dtype=bool)
    for i, r in effects.iterrows():
        verdict = "neutral: the interval holds 1.0" if flags[i] else ("faster" if r["ratio_lo"] > 1 else "slower")
        line = (f"{r['arm']} / {r['workload']} c={int(r['concurrency'])}: {labels.get(r['condition'], r['condition'])} "
                f"{r['ratio']:.2f}x [{r['ratio_lo']:.2f}, {r['ratio_hi']:.2f}] the tok/s of "
                f"{labels.get(r['reference'], r['reference'])} ({verdict}; {int(r['n_repeats'])} repeats)")
        if pd.notna(r["acceptance_rate"]) and pd.notna(r["acceptance_rate_ref"]):
            line += f"; acceptance {r['acceptance_rate']:.0%} vs {r['acceptance_rate_ref']:.0%}"
        out.append(line)
    return out
