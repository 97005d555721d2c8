"""A sweep's stopwatch: every second of an invocation belongs to exactly one phase.

Phases nest (a wait for a quiet host inside a point, a server restart inside a block): the
inner one pauses the outer, so the phases never count a second twice and their sum is the
wall time, with ``other`` holding whatever no phase claimed. The phase names are
:data:`specnb.ledger.timing.PHASES`.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager

from specnb.ledger.timing import PHASES, Phase

__all__ = ["PhaseClock"]


class PhaseClock:
    def __init__(self, now=time.monotonic):
        self._now = now
        self.t0 = now()
        self.seconds: dict[str, float] = dict.fromkeys(PHASES, 0.0)
        self._stack: list[tuple[str, float]] = []

    @contextmanager
    def phase(self, name: Phase) -> Iterator[None]:
        if name not in self.seconds:
            raise ValueError(f"unknown phase {name!r}; known: {', '.join(PHASES)}")
        t = self._now()
        if self._stack:  # pause the enclosing phase
            outer, since = self._stack[-1]
            self.seconds[outer] += t - since
        self._stack.append((name, t))
        try:
            yield
        finally:
            _, since = self._stack.pop()
            t = self._now()
            self.seconds[name] += t - since
            if self._stack:  # resume it
                self._stack[-1] = (self._stack[-1][0], t)

    def move(self, seconds: float | None, source: Phase, dest: Phase) -> None:
        """Give ``seconds`` already counted (or being counted: an open phase) to ``source`` to
        ``dest`` instead: time measured inside a phase that belongs to another (a point's stream
        parse, timed by the load driver inside the point)."""
        if not seconds or seconds <= 0:
            return
        if source not in self.seconds or dest not in self.seconds:
            raise ValueError(f"unknown phase {source!r} or {dest!r}; known: {', '.join(PHASES)}")
        self.seconds[source] -= seconds
        self.seconds[dest] += seconds

    def credit(self, name: Phase, seconds: float) -> None:
        """``seconds`` spent in phase ``name`` before this clock began (checks run ahead of the
        invocation they belong to): counted in the phase and in the wall time."""
        if name not in self.seconds:
            raise ValueError(f"unknown phase {name!r}; known: {', '.join(PHASES)}")
        self.t0 -= seconds
        self.seconds[name] += seconds

    def wall(self) -> float:
        return self._now() - self.t0

    def totals(self) -> dict[str, float]:
        """Seconds per phase so far; ``other`` = wall minus every named phase (open phases
        counted up to now)."""
        out = dict(self.seconds)
        if self._stack:
            name, since = self._stack[-1]
            out[name] += self._now() - since
        named = sum(v for k, v in out.items() if k != "other")
        out["other"] = max(self.wall() - named, 0.0)
        return out
