"""A live endpoint held against its measured answer (``specnb watch``, ``specnb alerts``).

A run says, for one drafter arm and workload: the speedup at each measured load with its
interval, where the curve crosses 1.0 with its interval, and the acceptance the drafter reached.
A served endpoint is seen in the scheduler's units, the requests it is running, not the client's
concurrency; so the run's levels are placed by the batch the server really ran at each of them
(the mean of ``vllm:num_requests_running`` over the point), and the threshold is carried into
those units by log-linear interpolation between the measured levels.

:func:`expectation` builds that answer from a run's frame; :func:`judge` reads one window of the
endpoint's metrics (:class:`WindowStats`, counters as deltas over the window) against it. Both are
pure: the scraping is :mod:`specnb.engine.watch`'s.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from enum import StrEnum
from typing import Any

import numpy as np
import pandas as pd

from specnb.analysis.pairing import AnalysisError, usable
from specnb.analysis.schedule import measured_batch
from specnb.analysis.speedups import paired_speedups
from specnb.analysis.thresholds import thresholds
from specnb.ledger import LoadMode, json_cell, load_requests

__all__ = ["ACCEPTANCE_Z", "Expectation", "Level", "Verdict", "WindowStats", "checkpoint_of", "expectation", "judge",
           "per_token_variance", "status_line", "MIN_DRAFT_TOKENS"]

# fewer draft tokens than this in a window: acceptance is not judged (too few to tell a drop from noise)
MIN_DRAFT_TOKENS = 200
# acceptance "fell" when a window is below the run's lowest point by more than this many standard
# errors (one-sided: a window of the run's own traffic crosses it about once in 700)
ACCEPTANCE_Z = 3.0
# a window whose mean running requests is below this is idle
IDLE_RUNNING = 0.05


class Verdict(StrEnum):
    PAYS = "pays"
    ABOVE_THRESHOLD = "above_threshold"
    BELOW_BREAK_EVEN = "below_break_even"
    ACCEPTANCE_FELL = "acceptance_fell"
    SPEC_OFF = "spec_off"
    IDLE = "idle"
    UNKNOWN = "cannot_tell"

    @property
    def exit_status(self) -> int:
        """``--once``: 0 pays or idle, 1 a warning, 2 cannot tell."""
        return {Verdict.PAYS: 0, Verdict.IDLE: 0, Verdict.UNKNOWN: 2}.get(self, 1)


@dataclass(frozen=True)
class Level:
    """One measured level of the run: the client's concurrency, the batch the server ran there
    (mean running requests; None where the run did not sample it) and the paired speedup."""

    concurrency: int
    running: float | None
    speedup: float
    lo: float
    hi: float


@dataclass(frozen=True)
class Expectation:
    """What a run measured for one drafter arm on one workload, in the scheduler's units."""

    run: str
    arm: str
    workload: str
    model: str | None
    engine_version: str | None
    speculative_config: dict[str, Any] | None
    levels: list[Level]
    kind: str  # the curve's threshold kind (specnb.analysis.thresholds): crosses, rises, above, below
    threshold_running: float | None  # where the speedup crosses 1.0, in running requests
    threshold_lo: float | None
    threshold_hi: float | None
    acceptance_rate: float | None  # mean over the arm's points
    acceptance_floor: float | None  # the lowest any of its points measured
    acceptance_length: float | None
    points: int = 0
    notes: list[str] = field(default_factory=list)
    # the acceptance's variance per draft token across the run's requests (prompts differ: a window
    # of D draft tokens has a standard error of sqrt(this / D)); None: the binomial one, which
    # treats every draft token as independent and so is the narrowest a window can be
    acceptance_var_per_token: float | None = None
    checkpoint: str | None = None  # the served checkpoint's folder name (the server's argv), where known

    def acceptance_margin(self, draft_tokens: float) -> float | None:
        """ACCEPTANCE_Z standard errors of a window's acceptance over ``draft_tokens`` draft
        tokens, with the larger of the run's measured per-token variance and the binomial one."""
        f = self.acceptance_floor
        if f is None or draft_tokens <= 0:
            return None
        return ACCEPTANCE_Z * math.sqrt(self.window_variance / draft_tokens)

    @property
    def window_variance(self) -> float:
        f = self.acceptance_floor or 0.0
        return max(self.acceptance_var_per_token or 0.0, f * (1 - f))

    @property
    def k(self) -> int | None:
        cfg = self.speculative_config or {}
        k = cfg.get("num_speculative_tokens")
        return int(k) if k is not None else None

    def nearest(self, running: float) -> Level | None:
        """The measured level whose batch is nearest ``running`` (on a log scale)."""
        placed = [lv for lv in self.levels if lv.running is not None and lv.running > 0]
        if not placed:
            return None
        x = math.log(max(running, 0.05))
        return min(placed, key=lambda lv: abs(math.log(lv.running) - x))

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _to_running(c: float | None, levels: list[Level]) -> float | None:
    """A client concurrency in the scheduler's units: log-linear between measured levels; beyond
    them, scaled by the nearest level's running-per-client ratio."""
    if c is None or not np.isfinite(c):
        return None
    placed = sorted((lv.concurrency, lv.running) for lv in levels if lv.running is not None and lv.running > 0)
    if not placed:
        return None
    cs = np.log([p[0] for p in placed])
    rs = np.log([p[1] for p in placed])
    x = math.log(c)
    if x <= cs[0]:
        return float(c * placed[0][1] / placed[0][0])
    if x >= cs[-1]:
        return float(c * placed[-1][1] / placed[-1][0])
    return float(np.exp(np.interp(x, cs, rs)))


def per_token_variance(requests: pd.DataFrame) -> float | None:
    """The acceptance's variance per draft token across requests (``spec_num_accepted_draft_tokens``
    and ``spec_num_draft_tokens`` per request, vLLM's --per-request-spec-decode-metrics): the
    ratio estimator's linearised variance, so a window of D draft tokens has variance this / D.
    None with fewer than ten drafting requests."""
    cols = ("spec_num_accepted_draft_tokens", "spec_num_draft_tokens")
    if requests is None or requests.empty or not set(cols) <= set(requests.columns):
        return None
    a = pd.to_numeric(requests[cols[0]], errors="coerce")
    d = pd.to_numeric(requests[cols[1]], errors="coerce")
    keep = a.notna() & d.notna() & (d > 0)
    a, d = a[keep].to_numpy(float), d[keep].to_numpy(float)
    if len(d) < 10:
        return None
    e = a - (a.sum() / d.sum()) * d
    return float(e.var(ddof=1) / d.mean())


def checkpoint_of(argv: list[str] | None) -> str | None:
    """The checkpoint folder's name a server was started with (``vllm serve PATH`` or ``--model PATH``)."""
    argv = list(argv or [])
    for i, tok in enumerate(argv):
        if tok == "serve" and i + 1 < len(argv) and not argv[i + 1].startswith("-"):
            return argv[i + 1].rstrip("/").rsplit("/", 1)[-1]
        if tok == "--model" and i + 1 < len(argv):
            return argv[i + 1].rstrip("/").rsplit("/", 1)[-1]
        if tok.startswith("--model="):
            return tok.split("=", 1)[1].rstrip("/").rsplit("/", 1)[-1]
    return None


def expectation(df: pd.DataFrame, run: str, *, arm: str | None = None, workload: str | None = None) -> Expectation:
    """The run's answer for one drafter arm and workload (named where the run has several): each
    level's speedup with the one interval, and the crossing bracketed between the levels the
    run's family-wise answer says pay and lose (:mod:`specnb.analysis.thresholds`)."""
    ok = usable(df)
    if ok.empty:
        raise AnalysisError(f"{run}: no measured point")
    if "load_mode" in ok.columns:
        ok = ok[ok["load_mode"] == LoadMode.CONCURRENCY.shape]
    spec = ok[ok["speculative"].astype(bool)]
    if spec.empty:
        raise AnalysisError(f"{run}: no drafter arm measured in closed loop: nothing to hold an endpoint against")
    arms = sorted(set(spec["arm"]))
    if arm is None and len(arms) > 1:
        raise AnalysisError(f"{run} has drafter arms {arms}: name the one the endpoint serves (--arm)")
    arm = arm or arms[0]
    if arm not in arms:
        raise AnalysisError(f"{run} has no drafter arm {arm!r} (it has {arms})")
    workloads = sorted(set(spec.loc[spec["arm"] == arm, "workload"]))
    if workload is None and len(workloads) > 1:
        raise AnalysisError(f"{run} measured {arm} on workloads {workloads}: name the one the traffic looks like "
                            "(--workload)")
    workload = workload or workloads[0]
    if workload not in workloads:
        raise AnalysisError(f"{run} has no workload {workload!r} for {arm} (it has {workloads})")
    rows = ok[(ok["workload"] == workload) & ((ok["arm"] == arm) | ~ok["speculative"].astype(bool))]
    sp = paired_speedups(rows)
    table = sp.table[sp.table["arm"] == arm].sort_values("concurrency")
    batch = measured_batch(rows)
    levels = [Level(int(r.concurrency), batch.get((arm, int(r.concurrency))), float(r.speedup),
                    float(r.speedup_lo), float(r.speedup_hi)) for r in table.itertuples(index=False)]
    th = next((t for t in thresholds(sp) if t.group.get("arm") == arm), None)
    kind = th.kind if th else "unknown"
    mine = spec[(spec["arm"] == arm) & (spec["workload"] == workload)]
    rate = pd.to_numeric(mine["acceptance_rate"], errors="coerce").dropna()
    length = pd.to_numeric(mine["mean_acceptance_length"], errors="coerce").dropna()
    models = sorted(set(mine["served_model"].dropna())) if "served_model" in mine.columns else []
    engines = sorted(set(mine["engine_version"].dropna()))
    notes = []
    if len(rate) < 3:
        notes.append(f"acceptance from {len(rate)} point(s) only: its floor is thin")
    frames = [load_requests(p, missing_ok=True) for p in mine["path"]] if "path" in mine.columns else []
    frames = [f for f in frames if f is not None and not f.empty]
    var = per_token_variance(pd.concat(frames, ignore_index=True)) if frames else None
    if var is None:
        notes.append("no per-request acceptance in the run: a window's spread is taken as binomial (too narrow "
                     "where prompts differ)")
    argv = json_cell(mine["server_argv"].dropna().iloc[0]) if "server_argv" in mine and mine["server_argv"].notna().any() else None
    return Expectation(
        run=run, arm=arm, workload=workload, model=models[0] if models else None,
        engine_version=engines[0] if engines else None,
        speculative_config=json_cell(mine["speculative_config"].iloc[0]) if "speculative_config" in mine else None,
        levels=levels, kind=kind,
        threshold_running=_to_running(th.concurrency, levels) if th else None,
        threshold_lo=_to_running(th.lo, levels) if th and th.lo is not None else None,
        threshold_hi=_to_running(th.hi, levels) if th and th.hi is not None else None,
        acceptance_rate=float(rate.mean()) if len(rate) else None,
        acceptance_floor=float(rate.min()) if len(rate) else None,
        acceptance_length=float(length.mean()) if len(length) else None,
        points=len(mine), notes=notes, acceptance_var_per_token=var, checkpoint=checkpoint_of(argv))


@dataclass(frozen=True)
class WindowStats:
    """One window of an endpoint's metrics: counter deltas over ``seconds`` and gauge means."""

    seconds: float
    drafts: float | None  # None: the endpoint exports no speculative metrics
    draft_tokens: float | None
    accepted_tokens: float | None
    output_tokens: float
    running_mean: float
    waiting_mean: float
    positions: int | None = None  # the endpoint's K (accepted-per-position series)

    @property
    def acceptance_rate(self) -> float | None:
        return self.accepted_tokens / self.draft_tokens if self.draft_tokens else None

    @property
    def acceptance_length(self) -> float | None:
        return 1.0 + self.accepted_tokens / self.drafts if self.drafts else None

    @property
    def draft_tok_s(self) -> float | None:
        return self.draft_tokens / self.seconds if self.draft_tokens is not None and self.seconds > 0 else None

    @property
    def output_tok_s(self) -> float:
        return self.output_tokens / self.seconds if self.seconds > 0 else 0.0

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "acceptance_rate": self.acceptance_rate, "acceptance_length": self.acceptance_length,
                "draft_tok_s": self.draft_tok_s, "output_tok_s": self.output_tok_s}


def judge(w: WindowStats, exp: Expectation | None, line: Any = None) -> tuple[Verdict, str]:
    """The window's verdict against the run, and why, in one phrase; with a break-even map's ``line``
    (:class:`specnb.analysis.breakeven.BreakEvenLine` for the served drafter's kind and K), a window
    whose acceptance length is below the break-even at its load first (the drafter costs there,
    whatever traffic it meets), and the map's reading added to every other verdict."""
    if w.drafts is None:
        return Verdict.UNKNOWN, "the endpoint exports no speculative-decoding metrics (is a drafter configured?)"
    if w.running_mean < IDLE_RUNNING and w.output_tokens == 0:
        return Verdict.IDLE, "no request ran in the window"
    if w.drafts == 0:
        return Verdict.SPEC_OFF, (f"no drafts while {w.running_mean:.1f} request(s) ran: speculation is off "
                                  "(a grammar, a fallback or a schedule at K = 0)")
    if exp is None:
        return Verdict.UNKNOWN, "no run to hold it against (--run)"
    mapped = ""
    if line is not None:
        from specnb.analysis.breakeven import below_break_even

        below, said = below_break_even(line, w.acceptance_length, w.drafts, w.running_mean)
        if below:
            return Verdict.BELOW_BREAK_EVEN, f"below break-even at this load: {said}"
        mapped = f"; map: {said}"
    verdict, why = _against_run(w, exp)
    return verdict, why + mapped


def _against_run(w: WindowStats, exp: Expectation) -> tuple[Verdict, str]:
    rate, floor = w.acceptance_rate, exp.acceptance_floor
    if rate is not None and floor is not None and (w.draft_tokens or 0) >= MIN_DRAFT_TOKENS:
        # below the lowest point the run measured by more than the window's own sampling error:
        # ACCEPTANCE_Z standard errors over its draft tokens, with the per-token variance the run's
        # requests showed (a short window holds few prompts, and prompts differ)
        margin = exp.acceptance_margin(w.draft_tokens)
        if rate < floor - margin:
            return Verdict.ACCEPTANCE_FELL, (
                f"acceptance {rate:.0%} is below the lowest the run measured for {exp.arm} ({floor:.0%}, less "
                f"{margin:.0%} for this window's {w.draft_tokens:.0f} draft tokens; mean {exp.acceptance_rate:.0%}): "
                "the traffic changed, re-measure")
    unjudged = ""
    if rate is not None and floor is not None and (w.draft_tokens or 0) < MIN_DRAFT_TOKENS:
        unjudged = (f"; acceptance {rate:.0%} not judged: {w.draft_tokens:.0f} draft tokens in the window "
                    f"({MIN_DRAFT_TOKENS} needed, a longer --window gives more)")
    near = exp.nearest(w.running_mean)
    at = (f"at {w.running_mean:.1f} running the run measured {near.speedup:.2f}x [{near.lo:.2f}, {near.hi:.2f}] "
          f"(c={near.concurrency}, batch {near.running:.1f})") if near else "the run has no batch per level"
    beyond = ""
    placed = [lv.running for lv in exp.levels if lv.running]
    if placed and w.running_mean > max(placed) * 1.25:
        beyond = f"; beyond the measured range (up to {max(placed):.1f} running)"
    th = exp.threshold_running
    if exp.kind == "below" or (exp.kind == "crosses" and th is not None and w.running_mean > th) or (
            exp.kind == "rises" and th is not None and w.running_mean < th):
        where = f"threshold {th:.1f} running" if th is not None else "it loses over the whole measured range"
        slower = f" ({near.speedup:.2f}x there)" if near else ""
        return Verdict.ABOVE_THRESHOLD, f"past the {where}: the drafter slows this server{slower}; {at}{beyond}{unjudged}"
    return Verdict.PAYS, f"{at}{beyond}{unjudged}"


def status_line(w: WindowStats, verdict: Verdict, why: str) -> str:
    rate = f"{w.acceptance_rate:.0%}" if w.acceptance_rate is not None else "-"
    length = f"{w.acceptance_length:.2f}" if w.acceptance_length is not None else "-"
    drafts = f"{w.draft_tok_s:.1f}" if w.draft_tok_s is not None else "-"
    return (f"{verdict.value:<16} acc {rate:>4} len {length:>5} draft {drafts:>6} tok/s  out {w.output_tok_s:7.1f} tok/s  "
            f"running {w.running_mean:5.1f} waiting {w.waiting_mean:4.1f}  {why}")
