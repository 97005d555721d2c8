"""Closing the loop measure -> derive -> deploy -> verify: one tune round's verdict and the next
config, from measured frames only (:mod:`specnb.sweep.tune` runs the rounds).

A *round* measures the candidate config (``tuned``) beside the baseline and the best static K
(``static``, the same drafter always at that K) on one run, at the proposal's levels and both
sides of every switch of the candidate's schedule. Per level the **envelope** is the better of
the two fixed choices: ``max(1, static speedup)``. The candidate *meets* it where the evidence
shows it, by two tests on the one interval (:func:`specnb.analysis.schedule.policy_check`):
non-inferior to static K (its paired ratio against the static arm, repeat by repeat, has a lower
bound above ``1 - margin``, 2 % by default) and faster than the baseline (its speedup's lower bound
above 1.0), each at ``1 - alpha / max_rounds`` (a tune deploys the first candidate verified, so
its rounds share alpha). A level measured too little to show either is short, and the check says which test
failed: "not shown worse" is never "verified". The round is verified where every level passes (an
intersection of tests, each at its own level: no correction across levels is needed).

**Thrash**: a level whose tuned throughput (output tok/s) is below both measured neighbours':
throughput rises with load in a closed loop, so a dip between two levels is the schedule
flipping K there (vLLM picks K per step from the scheduled batch, prefills included, with no
hysteresis: vLLM #51466). A thrashing level counts as short.

**Re-derivation** (:func:`rederive`), per short level, from what was measured:

- where the static K is the better fixed choice (its speedup >= 1), the level gets the static
  K: a K = 0 band is raised, a lower K band lifted, a boundary moved past the level;
- where the baseline is the better one (static K < 1) no drafter config can reach it: K = 0
  inside a schedule still runs the drafter (vLLM #49548); the level keeps whichever of the two
  configs measured faster there and is named *unreachable*: that traffic is better served by
  an endpoint without a drafter;
- a short level whose K is already the static K (the two arms are the same config there) is
  noise between two starts of one config, named, not changed.

The new per-level K gives a new schedule through :func:`specnb.analysis.schedule.derive_schedule`
(batch units); a schedule whose K is the static K everywhere *is* the static config.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import pandas as pd

from specnb import paths
from specnb.analysis.schedule import DEFAULT_MARGIN, SCHEDULE_KEY, derive_schedule, policy_check
from specnb.ledger.runs import TuneRecords

__all__ = ["TUNED", "STATIC", "round_check", "thrash_levels", "Rederived", "rederive", "claim_text",
           "schedule_levels", "tune_lines", "reread_lines"]

TUNED = "tuned"  # the candidate config of a round
STATIC = "static"  # the best static K of the proposal, measured again in every round


def round_check(table: pd.DataFrame, df: pd.DataFrame, *, tuned: str = TUNED, static: str | None = STATIC,
                margin: float = DEFAULT_MARGIN) -> pd.DataFrame:
    """Per level: :func:`policy_check` of the tuned arm against the static one (``static`` None:
    the candidate *is* the static config, its own envelope arm), the envelope's arm, and thrash."""
    check = policy_check(table, df, policy=tuned, always_on=static or tuned, margin=margin)
    sp = table.attrs.get("speedups")
    check["confidence"] = sp.confidence if sp is not None else 0.95
    check["envelope_arm"] = ["baseline" if s < 1.0 else (static or tuned) for s in check["always_on"]]
    check["thrash"] = check["concurrency"].isin(thrash_levels(check))
    check["short"] = ~check["meets_envelope"] | check["thrash"]
    return check


def thrash_levels(check: pd.DataFrame, column: str = "policy_tok_s") -> list[int]:
    """Levels (interior, by concurrency) whose throughput is below both neighbours' beyond the
    noise: its upper end below both neighbours' lower ends, each end the throughput scaled by
    the level's speedup interval (``policy_lo``/``policy_hi`` over ``policy``; a check without
    intervals compares the point values)."""
    c = check.sort_values("concurrency")
    tok = c[column].astype(float).to_numpy()
    if {"policy", "policy_lo", "policy_hi"} <= set(c.columns):
        pt = c["policy"].astype(float).to_numpy()
        lo, hi = tok * c["policy_lo"].astype(float).to_numpy() / pt, tok * c["policy_hi"].astype(float).to_numpy() / pt
    else:
        lo = hi = tok
    conc = c["concurrency"].astype(int).tolist()
    return [conc[i] for i in range(1, len(tok) - 1) if hi[i] < lo[i - 1] and hi[i] < lo[i + 1]]


@dataclass
class Rederived:
    """The next round's K per level, what changed and why, and what no config can reach."""

    k: dict[int, int]
    actions: list[str] = field(default_factory=list)
    unreachable: list[int] = field(default_factory=list)
    noise: list[int] = field(default_factory=list)

    @property
    def changed(self) -> bool:
        return any(a.startswith("c=") and "->" in a for a in self.actions)


def _iv(r: Any, who: str) -> str:
    if who == "tuned":
        return f"{r.policy:.2f}x [{r.policy_lo:.2f}, {r.policy_hi:.2f}]"
    return f"{r.always_on:.2f}x [{r.static_lo:.2f}, {r.static_hi:.2f}]"


def rederive(k_by_level: Mapping[int, int], check: pd.DataFrame, static_k: int) -> Rederived:
    """The next K per level from a round's check (see the module text for the rule).
    ``k_by_level`` is the K the candidate gives each measured level (``check.k_scheduled``)."""
    k = {int(c): int(v) for c, v in k_by_level.items()}
    out = Rederived(k=k)
    for r in check.sort_values("concurrency").itertuples(index=False):
        c = int(r.concurrency)
        k.setdefault(c, int(r.k_scheduled) if r.k_scheduled is not None and pd.notna(r.k_scheduled) else static_k)
        if not r.short:
            continue
        why = "thrashes (throughput below both neighbours)" if r.thrash and r.meets_envelope else (
            f"not verified ({r.failed}): tuned {_iv(r, 'tuned')}")
        now = k[c]
        if r.always_on >= 1.0:  # the static K is the better fixed choice here
            if now == static_k:
                out.noise.append(c)
                out.actions.append(f"c={c}: {why}, with the static K={static_k} itself: two starts of one config "
                                   "differ by noise here; unchanged")
            else:
                k[c] = static_k
                out.actions.append(f"c={c}: {why}; K={now} -> K={static_k} (static K={static_k} measured "
                                   f"{_iv(r, 'static')})")
        elif r.meets_envelope:  # thrash at a level where the candidate still beats the baseline
            out.actions.append(f"c={c}: {why}; it still reaches the baseline ({_iv(r, 'tuned')}) where static "
                               f"K={static_k} does not ({_iv(r, 'static')}); unchanged")
        else:  # the baseline is the better fixed choice: no drafter config reaches it
            out.unreachable.append(c)
            best = now if r.policy >= r.always_on else static_k
            if best != now:
                k[c] = best
                out.actions.append(f"c={c}: {why}; no drafter config beats the baseline here (static K={static_k} "
                                   f"{_iv(r, 'static')}); K={now} -> K={best}, the faster of the two measured")
            else:
                out.actions.append(f"c={c}: {why}; no drafter config beats the baseline here (static K={static_k} "
                                   f"{_iv(r, 'static')}): serve this traffic from an endpoint without a drafter")
    return out


def schedule_levels(k: Mapping[int, int], batch: Mapping[int, float] | None = None,
                    max_batch: int = 256) -> list[list[int]]:
    """A schedule from K per level, boundaries in batch units where ``batch`` maps levels to
    their measured batch."""
    rows = [{"concurrency": c, "k": v, "batch": (batch or {}).get(c)} for c, v in sorted(k.items())]
    return derive_schedule(pd.DataFrame(rows), max_batch)


def claim_text(check: pd.DataFrame, config: Mapping[str, Any], static_k: int, *, static_is_candidate: bool) -> str:
    """The claim a round's candidate earned: shown non-inferior to static K=k (within the margin)
    and faster than the baseline at every measured level, or where not and which test failed."""
    what = (f"static K={static_k}" if static_is_candidate or SCHEDULE_KEY not in config
            else f"the schedule {config[SCHEDULE_KEY]}")
    levels = ", ".join(str(int(c)) for c in check["concurrency"])
    short = check[check["short"]]
    margin = float(check["margin"].iloc[0]) if "margin" in check.columns and len(check) else DEFAULT_MARGIN
    conf = float(check["confidence"].iloc[0]) if "confidence" in check.columns and len(check) else 0.95
    bar = ("faster than the baseline (it is the static K itself)" if static_is_candidate else
           f"within {margin:.0%} of static K={static_k} or better, and faster than the baseline")
    if short.empty:
        return f"at every measured level (c={levels}) {what} is shown {bar} ({100 * conf:.4g} % intervals)"
    parts = []
    for r in short.itertuples(index=False):
        why = getattr(r, "failed", "") or "throughput below both neighbours (thrash)"
        parts.append(f"c={int(r.concurrency)}: {_iv(r, 'tuned')}: {why}"
                     + ("; throughput below both neighbours (thrash)" if r.thrash and getattr(r, "failed", "") else ""))
    met = check[~check["short"]]["concurrency"].astype(int).tolist()
    if not met:
        return f"{what} is not shown {bar} at any measured level: " + "; ".join(parts)
    return f"{what} is shown {bar} at c={', '.join(map(str, met))}, and not at " + "; ".join(parts)


def k_scheduled(check: pd.DataFrame) -> dict[int, int]:
    return {int(r.concurrency): int(r.k_scheduled) for r in check.itertuples(index=False)
            if r.k_scheduled is not None and pd.notna(r.k_scheduled)}


def reread_lines(rec: TuneRecords | None, df: pd.DataFrame) -> list[str]:
    """The tune run's last round read again with the current rule (non-inferiority on the one
    interval), where that reading differs from the round's record: a run made under an earlier
    rule keeps its records, and the report says what they would say now."""
    from specnb.analysis.pairing import usable
    from specnb.analysis.tables import summarize

    if rec is None or not rec.rounds or df.empty:
        return []
    last = rec.rounds[-1]
    ok = usable(df)
    arms = set(ok["arm"]) if len(ok) else set()
    if TUNED not in arms:
        return []
    static = STATIC if STATIC in arms else None
    derivation = (rec.result or {}).get("derivation") or {}
    margin = float(derivation.get("margin", DEFAULT_MARGIN))
    # a run made before tune split alpha over its rounds: its rounds' tests at 95 %
    conf = float(derivation.get("confidence", 0.95))
    try:
        check = round_check(summarize(df, confidence=conf), df, tuned=TUNED, static=static, margin=margin)
    except (KeyError, ValueError) as exc:
        return [f"  the last round read with the current rule: not judged ({exc})"]
    if check.empty:
        return []
    cfg = last.get("speculative_config") or {}
    static_cfg = last.get("static_config") or cfg
    static_k = int(static_cfg.get("num_speculative_tokens") or cfg.get("num_speculative_tokens") or 0)
    claim = claim_text(check, cfg, static_k, static_is_candidate=static is None)
    verified = not check["short"].any()
    if claim == last.get("claim") and verified == bool(last.get("verified")):
        return []
    return [f"  round {last.get('round')} read with the current rule (docs/statistics.md: non-inferiority on the one "
            f"interval): {'verified' if verified else 'short'}: {claim}"]


def tune_lines(rec: TuneRecords | None) -> list[str]:
    """The report's lines for a tune run (its records, :func:`specnb.ledger.runs.read_tune`): each
    round's config and verdict, what it changed, and the config to deploy with its claim."""
    if rec is None:
        return []
    lines = [f"tune run {paths.portable(str(rec.folder))}:"]
    for r in rec.rounds:
        lines.append(f"  round {r['round']}: --speculative-config '{paths.portable(json.dumps(r['speculative_config']))}' "
                     f"({'verified' if r['verified'] else 'short'})")
        lines.append(f"    {r['claim']}")
        batch = [f"c={int(c['concurrency'])}: {c['running_mean']:.1f}" for c in r.get("check") or []
                 if c.get("running_mean") is not None]
        if batch:
            lines.append("    batch the server ran (mean running requests, the scheduler's units): " + ", ".join(batch))
        for a in r.get("actions") or []:
            lines.append(f"    next: {a}")
        if r.get("thrash"):
            lines.append(f"    thrash at c={', '.join(map(str, r['thrash']))}")
    r = rec.result
    if r is not None:
        how = ("not verified everywhere" if not r["verified"] else
               "verified against the baseline" if r["deploy"] == "static" else "verified against the envelope")
        lines.append(f"deploy ({r['deploy']}, {how} in {r.get('verified_in')}): "
                     f"--speculative-config '{paths.portable(json.dumps(r['speculative_config']))}'")
        lines.append(f"  claim: {r['claim']}")
    else:
        lines.append("no tune/result.json yet: the tune has not finished (rerun with the same --out to resume)")
    return lines
