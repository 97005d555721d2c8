"""Sequential rounds: measure a level until its decision cannot change, then stop measuring it.

A sweep with ``sequential`` measures its ``repeats`` first (round 0: every level, every arm, fresh
server starts, A B | B A order). Then, before each later round, it reads the run's ledgers and reads
every level exactly as the report does (:func:`specnb.analysis.speedups.paired_speedups` with the
run's design, :mod:`specnb.analysis.design`): looks at the planned, balanced counts of repeats, each
at the calibrated per-look level, the interval over server starts and the panel's prompts. A level
is *decided* once every drafter's look clears 1.0 (pays or loses) and *closed* at its last look
either way. The next round is one more repeat (both arms started afresh) for the levels still open;
a level between two looks (an odd count) is open until its balancing repeat is measured.

**Where the noise is.** Each open level's interval has a start part and a prompt part (the panel's
prompts are the same in every repeat, so more repeats never shrink theirs). The round's record
says, per level, which part is larger and what would narrow it; with ``sequential.grow_panel`` a
round in which the prompts dominate an open level of a workload sends that workload a panel twice as
large (the same categories in turn, the old panel inside the new: paired in both arms, as every
panel is), up to ``sequential.max_panel``, before it spends another start on the same panel.

With a time budget (``budget_s``), a round is measured only as far as it fits: its cost is
estimated from this run's ledgers (the mean server start of the run, one per arm or one per repeat
when the arms start together, plus the mean duration of each open level's points), counting the
repeats a level needs to reach its next look; when the whole round does not fit, the open levels
closest to a decision go first; a round with no level that fits is not started. Each round's looks
and choices are written once to ``sequential/round-NN.json`` (a resumed run replays them) and
``specnb report`` says which levels stopped early and why (:func:`specnb.ledger.runs.sequential_lines`).
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pandas as pd

from specnb.analysis.design import Design, sequential_design
from specnb.analysis.pairing import AnalysisError
from specnb.analysis.speedups import level_of, paired_speedups
from specnb.ledger import REFUSED_ERROR, load_ledgers, utcnow, write_once
from specnb.ledger.runs import sequential_record
from specnb.sweep.spec import SweepError, SweepSpec

__all__ = ["rule_of", "level_looks", "next_sequential_round", "repeat_cost", "round_panels", "grown_panels", "noise_parts", "spend_text"]


def rule_of(spec: SweepSpec) -> Design:
    """The sweep's design: looks at the balanced counts from ``repeats`` to ``sequential.max_repeats``."""
    assert spec.sequential is not None
    return sequential_design(spec.sequential.alpha, spec.repeats, spec.sequential.max_repeats)


def _rule_doc(spec: SweepSpec, design: Design) -> dict[str, Any]:
    assert spec.sequential is not None
    return {"alpha": design.alpha, "first": spec.repeats, "last": spec.sequential.max_repeats,
            "looks": list(design.looks or ()), "per_look_alpha": round(design.look_alpha, 6),
            "interval": "t interval over server starts and the panel's prompts (docs/statistics.md), at looks where "
                        "the arm orders are balanced, each at a level calibrated to spend alpha over the looks"}


def level_looks(df: pd.DataFrame, design: Design | None = None) -> list[dict[str, Any]]:
    """Per (workload, level, drafter arm): the look its row reads now (as the report reads it, with
    the sweep's ``design``): repeats, ratios, the look's interval and state, and the interval's two
    parts."""
    sp = paired_speedups(df, design=design) if len(df) else None
    if sp is None or sp.table.empty:
        return []
    out = []
    for r in sp.table.itertuples(index=False):
        data = sp.data({k: getattr(r, k) for k in sp.group_keys}, float(r.level))
        ratios = [] if data is None else [float(x) for x in data.ratios["speedup"]]
        decision = r.decision if isinstance(r.decision, str) else None
        if decision is not None:
            state = f"decided: {decision}"
        elif r.open:
            state = "open"
        else:
            state = "open at the last look"
        sv, pv = r.start_var, r.prompt_var
        out.append({"workload": str(r.workload), "level": float(r.level), "arm": str(r.arm),
                    "repeats": [] if data is None else [int(x) for x in data.repeats],
                    "ratios": [round(x, 4) for x in ratios],
                    "look": {"n": int(r.n_repeats), "ratio": round(float(r.speedup), 4),
                             "lo": None if pd.isna(r.speedup_lo) else round(float(r.speedup_lo), 4),
                             "hi": None if pd.isna(r.speedup_hi) else round(float(r.speedup_hi), 4),
                             "confidence": round(float(r.confidence), 6), "decision": decision,
                             "scope": r.scope, "order": r.order, "text": r.look},
                    "state": state,
                    "noise": noise_parts(sv, pv, int(r.n_repeats))})
    return out


def noise_parts(start_var: Any, prompt_var: Any, n: int, more: int = 2) -> dict[str, Any] | None:
    """Which part of a look's interval is larger, and what ``more`` repeats would leave of it
    (log-scale standard errors): on the same panel (the starts' part shrinks as n / (n + more), the
    prompts' stays), or with a panel twice as large in those repeats (the old prompts keep their
    weight in the old starts: the prompts' part shrinks by ((n + more/2)^2 + (more/2)^2) / (n + more)^2,
    0.72 for 4 + 2)."""
    if start_var is None or pd.isna(start_var):
        return None
    sv = float(start_var)
    pv = None if prompt_var is None or pd.isna(prompt_var) else float(prompt_var)
    out: dict[str, Any] = {"start_var": round(sv, 8), "prompt_var": None if pv is None else round(pv, 8)}
    if pv is None:
        out["dominant"] = "starts"
        return out
    out["dominant"] = "prompts" if pv > sv else "starts"
    starts = sv * n / (n + more)
    grown = ((n + more / 2) ** 2 + (more / 2) ** 2) / (n + more) ** 2
    out[f"se_after_{more}_more_repeats"] = round(math.sqrt(starts + pv), 6)
    out[f"se_after_{more}_more_repeats_twice_the_panel"] = round(math.sqrt(starts + pv * grown), 6)
    return out


def _closeness(lk: dict[str, Any]) -> float:
    """How near a look is to a decision: its log ratio's distance from 0 over its half-width."""
    look = lk.get("look") or {}
    lo, hi, ratio = look.get("lo"), look.get("hi"), look.get("ratio")
    if lo is None or hi is None or not ratio:
        return 0.0
    half = (math.log(hi) - math.log(lo)) / 2
    return abs(math.log(ratio)) / half if half > 0 else math.inf


def repeat_cost(spec: SweepSpec, df: pd.DataFrame, levels: list[tuple[str, float]],
                scale: dict[str, float] | None = None) -> float | None:
    """Seconds one more repeat of these (workload, level)s takes, from this run's ledgers: server
    starts (one per arm; one for the repeat when its arms start together) at the run's mean start,
    plus each point's mean duration so far (the run's mean point for a level without one), times
    ``scale[workload]`` where its panel grows (a point's work is whole passes over its panel). None
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
        factor = (scale or {}).get(wl, 1.0)
        if len(pts):
            total += factor * float(pd.to_numeric(pts.groupby("arm")["duration_s"].mean(), errors="coerce").sum())
        else:  # a level without a measured point yet: the run's mean point, once per arm
            total += factor * float(pd.to_numeric(ok["duration_s"], errors="coerce").mean()) * arms
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


def _replayed(spec: SweepSpec, rule: dict[str, Any], doc: dict[str, Any], round_: int) -> None:
    """A record made under another rule or first look cannot be followed: its error rate and its
    repeat numbers are the other run's."""
    was = doc.get("rule") or {}
    keys = ("alpha", "first", "last", "looks")
    if any(was.get(k) != rule[k] for k in keys) or doc.get("repeat") != spec.repeats + round_ - 1:
        raise SweepError(f"this run's sequential round {round_} was decided under another rule (looks "
                         f"{was.get('looks') or str(was.get('first')) + '..' + str(was.get('last'))}, alpha "
                         f"{was.get('alpha')}); it cannot be resumed with looks {rule['looks']}, alpha {rule['alpha']}: "
                         "measure into a new folder")


def round_panels(out_dir: Path, round_: int) -> dict[str, int]:
    """The panel size each workload's points send in a sequential round (the record's ``panel``;
    empty: the sweep's own ``panel_size``). A later round keeps the largest panel an earlier one
    chose."""
    out: dict[str, int] = {}
    for k in range(1, round_ + 1):
        path = sequential_record(out_dir, k)
        if not path.exists():
            continue
        for wl, size in (json.loads(path.read_text()).get("panel") or {}).items():
            out[wl] = max(int(size), out.get(wl, 0))
    return out


def grown_panels(spec: SweepSpec, df: pd.DataFrame, open_looks: list[dict[str, Any]], before: dict[str, int],
                 workloads: dict[str, Any] | None = None) -> tuple[dict[str, int], list[str]]:
    """The workloads whose next panel doubles: an open level where the prompts dominate, while the
    panel is below ``max_panel`` and (given ``workloads``) every category of the workload has the
    prompts to double its share (the estimand is prompts like the panel's: the mix must not move)."""
    seq = spec.sequential
    assert seq is not None
    if not seq.grow_panel:
        return {}, []
    out, why = {}, []
    for wl in sorted({lk["workload"] for lk in open_looks if (lk.get("noise") or {}).get("dominant") == "prompts"}):
        now = _panel_now(spec, df, before, wl)
        if not now:
            continue
        size = min(2 * now, seq.max_panel)
        if size <= now:
            continue
        workload = (workloads or {}).get(wl)
        if workload is not None and not _in_proportion(workload, now, size):
            why.append(f"{wl}: the panel's prompts dominate, but a panel of {size} would change the categories' "
                       f"mix (a category has too few prompts): another start on the same {now}")
            continue
        out[wl] = size
        why.append(f"{wl}: the panel's prompts dominate an open level's interval: its next repeat sends a panel of "
                   f"{size} (was {now}) before another start on the same prompts")
    return out, why


def _in_proportion(workload: Any, now: int, size: int) -> bool:
    """Whether ``workload.panel(size)`` holds every category in the proportion ``panel(now)`` does
    (and the old panel inside it)."""
    from collections import Counter

    try:
        old, new = workload.panel(now), workload.panel(size)
    except Exception:  # noqa: BLE001 - a workload that cannot say: no growth
        return False
    c_old = Counter(p.category for p in old)
    c_new = Counter(p.category for p in new)
    ratio = size / now
    return ({p.id for p in old} <= {p.id for p in new}
            and set(c_old) == set(c_new) and all(abs(c_new[k] - ratio * c_old[k]) < 1e-9 for k in c_old))


def _panel_now(spec: SweepSpec, df: pd.DataFrame, before: dict[str, int], wl: str) -> int:
    """The panel a workload's points send now: the largest an earlier round chose or measured."""
    rows = df[df["workload"] == wl] if len(df) else df
    have = pd.to_numeric(rows.get("panel_size"), errors="coerce").max() if len(rows) else None
    return int(max(before.get(wl) or spec.panel_size or 0, 0 if have is None or pd.isna(have) else have))


def next_sequential_round(spec: SweepSpec, out_dir: Path, round_: int, *, elapsed_s: float,
               echo: Callable[[str], None] = print,
               workload_sets: dict[str, Any] | None = None) -> dict[str, list[tuple[float, str]]]:
    """The levels to measure in round ``round_`` (one more repeat each) per workload; empty: every
    level is decided, at its last look, or out of budget. Written once to
    ``sequential/round-NN.json``; a resumed run replays the record (with the same rule only).

    A level is open while any drafter arm the build can serve is open at it (an arm without a
    paired repeat there is open); an arm's decision is its first decided look (the looks' intervals
    hold together, so a later look that widens does not reopen it). ``workload_sets``: the sweep's
    workloads by name (a grown panel must keep each one's categories in proportion)."""
    assert spec.sequential is not None
    design = rule_of(spec)
    rule = _rule_doc(spec, design)
    path = sequential_record(out_dir, round_)
    if path.exists():
        doc = json.loads(path.read_text())
        _replayed(spec, rule, doc, round_)
        return {wl: [(float(c), why) for c, why in lv] for wl, lv in doc["levels"].items()}
    repeat = spec.repeats + round_ - 1  # the repeat this round would add (0-based)
    last = design.looks[-1] if design.looks else spec.sequential.max_repeats
    final = repeat >= last  # the last look is done: no round follows
    doc: dict[str, Any] = {
        "kind": "sequential", "round": round_, "repeat": repeat, "decided_at": utcnow(), "load": spec.load.mode.value,
        "elapsed_s": round(elapsed_s, 1), "budget_s": spec.budget_s, "rule": rule,
        "looks": [], "levels": {}, "stopped": None}
    df = load_ledgers(out_dir)
    refused = _refused_arms(df)
    drafters = [a.name for a in spec.arms if a.speculative and a.name not in refused]
    try:
        looks = level_looks(df, design)
    except AnalysisError as exc:  # no baseline measured to pair against (its points failed)
        looks, doc["stopped"] = [], f"nothing to pair: {exc}"
    if not drafters:
        doc["stopped"] = "no drafter arm this build can serve here: nothing to decide"
    workloads = sorted({str(w) for w in df["workload"]}) if len(df) and "workload" in df.columns else []
    if not workloads and doc["stopped"] is None:
        doc["stopped"] = "nothing measured in the first repeats"
    by_arm = {(r["workload"], r["level"], r["arm"]): r for r in looks}
    keys = sorted((wl, float(c)) for wl in workloads for c in spec.levels())
    open_levels, open_looks = _open_levels(keys, drafters, by_arm, design, final=final, repeat=repeat, last=last,
                                           doc=doc)
    if doc["stopped"] is None and final:
        doc["stopped"] = f"the last look ({last} repeats) is done"
    elif doc["stopped"] is None and not open_levels:
        doc["stopped"] = "every level decided or at its last look"
    elif doc["stopped"] is None:
        before = round_panels(out_dir, round_ - 1)
        grow, why = grown_panels(spec, df, open_looks, before, workload_sets)
        scale = {wl: size / max(1, _panel_now(spec, df, before, wl)) for wl, size in grow.items()}
        chosen = sorted(open_levels, key=lambda t: (-t[0], t[1]))  # nearest to a decision first
        if spec.budget_s is not None:
            chosen = _within_budget(spec, df, chosen, scale, elapsed_s, doc)
        if doc["stopped"] is None:
            for _, (wl, level), why_open, _ in sorted(chosen, key=lambda t: t[1]):
                doc["levels"].setdefault(wl, []).append([level, why_open])
            grow = {wl: size for wl, size in grow.items() if wl in doc["levels"]}
            panels = {**before, **grow}
            if panels:
                doc["panel"] = panels
            doc["spend"] = [w for w in why if w.split(":", 1)[0] in grow] or [spend_text(open_looks)]
    write_once(path, (json.dumps(doc, indent=2) + "\n").encode())
    if doc["stopped"]:
        echo(f"sequential: stopped before round {round_}: {doc['stopped']}")
    else:
        n = sum(len(v) for v in doc["levels"].values())
        echo(f"sequential round {round_}: repeat {repeat + 1} for {n} open level(s)"
             + (f"; {len(doc['left_out'])} left out for the time budget" if doc.get("left_out") else "")
             + "; " + "; ".join(doc["spend"]))
    return {wl: [(float(c), why) for c, why in lv] for wl, lv in doc["levels"].items()}


_Open = tuple[float, tuple[str, float], str, int]  # closeness, (workload, level), why open, repeats to its next look


def _open_levels(keys: list[tuple[str, float]], drafters: list[str], by_arm: dict[tuple[str, float, str], Any],
                 design: Any, *, final: bool, repeat: int, last: int,
                 doc: dict[str, Any]) -> tuple[list[_Open], list[dict[str, Any]]]:
    """Each (workload, level)'s looks, one per drafter arm, into ``doc["looks"]``; the levels still
    open (with how close each is to a decision, why it is open and the repeats to its next look)
    and their open looks."""
    open_levels: list[_Open] = []
    open_looks: list[dict[str, Any]] = []
    for key in keys:
        rows = []
        for arm in drafters:
            r = by_arm.get((*key, arm))
            if r is None:
                r = {"workload": key[0], "level": key[1], "arm": arm, "repeats": [], "ratios": [], "look": None,
                     "state": "open: no paired repeat yet", "noise": None}
            elif final and r["state"] == "open":
                r = {**r, "state": "open at the last look"}
            rows.append(r)
            doc["looks"].append(r)
        still = [r for r in rows if r["state"].startswith("open") and r["state"] != "open at the last look"]
        if still:
            open_looks += still
            n_have = max((len(r["repeats"]) for r in rows), default=0)
            to_look = next((n for n in (design.looks or ()) if n > n_have), last) - n_have
            for r in still:  # what the repeats to its next look would leave of its interval
                r["noise"] = noise_parts((r.get("noise") or {}).get("start_var"), (r.get("noise") or {}).get(
                    "prompt_var"), max(1, len(r["repeats"])), max(1, to_look)) if r.get("noise") else None
            worst = min((_closeness(r) for r in rows), default=0.0)
            shown = "; ".join(f"{r['arm']} {_look_text(r)}" for r in rows)
            open_levels.append((worst, key, f"sequential: open ({shown}): repeat {repeat + 1} of at most {last}",
                                max(1, to_look)))
    return open_levels, open_looks


def _within_budget(spec: SweepSpec, df: Any, chosen: list[_Open], scale: dict[str, float], elapsed_s: float,
                   doc: dict[str, Any]) -> list[_Open]:
    """The open levels, nearest to a decision first, whose repeats to their next look all fit in
    what is left of the time budget; ``doc`` says the estimate, what was left out, or why none fits."""
    left = spec.budget_s - elapsed_s
    fit: list[_Open] = []
    for item in chosen:
        # the repeats this level needs to reach its next look, all of them within the budget
        need = max(n for *_, n in [*fit, item])
        cost = repeat_cost(spec, df, [k for _, k, _, _ in [*fit, item]], scale)
        if cost is None or cost * need <= left:  # None: nothing measured to cost it by
            fit.append(item)
    full = repeat_cost(spec, df, [k for _, k, _, _ in chosen], scale)
    doc["estimated_s"] = None if full is None else round(full, 1)
    if not fit:
        one = repeat_cost(spec, df, [chosen[0][1]], scale) or 0.0
        doc["stopped"] = (f"time budget: {elapsed_s:.0f} s spent of {spec.budget_s:.0f} s; the nearest open level "
                          f"needs {chosen[0][3]} more repeat(s) to its next look, about {one * chosen[0][3]:.0f} s")
    elif len(fit) < len(chosen):
        kept = {k for _, k, _, _ in fit}
        doc["left_out"] = [{"workload": k[0], "level": k[1]} for _, k, _, _ in chosen if k not in kept]
    return fit


def _look_text(r: dict[str, Any]) -> str:
    look = r.get("look")
    if not look:
        return f"{len(r.get('ratios') or [])} paired repeat(s)"
    iv = "no interval" if look.get("lo") is None else f"[{look['lo']:.2f}, {look['hi']:.2f}]"
    return f"{look['ratio']:.2f}x {iv} after {look['n']} repeats"


def spend_text(open_looks: list[dict[str, Any]]) -> str:
    """Why the round adds a start: the starts dominate, or the panel cannot grow."""
    doms = [(lk.get("noise") or {}).get("dominant") for lk in open_looks]
    if any(d == "prompts" for d in doms):
        return ("another start: the panel's prompts dominate an open level but the panel does not grow "
                "(sequential.grow_panel off, or at max_panel): more repeats narrow only the starts' part")
    if doms and all(d == "starts" for d in doms):
        return "another start: the starts dominate every open level's interval"
    return "another start: an open level has too few repeats to tell its interval's parts apart"
