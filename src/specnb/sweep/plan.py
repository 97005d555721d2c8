"""A sweep's plan: which points, in which blocks, in which round, and how much each sends.

Pure bookkeeping, no server and no load: the runner (:mod:`specnb.sweep.runner`) and the Ray
executor (:mod:`specnb.sweep.fleet`) both plan from here. A round is the levels asked for (round
0), then whatever levels the search adds (:mod:`specnb.sweep.rounds`); a round's blocks are one per
(repeat, arm) in ABBA order (:func:`round_blocks`); a point's requests follow from its
workload's panel and the work floor (:class:`Panels`); what is left of a round, in seconds, is
:class:`TimeLeft`. The files a point leaves are named here too (:func:`failed_path`,
:func:`superseded_path`, :func:`sizing_path`).
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from specnb.ledger.timing import format_duration
from specnb.prompts.conversation import panel_conversations
from specnb.prompts.workload import Prompt, Workload
from specnb.sweep.arm import Arm
from specnb.sweep.estimate import Costs, PlannedPoint, estimate_s, plan_line
from specnb.sweep.load import ConcurrencyLoad, LoadProfile
from specnb.sweep.spec import SweepSpec, blocks, level_tag, point_path

__all__ = ["Levels", "Panels", "Point", "TimeLeft", "failed_path", "round_blocks", "round_repeats", "sizing_path",
           "superseded_path"]

# per workload, the round's levels with why each is measured ("asked for", or the search's reason)
Levels = dict[str, list[tuple[float, str]]]


@dataclass(frozen=True)
class Point:
    """One point of the plan: an arm's workload at one level in one repeat (and search round)."""

    arm: Arm
    workload: Workload
    level: float  # requests in flight (closed loop) or requests per second (open loop)
    repeat: int
    position: int
    # the sweep's load (every point of a run has the same: left out of equality and hashing)
    load: LoadProfile = field(default_factory=ConcurrencyLoad, compare=False)
    round: int = 0
    reason: str = ""

    @property
    def point_id(self) -> str:
        return f"{self.arm.name}/{self.workload.name}/{level_tag(self.level, self.load)}-r{self.repeat}"

    def path(self, out_dir: Path) -> Path:
        """Where the point's ledger goes (its existence means the point is measured)."""
        return point_path(out_dir, self.arm.name, self.workload.name, self.level, self.repeat, self.load)


def round_repeats(spec: SweepSpec, round_: int) -> list[int]:
    """The repeats a round measures: every repeat of the sweep, except in a sequential sweep's later
    rounds, each of which is one more repeat (:mod:`specnb.sweep.sequential`)."""
    if spec.sequential is not None and round_ > 0:
        return [spec.repeats + round_ - 1]
    return list(range(spec.repeats))


def round_blocks(spec: SweepSpec, workloads: dict[str, Workload], levels: Levels, round_: int) -> list[list[Point]]:
    """The blocks of one round: per (repeat, arm) in ABBA order, its points at the given levels
    per workload."""
    return [[Point(arm, workloads[wl], level, r, pos, spec.load, round_, reason) for wl, lv in levels.items()
             for level, reason in lv] for r, pos, arm in blocks(spec, round_repeats(spec, round_))]


def sizing_path(out_dir: Path, workload: str) -> Path:
    """A workload's measured output tokens per request (write-once, the run's first sizing)."""
    return out_dir / "sizing" / f"{workload.replace('/', '_')}.json"


def superseded_path(p: Path) -> Path:
    """A measurement disturbed by another process: kept, never paired."""
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%S%fZ")
    return p.with_name(f"{p.stem}.superseded-{stamp}.json")


def failed_path(p: Path) -> Path:
    """A new name per failure, so failures accumulate and never overwrite each other."""
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%S%fZ")
    return p.with_name(f"{p.stem}.failed-{stamp}.json")


class Panels:
    """Each workload's panel (its prompts, or its conversations) and how many requests a point of
    it sends: whole passes over the panel, enough for the sweep's work floor."""

    def __init__(self, spec: SweepSpec, workloads: dict[str, Workload], out_dir: Path):
        self.spec, self.workloads, self.out_dir = spec, workloads, out_dir
        self.prompts = {name: wl.panel(spec.panel_size) for name, wl in workloads.items()}
        self._grown: dict[tuple[str, int], list[Prompt]] = {}
        # a conversation set's panel, as conversations (self.prompts holds their first turns)
        self.conversations = {name: panel_conversations(wl, self.prompts[name]) for name, wl in workloads.items()
                              if wl.conversations is not None}
        # output tokens per request, per workload, once measured (sizing/<workload>.json)
        self.tokens_per_request: dict[str, float] = {}
        for name in workloads:
            f = sizing_path(out_dir, name)
            if f.exists():
                self.tokens_per_request[name] = float(json.loads(f.read_text())["tokens_per_request"])

    def panel_of(self, pt: Point) -> list[Prompt]:
        """The prompts a point sends: its workload's panel, or the larger one a sequential round
        chose for it (:func:`specnb.sweep.sequential.round_panels`; never for a conversation set)."""
        name = pt.workload.name
        if self.spec.sequential is None or pt.round <= 0 or name in self.conversations:
            return self.prompts[name]
        from specnb.sweep.sequential import round_panels

        size = round_panels(self.out_dir, pt.round).get(name)
        if not size or size <= len(self.prompts[name]):
            return self.prompts[name]
        if (name, size) not in self._grown:
            self._grown[(name, size)] = self.workloads[name].panel(size)
        return self._grown[(name, size)]

    def in_flight(self, pt: Point) -> int:
        return pt.load.in_flight(pt.level)

    def pass_requests(self, pt: Point) -> int:
        """Requests in one pass over the workload's panel: its prompts, or its conversations' turns."""
        convs = self.conversations.get(pt.workload.name)
        return sum(len(c.turns) for c in convs) if convs is not None else len(self.panel_of(pt))

    def passes(self, pt: Point) -> int:
        """Whole passes over the workload's panel, enough for the work floor (spec.passes); a
        conversation point also sends at least two conversations per user, so that every user
        is busy (the level is what the ledger says) and the steady window has room."""
        tpr = self.tokens_per_request.get(pt.workload.name, float(self.spec.sampling.max_tokens))
        n = self.spec.passes(self.pass_requests(pt), self.in_flight(pt), tpr)
        convs = self.conversations.get(pt.workload.name)
        if convs:
            n = max(n, math.ceil(2 * int(pt.level) / len(convs)))
        return n

    def num_requests(self, pt: Point) -> int:
        return self.pass_requests(pt) * self.passes(pt)

    def items(self, pt: Point) -> tuple[list[Any], int]:
        """What a point sends and how many of them: its panel's prompts and its requests, or its
        conversations and how many it replays."""
        convs = self.conversations.get(pt.workload.name)
        if convs is not None:
            return convs, self.num_conversations(pt)
        return self.panel_of(pt), self.num_requests(pt)

    def num_conversations(self, pt: Point) -> int | None:
        """Conversations a conversation point sends (None for any other point)."""
        convs = self.conversations.get(pt.workload.name)
        return None if convs is None else len(convs) * self.passes(pt)

    def planned(self, pts: list[Point]) -> list[PlannedPoint]:
        return [PlannedPoint(pt.arm.name, pt.workload.name, pt.level, self.num_requests(pt)) for pt in pts]


class TimeLeft:
    """What is left of the round being measured, one entry per block (empty: nothing to measure
    there), and its estimated seconds from this run's measured costs (an earlier run's before any)."""

    def __init__(self, spec: SweepSpec, panels: Panels, prior: Costs | None, spent_s: float = 0.0):
        """``spent_s``: what the sweep's earlier invocations took (a budget counts it)."""
        self.spec, self.panels, self.prior, self.spent_s = spec, panels, prior, spent_s
        self.costs = Costs()
        self.blocks: list[list[Point]] = []

    def start_round(self, blocks_left: list[list[Point]]) -> None:
        self.blocks = blocks_left

    def block_done(self) -> None:
        self.blocks.pop(0)

    def point_done(self, pt: Point) -> None:
        """Measured or failed: no longer left (a retry after a restart is not counted again)."""
        if self.blocks and pt in self.blocks[0]:
            self.blocks[0].remove(pt)

    def seconds(self, started: bool = False) -> float | None:
        """Seconds this round still needs: the blocks left (the first one's start already paid
        when ``started``), from this run's costs, an earlier run's where this one has none."""
        costs = self.costs.merged_over(self.prior)
        if not self.blocks:
            return 0.0
        first, rest = self.blocks[0], self.blocks[1:]
        if started:
            each = [costs.point(p) for p in self.panels.planned(first)]
            head = None if None in each else sum(each)
        else:
            head = estimate_s(costs, [self.panels.planned(first)])
        tail = estimate_s(costs, [self.panels.planned(b) for b in rest])
        sizing = (costs.sizing_s if self.spec.work_floor_tokens and not self.panels.tokens_per_request
                  and costs.sizing_s else 0.0)
        return None if head is None or tail is None else head + tail + sizing

    def text(self, started: bool = False) -> str:
        left = self.seconds(started)
        return "" if left is None else f" (~{format_duration(left)} left)"

    def plan_text(self) -> str:
        """The plan of what this run will do: points to measure, servers it will start (a block of a
        refused arm, of points already measured, or of an attached arm starts none), requests."""
        left = [b for b in self.blocks if b]
        planned = [self.panels.planned(b) for b in left]
        costs = self.costs.merged_over(self.prior)
        seconds = estimate_s(costs, planned,
                             sizing=bool(self.spec.work_floor_tokens and not self.panels.tokens_per_request))
        search: dict[str, Any] | None = self.spec.search.model_dump() if self.spec.search is not None else None
        if search is not None and search.get("budget_s") is None:
            search["budget_s"] = self.spec.budget_s
        starts = sum(1 for b in left if not b[0].arm.endpoint)
        return plan_line(sum(len(b) for b in planned), starts, sum(p.requests for b in planned for p in b), seconds,
                         costs.source, search, self.sequential_text(seconds))

    def sequential_text(self, seconds: float | None) -> str:
        """A sequential sweep's later rounds as the plan line says them: how many more repeats at
        most, the rule, and with a budget how many repeats of every level it leaves room for."""
        seq = self.spec.sequential
        if seq is None:
            return ""
        more = seq.max_repeats - self.spec.repeats
        looks = [n for n in range(max(2, self.spec.repeats), seq.max_repeats + 1) if n % 2 == 0]
        grow = (f"; a round whose open levels are dominated by the panel's prompts sends a panel twice as large (up "
                f"to {seq.max_panel})" if seq.grow_panel else "")
        text = (f"; then up to {more} more repeat(s), each for the levels still open (looks after "
                f"{', '.join(map(str, looks))} repeats, alpha {seq.alpha:g} over them){grow}")
        budget = self.spec.budget_s
        if budget is None:
            return text
        text += f"; budget {format_duration(budget)}"
        if self.spent_s > 0:  # a resumed sweep: its earlier invocations count
            text += f", {format_duration(self.spent_s)} of it spent by earlier invocations"
            budget = max(0.0, budget - self.spent_s)
        if seconds is None or seconds <= 0:
            return text + " (how many repeats it holds follows the first measured points)"
        if seconds > budget:
            return text + (f": the first {self.spec.repeats} repeats alone take about {format_duration(seconds)}, "
                           "past it (every level gets them; no later round starts)")
        room = min(more, int((budget - seconds) // (seconds / self.spec.repeats)))
        return text + f": room for about {room} more repeat(s) of every level (fewer levels: more repeats)"

