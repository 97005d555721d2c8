"""One point measured on an endpoint and its ledger written: the point measurer.

A point starts with an emptied prefix cache, sends its requests (closed loop, open loop or
conversations) while ``/metrics`` is sampled around it, and becomes a ledger: measured, failed
(too many failed requests, or an exception: a failure record), or superseded when another
process used the CPU meanwhile (``host_busy``: kept, and measured again up to ``busy_retries``
times). The warm-up after a start and the panels' sizing at a run's first start send load too,
so they live here as well (:func:`warmup`, :meth:`PointMeasurer.size_panels`).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import aiohttp
import pandas as pd

from specnb import paths
from specnb.engine import clients, loadgen, metrics
from specnb.engine.hostload import HostLoad, wait_for_quiet
from specnb.engine.kernels import FALLBACK_LOG_LINE
from specnb.engine.records import RequestRecord
from specnb.engine.server import Endpoint, EngineDiedError, ServerError, VllmServer, engine_cause
from specnb.ledger import Flag, Provenance, ServerRecord, Status, utcnow, write_ledger, write_once
from specnb.ledger.timing import MEASURING, Phase
from specnb.prompts.workload import Prompt, Workload
from specnb.sweep.clock import PhaseClock
from specnb.sweep.ledgers import PointSize, RunFacts, failure_ledger, measured_ledger, point_fields
from specnb.sweep.observers import SweepObserver
from specnb.sweep.plan import Panels, Point, TimeLeft, failed_path, sizing_path, superseded_path
from specnb.sweep.spec import SweepSpec, level_tag

__all__ = ["PointMeasurer", "check_engine", "run_async", "warmup"]


def run_async(coro: Any) -> Any:
    """``asyncio.run``, also from inside a running event loop (a Jupyter kernel has one):
    there the coroutine runs on a loop of its own in a worker thread."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(coro)
    with concurrent.futures.ThreadPoolExecutor(max_workers=1, thread_name_prefix="specnb-load") as pool:
        return pool.submit(asyncio.run, coro).result()


def _session(ep: Endpoint, spec: SweepSpec) -> aiohttp.ClientSession:
    """One client session per point; an attached endpoint's API key rides on its headers
    (chat, models and metrics routes alike), never in a request body, URL or log."""
    return aiohttp.ClientSession(
        connector=aiohttp.TCPConnector(limit=0),
        timeout=aiohttp.ClientTimeout(total=spec.request_timeout_s),
        headers=ep.headers,
    )


async def _measure(
    ep: Endpoint, spec: SweepSpec, items: list[Any], load: loadgen.Load,
    on_done: Callable[[RequestRecord], None] | None,
) -> tuple[loadgen.PointLoad, metrics.Snapshot, metrics.Snapshot, metrics.GaugeSampler]:
    """One point's load and the ``/metrics`` around it; ``items``: the prompts (or conversations)
    ``load``, the driver's shape of the point, sends."""
    async with _session(ep, spec) as session:
        before = await metrics.scrape(session, ep.base_url)
        sampler = metrics.GaugeSampler(session, ep.base_url, spec.metrics_interval_s)
        sampler.start()
        cpu0, wall0 = time.process_time(), time.perf_counter()
        try:
            target = loadgen.ChatTarget.of(ep.base_url, ep.model, session=session,
                                           return_token_ids=spec.return_token_ids)
            pl = await clients.drive(target, load, items, spec.sampling.model_dump(), on_done)
        finally:
            await sampler.stop()
        # The client must never be the bottleneck: record how busy its one core was (the load
        # generator measures it while the requests run, in each of its worker processes).
        if pl.client_cpu_util is None:
            pl.client_cpu_util = (time.process_time() - cpu0) / max(time.perf_counter() - wall0, 1e-9)
        after = await metrics.scrape(session, ep.base_url)
    return pl, before, after, sampler


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


def warmup(ep: Endpoint, spec: SweepSpec, wl: Workload) -> loadgen.PointLoad | None:
    """``warmup_requests`` requests from the end of ``wl``'s prompts, unrecorded (None: none asked for)."""
    return run_async(_warmup(ep, spec, wl))


def check_engine(warm: loadgen.PointLoad | None, server: VllmServer | None, since: int = 0) -> None:
    """A launched server whose requests (warmup, sizing) all failed, with an engine error logged
    since they began (``since``: an offset in the start's log), has a dead engine: say why in one
    line instead of measuring a point of HTTP 500s."""
    if warm is None or server is None or any(r.ok for r in warm.records):
        return
    cause = engine_cause(server.start_log()[since:])
    if cause:
        raise EngineDiedError(f"the engine died at its first requests: {cause} "
                              f"(server log {paths.portable(str(server.log_path))})")


class PointMeasurer:
    """Measures a run's points on the endpoint it is given and writes each one's ledger (measured,
    failed or superseded) into the run folder, adding it to the run's outcome."""

    def __init__(self, spec: SweepSpec, out_dir: Path, panels: Panels, clock: PhaseClock, provenance: Provenance,
                 notes: dict[str, str], outcome: Any, observer: SweepObserver, time_left: TimeLeft,
                 echo: Callable[[str], None]):
        self.spec, self.out_dir, self.panels, self.clock = spec, out_dir, panels, clock
        self.provenance, self.notes, self.outcome, self.observer = provenance, notes, outcome, observer
        self.time_left, self.echo = time_left, echo
        self.points_run = 0  # points measured (or attempted) by this invocation

    def path(self, pt: Point) -> Path:
        return pt.path(self.out_dir)

    def size_panels(self, ep: Endpoint, pending: list[Point], server: VllmServer | None = None) -> None:
        """Measure output tokens per request on each workload's panel once per run (at its first
        server start), so every point of the run is sized from the same number; kept in
        ``sizing/<workload>.json``, write-once."""
        if not self.spec.work_floor_tokens:
            return
        tokens = self.panels.tokens_per_request
        for name in dict.fromkeys(pt.workload.name for pt in pending):
            if name in tokens:
                continue
            panel = self.panels.prompts[name]
            self.observer.status(f"{self.spec.name}: sizing the {name} panel ({len(panel)} prompts)")
            pl = run_async(_panel_once(ep, self.spec, panel))
            ok = [r.output_tokens for r in pl.records if r.ok]
            if not ok:
                check_engine(pl, server, since=0)  # a dead engine says why
                raise ServerError(f"no request of the {name} panel succeeded while sizing points")
            tpr = sum(ok) / len(ok)
            doc = {"kind": "sizing", "workload": name, "tokens_per_request": tpr, "requests": len(ok), "measured_at": utcnow(),
                   "server": ep.describe()["argv"], "work_floor_tokens": self.spec.work_floor_tokens}
            try:
                write_once(sizing_path(self.out_dir, name), (json.dumps(doc, indent=2) + "\n").encode())
            except FileExistsError:  # another process sized it first: use that number
                tpr = float(json.loads(sizing_path(self.out_dir, name).read_text())["tokens_per_request"])
            tokens[name] = tpr

    def run_point(self, pt: Point, ep: Endpoint, server: VllmServer | None,
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
            self.time_left.point_done(pt)
            self.observer.files_written()

    def attempt_point(self, pt: Point, ep: Endpoint, server: VllmServer | None,
                      server_rec: ServerRecord, last: bool = True) -> bool:
        """One measurement of a point; True when it was superseded for a busy host."""
        spec, panels, n = self.spec, self.panels, self.panels.num_requests(pt)
        started = utcnow()
        self.observer.status(f"{spec.name} r{pt.repeat} {pt.arm.name} {pt.workload.name} "
                             f"{level_tag(pt.level, pt.load)}")
        ticks = 0

        def tick(_rec: RequestRecord) -> None:
            nonlocal ticks
            ticks += 1
            self.observer.requests_done(1)

        try:
            reset = ep.reset_prefix_cache() if spec.reset_prefix_cache else None
            host = HostLoad(server.pid if server is not None else None)
            since = len(server.start_log()) if server is not None else 0  # a cause must be this point's
            items, count = panels.items(pt)
            load = pt.load.point(pt.level, count, history=spec.history_for(pt.workload.conversation),
                                 client_workers=spec.client_workers)
            pl, before, after, sampler = run_async(_measure(ep, spec, items, load, tick))
            pl.host_other_cpu_cores = host.other_cores()
            pl.host_busy_threshold = host.threshold
            self.clock.move(pl.parse_s, MEASURING, Phase.PARSING)  # the server was idle by then
            log = server.start_log() if server is not None else ""
            led = measured_ledger(self.spec, pt.arm, panels.in_flight(pt), self.common(pt), server_rec, reset, pl,
                                  before, after, sampler, started, fallback=FALLBACK_LOG_LINE in log,
                                  engine_log=log[since:])
        except Exception as exc:  # noqa: BLE001 - recorded as a failure, the sweep goes on
            self.record_failure(pt, exc, server_rec, started, server.log_tail() if server else None,
                                unticked=n - ticks)
            return False
        frame = pd.DataFrame([rec.as_row() for rec in pl.records])
        if led.status == Status.OK and Flag.HOST_BUSY in led.flags and not last:
            led = led.model_copy(update={"flags": [*led.flags, Flag.SUPERSEDED]})
            self.outcome.superseded.append(write_ledger(superseded_path(self.path(pt)), led, frame))
            self.observer.requests_added(n)  # the point's requests are sent once more
            return True
        if led.status == Status.OK:
            self.outcome.written.append(write_ledger(self.path(pt), led, frame))
        else:  # too many requests failed: recorded, and retried on resume
            self.outcome.failed.append(write_ledger(failed_path(self.path(pt)), led, frame))
            self.echo(f"FAILED {pt.point_id}: {' '.join(led.failure.message.split())[:200]}")
        res = led.results or {}
        if led.status == Status.OK and res.get("duration_s"):
            self.time_left.costs.add_point(pt.arm.name, pt.workload.name, pt.level,
                                           float(res["duration_s"]) + (pl.parse_s or 0.0), n)
        self.time_left.point_done(pt)  # before the progress line, so its time left excludes this point
        mal = led.spec_decode.mean_acceptance_length if led.spec_decode else None
        self.observer.point_result(
            f"{res.get('output_tok_s') or 0:.1f} tok/s" + (f" MAL {mal:.2f}" if mal else "")
            + (f" flags={','.join(led.flags)}" if led.flags else "") + self.time_left.text(True)
        )
        return False

    def common(self, pt: Point, provenance: Provenance | None = None) -> dict[str, Any]:
        """Ledger fields every record of this point carries, measured or failed (``provenance``:
        another than the run's, for a record the Ray driver writes for a lost node)."""
        panels = self.panels
        size = PointSize(
            panel=panels.panel_of(pt), in_flight=panels.in_flight(pt),
            num_requests=panels.num_requests(pt), tokens_per_request=panels.tokens_per_request.get(pt.workload.name),
            passes=panels.passes(pt), conversations=panels.conversations.get(pt.workload.name),
            num_conversations=panels.num_conversations(pt))
        return point_fields(self.spec, pt, size, RunFacts(provenance or self.provenance, self.notes.get(pt.arm.name)))

    def record_failure(self, pt: Point, exc: BaseException, server_rec: ServerRecord | None,
                       started: str, log_tail: str | None = None, unticked: int | None = None,
                       quiet: bool = False, provenance: Provenance | None = None) -> None:
        """A failure record for the point (a new file each time); its requests count as done."""
        led = failure_ledger(self.common(pt, provenance), exc, server_rec, started, log_tail, ceiling=pt.arm.ceiling)
        self.outcome.failed.append(write_ledger(failed_path(self.path(pt)), led))
        self.observer.requests_done(self.panels.num_requests(pt) if unticked is None else unticked)
        msg = led.failure.message
        if not quiet:  # a refused arm was said once, in full, at the start
            self.echo(f"FAILED {pt.point_id}: {msg.splitlines()[0][:200] if msg else ''}")
