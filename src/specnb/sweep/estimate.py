"""How long a sweep will take: before it starts, and what is left while it runs.

A sweep's time is its server blocks (one per repeat and arm: start, warm-up, then its points)
plus the panels' sizing at the first start. :class:`Costs` holds what each of those took where
it was measured: this run's own starts and points as they finish, and, before there are any,
an earlier run of the same study (its ledgers' point durations, its timing records' starts and
warm-ups), which may come from another machine: the estimate names its source. Nothing here is
a constant: with no earlier run and nothing measured yet there is no estimate (``None``).

A point not measured before takes the per-request time of the nearest level measured for the
same arm and workload (the nearest in log2, any arm when that arm has none), scaled by the
ratio of the levels (a closed loop of N requests in flight finishes N at a time): an
approximation that a level measured in an earlier repeat replaces.
"""

from __future__ import annotations

import json
import math
import statistics
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from specnb.ledger.names import LoadMode
from specnb.ledger.timing import TIMINGS_DIR, format_duration

__all__ = ["Costs", "PlannedPoint", "costs_from_run", "prior_costs", "estimate_s", "plan_line"]

Key = tuple[str, str, float]  # (arm, workload, level)


@dataclass(frozen=True)
class PlannedPoint:
    arm: str
    workload: str
    level: float
    requests: int


@dataclass
class Costs:
    """Measured seconds: per server block (start + warm-up), per request of a point, sizing."""

    source: str = "this run"
    block_s: list[float] = field(default_factory=list)
    per_request_s: dict[Key, list[float]] = field(default_factory=dict)
    sizing_s: float | None = None

    def add_block(self, seconds: float) -> None:
        self.block_s.append(float(seconds))

    def add_point(self, arm: str, workload: str, level: float, duration_s: float, requests: int) -> None:
        if duration_s > 0 and requests > 0:
            self.per_request_s.setdefault((arm, workload, float(level)), []).append(duration_s / requests)

    def merged_over(self, prior: Costs | None) -> Costs:
        """This run's costs where it has them, the prior's elsewhere, rescaled to this machine.

        An earlier run may come from a machine twice as fast (another CPU family, a busier hour):
        once this run has measured points, each prior per-request cost is multiplied by how much
        slower (or faster) this run measured the same kind of point, per arm where the arm has
        measured points, over all of them otherwise (:meth:`speed_ratio`). Server blocks are
        this run's once it has started one."""
        if prior is None:
            return self
        ratios = self.speed_ratio(prior)
        overall = ratios.get(None, 1.0)
        per = {k: [v * ratios.get(k[0], overall) for v in vals] for k, vals in prior.per_request_s.items()}
        per.update(self.per_request_s)
        return Costs(source=self.source if self.block_s or self.per_request_s else prior.source,
                     block_s=self.block_s or prior.block_s, per_request_s=per,
                     sizing_s=self.sizing_s if self.sizing_s is not None else prior.sizing_s)

    def speed_ratio(self, prior: Costs) -> dict[str | None, float]:
        """This run's measured per-request cost over ``prior``'s for the same point (same arm,
        workload and level: a level or arm the prior never measured would mix the level model's
        error or another arm's speed into the ratio, so it is left out): the median ratio per arm,
        and over every compared point under the key None. Empty when nothing is comparable."""
        by_arm: dict[str | None, list[float]] = {}
        for key, vals in self.per_request_s.items():
            before = prior.per_request_s.get(key)
            if before and vals and statistics.median(before) > 0:
                arm = key[0]
                r = statistics.median(vals) / statistics.median(before)
                by_arm.setdefault(arm, []).append(r)
                by_arm.setdefault(None, []).append(r)
        return {arm: statistics.median(rs) for arm, rs in by_arm.items()}

    def block(self) -> float | None:
        return statistics.median(self.block_s) if self.block_s else None

    def point(self, pt: PlannedPoint) -> float | None:
        exact = self.per_request_s.get((pt.arm, pt.workload, float(pt.level)))
        if exact:
            return statistics.median(exact) * pt.requests
        for same_arm in (True, False):
            near = [(k, v) for k, v in self.per_request_s.items()
                    if k[1] == pt.workload and (k[0] == pt.arm or not same_arm) and k[2] > 0]
            if near and pt.level > 0:
                (_, _, lv), vals = min(near, key=lambda kv: abs(math.log2(kv[0][2] / pt.level)))
                return statistics.median(vals) * lv / pt.level * pt.requests
        return None


def _records(folder: Path) -> Iterator[dict[str, Any]]:
    """Every JSON object under a run folder but its timing records and logs (unreadable files skipped)."""
    for p in folder.rglob("*.json"):
        if TIMINGS_DIR in p.parts or "logs" in p.parts:
            continue
        try:
            doc = json.loads(p.read_text())
        except (OSError, UnicodeDecodeError, ValueError):
            continue
        if isinstance(doc, dict):
            yield doc


def costs_from_run(folder: Path | str, source: str | None = None) -> Costs | None:
    """The costs a finished (or partial) run measured: every ok point's duration per request,
    and each timing record's server blocks (start + warm-up per launched start) and sizing."""
    folder = Path(folder)
    costs = Costs(source=source or str(folder))
    for doc in _records(folder):
        if doc.get("status") != "ok" or not isinstance(doc.get("results"), dict):
            continue
        try:
            res, load = doc["results"], doc.get("load") or {}
            level = load.get("rate_rps") if load.get("mode") == LoadMode.RATE.shape else (load.get("concurrency") or doc.get("concurrency"))
            arm = (doc.get("arm") or {}).get("name")
            wl = (doc.get("workload") or {}).get("name")
            level = float(level) if level else None
        except (AttributeError, TypeError, ValueError):  # not a point ledger after all
            continue
        if isinstance(arm, str) and isinstance(wl, str) and level and res.get("duration_s") and res.get("num_requests"):
            # a point's cost: its load and the parse after it, as this run counts its own
            costs.add_point(arm, wl, float(level), float(res["duration_s"]) + float(res.get("client_parse_s") or 0.0),
                            int(res["num_requests"]))
    for t in sorted(folder.rglob(f"{TIMINGS_DIR}/*.json")):
        try:
            doc = json.loads(t.read_text())
        except (OSError, UnicodeDecodeError, ValueError):
            continue
        if not isinstance(doc, dict) or doc.get("kind") != "timing":
            continue
        try:
            starts = [s for s in doc.get("server_starts") or [] if s.get("mode") == "launched" and s.get("ok", True)]
            phases = doc.get("phases_s") or {}
            if starts:
                warm = float(phases.get("warmup", 0.0)) / len(starts)
                for s in starts:
                    costs.add_block(float(s.get("server_start_s") or 0.0) + warm)
            if phases.get("sizing"):
                costs.sizing_s = float(phases["sizing"])
        except (AttributeError, TypeError, ValueError):
            continue
    if not costs.block_s and not costs.per_request_s:
        return None
    return costs


def prior_costs(run_dir: Path | str, machine: str | None = None, name: str | None = None) -> Costs | None:
    """What to estimate from before this invocation measures anything: the folder itself when it
    is resumed, else the same condition of the newest earlier run of the study
    (``<study>/<run>/<condition>``), else the newest other sweep beside it; only folders a sweep
    wrote (a ``sweep.json``) and, given ``name``, only another folder whose sweep has that name (the
    same study's condition, or the same sweep file: not a scratch folder's unrelated neighbours).
    Its machine is named in the source; None when there is none."""
    run_dir = Path(run_dir)
    cands: list[Path] = [run_dir]
    study = run_dir.parent.parent
    if study.is_dir():
        cands += [d / run_dir.name for d in sorted((d for d in study.iterdir() if d.is_dir()), reverse=True)
                  if d != run_dir.parent]
    if run_dir.parent.is_dir():
        cands += sorted((d for d in run_dir.parent.iterdir() if d.is_dir() and d != run_dir), reverse=True)
    for other in cands:
        if not (other / "sweep.json").is_file() or not any(other.glob(f"{TIMINGS_DIR}/*.json")):
            continue
        if name is not None and other != run_dir and _sweep_name(other) not in (None, name):
            continue
        costs = costs_from_run(other, source="")
        if costs is None or not costs.block_s:
            continue
        where = _machine_of(other)
        label = ("this folder's earlier invocations" if other == run_dir
                 else f"run {other.parent.name if other.name == run_dir.name else other.name}")
        costs.source = label + (f" on {where}" if where else "") + (
            " (another machine)" if machine and where and where != machine else "")
        return costs
    return None


def _sweep_name(run: Path) -> str | None:
    try:
        spec = json.loads((run / "sweep.json").read_text()).get("spec")
    except (OSError, ValueError, AttributeError):
        return None
    return spec.get("name") if isinstance(spec, dict) else None


def _machine_of(run: Path) -> str | None:
    from specnb.ledger.frame import machine_label

    for doc in _records(run):
        prov = doc.get("provenance")
        hw = prov.get("hardware") if isinstance(prov, dict) else None
        if isinstance(hw, dict):
            return machine_label(hw)
    return None


def estimate_s(costs: Costs | None, blocks: Iterable[Iterable[PlannedPoint]], *, sizing: bool = False) -> float | None:
    """Seconds for these blocks (each a server start, warm-up and its points) and, when
    ``sizing``, the panels' sizing; None when any part has no measured cost to go on."""
    if costs is None:
        return None
    total = 0.0
    block = costs.block()
    for pts in blocks:
        pts = list(pts)
        if not pts:
            continue
        if block is None:
            return None
        total += block
        for pt in pts:
            s = costs.point(pt)
            if s is None:
                return None
            total += s
    if sizing and costs.sizing_s:
        total += costs.sizing_s
    return total


def plan_line(n_points: int, n_blocks: int, n_requests: int, seconds: float | None, source: str | None,
              search: dict[str, Any] | None = None, then: str = "") -> str:
    """``plan: 20 points, 4 server starts, 560 requests; about 14m10s (from run ... on ...)``
    (``then``: what follows these points, e.g. a sequential sweep's later rounds)."""
    text = f"plan: {n_points} point(s), {n_blocks} server start(s), {n_requests:,} request(s)"
    if search:
        text += f", then search rounds while the budget lasts ({format_duration(search['budget_s'])})" \
            if search.get("budget_s") else ", then search rounds"
    if seconds is None:
        return text + then + "; no estimate yet (no earlier run of this study to go on: one follows the first start)"
    return text + f"; about {format_duration(seconds)} (costs from {source})" + then
