"""The servers of a sweep's blocks: started alone or with the rest of their repeat, restarted
after dying, stopped, and every start recorded.

A launched arm gets the sweep's and its own arguments (:func:`server_args_for`); an arm with an
``endpoint`` is attached to instead (:func:`open_endpoint`). Every start and stop is timed as a
server phase on the invocation's clock, and every start (a failed one, a restart, one of several
launched together) becomes an entry of :attr:`Servers.starts`, with where a launched server's
start-up went (:func:`specnb.engine.startup.startup_breakdown`), for the timing record.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from specnb.analysis.schedule import with_schedule_key
from specnb.engine import kernels
from specnb.engine.decisions import startup_decisions
from specnb.engine.server import READY_POLL_S, Endpoint, ServerError, VllmServer, attach
from specnb.engine.startup import startup_breakdown
from specnb.engine.vllm import engine_schedule_key, engine_supports_flag
from specnb.ledger import ServerRecord
from specnb.ledger.timing import Phase
from specnb.sweep.arm import Arm
from specnb.sweep.clock import PhaseClock
from specnb.sweep.spec import SweepSpec

__all__ = ["PER_REQUEST_SPEC_FLAG", "PROMPT_DETAILS_FLAG", "Servers", "new_server", "open_endpoint",
           "server_args_for", "server_record"]

PER_REQUEST_SPEC_FLAG = "--per-request-spec-decode-metrics"
PROMPT_DETAILS_FLAG = "--enable-prompt-tokens-details"

# a server launched with its repeat's others and its endpoint, or why it did not come up
Started = tuple[VllmServer, Endpoint | BaseException]


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
    if (spec.load.replays_conversations and PROMPT_DETAILS_FLAG not in args
            and engine_supports_flag(PROMPT_DETAILS_FLAG)):
        args.append(PROMPT_DETAILS_FLAG)
    return args


def new_server(spec: SweepSpec, arm: Arm, model: str | None, log_path: Path) -> VllmServer:
    """The arm's server, not yet started."""
    # the schedule under the name the installed engine takes (vLLM is renaming it: PR #48944)
    config = with_schedule_key(arm.speculative_config, engine_schedule_key()) if arm.schedule else arm.speculative_config
    return VllmServer(
        model, args=server_args_for(spec, arm), speculative_config=config,
        served_model_name=spec.served_model_name or Path(model).name, env={**spec.env, **arm.env},
        log_path=log_path, ready_timeout_s=spec.ready_timeout_s,
    )


def server_record(ep: Endpoint, server: VllmServer | None) -> ServerRecord:
    """The endpoint as ledgers record it, with what a launched server decided at start-up."""
    return ServerRecord(**ep.describe(),
                        startup_decisions=startup_decisions(server.start_log()) if server is not None else None)


@contextmanager
def open_endpoint(spec: SweepSpec, arm: Arm, model: str | None, log_path: Path, clock: PhaseClock,
                  on_start: Callable[[VllmServer | None, Endpoint | None], None],
                  started: Started | None = None) -> Iterator[tuple[Endpoint, VllmServer | None]]:
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
    srv = new_server(spec, arm, model, log_path)
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


class Servers:
    """The servers of one invocation's blocks: each block's own (:meth:`open`), a repeat's launched
    together (:meth:`start_together`) until their blocks take them, and restarts; every start is
    kept in :attr:`starts` as the timing record writes it."""

    def __init__(self, spec: SweepSpec, model: str | None, out_dir: Path, clock: PhaseClock,
                 echo: Callable[[str], None]):
        self.spec, self.model, self.out_dir, self.clock, self.echo = spec, model, out_dir, clock, echo
        self.starts: list[dict[str, Any]] = []  # one entry per server start (or attach), failed ones too
        self._start_s_seen = 0.0  # server_start seconds already given to an entry of starts
        # start_together: (arm, repeat) -> a server started with its repeat's others and its endpoint
        # (or why it did not start), until its block takes it
        self._started: dict[tuple[str, int], Started] = {}

    def log_path(self, arm: Arm, repeat: int) -> Path:
        return self.out_dir / "logs" / f"{arm.name}-r{repeat:02d}.log"

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
        self.starts.append(entry)

    def take_started(self, arm: Arm, repeat: int) -> Started | None:
        """The block's server if it was started with its repeat's others (its block takes it now)."""
        return self._started.pop((arm.name, repeat), None)

    def has_started(self, arm: Arm, repeat: int) -> bool:
        return (arm.name, repeat) in self._started

    def stop(self, server: VllmServer) -> None:
        with self.clock.phase(Phase.SERVER_STOP):
            server.stop()

    def stop_unused(self) -> None:
        """Servers started for blocks that never ran (Ctrl-C, a ledger that cannot be written)."""
        while self._started:
            srv, _ = self._started.popitem()[1]
            self.stop(srv)

    @contextmanager
    def open(self, arm: Arm, repeat: int, started: Started | None = None
             ) -> Iterator[tuple[Endpoint, VllmServer | None]]:
        """The block's endpoint (a server started for it, attached, or one started with its
        repeat), stopped when the block ends; every start recorded."""
        def on_start(srv: VllmServer | None, ep: Endpoint | None) -> None:
            self.record_start(arm, repeat, srv, ep)

        with open_endpoint(self.spec, arm, self.model, self.log_path(arm, repeat), self.clock, on_start,
                           started) as got:
            yield got

    def start_together(self, firsts: list[Any], status: Callable[[str], None]) -> None:
        """``start_together``: launch the servers of one repeat's blocks (``firsts``: the first
        point of each block with points left, a launched arm the build can serve) side by side,
        then wait for each in turn; every start is recorded as it would be alone, a failed one
        kept for its block to record. Nothing is measured until all are up, so no start takes the
        cores from a measurement."""
        if len(firsts) < 2:
            return
        status(f"{self.spec.name} r{firsts[0].repeat}: starting {len(firsts)} servers together")
        launched: list[tuple[Any, VllmServer]] = []
        for pt in firsts:
            srv = new_server(self.spec, pt.arm, self.model, self.log_path(pt.arm, pt.repeat))
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
            up: list[tuple[Any, VllmServer, Endpoint | ServerError]] = []
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
                    time.sleep(READY_POLL_S)
            for pt, srv, got in up:
                self._started[(pt.arm.name, pt.repeat)] = (srv, got)
                self.record_start(pt.arm, pt.repeat, srv, None if isinstance(got, ServerError) else got, together=n)

    def restart(self, server: VllmServer, when: str, arm: Arm, repeat: int,
                warm: Callable[[Endpoint], Any]) -> tuple[Endpoint, ServerRecord]:
        """Stop what is left of a launched server's process group and start it again (same
        arguments, a new port, the same log), warmed up (``warm``); a failed start raises ServerError."""
        self.echo(f"the {server.served_model_name} server (pid {server.pid}) died {when}; restarting it")
        self.stop(server)
        ep = None
        try:
            with self.clock.phase(Phase.SERVER_START):
                ep = server.start()
        finally:
            self.record_start(arm, repeat, server, ep, restart=True)
        with self.clock.phase(Phase.WARMUP):
            warm(ep)
        return ep, server_record(ep, server)
