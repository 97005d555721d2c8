"""From a measured K sweep to a speculative config an operator can deploy: vLLM's dynamic
speculation schedule.

vLLM (0.32 and later with the default model runner) takes
``num_speculative_tokens_per_batch_size`` in ``--speculative-config``: a list of inclusive
batch-size ranges ``[lo, hi, K]``, K = 0 turning drafting off for that range. The scheduler
picks K from the number of requests it schedules in a step, prefills included, with no
hysteresis (vLLM issue #49548 reports throughput collapsing when K flips at a boundary).

**The rule** (stated, and recorded in the policy): at each measured concurrency compare the
best K with the K = 0 option, which is the run's off arm (the drafter loaded, K = 0 at every
batch size: what "off" inside a schedule really costs) where it has one, else the baseline;
``rule = "lower_bound"`` (the default) keeps whichever has the higher 95 % lower bound (against
the baseline: the drafter must pay with confidence to be switched on; against a measured off
arm, an uncertain K is not turned off for an option that costs too), ``rule = "point"`` the
higher point estimate. Between two measured levels whose choices differ the boundary is the
geometric mean of their batches (below): levels 2 and 4 with K = 4 and 0 and no gauges give
``[1, 2, 4], [3, max, 0]``. Adjacent ranges with the same K merge; the last range runs to
``max_batch``.

**Batch size is not concurrency**: a closed loop at concurrency c schedules at most c requests
in a step (fewer while some wait for their next request to arrive). Boundaries are placed in the
scheduler's units: each level is mapped to the batch the server really ran there (the mean of
the ``num_requests_running`` gauge over the point, prefills included, as vLLM counts them; from
the arm whose K the level keeps), and a boundary is the geometric mean of the two measured
batches around a switch; the mapping is printed with the schedule. A level without the gauge
falls back to its concurrency.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from enum import StrEnum
from typing import Any

import numpy as np
import pandas as pd

from specnb import paths
from specnb.errors import SpecnbError
from specnb.ledger import json_cell, utcnow
from specnb.ledger.names import BASELINE, LoadMode, Status

__all__ = ["ScheduleError", "SCHEDULE_KEY", "SCHEDULE_KEY_NEW", "SCHEDULE_KEYS", "canonical_schedule",
           "with_schedule_key", "Rule", "RULES", "Deploy", "check_schedule", "choose_k", "derive_schedule",
           "policy_config", "policy_document", "k_at", "derive_policy", "drafter_methods", "off_arms", "deployable", "format_policy", "policy_check",
           "derive_policies", "batch_of", "measured_batch",
           "best_static_arm"]

# the schedule's name in --speculative-config: specnb keeps it under vLLM's name up to 0.32, which
# vLLM is renaming (open PR #48944, the old name kept as an alias); a config may give either, a
# launched server gets the one the installed engine takes (specnb.engine.vllm.engine_schedule_key)
SCHEDULE_KEY = "num_speculative_tokens_per_batch_size"
SCHEDULE_KEY_NEW = "speculative_token_schedule"
SCHEDULE_KEYS = (SCHEDULE_KEY, SCHEDULE_KEY_NEW)


def canonical_schedule(cfg: dict[str, Any]) -> dict[str, Any]:
    """``cfg`` with its schedule under :data:`SCHEDULE_KEY`, whichever of the two names it came
    under (both at once: ScheduleError, one line)."""
    if SCHEDULE_KEY_NEW not in cfg:
        return cfg
    if SCHEDULE_KEY in cfg:
        raise ScheduleError(f"give the schedule once: {SCHEDULE_KEY} and {SCHEDULE_KEY_NEW} are the same setting "
                            "(vLLM's old and new name)")
    out = {k: v for k, v in cfg.items() if k != SCHEDULE_KEY_NEW}
    out[SCHEDULE_KEY] = cfg[SCHEDULE_KEY_NEW]
    return out


def with_schedule_key(cfg: dict[str, Any] | None, key: str) -> dict[str, Any] | None:
    """``cfg`` with its schedule (if any) under ``key``, one of :data:`SCHEDULE_KEYS`."""
    if not cfg or key not in SCHEDULE_KEYS:
        return cfg
    cfg = canonical_schedule(cfg)
    if SCHEDULE_KEY not in cfg or key == SCHEDULE_KEY:
        return cfg
    out = {k: v for k, v in cfg.items() if k != SCHEDULE_KEY}
    out[key] = cfg[SCHEDULE_KEY]
    return out


class Rule(StrEnum):
    """How :func:`choose_k` keeps a K at a level: by the 95 % lower bounds of the options, or by
    their point estimates."""

    LOWER_BOUND = "lower_bound"
    POINT = "point"


# the rules' names as plain strings (argparse choices and a pydantic Literal print them as such)
RULES = tuple(r.value for r in Rule)


class Deploy(StrEnum):
    """What a derived policy (:func:`deployable`) or a tune's result (``deploy``) tells an operator
    to deploy: the schedule, one static K arm as it is, or no drafter at all (a policy only)."""

    SCHEDULE = "schedule"
    STATIC = "static"
    NONE = "none"


DEFAULT_MAX_BATCH = 256


class ScheduleError(SpecnbError):
    """A schedule vLLM would refuse or misread; one line."""


def check_schedule(schedule: Any, num_speculative_tokens: int) -> list[list[int]]:
    """vLLM's rules, checked before any server starts: a list of ``[lo, hi, K]`` integers,
    1 <= lo <= hi, ranges sorted, the first starting at 1, none overlapping, 0 <= K <=
    num_speculative_tokens. Returns the schedule as lists of ints."""
    if not isinstance(schedule, list) or not schedule:
        raise ScheduleError(f"{SCHEDULE_KEY} must be a non-empty list of [lo, hi, K] ranges")
    out = []
    for i, r in enumerate(schedule):
        if (not isinstance(r, (list, tuple)) or len(r) != 3
                or not all(isinstance(x, int) and not isinstance(x, bool) for x in r)):
            raise ScheduleError(f"{SCHEDULE_KEY}[{i}] must be three integers [lo, hi, K], got {r!r}")
        lo, hi, k = r
        if lo < 1 or hi < lo:
            raise ScheduleError(f"{SCHEDULE_KEY}[{i}] = {list(r)}: a batch-size range needs 1 <= lo <= hi")
        if not 0 <= k <= num_speculative_tokens:
            raise ScheduleError(f"{SCHEDULE_KEY}[{i}] = {list(r)}: K must be in 0..num_speculative_tokens "
                                f"({num_speculative_tokens})")
        if out and lo <= out[-1][1]:
            raise ScheduleError(f"{SCHEDULE_KEY}[{i}] = {list(r)} overlaps or precedes {out[-1]}: ranges must be "
                                "sorted and must not overlap")
        out.append([lo, hi, k])
    if out[0][0] != 1:
        raise ScheduleError(f"{SCHEDULE_KEY} must start at batch size 1 (vLLM requires it), starts at {out[0][0]}")
    return out


def k_at(schedule: Sequence[Sequence[int]], batch: int) -> int:
    """The K a schedule gives a batch of ``batch`` requests (a gap carries the previous K, as vLLM does)."""
    k = schedule[0][2]
    for lo, hi, kk in schedule:
        if batch >= lo:
            k = kk
        if lo <= batch <= hi:
            return kk
    return k


def choose_k(choice: pd.DataFrame, rule: Rule | str = Rule.LOWER_BOUND) -> pd.DataFrame:
    """Per level of one workload: the K the rule keeps (0: drafting off inside the schedule) and why.

    K = 0 inside a schedule is not "no drafter": vLLM keeps the drafter loaded and still runs it
    (issue #49548; the CPU policy run measured 0.77x-0.82x of the baseline there). The K = 0
    option at a level is the run's *off arm* (the drafter loaded, K = 0 at every batch size:
    ``off`` rows of ``choice``) where it has one, never the baseline a schedule cannot reach;
    without one it is the baseline (speedup 1, no interval), and the row says the K = 0 it chose
    is unmeasured (``off_measured`` False).

    ``rule = "lower_bound"`` keeps the option (the best K by its estimate, or K = 0) whose 95 %
    lower bound is higher: the one that loses least in the worst case. Against the baseline that
    is "drafting must pay with confidence"; against a measured off arm, which costs too, an
    uncertain K is not turned off for an option known to be worse. ``"point"`` compares the
    point estimates."""
    if rule not in RULES:
        raise ScheduleError(f"unknown rule {rule!r}; choose one of {list(RULES)}")
    rule = Rule(rule)
    rows = []

    def lo(row: pd.Series) -> float:
        """The lower bound the rule reads: the arm's interval with the error split over the level's
        arms (``family_lo``, :func:`specnb.analysis.proposal.k_choice`: the best of several K is one
        of several tests), its own where the frame has none."""
        v = row.get("family_lo")
        return float(row["speedup_lo"]) if v is None or pd.isna(v) else float(v)

    for level, g in choice.groupby("level", sort=True):
        offs = g[g["off"].astype(bool)] if "off" in g.columns else g.iloc[0:0]
        offs = offs[offs["speedup"].notna()]
        off = offs.loc[offs["speedup"].idxmax()] if len(offs) else None
        drafters = g[(g["k"] > 0) & ~(g["off"].astype(bool) if "off" in g.columns else False)]
        best = drafters.loc[drafters["speedup"].idxmax()] if len(drafters) else None
        bar = float(off["speedup"]) if off is not None else 1.0
        bar_lo = lo(off) if off is not None else 1.0
        arms = best.get("family_arms") if best is not None else None
        fam = (f" ({100 * float(best['family_confidence']):.4g} %: the best of {int(arms)} arms at this level)"
               if arms is not None and pd.notna(arms) and int(arms) > 1 else "")
        against = (f"K=0 in a schedule ({off['arm']}, measured {bar:.2f}x" + (f", lower bound {bar_lo:.2f})"
                   if rule == Rule.LOWER_BOUND else ")") if off is not None else "1")
        decided = True
        if best is None:
            k, why = 0, "no drafter measured"
        elif rule == Rule.LOWER_BOUND and (pd.isna(lo(best)) or pd.isna(bar_lo)):
            # no interval to compare (too few repeats or prompts): nothing is decided here, and K = 0
            # is what the schedule falls back to until the level is measured again, not a finding
            decided, k = False, 0
            which = best["arm"] if pd.isna(lo(best)) else off["arm"]
            why = (f"undecided: {which} has no lower bound (its interval could not be estimated); K = 0 until this "
                   "level is measured with more repeats or prompts")
        elif rule == Rule.LOWER_BOUND and lo(best) > bar_lo:
            verb = "pays" if lo(best) > 1.0 else "loses least"
            k, why = int(best["k"]), (f"{best['arm']} {verb}: {best['speedup']:.2f}x, lower bound "
                                      f"{_bound(lo(best))}{fam} > {against}")
        elif rule == Rule.POINT and best["speedup"] > bar:
            verb = "pays" if best["speedup"] > 1.0 else "loses least"
            k, why = int(best["k"]), f"{best['arm']} {verb}: {best['speedup']:.2f}x > {against} (point estimate)"
        else:
            fam_hi = best.get("family_hi")
            hi = float(best["speedup_hi"]) if fam_hi is None or pd.isna(fam_hi) else float(fam_hi)
            k, why = 0, (f"best K={int(best['k'])} ({best['speedup']:.2f}x, interval [{_bound(lo(best))}, "
                         f"{_bound(hi)}]{fam}) does not clear {against if off is not None else '1.0'}"
                         if rule == Rule.LOWER_BOUND else
                         f"no K beats {against if off is not None else 'the baseline'} (best {best['speedup']:.2f}x)")
        won = best if k > 0 else off
        rows.append({"level": float(level), "concurrency": int(g["concurrency"].iloc[0]), "k": k, "reason": why,
                     # the arm whose measurement this level's choice rests on (the baseline's: K = 0, no off arm)
                     "arm": str(won["arm"]) if won is not None else BASELINE,
                     # the option kept over the runner-up, paired per repeat (where the kept option is
                     # the level's best: specnb.analysis.proposal.k_choice)
                     **_margin_of(g, won["arm"] if won is not None else "(baseline)"),
                     # what the schedule is expected to give here (K = 0 without an off arm: unmeasured)
                     "speedup": None if won is None else float(won["speedup"]),
                     "speedup_lo": None if won is None else float(won["speedup_lo"]),
                     "speedup_hi": None if won is None else float(won["speedup_hi"]),
                     "off_measured": off is not None,
                     # False: the rule could not compare (an interval missing); k is the fallback, not a choice
                     "decided": decided})
    return pd.DataFrame(rows)


def _margin_of(g: pd.DataFrame, name: str) -> dict[str, Any]:
    hit = g[(g["arm"] == name) & g.get("best", pd.Series(False, index=g.index)).astype(bool)]
    if not len(hit) or "margin" not in hit.columns or pd.isna(hit["margin"].iloc[0]):
        return {"runner_up": None, "margin": None, "margin_lo": None, "margin_hi": None}
    r = hit.iloc[0]
    return {"runner_up": r["runner_up"], "margin": float(r["margin"]),
            "margin_lo": None if pd.isna(r["margin_lo"]) else float(r["margin_lo"]),
            "margin_hi": None if pd.isna(r["margin_hi"]) else float(r["margin_hi"])}


def off_arms(df: pd.DataFrame) -> set[str]:
    """The arms of a frame with the drafter loaded and K = 0 at every batch size (the cost of
    "off inside a schedule", measured): the frame's ``drafting_off`` (specnb.ledger.frame says
    what an off arm is, once), read on each arm's first row."""
    spec = df[df["speculative"].astype(bool)] if len(df) else df
    if spec.empty or "drafting_off" not in spec.columns:
        return set()
    firsts = spec.drop_duplicates("arm")
    return {str(a) for a, off in zip(firsts["arm"], firsts["drafting_off"], strict=True) if off is True or off == 1}


def deployable(choice: pd.DataFrame, chosen: pd.DataFrame, sp: Any = None) -> tuple[Deploy, str | None, str]:
    """What to deploy, given the K per level a schedule would use: ``("schedule", None, claim)``,
    ``("static", <arm>, claim)`` (one static K is at least as good everywhere, or the schedule's
    K = 0 bands are unmeasured where that K is not known to lose), or ``("none", None, claim)``
    (no K pays anywhere). The claim names the levels where no drafter config beats the baseline:
    that traffic is better served from an endpoint without a drafter. With ``sp`` (the run's
    :class:`~specnb.analysis.speedups.Speedups`) the schedule beats the best static K at a level
    where the K it keeps there is shown faster than that static K, paired repeat by repeat;
    without it, where their intervals do not overlap."""
    static = choice[(choice["k"] > 0) & ~(choice["off"].astype(bool) if "off" in choice.columns else False)]
    levels = sorted(chosen["concurrency"])
    if chosen["k"].eq(0).all() and not (chosen["speedup"].fillna(0) > 1).any():
        return Deploy.NONE, None, "no K pays with confidence at any measured concurrency: leave drafting off for this workload"
    best = best_static_arm(choice, levels)
    sb = static[static["arm"] == best].set_index("concurrency") if best else None
    lose = [c for c in levels if sb is not None and sb.loc[c, "speedup_hi"] < 1.0
            and not (chosen.set_index("concurrency").loc[c, "speedup_lo"] or 0) > 1.0]
    separate = (f"; at c={', '.join(map(str, lose))} no drafter config beats the baseline: serve that traffic from an "
                "endpoint without a drafter" if lose else "")
    ch = chosen.set_index("concurrency")
    off_bands = [c for c in levels if ch.loc[c, "k"] == 0]
    if best is None:
        return Deploy.SCHEDULE, None, "no static K was measured at every level: the schedule is not compared with one" + separate
    unmeasured = [c for c in off_bands if not ch.loc[c, "off_measured"] and sb.loc[c, "speedup_hi"] >= 1.0]
    if unmeasured:
        return Deploy.STATIC, best, (f"deploy {best} as it is: the schedule would turn drafting off at "
                                f"c={', '.join(map(str, unmeasured))}, where {best} is not known to lose, and this run "
                                "has no arm measuring K = 0 inside a schedule (vLLM still runs the drafter there); add "
                                "one to verify a schedule" + separate)
    if sp is not None:
        group = {k: choice[k].iloc[0] for k in sp.group_keys if k != "arm" and k in choice.columns}
        beats = []
        for c in levels:
            arm = ch.loc[c, "arm"]
            if arm == best or ch.loc[c, "k"] == 0 and not ch.loc[c, "off_measured"]:
                continue
            est = sp.contrast(group, str(arm), best, float(sb.loc[c, "level"]))
            if est is not None and est.lo is not None and est.lo > 1.0:
                beats.append(c)
    else:
        beats = [c for c in levels if ch.loc[c, "speedup_lo"] is not None and not pd.isna(ch.loc[c, "speedup_lo"])
                 and ch.loc[c, "speedup_lo"] > sb.loc[c, "speedup_hi"]]
    if not beats:
        return Deploy.STATIC, best, (f"deploy {best} as it is: no level where the schedule is shown faster than "
                                f"{best}" + separate)
    return Deploy.SCHEDULE, None, (f"the schedule is shown faster than {best} (the best static K) at "
                                   f"c={', '.join(map(str, beats))}"
                              + ("" if all(ch.loc[c, "off_measured"] for c in off_bands) else
                                 "; its K = 0 bands are unmeasured (no off arm)") + separate)


def best_static_arm(choice: pd.DataFrame, levels: Sequence[int]) -> str | None:
    """The static K arm (drafter on at one K everywhere) measured at every level with the highest
    geometric-mean speedup over them, or None."""
    static = choice[(choice["k"] > 0) & ~(choice["off"].astype(bool) if "off" in choice.columns else False)]
    full = [a for a, g in static.groupby("arm") if sorted(g["concurrency"]) == sorted(levels)]
    geo = {a: float(np.exp(np.log(static[static["arm"] == a]["speedup"].clip(lower=1e-9)).mean())) for a in full}
    return max(geo, key=geo.get) if geo else None


def derive_schedule(chosen: pd.DataFrame, max_batch: int = DEFAULT_MAX_BATCH) -> list[list[int]]:
    """Batch-size ranges from the K chosen per level: boundaries at the geometric mean of the two
    measured batches around a switch (``batch``, the running requests the server really had at
    each level; the concurrency where a level has none), equal neighbours merged, the last range
    to ``max_batch``."""
    order = chosen.sort_values("concurrency")
    pts = order[["concurrency", "k"]].astype(int).values.tolist()
    if not pts:
        raise ScheduleError("no levels to derive a schedule from")
    if max_batch < pts[-1][0]:
        raise ScheduleError(f"max_batch {max_batch} is below the largest measured level {pts[-1][0]}")
    batch = batch_of(order)
    ranges: list[list[int]] = []
    lo = 1
    for i, (_c, k) in enumerate(pts):
        nxt = pts[i + 1] if i + 1 < len(pts) else None
        if nxt is not None and nxt[1] == k:
            continue  # same K on both sides: no boundary here
        if nxt is None:
            hi = max_batch
        else:
            # at or above this level's batch, below the next one's where they can be told apart (two
            # levels that ran the same batch cannot be: the switch then keeps this level in its band),
            # never an empty range
            hi = max(math.floor(math.sqrt(batch[i] * batch[i + 1])), math.floor(batch[i]))
            hi = max(lo, min(hi, max(math.ceil(batch[i + 1]) - 1, math.floor(batch[i]))))
        ranges.append([lo, hi, k])
        lo = hi + 1
    return ranges


def batch_of(chosen: pd.DataFrame) -> list[float]:
    """Each level's batch (mean running requests), its concurrency where the gauge is missing."""
    conc = chosen["concurrency"].astype(float)
    if "batch" not in chosen.columns:
        return conc.tolist()
    b = pd.to_numeric(chosen["batch"], errors="coerce")
    return [float(x) if pd.notna(x) and x > 0 else float(c) for x, c in zip(b, conc, strict=True)]


def measured_batch(df: pd.DataFrame) -> dict[tuple[str, int], float]:
    """(arm, concurrency) -> the mean of ``num_requests_running`` over its usable points."""
    if df.empty or "num_requests_running_mean" not in df.columns:
        return {}
    runs = pd.to_numeric(df["num_requests_running_mean"], errors="coerce")
    g = runs.groupby([df["arm"].astype(str), df["concurrency"].astype(int)]).mean().dropna()
    return {(str(a), int(c)): float(v) for (a, c), v in g.items()}


def policy_config(base: dict[str, Any], schedule: list[list[int]]) -> dict[str, Any]:
    """The ``--speculative-config`` to deploy: the drafter's config with the schedule; its
    ``num_speculative_tokens`` is the largest K the schedule uses (at least 1)."""
    k = max(1, max(r[2] for r in schedule))
    cfg = {key: v for key, v in base.items() if key != SCHEDULE_KEY}
    cfg["num_speculative_tokens"] = k
    cfg[SCHEDULE_KEY] = check_schedule(schedule, k)
    return cfg


def policy_document(config: dict[str, Any], chosen: pd.DataFrame, *, source: str, workload: str, rule: str,
                    max_batch: int) -> str:
    """What ``specnb policy`` writes: the config, the rule, and the evidence per level."""
    doc = {
        "kind": "policy",
        "speculative_config": config,
        "derived_from": source,
        "workload": workload,
        "rule": rule,
        "max_batch": max_batch,
        "created_at": utcnow(),
        "deploy": chosen.attrs.get("deploy", Deploy.SCHEDULE),
        "claim": chosen.attrs.get("claim"),
        "static_arm": chosen.attrs.get("static_arm"),
        "levels": json.loads(chosen.to_json(orient="records")),
        "note": "batch size counts every scheduled request, prefills included; each level's batch is the mean "
                "of num_requests_running it ran (levels[].batch); boundaries are the geometric means of the "
                "measured batches around each switch",
    }
    return json.dumps(doc, indent=2) + "\n"


def drafter_methods(df: pd.DataFrame) -> list[str]:
    """The drafter methods of a frame's speculative arms (``ngram``, ``eagle3``, ...)."""
    if df.empty or "method" not in df.columns:
        return []
    return sorted({str(m) for m in df.loc[df["speculative"].astype(bool), "method"].dropna()})


def derive_policy(df: pd.DataFrame, *, workload: str | None = None, rule: Rule | str = Rule.LOWER_BOUND,
                  max_batch: int | None = None, source: str = "", method: str | None = None) -> tuple[dict[str, Any], pd.DataFrame, str]:
    """From a run with one arm per K (or one K and the baseline): the deployable config, the K
    chosen per level with its reason, and the policy document to write.

    A schedule sets K for one drafter: a run whose arms use several methods (n-gram and EAGLE-3)
    yields one schedule per method (``method``); without it such a run is refused, naming them,
    so one method's K is never deployed on another's config."""
    from specnb.analysis.pairing import usable
    from specnb.analysis.proposal import k_choice
    from specnb.analysis.speedups import paired_speedups

    ok = usable(df)
    if ok.empty or not ok["speculative"].astype(bool).any():
        raise ScheduleError("no measured drafter arm to derive a schedule from")
    if ok["concurrency"].nunique() < 1 or ("load_mode" in ok.columns and (ok["load_mode"] == LoadMode.RATE.shape).any()):
        raise ScheduleError("a schedule is derived from closed-loop levels (concurrency), not from rates")
    workloads = sorted(set(ok["workload"]))
    if workload is None:
        if len(workloads) != 1:
            raise ScheduleError(f"the run has workloads {workloads}: name the one your traffic looks like (--workload)")
        workload = workloads[0]
    if workload not in workloads:
        raise ScheduleError(f"no workload {workload!r} in the run (it has {workloads})")
    ok = ok[ok["workload"] == workload]
    methods = drafter_methods(ok)
    if method is None and len(methods) > 1:
        raise ScheduleError(f"the run's drafter arms use {len(methods)} methods ({', '.join(methods)}): a schedule "
                            "sets K for one drafter; derive one per method (method=..., specnb policy --method)")
    if method is not None:
        if method not in methods:
            raise ScheduleError(f"no drafter arm with method {method!r} in the run (it has {methods})")
        ok = ok[~ok["speculative"].astype(bool) | (ok["method"] == method)]
    if "condition" in ok.columns and ok["condition"].nunique() > 1:
        raise ScheduleError(f"the run has conditions {sorted(set(ok['condition']))}: derive from one of them")
    if "sweep" in ok.columns and ok["sweep"].nunique() > 1:
        raise ScheduleError(f"the folder holds sweeps {sorted(set(ok['sweep']))}: derive from one of them (its folder)")
    offs = off_arms(ok)
    sp = paired_speedups(ok)
    choice = k_choice(sp, ok)
    choice["off"] = choice["arm"].isin(offs)
    choice.loc[choice["off"], "k"] = 0
    chosen = choose_k(choice, rule)
    batches = measured_batch(ok)
    chosen["batch"] = [batches.get((a, int(c))) for a, c in zip(chosen["arm"], chosen["concurrency"], strict=True)]
    spec_rows = ok[ok["speculative"].astype(bool) & ~ok["arm"].isin(offs)]
    keep = chosen.loc[chosen["k"] > 0, "k"]
    k_ref = int(keep.max()) if len(keep) else int(pd.to_numeric(spec_rows["num_speculative_tokens"]).max())
    ref = spec_rows[pd.to_numeric(spec_rows["num_speculative_tokens"]) == k_ref].iloc[0]
    base = json_cell(ref["speculative_config"]) or {}
    if SCHEDULE_KEY in base:
        raise ScheduleError("the run's drafter arms already carry a schedule: derive from a K sweep")
    if max_batch is None:
        argv = json_cell(ref["server_argv"]) or []
        seqs = next((argv[i + 1] for i, a in enumerate(argv[:-1]) if a == "--max-num-seqs"), None)
        max_batch = int(seqs) if seqs and seqs.isdigit() else DEFAULT_MAX_BATCH
    schedule = derive_schedule(chosen, max_batch)
    deploy, static_arm, claim = deployable(choice, chosen, sp)
    if deploy is Deploy.STATIC:
        config = dict(json_cell(spec_rows[spec_rows["arm"] == static_arm]["speculative_config"].iloc[0]))
    else:
        config = policy_config(base, schedule)
    chosen.attrs.update(deploy=deploy, claim=claim, static_arm=best_static_arm(choice, sorted(chosen["concurrency"])))
    doc = policy_document(config, chosen, source=source, workload=workload, rule=rule, max_batch=max_batch)
    return config, chosen, doc


def format_policy(config: dict[str, Any], chosen: pd.DataFrame, rule: str) -> str:
    """The schedule as a ready ``--speculative-config`` and, per level, the K kept and why."""
    lines = [f"K per concurrency (rule: {rule}; keep the best K or K = 0, whichever has the higher "
             + ("95% lower bound" if rule == Rule.LOWER_BOUND else "point estimate")
             + "; K = 0 is the off arm where one was measured, else the baseline)"]
    for r in chosen.itertuples(index=False):
        win = ""
        # the margin over another K (over the baseline it is the speedup the reason already gives)
        if getattr(r, "margin", None) is not None and pd.notna(r.margin) and r.runner_up not in (None, "(baseline)"):
            vs = r.runner_up
            iv = (f" [{_bound(r.margin_lo)}, {_bound(r.margin_hi)}]" if r.margin_lo is not None
                  and pd.notna(r.margin_lo) else "")
            who = "the baseline runs " if r.arm == BASELINE else f"{r.arm} runs "
            win = f"; {who}{r.margin:.2f}x{iv} the tok/s of {vs}"
        batch = getattr(r, "batch", None)
        at = f" (batch {batch:.1f})" if batch is not None and pd.notna(batch) else ""
        lines.append(f"  c={r.concurrency}{at}: K={r.k}  ({r.reason}{win})")
    claim = chosen.attrs.get("claim")
    if chosen.attrs.get("deploy") == Deploy.NONE or (SCHEDULE_KEY in config and all(k == 0 for _, _, k in config[SCHEDULE_KEY])):
        lines.append("no K pays with confidence at any measured concurrency: leave drafting off for this workload")
        return "\n".join(lines)
    if claim:
        lines.append(claim)
    # a draft model's folder as the sweep resolved it, made portable: the same text in every checkout
    lines.append("--speculative-config '" + paths.portable(json.dumps(config, separators=(", ", ": "))) + "'")
    return "\n".join(lines)


DEFAULT_MARGIN = 0.02  # tune's non-inferiority margin: the candidate may be at most 2 % slower than static K


def policy_check(table: pd.DataFrame, df: pd.DataFrame, *, policy: str, always_on: str,
                 margin: float = DEFAULT_MARGIN) -> pd.DataFrame:
    """Per level: the policy arm against the always-on (static K) arm and the baseline, by two
    tests on the one interval (docs/statistics.md), and what the server ran there.

    - **non-inferior to static K**: the policy's paired ratio against the always-on arm (both in
      the same server starts) has its lower bound above ``1 - margin``;
    - **beats the baseline**: the policy's speedup has its lower bound above 1.0.

    ``meets_envelope`` is both (``failed`` names the test that did not pass). Passing means the
    evidence shows the policy at least as good as the better fixed choice within the margin, not
    that nothing showed it worse: a level measured too little fails. Where the policy *is* the
    always-on arm only the second test applies. The check is verified where every level passes
    (each test at its own level: a claim over all levels needs no correction, it is an
    intersection of them).

    ``table`` is a :func:`specnb.analysis.tables.summarize` table holding both arms (its
    ``attrs["speedups"]`` gives the paired contrast); also returned per level: the K its schedule
    gives that concurrency, its drafts per output token, and the batch the server really ran (the
    mean of ``num_requests_running``: requests in prefill count, waiting ones do not)."""
    if not 0.0 <= margin < 1.0:
        raise ScheduleError(f"the non-inferiority margin must be in [0, 1), got {margin}")
    pol = table[table["arm"] == policy].set_index("level")
    on = table[table["arm"] == always_on].set_index("level")
    if pol.empty or on.empty:
        raise ScheduleError(f"the table needs arms {policy!r} and {always_on!r} (has {sorted(set(table['arm']))})")
    sp = table.attrs.get("speedups")
    rows_pol = df[(df["arm"] == policy) & (df["status"] == Status.OK)]
    schedule = (json_cell(rows_pol["speculative_config"].iloc[0]) or {}).get(SCHEDULE_KEY) if len(rows_pol) else None
    group_cols = [k for k in (sp.group_keys if sp is not None else []) if k != "arm"]
    out = []
    for level in sorted(set(pol.index) & set(on.index)):
        p, a = pol.loc[level], on.loc[level]
        envelope = max(1.0, float(a["speedup"]))
        at = rows_pol[rows_pol["concurrency"] == int(p["concurrency"])]
        drafts = pd.to_numeric(at.get("num_drafts"), errors="coerce").sum()
        tokens = pd.to_numeric(at.get("output_tokens"), errors="coerce").sum()
        same = policy == always_on
        vs = None
        if not same and sp is not None:
            vs = sp.contrast({k: p[k] for k in group_cols}, policy, always_on, float(level))
        vs_lo = None if vs is None or vs.lo is None else vs.lo
        noninferior = True if same else (vs_lo is not None and vs_lo > 1.0 - margin)
        beats = pd.notna(p["speedup_lo"]) and float(p["speedup_lo"]) > 1.0
        failed = "; ".join(
            ([] if noninferior else [f"not shown within {margin:.0%} of {always_on}: "
                                     + (f"{vs.ratio:.2f}x [{vs.lo:.2f}, {vs.hi:.2f}], lower bound <= {1 - margin:.2f}"
                                        if vs is not None and vs.lo is not None else "no paired interval")])
            + ([] if beats else [f"not shown above the baseline: lower bound {_f2(p['speedup_lo'])} <= 1"]))
        out.append({"level": level, "concurrency": int(p["concurrency"]),
                    "k_scheduled": k_at(schedule, int(p["concurrency"])) if schedule else None,
                    "always_on": float(a["speedup"]), "policy": float(p["speedup"]),
                    "policy_lo": float(p["speedup_lo"]), "policy_hi": float(p["speedup_hi"]), "envelope": envelope,
                    "static_lo": float(a["speedup_lo"]), "static_hi": float(a["speedup_hi"]),
                    "vs_static": 1.0 if same else (vs.ratio if vs is not None else np.nan),
                    "vs_static_lo": np.nan if same or vs_lo is None else vs_lo,
                    "vs_static_hi": np.nan if same or vs is None or vs.hi is None else vs.hi,
                    "margin": margin, "noninferior": bool(noninferior), "beats_baseline": bool(beats),
                    "meets_envelope": bool(noninferior and beats), "failed": failed,
                    "policy_tok_s": float(p["spec_tok_s"]),
                    "short_by": max(0.0, envelope - float(p["speedup"])),
                    "drafts_per_output_token": drafts / tokens if tokens else None,
                    "running_mean": pd.to_numeric(at.get("num_requests_running_mean"), errors="coerce").mean()})
    return pd.DataFrame(out)


def _bound(v: float) -> str:
    """An interval's end as the report prints it (past 0.01 or 99 a wide interval of few starts)."""
    return "<0.01" if v < 0.01 else ">99" if v > 99 else f"{v:.2f}"


def _f2(v: Any) -> str:
    return "-" if v is None or pd.isna(v) else f"{float(v):.2f}"


def derive_policies(df: pd.DataFrame, workload: str, **kw: Any) -> list[tuple[str, dict[str, Any], pd.DataFrame]]:
    """(label, config, chosen) per drafter method of a workload: one schedule per method, labelled
    ``"<workload> (<method>)"`` where the run has several, else ``"<workload>"``."""
    methods = drafter_methods(usable_rows(df, workload))
    out = []
    for method in methods or [None]:
        config, chosen, _ = derive_policy(df, workload=workload, method=method, **kw)
        out.append((f"{workload} ({method})" if len(methods) > 1 else workload, config, chosen))
    return out


def usable_rows(df: pd.DataFrame, workload: str) -> pd.DataFrame:
    from specnb.analysis.pairing import usable

    ok = usable(df)
    return ok[ok["workload"] == workload] if len(ok) else ok
