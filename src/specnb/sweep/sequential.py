"""Sequential rounds: measure a level until its decision cannot change, then stop measuring it.

A sweep with ``sequential`` measures its ``repeats`` first (round 0: every level, every arm, fresh
server starts, ABBA order). Then, before each later round, it reads the run's ledgers and looks at
every level: per drafter arm, the repeated confidence interval over the per-repeat paired ratios
(:mod:`specnb.analysis.sequential`, Bonferroni over the planned looks, so the stated error rate
holds however early a level stops). A level is *decided* once every drafter's interval clears 1.0
(pays or loses), and *closed* at its last look (``max_repeats``) either way. The next round is one
more repeat (both arms started afresh: start-to-start noise is what keeps a level open on these
machines) for the levels still open, in ABBA order as always.

With a time budget (``budget_s``), a round is measured only as far as it fits: its cost is
estimated from this run's ledgers (the mean server start of the run, one per arm or one per repeat
when the arms start together, plus the mean duration of each open level's points), and when the
whole round does not fit, the open levels closest to a decision (largest distance of their ratio
from 1.0 in units of their interval's half-width) go first; a round with no level that fits is not
started. Each round's looks and choices are written once to ``sequential/round-NN.json`` (a
resumed run replays them) and ``specnb report`` says which levels stopped early and why
(:func:`specnb.ledger.runs.sequential_lines`).
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from pathlib import Path
from statistics import NormalDist
from typing import Any

import numpy as np
import pandas as pd

from specnb.analysis.bootstrap import bootstrap_speedups, level_of
from specnb.analysis.pairing import AnalysisError, paired
from specnb.analysis.sequential import LOSES, PAYS, Look, SequentialRule, first_decision
from specnb.ledger import REFUSED_ERROR, load_ledgers, utcnow, write_once
from specnb.ledger.runs import sequential_record
from specnb.ledger.store import LedgerError
from specnb.sweep.spec import SweepError, SweepSpec

__all__ = ["rule_of", "level_ratios", "next_round", "repeat_cost", "prompt_spread", "across_prompts"]

# replicates of the prompt resampling behind a look's prompt spread (an SD, not an interval)
PROMPT_BOOT = 1000


def rule_of(spec: SweepSpec) -> SequentialRule:
    """The sweep's stopping rule: looks at ``repeats`` .. ``sequential.max_repeats``."""
    assert spec.sequential is not None
    return SequentialRule(alpha=spec.sequential.alpha, first=spec.repeats, last=spec.sequential.max_repeats)


def level_ratios(df: pd.DataFrame) -> list[dict[str, Any]]:
    """Per (workload, level, drafter arm): its per-repeat paired ratios in repeat order."""
    pairs = paired(df) if len(df) else pd.DataFrame()
    if pairs.empty:
        return []
    pairs = pairs.assign(level=level_of(pairs)).sort_values("repeat")
    return [{"workload": str(wl), "level": float(level), "arm": str(arm), "repeats": [int(r) for r in g["repeat"]],
             "ratios": [float(r) for r in g["speedup"]]}
            for (wl, level, arm), g in pairs.groupby(["workload", "level", "arm"], sort=True)]


def prompt_spread(df: pd.DataFrame) -> dict[tuple[str, float, str], float]:
    """Per (workload, level, drafter arm): how much its log ratio (over the repeats measured so far)
    depends on which prompts the panel holds: the SD over replicates that resample the panel's
    prompts and keep every repeat (the report's prompt level without its start level,
    :func:`specnb.analysis.bootstrap.bootstrap_speedups` with ``starts=False``). More repeats do not
    shrink it (every repeat sends the same prompts); a larger panel does. Absent where no pair has
    request records."""
    if not len(df):
        return {}
    try:
        boot = bootstrap_speedups(df, n_boot=PROMPT_BOOT, starts=False)
    except (AnalysisError, LedgerError):  # a sidecar that cannot be read: no reading, the round goes on
        return {}
    out: dict[tuple[str, float, str], float] = {}
    rows = boot.table
    for cv in boot.curves:
        wl, arm = str(cv.group.get("workload")), str(cv.group.get("arm"))
        for i, level in enumerate(cv.concurrency):
            row = rows[(rows["arm"].astype(str) == arm) & (rows["workload"].astype(str) == wl)
                       & (rows["level"].astype(float) == float(level))]  # a concurrency or an offered rate
            # every pair with request records (a pair without enters every replicate unchanged)
            if not len(row) or str(row["resampled"].iloc[0]) not in ("repeats+prompts", "prompts"):
                continue
            x = cv.replicates["speedup"][:, i]
            x = np.log(x[np.isfinite(x) & (x > 0)])
            if len(x) > 1:
                out[(wl, float(level), arm)] = float(np.std(x, ddof=1))
    return out


def across_prompts(rule: SequentialRule, lk: Look | None, prompts_sd: float | None) -> dict[str, Any] | None:
    """The look read for the workload rather than for this panel: its interval over the starts and
    the panel's prompt spread together (root sum of squares of the two half-widths at the look's
    level), and the decision that gives. The rule decides on the panel (the same prompts in every
    repeat: the starts are the noise repeats can shrink); the prompts' part only a larger
    ``panel_size`` narrows."""
    if lk is None or prompts_sd is None:
        return None
    z = NormalDist().inv_cdf(1.0 - rule.per_look_alpha / 2.0)
    starts_half = lk.log_half
    prompts_half = z * prompts_sd
    half = math.hypot(starts_half, prompts_half)
    lo, hi = lk.ratio * math.exp(-half), lk.ratio * math.exp(half)
    return {"prompts_sd": round(prompts_sd, 4), "starts_half": round(starts_half, 4),
            "prompts_half": round(prompts_half, 4), "lo": round(lo, 4), "hi": round(hi, 4),
            "decision": PAYS if lo > 1.0 else LOSES if hi < 1.0 else None}


def _look_doc(lk: Look | None) -> dict[str, Any] | None:
    if lk is None:
        return None
    return {"n": lk.n, "ratio": round(lk.ratio, 4), "lo": round(lk.lo, 4), "hi": round(lk.hi, 4),
            "decision": lk.decision}


def _closeness(lk: Look | None) -> float:
    """How near a look is to a decision: its log ratio's distance from 0 over its half-width."""
    if lk is None:
        return 0.0
    return abs(math.log(lk.ratio)) / lk.log_half if lk.log_half > 0 else math.inf


def repeat_cost(spec: SweepSpec, df: pd.DataFrame, levels: list[tuple[str, float]]) -> float | None:
    """Seconds one more repeat of these (workload, level)s takes, from this run's ledgers: server
    starts (one per arm; one for the repeat when its arms start together) at the run's mean start,
    plus each point's mean duration so far (the run's mean point for a level without one). None
    when no point has a duration yet."""
    if not len(df) or "duration_s" not in df.columns:
        return None
    ok = df[pd.to_numeric(df["duration_s"], errors="coerce").notna()].assign(level=lambda d: level_of(d))
    if not len(ok):
        return None
    ready = pd.to_numeric(ok.get("server_ready_s"), errors="coerce").mean()
    starts = 1 if spec.start_together else len(spec.arms)  # every arm is launched (spec: no attached arm)
    total = 0.0 if pd.isna(ready) else float(ready) * starts
    arms = max(1, ok["arm"].nunique())
    for wl, level in levels:
        pts = ok[(ok["workload"] == wl) & (ok["level"].astype(float) == float(level))]
        if len(pts):
            total += float(pd.to_numeric(pts.groupby("arm")["duration_s"].mean(), errors="coerce").sum())
        else:  # a level without a measured point yet: the run's mean point, once per arm
            total += float(pd.to_numeric(ok["duration_s"], errors="coerce").mean()) * arms
    return total


def _refused_arms(df: pd.DataFrame) -> set[str]:
    """Arms whose every record is a refusal (this build cannot serve them here): no repeat pairs them."""
    if not len(df) or "error_type" not in df.columns:
        return set()
    out = set()
    for arm, g in df.groupby("arm"):
        if (g["error_type"] == REFUSED_ERROR).all():
            out.add(str(arm))
    return out


def _replayed(spec: SweepSpec, rule: SequentialRule, doc: dict[str, Any], round_: int) -> None:
    """A record made under another rule or first look cannot be followed: its error rate and its
    repeat numbers are the other run's."""
    was = doc.get("rule") or {}
    now = {"alpha": rule.alpha, "first": rule.first, "last": rule.last}
    if any(was.get(k) != v for k, v in now.items()) or doc.get("repeat") != spec.repeats + round_ - 1:
        raise SweepError(f"this run's sequential round {round_} was decided with repeats {was.get('first')}, "
                         f"max_repeats {was.get('last')}, alpha {was.get('alpha')}; resume it with those (now "
                         f"{rule.first}, {rule.last}, {rule.alpha}), or measure into a new folder")


def next_round(spec: SweepSpec, out_dir: Path, round_: int, *, elapsed_s: float,
               echo: Callable[[str], None] = print) -> dict[str, list[tuple[float, str]]]:
    """The levels to measure in round ``round_`` (one more repeat each) per workload; empty: every
    level is decided, at its last look, or out of budget. Written once to
    ``sequential/round-NN.json``; a resumed run replays the record (with the same rule only).

    A level is open while any drafter arm the build can serve has no decision yet at it (an arm
    without a paired repeat there is open); an arm's decision is its first decided look (the
    repeated interval covers every look at once, so a later look that widens does not reopen it)."""
    assert spec.sequential is not None
    rule = rule_of(spec)
    path = sequential_record(out_dir, round_)
    if path.exists():
        doc = json.loads(path.read_text())
        _replayed(spec, rule, doc, round_)
        return {wl: [(float(c), why) for c, why in lv] for wl, lv in doc["levels"].items()}
    repeat = spec.repeats + round_ - 1  # the repeat this round would add (0-based)
    final = round_ > rule.last - rule.first  # the last look is done: no round follows
    doc: dict[str, Any] = {
        "kind": "sequential", "round": round_, "repeat": repeat, "decided_at": utcnow(), "load": str(spec.load),
        "elapsed_s": round(elapsed_s, 1), "budget_s": spec.budget_s,
        "rule": {"alpha": rule.alpha, "first": rule.first, "last": rule.last, "per_look_alpha": rule.per_look_alpha,
                 "interval": "repeated t interval over per-repeat log ratios, Bonferroni over the looks"},
        "looks": [], "levels": {}, "stopped": None}
    df = load_ledgers(out_dir)
    refused = _refused_arms(df)
    drafters = [a.name for a in spec.arms if a.speculative and a.name not in refused]
    try:
        looks = level_ratios(df)
    except AnalysisError as exc:  # no baseline measured to pair against (its points failed)
        looks, doc["stopped"] = [], f"nothing to pair: {exc}"
    if not drafters:
        doc["stopped"] = "no drafter arm this build can serve here: nothing to decide"
    workloads = sorted({str(w) for w in df["workload"]}) if len(df) and "workload" in df.columns else []
    if not workloads and doc["stopped"] is None:
        doc["stopped"] = "nothing measured in the first repeats"
    by_arm = {(r["workload"], r["level"], r["arm"]): r for r in looks}
    spreads: dict[tuple[int, ...], dict[tuple[str, float, str], float]] = {}  # per set of repeats

    def spread_at(key: tuple[str, float, str], repeats: list[int]) -> float | None:
        """The prompt spread of a level over the repeats its look used (a look that stopped earlier
        than its level's repeats reads only those)."""
        if tuple(repeats) not in spreads:
            spreads[tuple(repeats)] = prompt_spread(df[df["repeat"].isin(repeats)])
        return spreads[tuple(repeats)].get(key)
    open_levels: list[tuple[float, tuple[str, float], str]] = []
    for key in sorted((wl, float(c)) for wl in workloads for c in spec.levels()):
        rows, states = [], []
        for arm in drafters:
            r = by_arm.get((*key, arm))
            ratios = r["ratios"] if r is not None else []
            lk = first_decision(rule, ratios) if ratios else None
            if lk is not None and lk.decision is not None:
                state = f"decided: {lk.decision}"
            elif final or len(ratios) >= rule.last:
                state = "open at the last look"
            elif not ratios:
                state = "open: no paired repeat yet"
            else:
                state = "open"
            states.append(state)
            rows.append((arm, ratios, lk))
            doc["looks"].append({"workload": key[0], "level": key[1], "arm": arm,
                                 "repeats": r["repeats"] if r is not None else [],
                                 "ratios": [round(x, 4) for x in ratios], "look": _look_doc(lk), "state": state,
                                 "across_prompts": (None if lk is None else across_prompts(
                                     rule, lk, spread_at((*key, arm), r["repeats"][:lk.n])))})
        if any(st.startswith("open") and st != "open at the last look" for st in states):
            worst = min((_closeness(lk) for _, _, lk in rows), default=0.0)
            shown = "; ".join(f"{arm} {lk.text()}" if lk is not None else f"{arm}: {len(ratios)} paired repeat(s)"
                              for arm, ratios, lk in rows)
            open_levels.append((worst, key, f"sequential: open ({shown}): repeat {repeat + 1} of at most {rule.last}"))
    if doc["stopped"] is None and final:
        doc["stopped"] = f"the last look ({rule.last} repeats) is done"
    elif doc["stopped"] is None and not open_levels:
        doc["stopped"] = "every level decided or at its last look"
    elif doc["stopped"] is None:
        chosen = sorted(open_levels, key=lambda t: (-t[0], t[1]))  # nearest to a decision first
        if spec.budget_s is not None:
            left = spec.budget_s - elapsed_s
            fit: list[tuple[float, tuple[str, float], str]] = []
            for item in chosen:
                cost = repeat_cost(spec, df, [k for _, k, _ in [*fit, item]])
                if cost is None or cost <= left:  # None: nothing measured to cost it by (no point has a duration)
                    fit.append(item)
            full = repeat_cost(spec, df, [k for _, k, _ in chosen])
            doc["estimated_s"] = None if full is None else round(full, 1)
            if not fit:
                doc["stopped"] = (f"time budget: {elapsed_s:.0f} s spent of {spec.budget_s:.0f} s, one more repeat "
                                  f"of the nearest open level would take about "
                                  f"{repeat_cost(spec, df, [chosen[0][1]]) or 0:.0f} s")
            elif len(fit) < len(chosen):
                kept = {k for _, k, _ in fit}
                doc["left_out"] = [{"workload": k[0], "level": k[1]} for _, k, _ in chosen if k not in kept]
            chosen = fit
        if doc["stopped"] is None:
            for _, (wl, level), why in sorted(chosen, key=lambda t: t[1]):
                doc["levels"].setdefault(wl, []).append([level, why])
    write_once(path, (json.dumps(doc, indent=2) + "\n").encode())
    if doc["stopped"]:
        echo(f"sequential: stopped before round {round_}: {doc['stopped']}")
    else:
        n = sum(len(v) for v in doc["levels"].values())
        echo(f"sequential round {round_}: repeat {repeat + 1} for {n} open level(s)"
             + (f"; {len(doc['left_out'])} left out for the time budget" if doc.get("left_out") else ""))
    return {wl: [(float(c), why) for c, why in lv] for wl, lv in doc["levels"].items()}
