"""The one round loop: the levels asked for, then any the search adds (or, in a sequential sweep,
one more repeat of the levels still open), for one sweep or several.

A round's points are measured by whoever runs the sweep: here, block by block
(:class:`specnb.sweep.runner.SweepRun`), or as Ray tasks (:mod:`specnb.sweep.fleet`, which runs the
rounds of a study's conditions side by side). Both go through :func:`run_rounds`, so a search
decides its next round the same way wherever the blocks ran.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from specnb.ledger.timing import Phase, spent_s
from specnb.prompts.workload import Workload
from specnb.sweep.clock import PhaseClock
from specnb.sweep.plan import Levels
from specnb.sweep.spec import SweepSpec

__all__ = ["Rounds", "run_rounds"]


class Rounds:
    """The levels of each round of one sweep: those asked for (round 0), then any its search adds,
    until the search has nothing more (or the sweep has no search)."""

    def __init__(self, spec: SweepSpec, out_dir: Path, workloads: dict[str, Workload], clock: PhaseClock,
                 echo: Callable[[str], None]):
        self.spec, self.out_dir, self.clock, self.echo = spec, out_dir, clock, echo
        self.workloads = workloads
        # the time earlier invocations of this sweep took: a budget counts the sweep's time, not
        # this invocation's (read before this one writes its own record)
        self.spent_before_s = spent_s(out_dir)
        self.round = 0
        self.levels: Levels = {wl: [(lv, "asked for") for lv in spec.levels()] for wl in workloads}

    def advance(self, elapsed_s: float) -> bool:
        """After a round: the search's next levels, or a sequential sweep's levels still open (read
        from the run's ledgers); False when there is no next round. ``elapsed_s``: this invocation's
        time so far (the sweep's earlier invocations are added to it)."""
        elapsed_s += self.spent_before_s
        if self.spec.sequential is not None:
            from specnb.sweep import sequential  # the looks read this run's ledgers

            self.round += 1
            with self.clock.phase(Phase.SEARCH):
                self.levels = sequential.next_sequential_round(self.spec, self.out_dir, self.round, elapsed_s=elapsed_s,
                                                    echo=self.echo, workload_sets=self.workloads)
            return bool(self.levels)
        if self.spec.search is None:
            self.levels = {}
            return False
        from specnb.sweep import search  # the search reads this run's ledgers

        self.round += 1
        with self.clock.phase(Phase.SEARCH):
            self.levels = search.next_search_round(self.spec, self.out_dir, self.round, elapsed_s=elapsed_s, echo=self.echo)
        return bool(self.levels)


def run_rounds(sweeps: list[Rounds], measure: Callable[[list[int]], None], elapsed_s: Callable[[], float]) -> None:
    """Round after round until no sweep has levels left: ``measure(active)`` measures the current
    round of the sweeps at those indexes (each one's :attr:`Rounds.levels` and :attr:`Rounds.round`),
    then each one's search says its next."""
    active = [i for i, r in enumerate(sweeps) if r.levels]
    while active:
        measure(active)
        active = [i for i in active if sweeps[i].advance(elapsed_s())]
