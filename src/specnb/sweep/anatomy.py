"""Profiled windows of a sweep's arms: the step anatomy of each arm at each level.

``specnb anatomy <sweep.toml>`` reads the same TOML as ``specnb sweep`` (model, arms, server
arguments, workloads, levels, sampling, repeats) and, per arm and repeat, starts a server of its
own with vLLM's torch profiler configured (:func:`specnb.engine.anatomy.profiler_args` and
``VLLM_CUSTOM_SCOPES_FOR_PROFILING=1``). On it, after the warm-up, each level gets one profiled
window: ``/start_profile``, a closed loop of ``window_requests`` requests (at least the level)
from the workload's panel, ``/stop_profile``. The worker's trace is parsed into steps
(:mod:`specnb.engine.anatomy`), the streamed chunks are given to the steps they came from, and
one write-once record per (arm, workload, level, repeat) goes to
``<out>/<arm>/<workload>/anatomy-cNNN-rNN.json`` (``kind = "step_anatomy"``; a failed window:
``anatomy-cNNN-rNN.failed-<time>.json``). A window whose stream reached the client in one burst
is kept as ``...failed-<time>.retried.json`` and profiled again at once (at most three attempts).
A rerun with the same ``--out`` profiles only what is missing.

Kept apart from measurements: these servers measure nothing else, and no point ledger is
written here, so a profiled (slowed) window can never enter a pair or a speedup. The shares
are what the record is for; its absolute milliseconds are those of a profiled engine. To put
milliseconds back on the engine, each profiled window has an unprofiled twin run just before it
on the same server (the same requests, the prefix cache emptied before each, after one unrecorded
pass of them that warms the level's batch shapes): the ratio of the
two windows' client-side milliseconds per streamed token is the profiler's slowdown
(``profiling_slowdown``), and a step's parts divided by it are the record's estimate of the
unprofiled step (:func:`specnb.analysis.anatomy.anatomy_frame`'s ``unprofiled_*`` columns).

Where the blocks run is the sweep's executor (``--executor``): here, one after another, or each
(arm, repeat) block as a task on a Ray cluster, through the fleet's dispatch, retries, mailbox
and Ctrl-C (:class:`AnatomyBlocks`, given to :class:`~specnb.sweep.fleet.Fleet`); a node profiles into a scratch folder and sends each record as
it is written, its server's log and its traces at the block's end (whole then), and the driver
writes them into the run folder. A record names the driver's copy of its trace and profiler
folder; its ``provenance.executor`` names the node.
"""

from __future__ import annotations

import json
import os
import sys
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import aiohttp

from specnb import paths
from specnb.analysis.anatomy import KIND, RUN_KIND, format_anatomy, load_anatomy  # noqa: F401 - re-exported
from specnb.engine import anatomy, loadgen, metrics, wire
from specnb.engine.server import VllmServer
from specnb.ledger import provenance
from specnb.ledger.schema import utcnow
from specnb.ledger.store import write_once
from specnb.sweep.fleet import BlockRefused, Fleet, FleetBlock, on_node
from specnb.sweep.measure import run_async as _run_async
from specnb.sweep.preflight import prepare
from specnb.sweep.progress import progress_bar
from specnb.sweep.servers import server_args_for
from specnb.sweep.spec import SweepError, SweepSpec, blocks, level_tag

SCHEMA = 1
TRACE_WAIT_S = 120.0
# the parts of the steps a request spanned against its first-to-last chunk time on the client's
# clock (engine.anatomy.span_agreement): the stream's delivery jitter sits in between
STEP_TOLERANCE = 0.05
# a window whose stream reached the client in one burst (every chunk at one instant: the engine's
# output was held back while the profiler ran, seen once on a 2-core machine under Ray) cannot be
# read against its steps; it is kept as a failed attempt and profiled again, at most this many times
WINDOW_ATTEMPTS = 3
RETRIED = ".retried"  # the name of a failed attempt that was profiled again
BURST = "stream arrived in one burst (every chunk at one instant), so its tokens cannot be placed on the steps"
KEPT_APART = ("a server of its own per arm and repeat, started with the profiler configured; it measures no "
              "point, and no point ledger is written from it; each profiled window follows an unprofiled twin of "
              "the same requests on that server, which gives the profiler's slowdown")


class AnatomyError(SweepError):
    """Bad input for a profiled run, said before any server starts."""


def record_path(out_dir: Path, arm: str, workload: str, level: int, repeat: int) -> Path:
    return out_dir / arm / workload / f"anatomy-{level_tag(level)}-r{repeat:02d}.json"


def unrecorded(out_dir: Path, arm: str, repeat: int, windows: Iterable[tuple[str, int]]) -> list[tuple[str, int]]:
    """The (workload, level) windows of one arm and repeat that have no record yet."""
    return [(w, c) for w, c in windows if not record_path(out_dir, arm, w, c, repeat).exists()]


@dataclass
class AnatomyOutcome:
    out_dir: Path
    written: list[Path] = field(default_factory=list)
    already: int = 0
    failed: list[str] = field(default_factory=list)

    def summary(self) -> str:
        return (f"{len(self.written)} window(s) profiled, {self.already} already done, {len(self.failed)} failed "
                f"-> {self.out_dir}")


def check(spec: SweepSpec, window_requests: int | None) -> None:
    """What a profiled run refuses in one line, before preflight starts anything."""
    if not spec.load.concurrency_levels or not spec.levels():
        raise AnatomyError("anatomy profiles closed-loop levels: give concurrency = [...] (load = \"concurrency\")")
    attached = [a.name for a in spec.arms if a.endpoint]
    if attached:
        raise AnatomyError(f"arm(s) {', '.join(attached)} attach to an endpoint: a profiled window needs a server "
                           "that specnb starts with the profiler configured")
    if window_requests is not None and window_requests < 1:
        raise AnatomyError(f"window_requests must be >= 1, got {window_requests}")
    for a in [*spec.server_args, *(x for arm in spec.arms for x in arm.server_args)]:
        if a == "--profiler-config" or a.startswith("--profiler-config="):
            raise AnatomyError("--profiler-config is set by specnb anatomy (its traces go to the run folder): "
                               "leave it out of server_args")


async def _post(session: aiohttp.ClientSession, url: str) -> None:
    async with session.post(url) as r:
        if r.status != 200:
            raise RuntimeError(f"{url} answered HTTP {r.status}: {(await r.text())[:200]}")


def _wait_trace(trace_dir: Path, seen: set[str], timeout_s: float = TRACE_WAIT_S) -> Path:
    """The worker trace that ``/stop_profile`` writes (after it returns): the newest new one,
    once its size holds still."""
    deadline = time.monotonic() + timeout_s
    last: tuple[Path, int] | None = None
    while time.monotonic() < deadline:
        new = anatomy.newest_traces(trace_dir, seen)
        if new:
            p = new[-1]
            size = p.stat().st_size
            if last == (p, size) and size > 0:
                try:
                    anatomy.read_trace(p)
                    return p
                except anatomy.TraceError:
                    pass  # still being written
            last = (p, size)
        time.sleep(0.5)
    raise TimeoutError(f"no worker trace appeared in {trace_dir} within {timeout_s:.0f} s of /stop_profile")


def client_pace(pl: loadgen.PointLoad) -> dict[str, Any]:
    """A window's pace on the client's clock: each request's first-to-last chunk time over the
    tokens it streamed after its first. The same requests on the same server with and without the
    profiler give the profiler's slowdown as the ratio of the two (a step emits the same tokens
    either way; merged chunks do not change a span)."""
    ok = [r for r in pl.records if r.ok and len(r.chunk_times_s) >= 2]
    span = sum(r.chunk_times_s[-1] - r.chunk_times_s[0] for r in ok)
    after_first = sum(sum(r.chunk_tokens[1:]) for r in ok)
    return {"requests": len(pl.records), "ok": sum(1 for r in pl.records if r.ok),
            "output_tokens": sum(r.output_tokens for r in pl.records if r.ok),
            "wall_s": (pl.wall_end_s - pl.wall_start_s) if pl.records else None,
            "span_s": span, "tokens_after_first": after_first,
            # tokens after the first chunk, yet no request's chunks spread in time: one burst
            "burst": bool(after_first) and span <= 0,
            "ms_per_token": 1e3 * span / after_first if after_first and span > 0 else None}


async def _twin(ep, spec: SweepSpec, prompts, level: int, n: int) -> loadgen.PointLoad:
    """The profiled window's requests, unprofiled, on the same server (the profiler configured, not started)."""
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=spec.request_timeout_s),
                                     headers=ep.headers) as session:
        return await loadgen.run_load(ep.base_url, ep.model, prompts, level, n, spec.sampling.model_dump(),
                                      session=session)


async def _window(ep, spec: SweepSpec, prompts, level: int, n: int) -> tuple[loadgen.PointLoad, Any, Any, float]:
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=spec.request_timeout_s),
                                     headers=ep.headers) as session:
        before = await metrics.scrape(session, ep.base_url)
        await _post(session, ep.base_url + "/start_profile")
        try:
            pl = await loadgen.run_load(ep.base_url, ep.model, prompts, level, n, spec.sampling.model_dump(),
                                        session=session)
            # the monotonic clock's epoch offset, read right after: lines chunks up with the trace
            offset = time.time() - wire.clock()
        finally:
            await _post(session, ep.base_url + "/stop_profile")
        after = await metrics.scrape(session, ep.base_url)
    return pl, before, after, offset


def window_record(steps: list[anatomy.Step], pl: loadgen.PointLoad, offset: float,
                  spec_delta: dict[str, Any] | None, twin: loadgen.PointLoad | None = None) -> dict[str, Any]:
    """Steps with their streamed tokens, the summary, and the checks against the client and the
    engine's counters; with ``twin`` (the same requests unprofiled), the profiler's slowdown."""
    chunks = [anatomy.Chunk(r.index, offset + (pl.clock_zero_s or 0.0) + t, k)
              for r in pl.records for t, k in zip(r.chunk_times_s, r.chunk_tokens, strict=False)]
    placed = anatomy.attribute_chunks(steps, chunks)
    summary = anatomy.summarize(steps)
    ok = [r for r in pl.records if r.ok]
    out_tokens = sum(r.output_tokens for r in ok)
    client_s = (max(r.end_s for r in pl.records) - min(r.start_s for r in pl.records)) if pl.records else None
    trace_s = steps[-1].end_s - steps[0].start_s if steps else None
    agree = anatomy.span_agreement(steps, chunks)
    checks = {
        "emitted_tokens_in_steps": sum(s.emitted_tokens for s in steps),
        "output_tokens_of_requests": out_tokens,
        "chunks_placed": placed,
        "drafted_tokens_in_steps": sum(s.drafted_tokens for s in steps),
        "accepted_tokens_in_steps": sum(s.accepted_tokens for s in steps),
        "engine_counters": spec_delta,
        # the engine counts drafts accepted past a request's max_tokens too; the stream cuts them
        "accepted_not_delivered": (None if not spec_delta else
                                   spec_delta["num_accepted_tokens"] - sum(s.accepted_tokens for s in steps)),
        "client_window_s": client_s,
        "trace_window_s": trace_s,
        # the parts against the client's clock: each request's first-to-last chunk time, on both
        "span_agreement": agree,
        "step_tolerance": STEP_TOLERANCE,
        "steps_agree": None if agree is None else abs(agree["ratio"] - 1) <= STEP_TOLERANCE,
    }
    requests = [{"index": r.index, "ok": r.ok, "output_tokens": r.output_tokens, "error": r.error,
                 "chunks": [[round(c.t_s, 6), c.tokens, c.step] for c in chunks if c.request == r.index]}
                for r in pl.records]
    pace = client_pace(pl)
    unprofiled = None
    if twin is not None:
        unprofiled = client_pace(twin)
        slow = (pace["ms_per_token"] / unprofiled["ms_per_token"]
                if pace["ms_per_token"] and unprofiled["ms_per_token"] else None)
        unprofiled["profiling_slowdown"] = slow
        # the decode step's estimate on the unprofiled engine: the profiled cycle over the slowdown
        unprofiled["cycle_ms"] = summary.cycle_ms / slow if slow else None
    return {"steps": [s.as_dict() for s in steps], "summary": summary.as_dict(), "checks": checks,
            "requests": requests,
            "window": {"requests": len(pl.records), "ok": len(ok), "concurrency": pl.concurrency,
                       "output_tokens": out_tokens, "wall_s": client_s, "ms_per_token": pace["ms_per_token"],
                       "burst": pace["burst"]},
            "unprofiled": unprofiled}


def came_in_a_burst(problems: list[str]) -> bool:
    """Whether a window failed because a stream came in one burst (what else failed may follow
    from it: chunks all given to the last step); such a window is profiled again."""
    return any(p.endswith(BURST) for p in problems)


def window_problems(body: dict[str, Any], speculative: bool) -> list[str]:
    """Why a profiled window cannot be read (empty: it can): failed requests, chunks the trace
    cannot place (two clocks that disagree), parts that do not add up to the client's time,
    drafts the steps and the engine count differently, accepted tokens the engine never counted."""
    c, w = body["checks"], body["window"]
    out = []
    if w["ok"] < w["requests"]:
        out.append(f"{w['requests'] - w['ok']} of {w['requests']} requests failed")
    elif w.get("burst"):
        out.append(f"the profiled window's {BURST}")
    u = body.get("unprofiled")
    if u is not None:
        if u["ok"] < u["requests"]:
            out.append(f"{u['requests'] - u['ok']} of {u['requests']} requests of the unprofiled twin failed")
        elif u.get("burst"):
            out.append(f"the unprofiled twin's {BURST}")
        elif not u.get("profiling_slowdown") and not w.get("burst"):
            out.append("the unprofiled twin streamed too few tokens to give the profiler's slowdown")
    placed = c["chunks_placed"]
    if placed["before"] or placed["after"]:
        out.append(f"{placed['before'] + placed['after']} chunk(s) fall outside the trace's steps (clocks disagree, "
                   "or steps are missing from the trace)")
    if c["steps_agree"] is False:
        out.append(f"the steps' parts give {c['span_agreement']['ratio']:.3f}x the client's time "
                   f"(tolerance {STEP_TOLERANCE:.0%})")
    eng = c["engine_counters"]
    if speculative and eng is not None:
        if c["drafted_tokens_in_steps"] != eng["num_draft_tokens"]:
            out.append(f"the steps schedule {c['drafted_tokens_in_steps']} draft tokens, the engine counted "
                       f"{eng['num_draft_tokens']:g}")
        if c["accepted_not_delivered"] is not None and c["accepted_not_delivered"] < 0:
            out.append(f"the stream shows {-c['accepted_not_delivered']:g} accepted token(s) more than the engine counted")
    elif c["accepted_tokens_in_steps"]:
        out.append(f"{c['accepted_tokens_in_steps']} accepted token(s) on an arm without a drafter (chunks merged?)")
    return out


class AnatomyRun:
    """One anatomy run (resumable): its record of the run, its blocks and windows, its failures.

    On a Ray node (:func:`anatomy_task`) it profiles one block into a scratch folder: ``shown_out``
    is the driver's run folder (what a record's trace path names), ``after_window`` sends what was
    written, ``node`` goes into each record's provenance as its executor."""

    def __init__(self, spec: SweepSpec, out_dir: Path, window_requests: int | None, progress: bool,
                 echo: Callable[[str], None], *, shown_out: Path | None = None,
                 after_window: Callable[[], None] | None = None, node: dict[str, Any] | None = None,
                 argv: list[str] | None = None):
        check(spec, window_requests)
        self.spec, self.out_dir, self.echo = spec, out_dir, echo
        self.window_requests = window_requests
        self.shown_out, self.after_window = shown_out, after_window
        pre = prepare(spec, out_dir)
        self.model, self.workloads = pre.model, pre.workloads
        self.refused = pre.refused
        self.panels = {name: wl.panel(spec.panel_size) for name, wl in self.workloads.items()}
        self.provenance = provenance.collect()
        if node is not None:
            self.provenance.update(executor=node, argv=list(argv or self.provenance["argv"]))
        self.outcome = AnatomyOutcome(out_dir)
        run_doc = {"kind": RUN_KIND, "schema_version": SCHEMA, "name": spec.name, "spec": spec.model_dump(mode="json"),
                   "window_requests": window_requests, "created_at": utcnow(), "kept_apart": KEPT_APART}
        data = (json.dumps(run_doc, indent=2) + "\n").encode()
        first = out_dir / "anatomy.json"
        if first.exists():  # resuming: the same study only
            try:
                was = json.loads(first.read_text())["spec"]
            except (OSError, ValueError, KeyError, TypeError) as exc:
                raise AnatomyError(f"{first}: not an anatomy run record ({exc})") from None
            for key in ("name", "model"):
                if was.get(key) != run_doc["spec"].get(key):
                    raise AnatomyError(f"{out_dir} holds the anatomy run of {key} {was.get(key)!r}, not "
                                       f"{run_doc['spec'].get(key)!r}: choose another --out")
        try:
            write_once(out_dir / "anatomy.json", data)  # the run's first invocation
        except FileExistsError:
            pass
        stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%S%fZ")
        write_once(out_dir / "invocations" / f"{stamp}.json", data)  # each one, a resumed one with --set too
        n = sum(1 for _ in blocks(spec)) * len(self.workloads) * len(spec.levels())
        self.bar = progress_bar(n, desc=f"{spec.name} anatomy", enabled=progress, unit="window", dynamic_ncols=True,
                                file=sys.stderr)

    def levels(self) -> list[int]:
        return [int(c) for c in self.spec.levels()]

    def todo(self) -> Iterator[tuple[int, Any, list[tuple[str, int]]]]:
        """Each block with windows left to profile, in the sweep's ABBA order: (repeat, arm,
        windows); a window already recorded is counted done, an arm this build cannot serve is
        recorded as failed (its windows are not handed out)."""
        for repeat, _, arm in blocks(self.spec):
            todo = unrecorded(self.out_dir, arm.name, repeat, ((w, c) for w in self.workloads for c in self.levels()))
            self.bar.update(len(self.workloads) * len(self.levels()) - len(todo))
            self.outcome.already += len(self.workloads) * len(self.levels()) - len(todo)
            if todo and arm.name in self.refused:
                for w, c in todo:
                    self.fail(arm, w, c, repeat, f"refused: {self.refused[arm.name]}")
            elif todo:
                yield repeat, arm, todo

    def run(self) -> AnatomyOutcome:
        try:
            for repeat, arm, todo in self.todo():
                self.block(arm, repeat, todo)
        finally:
            self.bar.close()
        return self.outcome

    def block(self, arm, repeat: int, todo: list[tuple[str, int]]) -> None:
        trace_dir = (self.out_dir / "traces" / f"{arm.name}-r{repeat:02d}").resolve()
        trace_dir.mkdir(parents=True, exist_ok=True)
        spec = self.spec
        srv = VllmServer(
            self.model, args=[*server_args_for(spec, arm), *anatomy.profiler_args(trace_dir)],
            speculative_config=arm.speculative_config,
            served_model_name=spec.served_model_name or Path(self.model).name,
            env={**spec.env, **arm.env, **anatomy.PROFILE_ENV},
            log_path=self.out_dir / "logs" / f"{arm.name}-r{repeat:02d}.log", ready_timeout_s=spec.ready_timeout_s,
        )
        self.bar.set_description(f"{spec.name} anatomy r{repeat} {arm.name}: starting server")
        try:
            ep = srv.start()
        except Exception as exc:  # noqa: BLE001 - every window of the block is recorded as failed
            for w, c in todo:
                self.fail(arm, w, c, repeat, f"{type(exc).__name__}: {exc}")
            return
        try:
            wl0 = self.workloads[todo[0][0]]
            if spec.warmup_requests:
                k = spec.warmup_requests
                _run_async(loadgen.run_load(ep.base_url, ep.model, wl0.prompts, min(k, 4), k,
                                            spec.sampling.model_dump(), headers=ep.headers,
                                            prompt_offset=len(wl0.prompts) - k))
            for w, c in todo:
                self.bar.set_description(f"{spec.name} anatomy r{repeat} {arm.name}: {w} c={c}")
                try:
                    self.window(srv, ep, arm, w, c, repeat, trace_dir)
                except Exception as exc:  # noqa: BLE001 - recorded; the next window goes on
                    self.fail(arm, w, c, repeat, f"{type(exc).__name__}: {exc}")
                self.bar.update(1)
                if self.after_window is not None:
                    self.after_window()
        finally:
            srv.stop()

    def window(self, srv: VllmServer, ep, arm, workload: str, level: int, repeat: int, trace_dir: Path) -> None:
        """Profile one window and write its record; a window whose stream came in one burst is kept
        as a failed attempt and profiled again (at most WINDOW_ATTEMPTS in all)."""
        for attempt in range(1, WINDOW_ATTEMPTS + 1):
            doc, problems = self.attempt(ep, arm, workload, level, repeat, trace_dir)
            doc["attempt"] = attempt
            if problems and came_in_a_burst(problems) and attempt < WINDOW_ATTEMPTS:
                self.record_failed(doc, quiet=True, retried=True)
                self.echo(f"anatomy {failed_line(doc, 300)}: profiled again (attempt {attempt + 1} of "
                          f"{WINDOW_ATTEMPTS})")
                continue
            break
        p = record_path(self.out_dir, arm.name, workload, level, repeat)
        if problems:  # kept, under a failure's name: a rerun profiles the window again
            self.record_failed(doc)
        else:
            write_once(p, (json.dumps(doc, indent=2, default=str) + "\n").encode())
            self.outcome.written.append(p)

    def attempt(self, ep, arm, workload: str, level: int, repeat: int,
                trace_dir: Path) -> tuple[dict[str, Any], list[str]]:
        """One profiled window (after its unprofiled twin): its record and why it cannot be read."""
        seen = {p.name for p in trace_dir.glob(anatomy.TRACE_GLOB)}
        if self.spec.reset_prefix_cache:
            ep.reset_prefix_cache()  # each window prefills its prompts, as the first did
        n = max(level, self.window_requests or level)
        panel = self.panels[workload]
        started = utcnow()
        # unprofiled: one pass that gives the engine this level's batch shapes (the first batch of a
        # new size pays one-time kernel set-up, which the profiled window must not be compared
        # with), then the twin, the profiled window's own requests; the prefix cache is emptied
        # before each, as before the profiled one
        twin = None
        for _ in range(2):
            twin = _run_async(_twin(ep, self.spec, panel, level, n))
            if self.spec.reset_prefix_cache:
                ep.reset_prefix_cache()
        pl, before, after, offset = _run_async(_window(ep, self.spec, panel, level, n))
        trace = _wait_trace(trace_dir, seen)
        steps = anatomy.parse_trace(anatomy.read_trace(trace))
        body = window_record(steps, pl, offset, metrics.spec_decode_delta(before, after), twin)
        problems = window_problems(body, arm.speculative)
        doc = {
            "kind": KIND, "schema_version": SCHEMA, "status": "failed" if problems else "ok",
            **({"error": "; ".join(problems)} if problems else {}), "sweep": self.spec.name, "arm": arm.name,
            "speculative_config": arm.speculative_config, "workload": workload, "concurrency": level,
            "repeat": repeat, "started_at": started, "finished_at": utcnow(),
            "profiler": {"route": "torch profiler: POST /start_profile, POST /stop_profile",
                         "config": self.kept_at(anatomy.profiler_config(trace_dir)), "env": anatomy.PROFILE_ENV,
                         "trace": paths.portable(str(self.kept_at(trace))), "trace_bytes": trace.stat().st_size},
            "server": {"argv": self.kept_at(ep.argv), "env": ep.env, "engine_version": ep.engine_version, "pid": ep.pid},
            "sampling": self.spec.sampling.model_dump(mode="json"), "kept_apart": KEPT_APART,
            "units": {"*_ms": "milliseconds per step (profiled engine)", "start_s": "epoch seconds",
                      "unprofiled.cycle_ms": "ms per decode step, estimated unprofiled (cycle / slowdown)",
                      "*.ms_per_token": "client ms per streamed token after each request's first",
                      "shares": "fraction of the step cycle", "*_tokens": "tokens",
                      "requests[].chunks": "[arrival, epoch s; tokens; the step it was given to]"},
            "provenance": self.provenance, **body,
        }
        return doc, problems

    def kept_at(self, value: Any) -> Any:
        """A path (or a string, list or dict holding one) in this run's folder, as the run keeps
        it: unchanged here; in the driver's folder when a node profiled it into its scratch one."""
        if self.shown_out is None:
            return value
        if isinstance(value, Path):
            return self.shown_out / value.relative_to(self.out_dir.resolve())
        return json.loads(json.dumps(value).replace(json.dumps(str(self.out_dir.resolve()))[1:-1],
                                                    json.dumps(str(self.shown_out))[1:-1]))

    def fail(self, arm, workload: str, level: int, repeat: int, why: str, *, quiet: bool = False,
             provenance: dict[str, Any] | None = None) -> None:
        """A window that has no measurement, recorded as failed with why (``provenance``: where, when
        the driver records a lost block's windows; ``quiet``: the caller says it in one line)."""
        self.record_failed({"kind": KIND, "schema_version": SCHEMA, "status": "failed", "sweep": self.spec.name,
                            "arm": arm.name, "workload": workload, "concurrency": level, "repeat": repeat,
                            "failed_at": utcnow(), "error": " ".join(why.split())[:2000],
                            **({"provenance": provenance} if provenance else {})}, quiet=quiet)

    def record_failed(self, doc: dict[str, Any], quiet: bool = False, retried: bool = False) -> None:
        """Keep a failed window under a failure's name; ``retried``: an attempt profiled again at
        once (named ``.failed-<time>.retried.json``), which the run does not count as failed."""
        p = record_path(self.out_dir, doc["arm"], doc["workload"], doc["concurrency"], doc["repeat"])
        stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%S%fZ")
        write_once(p.with_name(f"{p.stem}.failed-{stamp}{RETRIED if retried else ''}.json"),
                   (json.dumps(doc, indent=2, default=str) + "\n").encode())
        if not retried:
            self.outcome.failed.append(failed_line(doc))
        if not quiet:
            self.echo(f"FAILED anatomy {failed_line(doc, 300)}")


def _newest_failure(out_dir: Path, arm: str, workload: str, level: int, repeat: int) -> dict[str, Any]:
    p = record_path(out_dir, arm, workload, level, repeat)
    # the newest final failure first (an attempt profiled again at once is only a fallback)
    for f in sorted(p.parent.glob(f"{p.stem}.failed-*.json"), key=lambda f: (not f.name.endswith(RETRIED + ".json"),
                                                                              f.name), reverse=True):
        try:
            return json.loads(f.read_text())
        except (OSError, ValueError):
            continue
    return {"arm": arm, "workload": workload, "concurrency": level, "repeat": repeat, "error": "no record"}


def _one_arm(spec: SweepSpec, arm: Any) -> SweepSpec:
    return spec.model_copy(update={"arms": [arm], "start_together": False})


def failed_line(doc: dict[str, Any], width: int = 160) -> str:
    """A failed window in one line: arm/workload/cNNN-rR (why)."""
    return (f"{doc['arm']}/{doc['workload']}/{level_tag(doc['concurrency'])}-r{doc['repeat']} "
            f"({str(doc.get('error', ''))[:width]})")


# -- on Ray: one task per (arm, repeat) block --------------------------------------------------------
@dataclass
class AnatomyOrder:
    """One anatomy block as the driver hands it to a node."""

    key: str
    sweep: int
    spec: SweepSpec
    arm: str
    repeat: int
    windows: list[tuple[str, int]]
    window_requests: int | None
    out: str  # the driver's run folder, as its records name it
    engine: str | None  # the driver's vLLM version
    argv: list[str]
    cwd: str
    attempt: int
    mailbox: Any


def anatomy_task(order: AnatomyOrder) -> dict[str, Any]:  # pragma: no cover - runs in a Ray worker
    """Profile one block's windows on this node; every file it writes goes to the driver."""
    t0, began = time.monotonic(), time.time()
    # traces at the block's end only: a trace is whole once its server has stopped (every rank's)
    with on_node(order, keep=("anatomy.json", "invocations/"), late=("logs/", "traces/")) as (staging, shipper, node,
                                                                                              send):
        run = AnatomyRun(order.spec, staging, order.window_requests, False, lambda text: send("echo", text),
                         shown_out=Path(order.out), after_window=shipper.ship, node=node, argv=order.argv)
        arm = next(a for a in order.spec.arms if a.name == order.arm)
        where = f"node {node['host']} ({node['node_ip']})"
        engine = run.provenance["versions"].get("vllm")
        if order.engine and engine != order.engine:  # refused here, submitted again while retries are left
            raise BlockRefused(f"{where} has vLLM {engine}, the driver {order.engine}")
        if arm.name in run.refused:
            raise BlockRefused(f"{where} cannot serve arm {arm.name}: {run.refused[arm.name]}")
        run.block(arm, order.repeat, [(w, int(c)) for w, c in order.windows])
        return {"node": node, "wall_s": time.monotonic() - t0, "points": len(order.windows), "began": began,
                "ended": time.time()}


@dataclass
class AnatomyBlock(FleetBlock):
    """One arm's start in one repeat, and its windows (``points``: (workload, level) pairs)."""

    arm: Any = None

    @property
    def key(self) -> str:
        return f"{self.run.spec.name}/r{self.repeat}/{self.arm.name}"


class AnatomyBlocks:
    """An anatomy run's blocks, for the fleet's dispatch: a block is one arm's start in one repeat
    and its windows; the driver writes what nodes send and records a lost block's windows as failed."""

    task_fn = staticmethod(anatomy_task)

    def measure_all(self, fleet: Fleet, t0: float) -> None:
        (run,) = fleet.runs
        todo = [AnatomyBlock(run, repeat, 0, None, windows, arm=arm) for repeat, arm, windows in run.todo()]
        refused = list(run.outcome.failed)  # the arms this build refuses, recorded here before any block
        fleet.bar.total += run.outcome.already + sum(len(b.points) for b in todo)
        fleet.bar.update(run.outcome.already)
        fleet.dispatch(todo)
        run.outcome.failed = refused + self.still_failed(todo)

    @staticmethod
    def still_failed(blocks: list[AnatomyBlock]) -> list[str]:
        """Each window of ``blocks`` still without a record, as its newest failure record says it
        (a lost block's window that a retry then profiled is not a failure)."""
        return [failed_line(_newest_failure(b.run.out_dir, b.arm.name, w, c, b.repeat)) for b in blocks
                for w, c in unrecorded(b.run.out_dir, b.arm.name, b.repeat, b.points)]

    def block_specs(self, run: AnatomyRun) -> list[SweepSpec]:
        return [_one_arm(run.spec, a) for a in run.spec.arms]  # a block starts one arm's server

    def block_spec(self, blk: AnatomyBlock) -> SweepSpec:
        return _one_arm(blk.run.spec, blk.arm)

    def order(self, fleet: Fleet, blk: AnatomyBlock) -> AnatomyOrder:
        run = blk.run
        return AnatomyOrder(key=blk.key, sweep=0, spec=run.spec, arm=blk.arm.name, repeat=blk.repeat,
                            windows=list(blk.points), window_requests=run.window_requests,
                            out=str(run.out_dir.resolve()), engine=run.provenance["versions"].get("vllm"),
                            argv=list(run.provenance["argv"]), cwd=os.getcwd(),
                            attempt=blk.attempt, mailbox=fleet.mailbox)

    def needs_sizing(self, blk: AnatomyBlock) -> bool:
        return False  # a window sends the level's requests from the panel: nothing to size

    def count(self, fleet: Fleet, run: AnatomyRun, relp: Path, dest: Path) -> None:
        """A window's record: profiled (written) or failed on its node, one tick either way, as a
        local run ticks; a window sent twice (a block declared lost that was not) is kept apart."""
        if (relp.parts[0] in ("logs", "traces") or dest.suffix != ".json" or ".superseded-" in dest.name
                or dest.name.endswith(RETRIED + ".json")):  # an attempt its node profiled again: no tick
            return
        if ".failed-" not in dest.name:
            run.outcome.written.append(dest)
        fleet.bar_points(1)

    def left_of(self, blk: AnatomyBlock) -> list[Any]:
        return unrecorded(blk.run.out_dir, blk.arm.name, blk.repeat, blk.points)

    def record_left(self, blk: AnatomyBlock, left: list[Any], exc: Exception, node: dict[str, Any]) -> None:
        where = {"executor": {k: v for k, v in node.items() if k != "hardware"} or {"kind": "ray", "block": blk.key},
                 "hardware": node.get("hardware") or "unknown: the node was lost before it said"}
        for w, c in left:  # said once, in the fleet's line
            blk.run.fail(blk.arm, w, c, blk.repeat, f"{type(exc).__name__}: {exc}", quiet=True, provenance=where)

    def write_timing(self, fleet: Fleet, run: Any, index: int, ended: str, elapsed_s: float) -> None:
        """An anatomy run keeps no timing record (its records carry their windows' times)."""
