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

import asyncio
import concurrent.futures
import json
import math
import re
import sys
import time
from collections.abc import Callable, Iterable
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import aiohttp
import pandas as pd

from specnb import paths
from specnb.analysis.schedule import SCHEDULE_KEY, SCHEDULE_KEY_NEW, with_schedule_key
from specnb.engine import clients, kernels, loadgen, metrics
from specnb.engine.decisions import startup_decisions
from specnb.engine.hostload import HostLoad, wait_for_quiet
from specnb.engine.kernels import FALLBACK_LOG_LINE, Unservable
from specnb.engine.records import RequestRecord
from specnb.engine.server import Endpoint, EngineDiedError, ServerError, VllmServer, attach, engine_cause
from specnb.engine.startup import startup_breakdown
from specnb.engine.vllm import engine_schedule_key, engine_supports_flag
from specnb.ledger import (
    REFUSED_ERROR,
    Flag,
    LoadMode,
    Provenance,
    ServerRecord,
    Status,
    provenance,
    read_ledger,
    utcnow,
    write_ledger,
    write_once,
)
from specnb.ledger.frame import machine_label
from specnb.ledger.store import LedgerError, LedgerWriteError
from specnb.ledger.timing import MEASURING, TIMINGS_DIR, Phase, format_duration, overhead_line, total_phases
from specnb.prompts.conversation import panel_conversations
from specnb.prompts.workload import Prompt, Workload
from specnb.sweep.arm import Arm
from specnb.sweep.clock import PhaseClock
from specnb.sweep.estimate import Costs, PlannedPoint, estimate_s, plan_line, prior_costs
from specnb.sweep.ledgers import (
    CLIENT_BUSY,
    PointSize,
    RunFacts,
    failure_ledger,
    measured_ledger,
    point_fields,
    sweep_record,
    timing_record,
)
from specnb.sweep.preflight import prepare
from specnb.sweep.progress import progress_bar
from specnb.sweep.spec import SweepSpec, blocks, level_tag, point_path

__all__ = ["SweepOutcome", "run_sweep", "server_args_for", "PER_REQUEST_SPEC_FLAG", "PROMPT_DETAILS_FLAG",
           "CLIENT_BUSY"]



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


PER_REQUEST_SPEC_FLAG = "--per-request-spec-decode-metrics"
PROMPT_DETAILS_FLAG = "--enable-prompt-tokens-details"


def server_args_for(spec: SweepSpec, arm: Arm) -> list[str]:
    """The launched server's arguments: the sweep's, the arm's (``--dtype machine`` resolved for
    this CPU: :func:`specnb.engine.kernels.resolve_dtype`), the per-request acceptance flag for
    a speculative arm when the engine has it and nobody set it already, and, in a conversation
    sweep, ``--enable-prompt-tokens-details`` for every arm alike (each response then says how
    many of its prompt tokens came from the prefix cache: the ledger's ``by_turn``; it changes
    what the usage block reports, not what the engine computes)."""
    args = kernels.resolve_dtype([*spec.server_args, *arm.server_args])
    already = any(a == PER_REQUEST_SPEC_FLAG or a.startswith(PER_REQUEST_SPEC_FLAG + "=") for a in args)
    if (arm.speculative and spec.per_request_spec_metrics and not already
            and engine_supports_flag(PER_REQUEST_SPEC_FLAG)):
        args += [PER_REQUEST_SPEC_FLAG, "summary"]
    if (spec.load == LoadMode.CONVERSATION and PROMPT_DETAILS_FLAG not in args
            and engine_supports_flag(PROMPT_DETAILS_FLAG)):
        args.append(PROMPT_DETAILS_FLAG)
    return args


def _new_server(spec: SweepSpec, arm: Arm, model: str | None, log_path: Path) -> VllmServer:
    # the schedule under the name the installed engine takes (vLLM is renaming it: PR #48944)
    config = with_schedule_key(arm.speculative_config, engine_schedule_key()) if arm.schedule else arm.speculative_config
    return VllmServer(
        model, args=server_args_for(spec, arm), speculative_config=config,
        served_model_name=spec.served_model_name or Path(model).name, env={**spec.env, **arm.env},
        log_path=log_path, ready_timeout_s=spec.ready_timeout_s,
    )


@contextmanager
def _open_endpoint(spec: SweepSpec, arm: Arm, model: str | None, log_path: Path, clock: PhaseClock,
                   on_start: Callable[[VllmServer | None, Endpoint | None], None],
                   started: tuple[VllmServer, Endpoint | BaseException] | None = None):
    """The arm's endpoint, its start and stop timed as server phases; ``on_start`` hears of every
    start, a failed one with no endpoint (a failed start stops what it launched itself).
    ``started``: a server already started with the repeat's others (``start_together``) and its
    endpoint, or why it did not start (raised here, as its own start would have)."""
    if started is not None:
        srv, got = started
        try:
            if isinstance(got, BaseException):
                raise got
            yield got, srv
        finally:
            with clock.phase(Phase.SERVER_STOP):
                srv.stop()
        return
    if arm.endpoint:
        ep = None
        try:
            with clock.phase(Phase.SERVER_START):
                ep = attach(arm.endpoint, spec.served_model_name, api_key=arm.api_key())
        finally:
            on_start(None, ep)
        yield ep, None
        return
    srv = _new_server(spec, arm, model, log_path)
    try:
        ep = None
        try:
            with clock.phase(Phase.SERVER_START):
                ep = srv.start()
        finally:
            on_start(srv, ep)
        yield ep, srv
    finally:
        with clock.phase(Phase.SERVER_STOP):
            srv.stop()


async def _measure(
    ep: Endpoint, spec: SweepSpec, panel: list[Any], pt: _Point, n: int,
    on_done: Callable[[RequestRecord], None] | None,
) -> tuple[loadgen.PointLoad, metrics.Snapshot, metrics.Snapshot, metrics.GaugeSampler]:
    """One point's load and the ``/metrics`` around it; ``panel``: prompts, or conversations (``n``
    is then the conversations to send)."""
    async with _session(ep, spec) as session:
        before = await metrics.scrape(session, ep.base_url)
        sampler = metrics.GaugeSampler(session, ep.base_url, spec.metrics_interval_s)
        sampler.start()
        cpu0, wall0 = time.process_time(), time.perf_counter()
        try:
            sampling = spec.sampling.model_dump()
            if pt.load == LoadMode.CONCURRENCY:
                pl = await clients.run_load(
                    ep.base_url, ep.model, panel, int(pt.level), n, sampling, session=session, on_done=on_done,
                    return_token_ids=spec.return_token_ids, processes=spec.client_workers,
                )
            elif pt.load == LoadMode.CONVERSATION:
                pl = await loadgen.run_conversation_load(
                    ep.base_url, ep.model, panel, int(pt.level), n, sampling,
                    history=spec.history_for(pt.workload.conversation), think_time_s=spec.think_time_s,
                    session=session, on_done=on_done, return_token_ids=spec.return_token_ids,
                )
            else:
                pl = await loadgen.run_rate_load(
                    ep.base_url, ep.model, panel, pt.level, n, sampling, burstiness=spec.burstiness,
                    max_in_flight=spec.max_in_flight, arrival_seed=spec.arrival_seed, session=session,
                    on_done=on_done, return_token_ids=spec.return_token_ids,
                )
        finally:
            await sampler.stop()
        # The client must never be the bottleneck: record how busy its one core was (the load
        # generator measures it while the requests run, in each of its worker processes).
        if pl.client_cpu_util is None:
            pl.client_cpu_util = (time.process_time() - cpu0) / max(time.perf_counter() - wall0, 1e-9)
        after = await metrics.scrape(session, ep.base_url)
    return pl, before, after, sampler


def _session(ep: Endpoint, spec: SweepSpec) -> aiohttp.ClientSession:
    """One client session per point; an attached endpoint's API key rides on its headers
    (chat, models and metrics routes alike), never in a request body, URL or log."""
    return aiohttp.ClientSession(
        connector=aiohttp.TCPConnector(limit=0),
        timeout=aiohttp.ClientTimeout(total=spec.request_timeout_s),
        headers=ep.headers,
    )


async def _panel_once(ep: Endpoint, spec: SweepSpec, panel: list[Prompt]) -> loadgen.PointLoad:
    """The panel sent once (sizing a point's requests), on a session with the endpoint's key."""
    async with _session(ep, spec) as session:
        return await loadgen.run_load(ep.base_url, ep.model, panel, min(len(panel), 4), len(panel),
                                      spec.sampling.model_dump(), session=session)


async def _warmup(ep: Endpoint, spec: SweepSpec, wl: Workload) -> loadgen.PointLoad | None:
    if spec.warmup_requests == 0:
        return None
    k = spec.warmup_requests
    async with _session(ep, spec) as session:
        return await loadgen.run_load(
            ep.base_url, ep.model, wl.prompts, min(k, 4), k, spec.sampling.model_dump(),
            session=session, prompt_offset=len(wl.prompts) - k,
        )


@dataclass(frozen=True)
class _Point:
    """One point of the plan: an arm's workload at one level in one repeat (and search round)."""

    arm: Arm
    workload: Workload
    level: float  # requests in flight (closed loop) or requests per second (open loop)
    repeat: int
    position: int
    load: str = "concurrency"
    round: int = 0
    reason: str = ""

    @property
    def point_id(self) -> str:
        return f"{self.arm.name}/{self.workload.name}/{level_tag(self.level, self.load)}-r{self.repeat}"


def _sizing_path(out_dir: Path, workload: str) -> Path:
    return out_dir / "sizing" / f"{workload.replace('/', '_')}.json"


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


class _SweepRun:
    """Runs the plan round by round (the levels asked for, then any the search adds), each
    round block by block (one server per repeat and arm), point by point."""

    def __init__(self, spec: SweepSpec, out_dir: Path, progress: bool, echo: Callable[[str], None]):
        self.spec, self.out_dir, self.echo = spec, out_dir, echo
        self.clock = PhaseClock()
        self.started_at = utcnow()
        self.server_starts: list[dict[str, Any]] = []  # one entry per server start (or attach), failed ones too
        self._start_s_seen = 0.0  # server_start seconds already given to an entry of server_starts
        self.points_run = 0  # points measured (or attempted) by this invocation
        with self.clock.phase(Phase.PREFLIGHT):
            pre = prepare(spec, out_dir)
            self.model, self.workloads, self.notes = pre.model, pre.workloads, pre.notes
            self.refused, self.fallback = pre.refused, pre.fallback
            sweep_record(out_dir, spec, self.workloads)
            prov = provenance.collect()
            if pre.kernels is not None:  # which engine extension, and what it lacked, on this CPU
                prov["hardware"] = {**prov["hardware"], "engine_kernels": pre.kernels}
            self.provenance = Provenance(**prov)
        # every arm refused: nothing can be measured, and the refusal is all there is to say (no
        # plan, no progress); its failure records are still written, so `specnb report` lists them
        self.refused_all = bool(spec.arms) and all(a.name in self.refused for a in spec.arms)
        if not self.refused:
            echo(f"sweep {spec.name!r} -> {out_dir} (every check passed; the same folder resumes it)")
        elif not self.refused_all:
            echo(f"sweep {spec.name!r} -> {out_dir} ({len(self.refused)} of {len(spec.arms)} arms refused below, "
                 "the others checked; the same folder resumes it)")
        for line in refusal_lines(self.refused.values()):  # recorded as failures point by point; nothing starts for them
            echo(line)
        scheduled = [a.name for a in spec.arms if a.schedule and a.endpoint is None and a.name not in self.refused]
        if scheduled:
            echo(f"note: {'arm' if len(scheduled) == 1 else 'arms'} {', '.join(map(repr, scheduled))}: the installed "
                 f"vLLM takes the K schedule as {engine_schedule_key()!r} (vLLM is renaming "
                 f"{SCHEDULE_KEY!r} to {SCHEDULE_KEY_NEW!r}: either is read, this one is sent)")
        for why, arms in _arms_by_note(self.fallback).items():  # a note several arms share, once
            echo(f"note: {'arm' if len(arms) == 1 else 'arms'} {', '.join(map(repr, arms))}: {why}")
        self.outcome = SweepOutcome(out_dir=out_dir)
        self.planned: list[_Point] = []  # every point of every round, for the failed-points summary
        self.panels = {name: wl.panel(spec.panel_size) for name, wl in self.workloads.items()}
        # a conversation set's panel, as conversations (self.panels holds their first turns)
        self.conv_panels = {name: panel_conversations(wl, self.panels[name]) for name, wl in self.workloads.items()
                            if wl.conversations is not None}
        self.tokens_per_request: dict[str, float] = {}
        for name in self.workloads:
            f = _sizing_path(out_dir, name)
            if f.exists():
                self.tokens_per_request[name] = float(json.loads(f.read_text())["tokens_per_request"])
        self.bar = progress_bar(0, desc=spec.name, enabled=progress and not self.refused_all, dynamic_ncols=True,
                                file=sys.stderr)
        self.t_start = time.monotonic()
        # what is left, estimated from this run's measured costs (an earlier run's before any)
        self.costs = Costs()
        try:
            self.prior = prior_costs(out_dir, machine_label(self.provenance.hardware))
        except Exception:  # noqa: BLE001 - an estimate is never worth a sweep
            self.prior = None
        self._left: list[list[_Point]] = []  # this round's blocks not finished, their points not yet measured
        # where this invocation ran when an executor other than the local one placed it (specnb.sweep.fleet)
        self.executor: dict[str, Any] | None = None
        # start_together: (arm, repeat) -> a server started with its repeat's others and its endpoint
        # (or why it did not start), until its block takes it
        self._started: dict[tuple[str, int], tuple[VllmServer, Endpoint | BaseException]] = {}

    def files_written(self) -> None:
        """Called after every point, sizing and block: the local run has nothing to do then (the
        files are in place); a fleet block sends what it wrote to the driver (specnb.sweep.fleet)."""

    # -- the plan --------------------------------------------------------------------------
    def path(self, pt: _Point) -> Path:
        return point_path(self.out_dir, pt.arm.name, pt.workload.name, pt.level, pt.repeat, pt.load)

    def in_flight(self, pt: _Point) -> int:
        return self.spec.max_in_flight if pt.load == "rate" else int(pt.level)

    def pass_requests(self, pt: _Point) -> int:
        """Requests in one pass over the workload's panel: its prompts, or its conversations' turns."""
        convs = self.conv_panels.get(pt.workload.name)
        return sum(len(c.turns) for c in convs) if convs is not None else len(self.panels[pt.workload.name])

    def passes(self, pt: _Point) -> int:
        """Whole passes over the workload's panel, enough for the work floor (spec.passes); a
        conversation point also sends at least two conversations per user, so that every user
        is busy (the level is what the ledger says) and the steady window has room."""
        tpr = self.tokens_per_request.get(pt.workload.name, float(self.spec.sampling.max_tokens))
        n = self.spec.passes(self.pass_requests(pt), self.in_flight(pt), tpr)
        convs = self.conv_panels.get(pt.workload.name)
        if convs:
            n = max(n, math.ceil(2 * int(pt.level) / len(convs)))
        return n

    def num_requests(self, pt: _Point) -> int:
        return self.pass_requests(pt) * self.passes(pt)

    def num_conversations(self, pt: _Point) -> int | None:
        """Conversations a conversation point sends (None for any other point)."""
        convs = self.conv_panels.get(pt.workload.name)
        return None if convs is None else len(convs) * self.passes(pt)

    def points(self, levels: dict[str, list[tuple[float, str]]], round_: int) -> list[list[_Point]]:
        """The blocks of one round: per (repeat, arm) in ABBA order, its points at the given
        levels per workload."""
        out = []
        for r, pos, arm in blocks(self.spec):
            out.append([_Point(arm, self.workloads[wl], level, r, pos, self.spec.load, round_, reason)
                        for wl, lv in levels.items() for level, reason in lv])
        return out

    def run(self) -> SweepOutcome:
        ended = "complete"
        try:
            levels = {wl: [(lv, "asked for") for lv in self.spec.levels()] for wl in self.workloads}
            round_ = 0
            while levels:
                self.run_round(self.points(levels, round_))
                if self.spec.search is None:
                    break
                from specnb.sweep import search  # the search reads this run's ledgers

                round_ += 1
                with self.clock.phase(Phase.SEARCH):
                    levels = search.next_round(self.spec, self.out_dir, round_,
                                               elapsed_s=time.monotonic() - self.t_start, echo=self.echo)
            self.outcome.failed_points = self.missing()
            self.outcome.refused = list(self.refused.values())
            self.outcome.refused_all = self.refused_all
        except BaseException as exc:
            ended = ended_by(exc)
            raise
        finally:
            self.bar.close()
            self.write_timing(ended)
        return self.outcome

    def write_timing(self, ended: str) -> None:
        """The invocation's wall time by phase, once, in ``timings/<UTC time>.json``; none when it
        started no server and measured nothing. A record that cannot be written is said, not
        raised: the measurements it describes are already safe."""
        phases = self.clock.totals()
        self.outcome.phases_s = phases
        if not self.server_starts and not self.points_run:
            return
        doc = timing_record(self.spec.name, ended, self.started_at, phases, self.points_run, self.server_starts,
                            executor=self.executor)
        stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%S%fZ")
        path = self.out_dir / TIMINGS_DIR / f"{stamp}.json"
        try:
            self.outcome.timings.append(write_once(path, (json.dumps(doc, indent=2) + "\n").encode()))
        except (OSError, LedgerWriteError) as exc:
            self.echo(f"the timing record {path} was not written: {exc}")

    def record_start(self, arm: Arm, repeat: int, server: VllmServer | None, ep: Endpoint | None,
                     restart: bool = False, together: int = 1) -> None:
        """What a server start cost (``ep`` None: it failed), and where a launched server's start-up
        went, from its own log; ``together``: how many servers were launched side by side with it
        (its ``server_start_s`` then is the wait for it after the ones before it)."""
        seconds = self.clock.seconds["server_start"] - self._start_s_seen
        self._start_s_seen = self.clock.seconds["server_start"]
        entry: dict[str, Any] = {"arm": arm.name, "repeat": repeat,
                                 "mode": "attached" if server is None else "launched", "restart": restart,
                                 "ok": ep is not None, "server_start_s": round(seconds, 2),
                                 "ready_s": None if ep is None else ep.ready_s}
        if together > 1:
            entry["started_together"] = together
        if server is not None and server.launched_at is not None:
            entry["startup"] = startup_breakdown(server.start_log(), server.launched_at,
                                                 None if ep is None else ep.ready_s)
        self.server_starts.append(entry)

    def run_round(self, plan: list[list[_Point]]) -> None:
        # the requests this run will send: a refused arm's points send none (their records tick nothing)
        self.bar.total += sum(self.num_requests(pt) for block in plan for pt in block if pt.arm.name not in self.refused)
        self.bar.refresh()
        # what is left, one entry per block (empty: nothing to measure there), popped as each ends
        self._left = [[pt for pt in block if not self.path(pt).exists()] if block and block[0].arm.name not in
                      self.refused else [] for block in plan]
        if plan and plan[0] and plan[0][0].round == 0 and not self.refused_all:
            self.echo(self.plan_text())
        together: set[int] = set()  # repeats whose servers were started together
        try:
            for i, block in enumerate(plan):
                pending = []
                for pt in block:
                    self.planned.append(pt)
                    if self.path(pt).exists():
                        self.outcome.skipped.append(self.path(pt))
                        self.bar.update(self.num_requests(pt))
                    else:
                        pending.append(pt)
                if pending and self.spec.start_together and pending[0].repeat not in together:
                    together.add(pending[0].repeat)
                    self.start_together([[pt for pt in b if not self.path(pt).exists()] for b in plan[i:]
                                         if b and b[0].repeat == pending[0].repeat])
                if pending:
                    self.run_block(pending[0].arm, pending[0].repeat, pending)
                elif block and (block[0].arm.name, block[0].repeat) in self._started:
                    # started with its repeat, but its points were written meanwhile (another process)
                    srv, _ = self._started.pop((block[0].arm.name, block[0].repeat))
                    with self.clock.phase(Phase.SERVER_STOP):
                        srv.stop()
                self._left.pop(0)
        finally:  # servers started for blocks that never ran (Ctrl-C, a ledger that cannot be written)
            while self._started:
                srv, _ = self._started.popitem()[1]
                with self.clock.phase(Phase.SERVER_STOP):
                    srv.stop()

    def log_path(self, arm: Arm, repeat: int) -> Path:
        return self.out_dir / "logs" / f"{arm.name}-r{repeat:02d}.log"

    def start_together(self, blocks: list[list[_Point]]) -> None:
        """``start_together``: launch the servers of one repeat's blocks (those with points left,
        a launched arm the build can serve) side by side, then wait for each in turn; every start
        is recorded as it would be alone, a failed one kept for its block to record. Nothing is
        measured until all are up, so no start takes the cores from a measurement."""
        todo = [b[0] for b in blocks if b and not b[0].arm.endpoint and b[0].arm.name not in self.refused]
        if len(todo) < 2:
            return
        self.bar.set_description(f"{self.spec.name} r{todo[0].repeat}: starting {len(todo)} servers together")
        launched: list[tuple[_Point, VllmServer]] = []
        for pt in todo:
            srv = _new_server(self.spec, pt.arm, self.model, self.log_path(pt.arm, pt.repeat))
            self._started[(pt.arm.name, pt.repeat)] = (srv, ServerError("not launched"))
            with self.clock.phase(Phase.SERVER_START):
                try:
                    srv.launch()
                except OSError as exc:  # its block starts it alone (and records what fails)
                    del self._started[(pt.arm.name, pt.repeat)]
                    self.echo(f"{pt.arm.name}: could not launch with the others ({exc})")
                    continue
            launched.append((pt, srv))
        left, n = list(launched), len(launched)
        while left:  # polled in turn, so each ready_s is its own; each recorded as it comes up
            up: list[tuple[_Point, VllmServer, Endpoint | ServerError]] = []
            with self.clock.phase(Phase.SERVER_START):
                for pt, srv in list(left):
                    try:
                        if srv.ready_now():
                            up.append((pt, srv, srv.wait_ready()))
                    except ServerError as exc:  # exited or timed out: stopped; its block records why
                        srv.stop()
                        up.append((pt, srv, exc))
                for item in up:
                    left.remove(item[:2])
                if left and not up:
                    time.sleep(0.5)
            for pt, srv, got in up:
                self._started[(pt.arm.name, pt.repeat)] = (srv, got)
                self.record_start(pt.arm, pt.repeat, srv, None if isinstance(got, ServerError) else got, together=n)

    # -- what is left ------------------------------------------------------------------------
    def _planned(self, pts: list[_Point]) -> list[PlannedPoint]:
        return [PlannedPoint(pt.arm.name, pt.workload.name, pt.level, self.num_requests(pt)) for pt in pts]

    def left_s(self, started: bool = False) -> float | None:
        """Seconds this round still needs: the blocks left (the first one's start already paid
        when ``started``), from this run's costs, an earlier run's where this one has none."""
        costs = self.costs.merged_over(self.prior)
        if not self._left:
            return 0.0
        first, rest = self._left[0], self._left[1:]
        if started:
            each = [costs.point(p) for p in self._planned(first)]
            head = None if None in each else sum(each)
        else:
            head = estimate_s(costs, [self._planned(first)])
        tail = estimate_s(costs, [self._planned(b) for b in rest])
        sizing = costs.sizing_s if self.spec.work_floor_tokens and not self.tokens_per_request and costs.sizing_s else 0.0
        return None if head is None or tail is None else head + tail + sizing

    def left_text(self, started: bool = False) -> str:
        left = self.left_s(started)
        return "" if left is None else f" (~{format_duration(left)} left)"

    def plan_text(self) -> str:
        """The plan of what this run will do: points to measure, servers it will start (a block of a
        refused arm, of points already measured, or of an attached arm starts none), requests."""
        left = [b for b in self._left if b]
        blocks = [self._planned(b) for b in left]
        costs = self.costs.merged_over(self.prior)
        seconds = estimate_s(costs, blocks, sizing=bool(self.spec.work_floor_tokens and not self.tokens_per_request))
        search = self.spec.search.model_dump() if self.spec.search is not None else None
        starts = sum(1 for b in left if not b[0].arm.endpoint)
        return plan_line(sum(len(b) for b in blocks), starts, sum(p.requests for b in blocks for p in b), seconds,
                         costs.source, search)

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

    # -- one server ------------------------------------------------------------------------
    def run_block(self, arm: Arm, repeat: int, pending: list[_Point]) -> None:
        server_rec: ServerRecord | None = None
        server: VllmServer | None = None
        started = utcnow()
        if arm.name in self.refused:  # this build cannot serve it here: a failure record each, once; no server
            for pt in pending:
                if not self.refusal_recorded(pt):
                    self.record_failure(pt, Unservable(self.refused[arm.name]), None, started, unticked=0, quiet=True)
            self.files_written()
            return
        ready = self._started.pop((arm.name, repeat), None)
        if ready is None:
            self.bar.set_description(f"{self.spec.name} r{repeat} {arm.name}: starting server")
        on_start = lambda srv, ep: self.record_start(arm, repeat, srv, ep)  # noqa: E731
        try:
            t_block = time.monotonic()
            with _open_endpoint(self.spec, arm, self.model, self.log_path(arm, repeat), self.clock, on_start,
                                ready) as (ep, server):
                if ready is not None and server is not None and not server.alive():
                    # started with its repeat, it died while the blocks before it measured
                    ep, _ = self.restart(server, "while it waited for its block", arm, repeat)
                server_rec = self.server_record(ep, server)
                t_size = time.monotonic()
                with self.clock.phase(Phase.SIZING):
                    self.size_panels(ep, pending, server)
                self.files_written()
                sized = time.monotonic() - t_size
                if sized > 1.0:
                    self.costs.sizing_s = sized
                since = len(server.start_log()) if server is not None else 0
                with self.clock.phase(Phase.WARMUP):
                    warm = _run_async(_warmup(ep, self.spec, next(iter(self.workloads.values()))))
                _check_engine(warm, server, since)
                self.costs.add_block(time.monotonic() - t_block - sized)
                self.bar.set_description(f"{self.spec.name} r{repeat} {arm.name}: server up{self.left_text(True)}")
                for pt in pending:
                    if server is not None and not server.alive():  # died between points
                        ep, server_rec = self.restart(server, f"before {pt.point_id}", arm, repeat)
                    self.run_point(pt, ep, server, server_rec)
                    if server is not None and not self.path(pt).exists() and not server.alive(grace_s=10.0):
                        # died during the point: a fresh server gets one more try at it
                        ep, server_rec = self.restart(server, f"during {pt.point_id}; measuring it again", arm,
                                                      repeat)
                        self.run_point(pt, ep, server, server_rec)
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
            self.files_written()

    @staticmethod
    def server_record(ep: Endpoint, server: VllmServer | None) -> ServerRecord:
        """The endpoint as ledgers record it, with what a launched server decided at start-up."""
        return ServerRecord(**ep.describe(),
                            startup_decisions=startup_decisions(server.start_log()) if server is not None else None)

    def refusal_recorded(self, pt: _Point) -> bool:
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

    def size_panels(self, ep: Endpoint, pending: list[_Point], server: VllmServer | None = None) -> None:
        """Measure output tokens per request on each workload's panel once per run (at its first
        server start), so every point of the run is sized from the same number; kept in
        ``sizing/<workload>.json``, write-once."""
        if not self.spec.work_floor_tokens:
            return
        for name in dict.fromkeys(pt.workload.name for pt in pending):
            if name in self.tokens_per_request:
                continue
            panel = self.panels[name]
            self.bar.set_description(f"{self.spec.name}: sizing the {name} panel ({len(panel)} prompts)")
            pl = _run_async(_panel_once(ep, self.spec, panel))
            ok = [r.output_tokens for r in pl.records if r.ok]
            if not ok:
                _check_engine(pl, server, since=0)  # a dead engine says why
                raise ServerError(f"no request of the {name} panel succeeded while sizing points")
            tpr = sum(ok) / len(ok)
            doc = {"kind": "sizing", "workload": name, "tokens_per_request": tpr, "requests": len(ok), "measured_at": utcnow(),
                   "server": ep.describe()["argv"], "work_floor_tokens": self.spec.work_floor_tokens}
            try:
                write_once(_sizing_path(self.out_dir, name), (json.dumps(doc, indent=2) + "\n").encode())
            except FileExistsError:  # another process sized it first: use that number
                tpr = float(json.loads(_sizing_path(self.out_dir, name).read_text())["tokens_per_request"])
            self.tokens_per_request[name] = tpr

    def restart(self, server: VllmServer, when: str, arm: Arm, repeat: int) -> tuple[Endpoint, ServerRecord]:
        """Stop what is left of a launched server's process group and start it again (same
        arguments, a new port, the same log), warmed up; a failed start raises ServerError."""
        self.echo(f"the {server.served_model_name} server (pid {server.pid}) died {when}; restarting it")
        self.outcome.restarts += 1
        with self.clock.phase(Phase.SERVER_STOP):
            server.stop()
        ep = None
        try:
            with self.clock.phase(Phase.SERVER_START):
                ep = server.start()
        finally:
            self.record_start(arm, repeat, server, ep, restart=True)
        with self.clock.phase(Phase.WARMUP):
            _run_async(_warmup(ep, self.spec, next(iter(self.workloads.values()))))
        return ep, self.server_record(ep, server)

    # -- one point -------------------------------------------------------------------------
    def run_point(self, pt: _Point, ep: Endpoint, server: VllmServer | None,
                  server_rec: ServerRecord) -> None:
        """Measure one point; a measurement disturbed by another process (``host_busy``) is
        kept as a superseded record and measured again, up to ``busy_retries`` times."""
        self.points_run += 1
        try:
            for attempt in range(self.spec.busy_retries + 1):
                with self.clock.phase(MEASURING):
                    busy = self.attempt_point(pt, ep, server, server_rec, last=attempt == self.spec.busy_retries)
                if not busy:
                    return
                self.echo(f"{pt.point_id}: another process used the CPU during the point "
                          f"(attempt {attempt + 1}); kept as superseded, measuring again")
                with self.clock.phase(Phase.HOST_WAIT):
                    wait_for_quiet(server.pid if server is not None else None)
        finally:  # measured or failed: no longer left (a retry after a restart is not counted again)
            if self._left and pt in self._left[0]:
                self._left[0].remove(pt)
            self.files_written()

    def attempt_point(self, pt: _Point, ep: Endpoint, server: VllmServer | None,
                      server_rec: ServerRecord, last: bool = True) -> bool:
        """One measurement of a point; True when it was superseded for a busy host."""
        spec, n = self.spec, self.num_requests(pt)
        started = utcnow()
        self.bar.set_description(f"{spec.name} r{pt.repeat} {pt.arm.name} {pt.workload.name} "
                                 f"{level_tag(pt.level, pt.load)}")
        ticks = 0

        def tick(_rec: RequestRecord) -> None:
            nonlocal ticks
            ticks += 1
            self.bar.update(1)

        try:
            reset = ep.reset_prefix_cache() if spec.reset_prefix_cache else None
            host = HostLoad(server.pid if server is not None else None)
            since = len(server.start_log()) if server is not None else 0  # a cause must be this point's
            conv = pt.load == LoadMode.CONVERSATION
            panel = self.conv_panels[pt.workload.name] if conv else self.panels[pt.workload.name]
            pl, before, after, sampler = _run_async(
                _measure(ep, spec, panel, pt, self.num_conversations(pt) if conv else n, tick))
            pl.host_other_cpu_cores = host.other_cores()
            self.clock.move(pl.parse_s, MEASURING, Phase.PARSING)  # the server was idle by then
            log = server.start_log() if server is not None else ""
            led = measured_ledger(self.spec, pt.arm, self.in_flight(pt), self.common(pt), server_rec, reset, pl,
                                  before, after, sampler, started, fallback=FALLBACK_LOG_LINE in log,
                                  engine_log=log[since:])
        except Exception as exc:  # noqa: BLE001 - recorded as a failure, the sweep goes on
            self.record_failure(pt, exc, server_rec, started, server.log_tail() if server else None,
                                unticked=n - ticks)
            return False
        frame = pd.DataFrame([rec.as_row() for rec in pl.records])
        if led.status == Status.OK and Flag.HOST_BUSY in led.flags and not last:
            led = led.model_copy(update={"flags": [*led.flags, Flag.SUPERSEDED]})
            self.outcome.superseded.append(write_ledger(_superseded_path(self.path(pt)), led, frame))
            self.bar.total += n  # the point's requests are sent once more
            return True
        if led.status == Status.OK:
            self.outcome.written.append(write_ledger(self.path(pt), led, frame))
        else:  # too many requests failed: recorded, and retried on resume
            self.outcome.failed.append(write_ledger(_failed_path(self.path(pt)), led, frame))
            self.echo(f"FAILED {pt.point_id}: {' '.join(led.failure.message.split())[:200]}")
        res = led.results or {}
        if led.status == Status.OK and res.get("duration_s"):
            self.costs.add_point(pt.arm.name, pt.workload.name, pt.level, float(res["duration_s"]) + (pl.parse_s or 0.0), n)
        if self._left and pt in self._left[0]:
            self._left[0].remove(pt)  # before the progress line, so its time left excludes this point
        mal = led.spec_decode.mean_acceptance_length if led.spec_decode else None
        self.bar.set_postfix_str(
            f"{res.get('output_tok_s') or 0:.1f} tok/s" + (f" MAL {mal:.2f}" if mal else "")
            + (f" flags={','.join(led.flags)}" if led.flags else "") + self.left_text(True)
        )
        return False

    def common(self, pt: _Point) -> dict[str, Any]:
        """Ledger fields every record of this point carries, measured or failed."""
        size = PointSize(
            panel=self.panels[pt.workload.name], in_flight=self.in_flight(pt), num_requests=self.num_requests(pt),
            tokens_per_request=self.tokens_per_request.get(pt.workload.name), passes=self.passes(pt),
            conversations=self.conv_panels.get(pt.workload.name), num_conversations=self.num_conversations(pt))
        return point_fields(self.spec, pt, size, RunFacts(self.provenance, self.notes.get(pt.arm.name)))

    def record_failure(self, pt: _Point, exc: BaseException, server_rec: ServerRecord | None,
                       started: str, log_tail: str | None = None, unticked: int | None = None,
                       quiet: bool = False) -> None:
        led = failure_ledger(self.common(pt), exc, server_rec, started, log_tail, ceiling=pt.arm.ceiling)
        self.outcome.failed.append(write_ledger(_failed_path(self.path(pt)), led))
        self.bar.update(self.num_requests(pt) if unticked is None else unticked)
        msg = led.failure.message
        if not quiet:  # a refused arm was said once, in full, at the start
            self.echo(f"FAILED {pt.point_id}: {msg.splitlines()[0][:200] if msg else ''}")


def run_sweep(
    spec: SweepSpec,
    out_dir: str | Path,
    *,
    progress: bool = True,
    echo: Callable[[str], None] | None = None,
) -> SweepOutcome:
    """Run (or resume) a sweep into ``out_dir`` here; returns which ledgers were written.
    (:func:`specnb.sweep.executor.run_sweep` runs it here or on a Ray cluster.)

    Every check that can fail on bad input runs before the first server starts.
    """
    echo = echo or (lambda s: print(s, file=sys.stderr))
    return _SweepRun(spec, Path(out_dir), progress, echo).run()


def ended_by(exc: BaseException) -> str:
    """How an invocation ended, for its timing record: ``interrupted`` (Ctrl-C) or ``stopped: <error>``."""
    return "interrupted" if isinstance(exc, (KeyboardInterrupt, SystemExit)) else f"stopped: {type(exc).__name__}"


def _run_async(coro: Any) -> Any:
    """``asyncio.run``, also from inside a running event loop (a Jupyter kernel has one):
    there the coroutine runs on a loop of its own in a worker thread."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(coro)
    with concurrent.futures.ThreadPoolExecutor(max_workers=1, thread_name_prefix="specnb-load") as pool:
        return pool.submit(asyncio.run, coro).result()


def _superseded_path(p: Path) -> Path:
    """A measurement disturbed by another process: kept, never paired."""
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%S%fZ")
    return p.with_name(f"{p.stem}.superseded-{stamp}.json")


def _failed_path(p: Path) -> Path:
    """A new name per failure, so failures accumulate and never overwrite each other."""
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%S%fZ")
    return p.with_name(f"{p.stem}.failed-{stamp}.json")


def _check_engine(warm: loadgen.PointLoad | None, server: VllmServer | None, since: int = 0) -> None:
    """A launched server whose requests (warmup, sizing) all failed, with an engine error logged
    since they began (``since``: an offset in the start's log), has a dead engine: say why in one
    line instead of measuring a point of HTTP 500s."""
    if warm is None or server is None or any(r.ok for r in warm.records):
        return
    cause = engine_cause(server.start_log()[since:])
    if cause:
        raise EngineDiedError(f"the engine died at its first requests: {cause} "
                              f"(server log {paths.portable(str(server.log_path))})")
