"""What a serving condition changes, paired like an arm: one condition against a reference.

A study's conditions (a start-up lever, a dtype, compiled vs eager) each run every arm on the
same prompts, repeat by repeat (repeat-major: repeat r of every condition back to back). The
question "does this condition change throughput or acceptance?" is then the drafter question
turned sideways: each condition is an *arm* and the reference condition its *baseline*, paired
per (arm, workload, concurrency, repeat), with the same interval (server starts and prompts) as
every speedup (:mod:`specnb.analysis.speedups`). :func:`condition_effects` builds
that frame and returns the ratios; :func:`neutral` reads "within the interval".

The pairing rules still hold: two conditions pair only where they share prompts, sampling and
engine build (:class:`~specnb.analysis.pairing.PairingError` otherwise). A condition that
changes the prompts or the sampling (a temperature study) is not a serving condition.

Seed 000's order of work ("the difference between compilation off and compilation on dwarfs
anything speculative decoding contributes"): :func:`serving_gains` puts every (condition, arm)
against one anchor, the reference condition's baseline, paired the same way, so the gain from
fixing the serving config (the best condition's baseline), the drafter's gain where it stands
(the drafter under the reference) and both together sit on one scale with their intervals;
:func:`serving_verdicts` says per level which is larger, and whether the intervals tell.
"""

from __future__ import annotations

import pandas as pd

from specnb.analysis.pairing import AnalysisError, usable
from specnb.analysis.speedups import paired_speedups
from specnb.ledger.names import LoadMode

_SEP = " \u00b7 "  # condition · arm, as one sideways arm name

__all__ = ["condition_effects", "neutral", "condition_lines", "serving_gains", "serving_verdicts", "verdict_lines"]

def _closed_loop(df: pd.DataFrame) -> pd.DataFrame:
    """Usable closed-loop points (an open-loop point's concurrency is its cap, not a level)."""
    ok = usable(df)
    return ok[ok["load_mode"] != LoadMode.RATE.shape] if "load_mode" in ok.columns else ok


COLUMNS = ["arm", "condition", "reference", "workload", "concurrency", "n_repeats", "ref_tok_s", "tok_s", "ratio",
           "ratio_lo", "ratio_hi", "acceptance_rate", "acceptance_rate_ref"]


def condition_effects(df: pd.DataFrame, reference: str) -> pd.DataFrame:
    """Per (arm, condition, workload, concurrency): each condition's output tok/s over the
    reference condition's (``ratio`` with its interval ``[ratio_lo, ratio_hi]``), and the arm's
    acceptance rate under both (speculative arms)."""
    if "condition" not in df.columns:
        raise AnalysisError("condition_effects needs a study frame with a condition column")
    ok = _closed_loop(df)
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
        t = paired_speedups(side, baseline=reference).table
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


GAIN_COLUMNS = ["condition", "arm", "workload", "concurrency", "n_repeats", "anchor_tok_s", "tok_s", "gain", "gain_lo",
                "gain_hi", "acceptance_rate"]


def serving_gains(df: pd.DataFrame, reference: str) -> pd.DataFrame:
    """Per (condition, arm, workload, concurrency): output tok/s over the reference condition's
    baseline (``gain`` with its interval ``[gain_lo, gain_hi]``; the anchor itself is left out).
    The baseline is the study's arm without a drafter."""
    if "condition" not in df.columns:
        raise AnalysisError("serving_gains needs a study frame with a condition column")
    ok = _closed_loop(df)
    bases = sorted(set(ok.loc[~ok["speculative"].astype(bool), "arm"]))
    if len(bases) != 1:
        raise AnalysisError(f"serving_gains needs exactly one arm without a drafter, found {bases}")
    anchor = f"{reference}{_SEP}{bases[0]}"
    names = ok["condition"].astype(str) + _SEP + ok["arm"].astype(str)
    if anchor not in set(names):
        raise AnalysisError(f"no usable {bases[0]!r} point under the reference condition {reference!r}")
    side = ok.assign(arm=names, speculative=names != anchor, condition="all", sweep="conditions")
    t = paired_speedups(side, baseline=anchor).table
    rows = []
    for _, r in t.iterrows():
        cond, arm = r["arm"].split(_SEP, 1)
        rows.append({"condition": cond, "arm": arm, "workload": r["workload"], "concurrency": r["concurrency"],
                     "n_repeats": r["n_repeats"], "anchor_tok_s": r["base_tok_s"], "tok_s": r["spec_tok_s"],
                     "gain": r["speedup"], "gain_lo": r["speedup_lo"], "gain_hi": r["speedup_hi"],
                     "acceptance_rate": r.get("acceptance_rate")})
    return pd.DataFrame(rows, columns=GAIN_COLUMNS)


VERDICT_COLUMNS = ["workload", "concurrency", "drafter", "serving_condition", "serving_gain", "serving_lo", "serving_hi",
                   "drafter_gain", "drafter_lo", "drafter_hi", "both_condition", "both_gain", "both_lo", "both_hi",
                   "larger", "decided"]


def serving_verdicts(gains: pd.DataFrame, reference: str) -> pd.DataFrame:
    """Per (workload, concurrency, drafter): the serving fix (the condition whose baseline gains
    most over the reference's), the drafter's gain under the reference, the best (condition,
    drafter) pair, and which of the first two is larger; ``decided`` when their intervals do not
    overlap."""
    rows = []
    if gains.empty:
        return pd.DataFrame(rows, columns=VERDICT_COLUMNS)
    drafters = sorted(set(gains.loc[gains["condition"] == reference, "arm"]))
    for (wl, c), g in gains.groupby(["workload", "concurrency"], sort=True):
        fixes = g[(g["condition"] != reference) & ~g["arm"].isin(drafters)]
        if fixes.empty:
            continue
        fix = fixes.loc[fixes["gain"].idxmax()]
        for d in drafters:
            dr = g[(g["condition"] == reference) & (g["arm"] == d)]
            both = g[g["arm"] == d]
            if dr.empty:
                continue
            dr = dr.iloc[0]
            best = both.loc[both["gain"].idxmax()]
            larger = "serving" if fix["gain"] > dr["gain"] else "drafter"
            decided = fix["gain_lo"] > dr["gain_hi"] if larger == "serving" else dr["gain_lo"] > fix["gain_hi"]
            rows.append({"workload": wl, "concurrency": c, "drafter": d, "serving_condition": fix["condition"],
                         "serving_gain": fix["gain"], "serving_lo": fix["gain_lo"], "serving_hi": fix["gain_hi"],
                         "drafter_gain": dr["gain"], "drafter_lo": dr["gain_lo"], "drafter_hi": dr["gain_hi"],
                         "both_condition": best["condition"], "both_gain": best["gain"], "both_lo": best["gain_lo"],
                         "both_hi": best["gain_hi"], "larger": larger, "decided": bool(decided)})
    return pd.DataFrame(rows, columns=VERDICT_COLUMNS)


def verdict_lines(verdicts: pd.DataFrame, reference: str, labels: dict[str, str] | None = None) -> list[str]:
    """``copy c=4: fixing the serving config (eager fp32) gives the baseline 2.10x [1.80, 2.40] its
    tok/s under eager bf16; ngram-k4 under eager bf16 gives 0.49x [...]: the serving fix is larger
    (intervals apart); best with the drafter: ngram-k4 under eager fp32, 1.68x [...]``."""
    labels = labels or {}
    name = lambda c: labels.get(c, c)  # noqa: E731
    out = []
    for _, v in verdicts.iterrows():
        which = "the serving fix" if v["larger"] == "serving" else f"the drafter ({v['drafter']})"
        said = (f"{which} is larger (intervals apart)" if v["decided"] else
                f"neither is larger with confidence (the intervals overlap; on the estimates, {which})")
        fix = (f"fixing the serving config ({name(v['serving_condition'])}) gives the baseline" if v["serving_gain"] > 1
               else f"no serving option speeds the baseline up (the best, {name(v['serving_condition'])}, gives")
        out.append(
            f"{v['workload']} c={int(v['concurrency'])}: {fix} {v['serving_gain']:.2f}x [{v['serving_lo']:.2f}, "
            f"{v['serving_hi']:.2f}] its tok/s under {name(reference)}{'' if v['serving_gain'] > 1 else ')'}; "
            f"{v['drafter']} under {name(reference)} gives {v['drafter_gain']:.2f}x "
            f"[{v['drafter_lo']:.2f}, {v['drafter_hi']:.2f}]: {said}; best with the drafter: "
            f"{v['drafter']} under {name(v['both_condition'])}, {v['both_gain']:.2f}x "
            f"[{v['both_lo']:.2f}, {v['both_hi']:.2f}]")
    return out
