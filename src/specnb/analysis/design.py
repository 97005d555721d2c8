"""How a run spends its error rate, and which of a level's repeats its one interval uses.

Three designs (docs/statistics.md):

- **fixed repeats**: one look at a level, at every repeat measured, at ``alpha`` (95 %);
- **sequential** (a sweep with ``sequential``): looks at the planned counts of repeats where the
  two arm orders are balanced (:func:`~specnb.analysis.estimator.balanced_looks`: repeats
  alternate A B, B A), each at the per-look level that spends exactly ``alpha`` over the looks
  (:func:`~specnb.analysis.estimator.per_look_alpha`). A level stops at the first look whose
  interval clears 1.0 (that look's interval is then the level's, in the table and in every
  decision), else runs to its last look. The chance that any look's interval misses the true
  ratio is ``alpha`` whatever the stopping, so the decision is wrong with probability at most
  ``alpha / 2`` in its direction;
- **adaptive search** (a sweep with ``search``): each round restarts every server and chooses its
  levels from the data before it, so each round's levels are a family of their own: the first
  round's at ``alpha / 2``, each later round's at ``alpha / (2 * max_rounds)`` (they add up to
  ``alpha`` however many rounds run).

What holds across the levels of one curve (a fixed sequence: pays from the lowest level up,
loses from the highest down) is :mod:`specnb.analysis.thresholds`'.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pandas as pd

from specnb.analysis.estimator import (
    DEFAULT_CONFIDENCE,
    Sample,
    Scope,
    balanced_looks,
    estimate,
    per_look_alpha,
)

__all__ = ["DEFAULT_ALPHA", "Design", "Look", "choose_look", "design_of", "sequential_design"]

DEFAULT_ALPHA = round(1.0 - DEFAULT_CONFIDENCE, 10)


@dataclass(frozen=True)
class Design:
    """``alpha`` per level (two-sided), the planned looks at a level (counts of repeats; None: one
    look at every repeat measured), and an adaptive search's rounds after the first (None: none)."""

    alpha: float = DEFAULT_ALPHA
    looks: tuple[int, ...] | None = None
    search_rounds: int | None = None

    def __post_init__(self) -> None:
        if not 0.0 < self.alpha < 1.0:
            raise ValueError(f"alpha must be in (0, 1), got {self.alpha}")
        if self.looks is not None and (not self.looks or min(self.looks) < 2):
            raise ValueError(f"looks need two repeats or more each, got {self.looks}")

    @property
    def look_alpha(self) -> float:
        """Each look's two-sided level (calibrated over the looks; ``alpha`` itself for one look)."""
        return per_look_alpha(tuple(self.looks), self.alpha) if self.looks else self.alpha

    def round_alpha(self, search_round: int) -> float:
        """A level's two-sided level in a run without looks: ``alpha``, or its search round's share."""
        if not self.search_rounds:
            return self.alpha
        return self.alpha / 2 if search_round <= 0 else self.alpha / (2 * self.search_rounds)

    def text(self) -> str:
        if self.looks:
            return (f"looks after {', '.join(map(str, self.looks))} repeats (arm orders balanced), each at "
                    f"{100 * (1 - self.look_alpha):.2f} %: {100 * (1 - self.alpha):g} % over all looks however "
                    "early a level stops")
        if self.search_rounds:
            return (f"adaptive search: the first round's levels at {100 * (1 - self.alpha / 2):g} %, each later "
                    f"round's at {100 * (1 - self.round_alpha(1)):.2f} % ({self.search_rounds} rounds at most)")
        return f"one look at every repeat, {100 * (1 - self.alpha):g} %"


def sequential_design(alpha: float, first: int, last: int) -> Design:
    """The design of a sequential sweep: looks at the balanced counts from ``first`` to ``last``
    repeats. Raises ValueError when there is none (one line, for the spec's validation)."""
    looks = balanced_looks(first, last)
    if not looks:
        raise ValueError(f"no look between {first} and {last} repeats: a look needs the two arm orders balanced "
                         "(an even count of repeats, A B then B A), so give max_repeats an even number >= repeats")
    return Design(alpha=alpha, looks=looks)


def design_of(rows: pd.DataFrame, confidence: float | None = None) -> Design:
    """A curve's design from its frame rows (the design columns :func:`specnb.ledger.load_ledgers`
    reads from the run's sweep.json); ``confidence`` sets a run without looks' level (a sequential
    run keeps the alpha its looks spent)."""
    first = rows.iloc[0] if len(rows) else pd.Series(dtype=object)
    alpha = _num(first.get("design_alpha"))
    lo, hi = _num(first.get("design_first")), _num(first.get("design_last"))
    if lo is not None and hi is not None:
        looks = balanced_looks(int(lo), int(hi))
        if looks:
            return Design(alpha=alpha or DEFAULT_ALPHA, looks=looks)
    rounds = _num(first.get("design_search_rounds"))
    alpha = (1.0 - confidence) if confidence is not None else DEFAULT_ALPHA
    return Design(alpha=alpha, search_rounds=int(rounds) if rounds else None)


def _num(v: Any) -> float | None:
    try:
        f = float(v)
    except (TypeError, ValueError):
        return None
    return f if math.isfinite(f) else None


@dataclass(frozen=True)
class Look:
    """Which repeats a level's row uses and at what level: ``n`` repeats, ``confidence``, how
    they were chosen (``text``), whether it is a planned look (a decision may be read from it) and
    whether the level is still open (a sequential level undecided before its last look)."""

    n: int
    confidence: float
    text: str
    planned: bool
    open: bool = False
    kind: str = "fixed"  # the design: "fixed", "sequential" or "search"


def choose_look(design: Design, n_measured: int, sample: Callable[[int], Sample | None], *,
                scope: Scope = Scope.PROMPTS, search_round: int = 0) -> Look:
    """The look a level's row reads: every repeat (a run without looks), else the first planned
    look whose interval clears 1.0, else the last look measured (``sample(n)``: the speedup's
    sample of the first ``n`` repeats)."""
    if not design.looks:
        if not design.search_rounds:
            return Look(n_measured, 1.0 - design.alpha, "every repeat", True)
        return Look(n_measured, 1.0 - design.round_alpha(search_round),
                    f"every repeat (search round {search_round})", True, kind="search")
    conf = 1.0 - design.look_alpha
    reached = [n for n in design.looks if n <= n_measured]
    if not reached:
        return Look(n_measured, conf, f"before its first look ({design.looks[0]} repeats)", False, open=True,
                    kind="sequential")
    for n in reached:
        s = sample(n)
        if s is not None and estimate(s, conf, scope).decision is not None:
            return Look(n, conf, f"decided at the look after {n} repeats", True, kind="sequential")
    last = reached[-1]
    if last == design.looks[-1]:
        return Look(last, conf, f"undecided at its last look ({last} repeats)", True, kind="sequential")
    return Look(last, conf, f"open after {last} repeats (looks up to {design.looks[-1]})", True, open=True,
                kind="sequential")
