"""Paired sweeps: arms x workloads x concurrency levels x repeats, one ledger per point.

The layout follows vLLM's ``bench sweep``: one folder per sweep, one file per point, a
point whose ledger exists is skipped (so a sweep resumes where it died), and a failure is
written as its own record instead of being lost.

Pairing: within a repeat every arm sees the same prompts in the same order with the same
sampling, on the same engine build, so speedups are ratios within a pair. One server is
started per (repeat, arm) and reused across its workloads and concurrency levels; the arm
order reverses on every other repeat (A B, B A, ...) so slow drift (thermal, page cache,
a noisy neighbour) cancels instead of favouring one arm. On these CPU machines the same
server measures up to 1.5x apart between two starts, so repeats are restarts, not reruns.

Every point starts with an emptied prefix cache (``/reset_prefix_cache``) and ledgers say
whether that worked; a conversation point empties it once, before its first turn, never between
turns, so later turns find their history cached as a chat service's would. A speculative arm whose draft counter did not move is flagged
(``spec_no_drafts``): some stacks silently turn speculation off. A ceiling arm (synthetic
acceptance) is flagged ``synthetic_acceptance`` on every point, so its acceptance is never
averaged with a real drafter's; on the CPU build it needs specnb's vLLM plugin, and
:func:`prepare` refuses the sweep when vLLM would not load it, instead of letting the
engine die at its first speculative step.

Faults: a launched server that dies during a point is restarted (same arguments, a new port,
the same log) and the point measured once more in the same run; then the sweep moves on. A
point whose share of failed requests (errors, timeouts) passes ``max_error_share`` is
recorded as failed and flagged ``invalid``. Every failed point is measured again on resume;
:attr:`SweepOutcome.failed_points` names the points still without a measurement, and the
command line exits non-zero when there are any. A ledger that cannot be written (a full disk)
stops the sweep with one line naming the file; ledgers written before it are untouched.

A launched speculative arm gets ``--per-request-spec-decode-metrics summary`` when the
installed vLLM knows that flag (and the arm's arguments do not set it already), so every
response carries its own acceptance counts and the ledger can split acceptance by prompt
category (``spec_decode_by_category``). A baseline never gets it: vLLM refuses it without
a drafter. An engine without the flag is launched as before; the field stays empty.

Overhead: every second of an invocation is accounted to one phase (preflight, server start
and stop, warmup, sizing, measuring, search, waiting for a quiet host, other) and written once
to ``timings/<UTC time>.json`` (:mod:`specnb.ledger.timing`), with where each launched
server's start-up went (:mod:`specnb.engine.startup`); the summary ends with one line of it.
Servers are never reused across repeats, although the ABBA order puts the same arm on both
sides of every repeat boundary: a repeat is a fresh start because start-to-start variance is
most of the spread on these machines. The next server is never started while the current one
still measures: on two cores its start-up (three processes importing torch) would take the
cores the measured server needs, and on a GPU two servers must not share a device. With
``start_together`` the servers of a repeat are all launched before its first point and waited
for, then measured one at a time (the others idle, stopped after their blocks): a start is
mostly one core importing, so a repeat of N launched arms costs about one start, not N.
"""

from __future__ import annotations

import json
import re
import sys
import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import aiohttp

from specnb.analysis.schedule import SCHEDULE_KEY, SCHEDULE_KEY_NEW
from specnb.engine import metrics
from specnb.engine.kernels import Unservable
from specnb.engine.server import EngineDiedError, ServerError, VllmServer
from specnb.engine.vllm import engine_schedule_key
from specnb.ledger import REFUSED_ERROR, Provenance, ServerRecord, provenance, read_ledger, utcnow, write_once
from specnb.ledger.frame import machine_label
from specnb.ledger.store import LedgerError, LedgerWriteError
from specnb.ledger.timing import TIMINGS_DIR, Phase, overhead_line, spent_s, total_phases
from specnb.prompts.workload import Workload
from specnb.sweep.arm import Arm
from specnb.sweep.clock import PhaseClock
from specnb.sweep.estimate import prior_costs
from specnb.sweep.ledgers import CLIENT_BUSY, sweep_record, timing_record
from specnb.sweep.measure import PointMeasurer, check_engine, warmup
from specnb.sweep.observers import Observers, ProgressObserver, SweepObserver
from specnb.sweep.plan import Levels, Panels, Point, TimeLeft, round_blocks
from specnb.sweep.preflight import PreflightResult, check_out_dir, prepare
from specnb.sweep.progress import progress_bar
from specnb.sweep.rounds import Rounds, run_rounds
from specnb.sweep.servers import (
    PER_REQUEST_SPEC_FLAG,
    PROMPT_DETAILS_FLAG,
    Servers,
    server_args_for,
    server_record,
)
from specnb.sweep.spec import SweepSpec

__all__ = ["BlockRunner", "Checked", "Prepared", "check", "SweepOutcome", "announce", "ended_by", "preflight", "refusal_lines",
           "server_args_for", "PER_REQUEST_SPEC_FLAG", "PROMPT_DETAILS_FLAG", "CLIENT_BUSY"]


@dataclass
class SweepOutcome:
    out_dir: Path
    written: list[Path] = field(default_factory=list)
    skipped: list[Path] = field(default_factory=list)
    failed: list[Path] = field(default_factory=list)
    superseded: list[Path] = field(default_factory=list)
    restarts: int = 0  # launched servers restarted after dying mid-run
    # "<point id> (<why>)" for every planned point still without a measurement when the run ended
    failed_points: list[str] = field(default_factory=list)
    # "<arm>: <why>" for every arm this engine build cannot serve here: recorded, not retried
    refused: list[str] = field(default_factory=list)
    timings: list[Path] = field(default_factory=list)  # timings/<UTC time>.json written by this run
    phases_s: dict[str, float] = field(default_factory=dict)  # wall seconds per phase (ledger.timing.PHASES)
    # every arm was refused (this build cannot serve any of them here): the run measured nothing, and
    # said so in its refusal line(s) alone; the failure records are written for `specnb report`
    refused_all: bool = False

    @property
    def ok(self) -> bool:
        """True when every planned point has a measurement (what the exit status reports)."""
        return not self.failed_points

    def merge(self, later: SweepOutcome) -> SweepOutcome:
        """This outcome followed by a later run of the same sweep (a study's next repeat, which
        also retries earlier failures): the later one says which points are still missing."""
        self.written += later.written
        self.skipped += later.skipped
        self.failed += later.failed
        self.superseded += later.superseded
        self.restarts += later.restarts
        self.failed_points = list(later.failed_points)
        self.refused = list(later.refused)
        self.refused_all = later.refused_all and not self.written and not self.skipped
        self.timings += later.timings
        self.phases_s = total_phases([{"phases_s": self.phases_s}, {"phases_s": later.phases_s}])
        return self

    @property
    def overhead(self) -> str | None:
        """``wall 8m12s: servers 31%, ...``: where this run's time went (None before it ran)."""
        return overhead_line(self.phases_s) if any(self.phases_s.values()) else None

    def summary(self) -> str:
        busy = f", {len(self.superseded)} re-measured for a busy host" if self.superseded else ""
        restarts = f", {self.restarts} server restart(s)" if self.restarts else ""
        text = (f"{len(self.written)} points measured, {len(self.skipped)} already done, "
                f"{len(self.failed)} failure records{busy}{restarts} -> {self.out_dir}")
        if self.overhead:
            text += f"\n{self.overhead}"
        for why in dict.fromkeys(self.refused):  # once per reason
            text += f"\nrefused: {why}"
        if self.failed_points:
            shown = "; ".join(self.failed_points[:5]) + ("; ..." if len(self.failed_points) > 5 else "")
            text += f"\n{len(self.failed_points)} point(s) without a measurement: {shown}"
        return text


@dataclass(frozen=True)
class Prepared:
    """What a sweep's preflight found, before any run object exists: the model and workloads it
    resolved, the arms this build cannot serve here (``refused``) and the notes for others, the
    provenance every ledger carries, the identity hash ``sweep.json`` holds; and the invocation's
    clock and start, which timed the preflight."""

    clock: PhaseClock
    started_at: str
    model: str | None
    workloads: dict[str, Workload]
    notes: dict[str, str]
    refused: dict[str, str]
    fallback: dict[str, str]
    provenance: Provenance
    identity: str | None

    def refused_all(self, spec: SweepSpec) -> bool:
        """Every arm refused: nothing can be measured, and the refusal is all there is to say."""
        return bool(spec.arms) and all(a.name in self.refused for a in spec.arms)


@dataclass(frozen=True)
class Checked:
    """A sweep's checks, run ahead of its invocation (:func:`check`): what they found, when they
    began and how long they took (the invocation's preflight counts them)."""

    result: PreflightResult
    started_at: str
    seconds: float

    def again(self) -> Checked:
        """The same checks for a later invocation (they passed: nothing to count again)."""
        return Checked(self.result, utcnow(), 0.0)


def check(spec: SweepSpec) -> Checked:
    """Every check that can fail on bad input, nothing written (:func:`~specnb.sweep.preflight.prepare`)."""
    started_at, t0 = utcnow(), time.monotonic()
    result = prepare(spec)
    return Checked(result, started_at, time.monotonic() - t0)


def preflight(spec: SweepSpec, out_dir: Path, checked: Checked | None = None) -> Prepared:
    """Every check that can fail on bad input, before any server starts (``checked``: this sweep's
    checks, run already; the folder is checked then); writes (or checks, on a resume)
    ``sweep.json``. Timed as the invocation's preflight phase."""
    clock = PhaseClock()
    started_at = utcnow() if checked is None else checked.started_at
    if checked is not None:
        clock.credit(Phase.PREFLIGHT, checked.seconds)
    with clock.phase(Phase.PREFLIGHT):
        if checked is None:
            pre = prepare(spec, out_dir)
        else:
            pre = checked.result
            check_out_dir(Path(out_dir))
        identity = sweep_record(out_dir, spec, pre.workloads)
        prov = provenance.collect()
        if pre.kernels is not None:  # which engine extension, and what it lacked, on this CPU
            prov["hardware"] = {**prov["hardware"], "engine_kernels": pre.kernels}
    return Prepared(clock=clock, started_at=started_at, model=pre.model, workloads=pre.workloads, notes=pre.notes,
                    refused=pre.refused, fallback=pre.fallback, provenance=Provenance(**prov), identity=identity)


def announce(spec: SweepSpec, out_dir: Path, pre: Prepared, echo: Callable[[str], None]) -> None:
    """The lines a sweep says once its preflight passed: where it goes, which arms are refused and
    why, and notes that hold for some arms."""
    if not pre.refused:
        echo(f"sweep {spec.name!r} -> {out_dir} (every check passed; the same folder resumes it)")
    elif not pre.refused_all(spec):
        echo(f"sweep {spec.name!r} -> {out_dir} ({len(pre.refused)} of {len(spec.arms)} arms refused below, "
             "the others checked; the same folder resumes it)")
    for line in refusal_lines(pre.refused.values()):  # recorded as failures point by point; nothing starts for them
        echo(line)
    scheduled = [a.name for a in spec.arms if a.schedule and a.endpoint is None and a.name not in pre.refused]
    if scheduled:
        echo(f"note: {'arm' if len(scheduled) == 1 else 'arms'} {', '.join(map(repr, scheduled))}: the installed "
             f"vLLM takes the K schedule as {engine_schedule_key()!r} (vLLM is renaming "
             f"{SCHEDULE_KEY!r} to {SCHEDULE_KEY_NEW!r}: either is read, this one is sent)")
    for why, arms in _arms_by_note(pre.fallback).items():  # a note several arms share, once
        echo(f"note: {'arm' if len(arms) == 1 else 'arms'} {', '.join(map(repr, arms))}: {why}")


_ARM_PREFIX = re.compile(r"^arm '([^']*)': ")


def refusal_lines(reasons: Iterable[str], where: str = "") -> list[str]:
    """``refused: [<where>: ]arm(s) '<a>', '<b>': <why>``, once per reason however many arms it
    holds for (preflight words each arm's refusal ``arm '<name>': <why>``)."""
    by: dict[str, list[str]] = {}
    for reason in reasons:
        m = _ARM_PREFIX.match(reason)
        by.setdefault(reason[m.end():] if m else reason, []).extend([m.group(1)] if m else [])
    lines = []
    for why, arms in by.items():
        who = f"{'arm' if len(arms) == 1 else 'arms'} {', '.join(repr(a) for a in arms)}: " if arms else ""
        lines.append(f"refused: {where + ': ' if where else ''}{who}{why}")
    return lines


def _arms_by_note(notes: dict[str, str]) -> dict[str, list[str]]:
    """Per note, the arms it holds for, in the arms' order."""
    out: dict[str, list[str]] = {}
    for arm, why in notes.items():
        out.setdefault(why, []).append(arm)
    return out


class BlockRunner:
    """Runs a sweep's blocks here, one after another (one server per repeat and arm, its points
    in turn), keeping the run's outcome and its timing record.

    It composes the plan's sizes (:class:`~specnb.sweep.plan.Panels`, what is left:
    :class:`~specnb.sweep.plan.TimeLeft`), the servers (:class:`~specnb.sweep.servers.Servers`), the
    point measurer (:class:`~specnb.sweep.measure.PointMeasurer`) and its observers (the progress
    bar, and any given: a Ray block's file shipper). Its preflight ran before it (:func:`preflight`).
    """

    def __init__(self, spec: SweepSpec, out_dir: Path, pre: Prepared, *, echo: Callable[[str], None],
                 progress: bool = False, observers: Iterable[SweepObserver] = (),
                 executor: dict[str, Any] | None = None):
        self.spec, self.out_dir, self.echo = spec, out_dir, echo
        self.clock, self.started_at = pre.clock, pre.started_at
        self.model, self.workloads, self.notes = pre.model, pre.workloads, pre.notes
        self.refused, self.provenance, self.identity = pre.refused, pre.provenance, pre.identity
        # every arm refused: nothing can be measured, and the refusal is all there is to say (no
        # plan, no progress); its failure records are still written, so `specnb report` lists them
        self.refused_all = pre.refused_all(spec)
        # where this invocation ran when an executor other than the local one placed it (specnb.sweep.fleet)
        self.executor = executor
        self.outcome = SweepOutcome(out_dir=out_dir)
        self.planned: list[Point] = []  # every point of every round, for the failed-points summary
        self.panels = Panels(spec, self.workloads, out_dir)
        bar = progress_bar(0, desc=spec.name, enabled=progress and not self.refused_all, dynamic_ncols=True,
                           file=sys.stderr)
        self.observer = Observers([ProgressObserver(bar), *observers])
        self.t_start = time.monotonic()
        try:  # what is left, estimated from this run's measured costs (an earlier run's before any)
            prior = prior_costs(out_dir, machine_label(self.provenance.hardware), spec.name)
        except Exception:  # noqa: BLE001 - an estimate is never worth a sweep
            prior = None
        self.time_left = TimeLeft(spec, self.panels, prior, spent_s(out_dir))
        self.servers = Servers(spec, self.model, out_dir, self.clock, echo)
        self.measurer = PointMeasurer(spec, out_dir, self.panels, self.clock, self.provenance, self.notes,
                                      self.outcome, self.observer, self.time_left, echo)

    @property
    def points_run(self) -> int:
        """Points measured (or attempted) by this invocation."""
        return self.measurer.points_run

    # -- the plan --------------------------------------------------------------------------
    def path(self, pt: Point) -> Path:
        return pt.path(self.out_dir)

    def plan(self, levels: Levels, round_: int) -> list[list[Point]]:
        """The blocks of one round (:func:`~specnb.sweep.plan.round_blocks`)."""
        return round_blocks(self.spec, self.workloads, levels, round_)

    # -- an invocation ---------------------------------------------------------------------
    def run(self) -> SweepOutcome:
        """Every round of the sweep (the levels asked for, then any the search adds)."""
        rounds = Rounds(self.spec, self.out_dir, self.workloads, self.clock, self.echo)
        with self.invocation():
            run_rounds([rounds], lambda _: self.run_round(self.plan(rounds.levels, rounds.round)),
                       lambda: time.monotonic() - self.t_start)
            self.finish()
        return self.outcome

    def run_blocks(self, plan: list[list[Point]]) -> None:
        """Only these blocks (a Ray block on its node: one repeat's points of one round)."""
        with self.invocation():
            self.run_round(plan)

    @contextmanager
    def invocation(self) -> Iterator[None]:
        """However the invocation ends, the observers are closed and its timing record written."""
        ended = "complete"
        try:
            yield
        except BaseException as exc:
            ended = ended_by(exc)
            raise
        finally:
            self.observer.close()
            self.write_timing(ended)

    def finish(self) -> None:
        """The outcome's last words: points still without a measurement, the arms refused."""
        self.outcome.failed_points = self.missing()
        self.outcome.refused = list(self.refused.values())
        self.outcome.refused_all = self.refused_all

    def write_timing(self, ended: str) -> None:
        """The invocation's wall time by phase, once, in ``timings/<UTC time>.json``; none when it
        started no server and measured nothing. A record that cannot be written is said, not
        raised: the measurements it describes are already safe."""
        phases = self.clock.totals()
        self.outcome.phases_s = phases
        if not self.servers.starts and not self.points_run:
            return
        doc = timing_record(self.spec.name, ended, self.started_at, phases, self.points_run, self.servers.starts,
                            executor=self.executor)
        stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%S%fZ")
        path = self.out_dir / TIMINGS_DIR / f"{stamp}.json"
        try:
            self.outcome.timings.append(write_once(path, (json.dumps(doc, indent=2) + "\n").encode()))
        except (OSError, LedgerWriteError) as exc:
            self.echo(f"the timing record {path} was not written: {exc}")

    # -- one round -------------------------------------------------------------------------
    def run_round(self, plan: list[list[Point]]) -> None:
        """The round's blocks in their order; a block whose points all exist is skipped."""
        panels = self.panels
        # the requests this run will send: a refused arm's points send none (their records tick nothing)
        self.observer.requests_planned(sum(panels.num_requests(pt) for block in plan for pt in block
                                           if pt.arm.name not in self.refused))
        # what is left, one entry per block (empty: nothing to measure there), popped as each ends
        self.time_left.start_round([[pt for pt in block if not self.path(pt).exists()] if block and block[0].arm.name
                                    not in self.refused else [] for block in plan])
        if plan and plan[0] and plan[0][0].round == 0 and not self.refused_all:
            self.echo(self.time_left.plan_text())
        together: set[int] = set()  # repeats whose servers were started together
        try:
            for i, block in enumerate(plan):
                pending = []
                for pt in block:
                    self.planned.append(pt)
                    if self.path(pt).exists():
                        self.outcome.skipped.append(self.path(pt))
                        self.observer.requests_done(panels.num_requests(pt))
                    else:
                        pending.append(pt)
                if pending and self.spec.start_together and pending[0].repeat not in together:
                    together.add(pending[0].repeat)
                    self.servers.start_together(self.firsts_to_start(plan[i:], pending[0].repeat),
                                                self.observer.status)
                if pending:
                    self.run_block(pending[0].arm, pending[0].repeat, pending)
                elif block and self.servers.has_started(block[0].arm, block[0].repeat):
                    # started with its repeat, but its points were written meanwhile (another process)
                    srv, _ = self.servers.take_started(block[0].arm, block[0].repeat)
                    self.servers.stop(srv)
                self.time_left.block_done()
        finally:  # servers started for blocks that never ran (Ctrl-C, a ledger that cannot be written)
            self.servers.stop_unused()

    def firsts_to_start(self, plan: list[list[Point]], repeat: int) -> list[Point]:
        """The first point left of each of the repeat's blocks that launches a server the build can
        serve (``start_together`` starts those side by side)."""
        left = [[pt for pt in b if not self.path(pt).exists()] for b in plan if b and b[0].repeat == repeat]
        return [b[0] for b in left if b and not b[0].arm.endpoint and b[0].arm.name not in self.refused]

    def missing(self) -> list[str]:
        """``"<point id> (<why>)"`` for every planned point without a measurement at its path."""
        why = {}
        for p in self.outcome.failed:  # the newest failure record of each point says why
            try:
                led = read_ledger(p)
            except LedgerError:
                continue
            why[led.point_id] = f"{led.failure.error_type}: {led.failure.message}" if led.failure else "failed"
        out = []
        seen: set[Path] = set()
        for pt in self.planned:
            if self.path(pt) in seen or pt.arm.name in self.refused:  # refused: recorded, nothing to retry
                continue
            seen.add(self.path(pt))
            if not self.path(pt).exists():
                reason = " ".join(why.get(pt.point_id, "not measured").split())
                out.append(f"{pt.point_id} ({reason if len(reason) <= 160 else reason[:157] + '...'})")
        return out

    # -- one block: one server -------------------------------------------------------------
    def run_block(self, arm: Arm, repeat: int, pending: list[Point]) -> None:
        server_rec: ServerRecord | None = None
        server: VllmServer | None = None
        started = utcnow()
        if arm.name in self.refused:  # this build cannot serve it here: a failure record each, once; no server
            for pt in pending:
                if not self.refusal_recorded(pt):
                    self.record_failure(pt, Unservable(self.refused[arm.name]), None, started, unticked=0, quiet=True)
            self.observer.files_written()
            return
        ready = self.servers.take_started(arm, repeat)
        if ready is None:
            self.observer.status(f"{self.spec.name} r{repeat} {arm.name}: starting server")
        costs, measurer = self.time_left.costs, self.measurer
        try:
            t_block = time.monotonic()
            with self.servers.open(arm, repeat, ready) as (ep, server):
                if ready is not None and server is not None and not server.alive():
                    # started with its repeat, it died while the blocks before it measured
                    ep, _ = self.restart(server, "while it waited for its block", arm, repeat)
                server_rec = server_record(ep, server)
                t_size = time.monotonic()
                with self.clock.phase(Phase.SIZING):
                    measurer.size_panels(ep, pending, server)
                self.observer.files_written()
                sized = time.monotonic() - t_size
                if sized > 1.0:
                    costs.sizing_s = sized
                since = len(server.start_log()) if server is not None else 0
                with self.clock.phase(Phase.WARMUP):
                    warm = warmup(ep, self.spec, self.first_workload)
                check_engine(warm, server, since)
                costs.add_block(time.monotonic() - t_block - sized)
                self.observer.status(f"{self.spec.name} r{repeat} {arm.name}: server up{self.time_left.text(True)}")
                for pt in pending:
                    if server is not None and not server.alive():  # died between points
                        ep, server_rec = self.restart(server, f"before {pt.point_id}", arm, repeat)
                    measurer.run_point(pt, ep, server, server_rec)
                    if server is not None and not self.path(pt).exists() and not server.alive(grace_s=10.0):
                        # died during the point: a fresh server gets one more try at it
                        ep, server_rec = self.restart(server, f"during {pt.point_id}; measuring it again", arm,
                                                      repeat)
                        measurer.run_point(pt, ep, server, server_rec)
        except (ServerError, OSError, aiohttp.ClientError, metrics.MetricsError) as exc:
            # The server did not start, or the block broke outside a point (warmup):
            # every point of the block not yet recorded gets a failure record.
            done = {(q.parent, q.name.split(".")[0]) for q in self.outcome.failed}
            tail = server.log_tail() if server is not None and isinstance(exc, EngineDiedError) else None
            for pt in pending:
                p = self.path(pt)
                if not p.exists() and (p.parent, p.stem) not in done:
                    self.record_failure(pt, exc, server_rec, started, tail)
        finally:
            self.observer.files_written()

    @property
    def first_workload(self) -> Workload:
        """The workload every warm-up sends from."""
        return next(iter(self.workloads.values()))

    def restart(self, server: VllmServer, when: str, arm: Arm, repeat: int) -> tuple[Any, ServerRecord]:
        """The block's server started again after it died, warmed up; counted in the outcome."""
        self.outcome.restarts += 1
        return self.servers.restart(server, when, arm, repeat, lambda ep: warmup(ep, self.spec, self.first_workload))

    def refusal_recorded(self, pt: Point) -> bool:
        """Whether a point already has its refusal on record (a resume or a study's next repeat
        must not write it again: the reason has not changed)."""
        p = self.path(pt)
        for f in p.parent.glob(f"{p.stem}.failed-*.json"):
            try:
                led = read_ledger(f)
            except LedgerError:
                continue
            if led.failure is not None and led.failure.error_type == REFUSED_ERROR:
                return True
        return False

    def record_failure(self, pt: Point, exc: BaseException, server_rec: ServerRecord | None, started: str,
                       log_tail: str | None = None, unticked: int | None = None, quiet: bool = False,
                       provenance: Provenance | None = None) -> None:
        """A failure record for the point (:meth:`specnb.sweep.measure.PointMeasurer.record_failure`)."""
        self.measurer.record_failure(pt, exc, server_rec, started, log_tail, unticked, quiet, provenance)


def ended_by(exc: BaseException) -> str:
    """How an invocation ended, for its timing record: ``interrupted`` (Ctrl-C) or ``stopped: <error>``."""
    return "interrupted" if isinstance(exc, (KeyboardInterrupt, SystemExit)) else f"stopped: {type(exc).__name__}"
