"""Sweeps across a fleet on Ray: one pairing block per task, every ledger written by the driver.

The unit of work is a **pairing block**: one repeat of one sweep (a study's condition), all its
arms in their ABBA order on one node, so every pair is measured on the same machine and GPU
model. Blocks run in parallel across nodes (``max_blocks`` caps how many at once); a block asks
Ray for the GPUs its largest arm serves on (tensor x pipeline x data parallel) and a CPU for its
load client, or, on the CPU engine, a whole node's CPUs; ``accelerator_type``, node ``labels``
and custom ``resources`` pin blocks to a kind of node. Ray's ``SPREAD`` strategy places them, so
consecutive blocks go to different nodes.

Preflight runs once on the driver before any block is scheduled (bad input, a missing model, an
engine that cannot serve an arm), then again on each node before its first server starts, in
the block: the model path, the workloads (the node must build the same prompts: the sweep's
identity hash), the dtype it resolves and the engine version must be the driver's, or the block
is refused on that node with the reason.

Files: a block measures into a scratch folder on its node and, after every point (and after
sizing and at its end), sends what it wrote to a mailbox actor on the head node; the driver
takes the files from there and writes them into the run folder under the local sweep's
write-once rules. No shared file system is assumed, and none is used when there is one: the
run folder is the driver's, and nothing else is written to it.

Faults: a block whose node dies, whose worker is killed (out of memory, preemption) or that
raises records its points without a measurement as failed (``NodeLost``, ``WorkerLost``,
``BlockFailed``, with Ray's reason) and is submitted again, up to ``retries`` times; Ray places
it on a node that is alive. Points that finished before the fault are already on the driver:
they are kept and never measured again. Rerunning the same command skips finished points, as
a local run does. Ctrl-C on the driver cancels every block (each stops its servers on the way
out), waits for them, then kills what is left; a launched server dies with its worker (it gets
the parent-death signal). Progress on the driver: blocks queued / running / done and points.

Ray is imported only here and only when this executor is chosen (``pip install -e '.[ray]'``).
"""

from __future__ import annotations

import collections
import contextlib
import dataclasses
import json
import os
import shutil
import socket
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Protocol

from specnb.engine import forkserver
from specnb.errors import SpecnbError
from specnb.sweep.observers import SweepObserver
from specnb.sweep.plan import Levels, sizing_path, superseded_path
from specnb.sweep.rounds import Rounds, run_rounds
from specnb.sweep.spec import SweepError, SweepSpec

__all__ = ["NodeLost", "WorkerLost", "BlockFailed", "BlockRefused", "block_gpus", "layout_gpus",
           "Fleet", "FleetBlock", "Blocks", "SweepBlocks", "FileSink", "retry", "on_node", "import_ray"]

# set in a block's worker while it runs, so the servers it launches carry it (never recorded in a ledger)
BLOCK_ENV = "SPECNB_FLEET_BLOCK"
# the resource Ray gives its head node only
HEAD_RESOURCE = "node:__internal_head__"


class FleetError(SpecnbError):
    """The fleet cannot run the sweep (Ray missing, no node can hold a block)."""


class NodeLost(SpecnbError):
    """The node running the block died (or was removed) before the point was measured."""


class WorkerLost(SpecnbError):
    """The block's worker process died (killed, out of memory, preempted) before the point was measured."""


class BlockFailed(SpecnbError):
    """The block raised on its node before the point was measured (the node's reason follows)."""


class BlockRefused(SpecnbError):
    """The node cannot run the block as the driver planned it (another engine, dtype or workload)."""


class BlockCancelled(SpecnbError):
    """The driver cancelled the block (Ctrl-C)."""


# -- resources ----------------------------------------------------------------------------------
_LAYOUT = {"tensor": ("--tensor-parallel-size", "-tp"), "pipeline": ("--pipeline-parallel-size", "-pp"),
           "data": ("--data-parallel-size", "-dp")}


def _flag_int(args: list[str], names: tuple[str, ...]) -> int:
    value = 1
    for i, a in enumerate(args):
        raw = None
        if a in names and i + 1 < len(args):
            raw = args[i + 1]
        elif any(a.startswith(n + "=") for n in names):
            raw = a.split("=", 1)[1]
        if raw is not None:
            try:
                value = int(raw)
            except ValueError:
                raise SweepError(f"{a} {raw!r}: not a whole number") from None
    return value


def layout_gpus(args: list[str]) -> int:
    """GPUs one server asks for: tensor x pipeline x data parallel (vLLM's own flags)."""
    n = 1
    for names in _LAYOUT.values():
        n *= max(_flag_int(args, names), 1)
    return n


def block_gpus(spec: SweepSpec) -> int:
    """GPUs a pairing block needs: its arms run one after another, so the largest arm's layout,
    or, with ``start_together`` (every arm's server up at once), their sum (arms attached to an
    endpoint need none)."""
    sizes = [layout_gpus([*spec.server_args, *arm.server_args]) for arm in spec.arms if not arm.endpoint]
    return sum(sizes) if spec.start_together else max(sizes, default=0)


def block_options(spec: SweepSpec, ex: Any, cpu_engine: bool, node_cpus: float | None) -> dict[str, Any]:
    """Ray task options for one of the sweep's blocks."""
    launched = any(not arm.endpoint for arm in spec.arms)
    if cpu_engine and launched:  # vLLM-CPU takes every core it is given: one block per node
        gpus, cpus = 0, ex.cpus_per_block or node_cpus or 1
    else:
        gpus, cpus = block_gpus(spec), ex.cpus_per_block or 1
    opts: dict[str, Any] = {"num_cpus": cpus, "num_gpus": gpus, "max_retries": 0, "scheduling_strategy": "SPREAD"}
    if ex.accelerator_type:
        opts["accelerator_type"] = ex.accelerator_type
    if ex.resources:
        opts["resources"] = dict(ex.resources)
    if ex.labels:
        opts["label_selector"] = dict(ex.labels)
    return opts


# -- the node's side -------------------------------------------------------------------------------
class _Mailbox:
    """What blocks send the driver (files, lines to print, "started"), held until it takes them."""

    def __init__(self) -> None:
        self.items: list[tuple[str, str, Any]] = []

    def put(self, items: list[tuple[str, str, Any]]) -> int:
        self.items.extend(items)
        return len(items)

    def take(self) -> list[tuple[str, str, Any]]:
        out, self.items = self.items, []
        return out


@dataclass
class _Order:
    """One block as the driver hands it to a node."""

    key: str  # "<sweep name>/r<repeat>" (and the search round)
    sweep: int  # index of the sweep on the driver
    spec: SweepSpec
    repeat: int
    round: int
    levels: Levels
    pending: list[str]  # point ids to measure
    sizing: dict[str, bytes]  # the run's sizing (and sequential round) records: every block sends the same requests
    identity: str  # the sweep's identity hash on the driver
    engine: str | None  # the driver's vLLM version
    argv: list[str]
    cwd: str
    attempt: int
    mailbox: Any


class _Shipper(SweepObserver):
    """Sends a block's new files to the driver's mailbox (a Parquet sidecar before the ledger
    that names it; server logs at the block's end, when they are whole): an observer of the
    block's run, told after every point, sizing and block."""

    def __init__(self, staging: Path, send: Callable[[str, Any], None], sweep: int,
                 keep: tuple[str, ...] = ("sweep.json",), late: tuple[str, ...] = ("logs/",)):
        """``keep``: files and folders (``name/``) the block writes for itself, never sent (the
        driver wrote its own); ``late``: folders sent at the block's end only, when whole."""
        self.staging, self.send, self.sweep, self.keep, self.late = staging, send, sweep, keep, late
        self.sent: set[str] = set()

    def ship(self, final: bool = False) -> None:
        batch = []
        for p in sorted(self.staging.rglob("*"), key=lambda q: (q.suffix == ".json", str(q))):
            rel = p.relative_to(self.staging).as_posix()
            if (not p.is_file() or rel in self.sent or p.name.startswith(".")
                    or any(rel == k or (k.endswith("/") and rel.startswith(k)) for k in self.keep)):
                continue
            if not final and rel.startswith(self.late):
                continue
            batch.append((self.sweep, rel, p.read_bytes()))
            self.sent.add(rel)
        if batch:
            self.send("files", batch)

    def files_written(self) -> None:
        self.ship()


# what Ray puts in a task's environment when the node's own has none (OMP_NUM_THREADS = the task's
# CPUs): a launched server would inherit it and run other than it does in a local sweep
RAY_DEFAULTS = ("OMP_NUM_THREADS",)


def _without_ray_defaults() -> dict[str, str]:
    """Take out of this worker's environment what Ray set and the node's raylet (its parent) has
    not; returns what was taken, to put back after the block."""
    import psutil

    try:
        base = psutil.Process(os.getppid()).environ()
    except (psutil.Error, OSError):  # another platform, or no permission: leave the environment as it is
        return {}
    return {k: os.environ.pop(k) for k in RAY_DEFAULTS if k in os.environ and k not in base}


@contextlib.contextmanager
def on_node(order: Any, keep: tuple[str, ...] = ("sweep.json",),
            late: tuple[str, ...] = ("logs/",)) -> Iterator[tuple[Path, Any, dict[str, Any], Callable[[str, Any], None]]]:
    """A block's frame on its node (in a Ray worker): says where it runs, gives it a scratch
    folder whose files go to the driver (all of them once more at the end), runs it in the
    driver's folder with the block's marker in its environment and without Ray's defaults.
    ``order`` carries ``key``, ``sweep``, ``attempt``, ``cwd`` and ``mailbox``; ``keep`` and ``late``
    are the shipper's (what is never sent, what is sent at the end only); it yields the scratch
    folder, the shipper (``ship()`` sends what is new), the node's description and ``send``."""
    import ray

    ctx = ray.get_runtime_context()
    node = {"kind": "ray", "node_id": ctx.get_node_id(), "node_ip": ray.util.get_node_ip_address(),
            "host": socket.gethostname(), "job_id": ctx.get_job_id(), "task_id": ctx.get_task_id(),
            "gpu_ids": [str(g) for g in ray.get_gpu_ids()], "block": order.key, "attempt": order.attempt}

    def send(kind: str, payload: Any) -> None:
        ray.get(order.mailbox.put.remote([(order.key, kind, payload)]))

    from specnb.ledger import provenance

    # the node's own hardware, for the failure records the driver writes if this block is lost
    send("started", {**node, "hardware": {**provenance.hardware(), **provenance.confinement()}})
    staging = Path(tempfile.mkdtemp(prefix="specnb-block-"))
    shipper = _Shipper(staging, send, order.sweep, keep, late)
    old = os.getcwd()
    removed: dict[str, str] = {}
    try:
        if order.cwd and os.path.isdir(order.cwd):  # relative paths (model, workloads) mean the driver's
            os.chdir(order.cwd)
        os.environ[BLOCK_ENV] = order.key  # in every server it starts: what a node's leftovers are found by
        removed.update(_without_ray_defaults())
        node["ray_env_removed"] = sorted(removed)
        yield staging, shipper, node, send
    finally:
        forkserver.close_all()  # a Ray worker outlives its block: the block's fork servers must not
        os.chdir(old)
        os.environ.pop(BLOCK_ENV, None)
        os.environ.update(removed)
        try:
            shipper.ship(final=True)
        except Exception:  # noqa: BLE001 - the driver is gone: nothing to send to
            pass
        shutil.rmtree(staging, ignore_errors=True)


def _block_task(order: _Order) -> dict[str, Any]:  # pragma: no cover - runs in a Ray worker
    """Run one pairing block on this node; every file it writes goes to the driver."""
    t0, began = time.monotonic(), time.time()
    with on_node(order) as (staging, shipper, node, send):
        for rel, data in order.sizing.items():
            (staging / rel).parent.mkdir(parents=True, exist_ok=True)
            (staging / rel).write_bytes(data)
            shipper.sent.add(rel)
        run = _block_run(order, staging, shipper, node, send)
        pending = set(order.pending)
        plan = [[pt for pt in block if pt.point_id in pending] for block in run.plan(order.levels, order.round)
                if block and block[0].repeat == order.repeat]
        run.run_blocks([b for b in plan if b])
        return {"node": node, "wall_s": time.monotonic() - t0, "points": run.points_run, "began": began,
                "ended": time.time()}


def _block_run(order: _Order, staging: Path, shipper: _Shipper, node: dict[str, Any],
               send: Callable[[str, Any], None]) -> Any:  # pragma: no cover - runs in a Ray worker
    """The block's runner on this node, after the node's own preflight (its lines are the
    driver's to say, not the node's): the local runner, its files shipped as written."""
    from specnb.sweep.runner import BlockRunner, preflight

    pre = preflight(order.spec, staging)
    if pre.identity != order.identity:
        raise BlockRefused(f"node {node['host']} ({node['node_ip']}) resolves the sweep differently (identity "
                           f"{pre.identity} vs the driver's {order.identity}: another dtype, model or prompt set there)")
    engine = pre.provenance.versions.get("vllm")
    if order.engine and engine != order.engine:
        raise BlockRefused(f"node {node['host']} ({node['node_ip']}) has vLLM {engine}, the driver {order.engine}")
    pre = dataclasses.replace(pre, provenance=pre.provenance.model_copy(update={"executor": node, "argv": order.argv}))
    return BlockRunner(order.spec, staging, pre, echo=lambda text: send("echo", text), observers=[shipper],
                       executor=node)


# -- the driver's side -----------------------------------------------------------------------------
@dataclass
class FleetBlock:
    run: Any  # the sweep's driver-side BlockRunner (its plan, outcome and failure records; it runs no block)
    repeat: int
    round: int
    levels: Levels
    points: list[Any]
    attempt: int = 0
    node: dict[str, Any] | None = None
    submitted: float = 0.0
    started: float | None = None
    history: list[dict[str, Any]] = field(default_factory=list)

    @property
    def key(self) -> str:
        return f"{self.run.spec.name}/r{self.repeat}" + (f"/round{self.round}" if self.round else "")


def import_ray() -> Any:
    try:
        import ray
    except ImportError:
        raise FleetError("the Ray executor needs Ray: pip install -e '.[ray]' (or any ray>=2.48)") from None
    return ray


def _sidecar_of(data: bytes) -> str | None:
    """The Parquet sidecar a point ledger's JSON names (None: not a point ledger, or none)."""
    try:
        doc = json.loads(data)
    except (ValueError, UnicodeDecodeError):
        return None
    return doc.get("requests_file") if isinstance(doc, dict) else None


def lost_provenance(prov: Any, node: dict[str, Any], block: str, attempt: int) -> Any:
    """The provenance of a lost block's failure records, written by the driver: the lost node's
    hardware as it reported it when the block started (never the driver's), or a line saying the
    node was lost before it reported any; where the block ran, as ``executor``."""
    hardware = node.get("hardware") or {"cpu_model": "unknown: the node was lost before its block reported its "
                                                     "hardware"}
    executor = {k: v for k, v in node.items() if k != "hardware"}
    return prov.model_copy(update={"hardware": hardware, "executor": {**executor, "kind": "ray", "block": block,
                                                                      "attempt": attempt}})


def _where(node: dict[str, Any] | None) -> str:
    """A node in a few characters: its host and the start of Ray's node id (simulated nodes share a host)."""
    if not node:
        return "a node not yet known"
    return f"{node.get('host', '?')}:{str(node.get('node_id', '?'))[:8]}"


def _stamp() -> str:
    return datetime.now(UTC).strftime("%Y%m%dT%H%M%S%fZ")


def _classify(ray: Any, exc: BaseException) -> tuple[type[SpecnbError], str]:
    """What a block's exception from Ray means: the failure type its points record, and why."""
    ex = ray.exceptions
    text = " ".join(str(exc).split())
    if isinstance(exc, ex.TaskCancelledError):
        return BlockCancelled, "the driver cancelled the block"
    if isinstance(exc, getattr(ex, "NodeDiedError", ())):
        return NodeLost, f"node lost: {text[:300]}"
    if isinstance(exc, (ex.WorkerCrashedError, getattr(ex, "OutOfMemoryError", ex.WorkerCrashedError))):
        return WorkerLost, f"worker lost (killed, out of memory or preempted): {text[:300]}"
    if not isinstance(exc, ex.RayTaskError) and "node" in text.lower() and ("dead" in text.lower() or "died" in text.lower()):
        return NodeLost, f"node lost: {text[:300]}"  # Ray's own message for a task whose node went away
    if isinstance(exc, ex.RayTaskError):
        cause = exc.cause if getattr(exc, "cause", None) is not None else exc
        kind = BlockRefused if type(cause).__name__ == "BlockRefused" else BlockFailed
        return kind, f"{type(cause).__name__}: {' '.join(str(cause).split())[:300]}"
    return BlockFailed, f"{type(exc).__name__}: {text[:300]}"


class FileSink:
    """Writes the files blocks send into their run folders, under the local sweep's write-once
    rules, and hands each written file to ``count`` (its kind of work's bookkeeping)."""

    def __init__(self, echo: Callable[[str], None], count: Callable[[Any, Path, Path], None]):
        self.echo, self.count = echo, count
        # (run, folder, sidecar name a block wrote) -> the name the driver gave it (a collision)
        self.renamed: dict[tuple[int, str, str], str] = {}

    def write(self, run: Any, rel: str, data: bytes) -> None:
        """A file a block wrote, into the run folder, write-once as the local sweep writes it."""
        from specnb.ledger import write_once

        relp = Path(rel)
        if relp.is_absolute() or ".." in relp.parts:
            self.echo(f"ignored a file outside the run folder from a block: {rel}")
            return
        dest = run.out_dir / relp
        renamed = self.renamed.pop((id(run), relp.parent.as_posix(), _sidecar_of(data)), None) \
            if dest.suffix == ".json" else None
        if renamed is not None:  # its sidecar was written under another name: the ledger names that one
            doc = json.loads(data)
            doc["requests_file"] = renamed
            data = (json.dumps(doc, indent=2) + "\n").encode()
        if relp.parts[0] == "logs" and dest.exists():  # a retried block's log of the same arm and repeat
            dest = dest.with_name(f"{dest.stem}.{_stamp()}{dest.suffix}")
        try:
            write_once(dest, data)
        except FileExistsError:
            if dest.read_bytes() == data or relp.parts[0] == "sizing":  # the run's first sizing stands
                return
            # a point measured twice (a block declared lost that was not): kept, never paired
            old_name = dest.name
            dest = superseded_path(dest) if dest.suffix == ".json" else dest.with_name(f"{dest.stem}-{_stamp()}{dest.suffix}")
            write_once(dest, data)
            if dest.suffix == ".parquet":
                self.renamed[(id(run), relp.parent.as_posix(), old_name)] = dest.name
        self.count(run, relp, dest)


class Blocks(Protocol):
    """What a kind of work's blocks are, for the dispatcher: what a block runs on its node
    (``task_fn``), the rounds of blocks (``measure_all``), what a block asks Ray for, the order a
    node gets, whether it sizes panels first (it then runs alone), how a file it sends is counted,
    what a lost block leaves and how that is recorded, and the driver's timing record."""

    task_fn: Callable[[Any], dict[str, Any]]

    def measure_all(self, fleet: Fleet, t0: float) -> None: ...
    def block_specs(self, run: Any) -> list[SweepSpec]: ...
    def block_spec(self, blk: Any) -> SweepSpec: ...
    def order(self, fleet: Fleet, blk: Any) -> Any: ...
    def needs_sizing(self, blk: Any) -> bool: ...
    def count(self, fleet: Fleet, run: Any, relp: Path, dest: Path) -> None: ...
    def left_of(self, blk: Any) -> list[Any]: ...
    def record_left(self, blk: Any, left: list[Any], exc: Exception, node: dict[str, Any]) -> None: ...
    def write_timing(self, fleet: Fleet, run: Any, index: int, ended: str, elapsed_s: float) -> None: ...


class SweepBlocks:
    """A sweep's blocks: one repeat of one sweep (a study's condition), its points measured on
    one node (:func:`_block_task`)."""

    task_fn = staticmethod(_block_task)

    def measure_all(self, fleet: Fleet, t0: float) -> None:
        """Every sweep's rounds, each round's blocks dispatched together, then each sweep finished."""
        rounds = [Rounds(r.spec, r.out_dir, r.workloads, r.clock, r.echo) for r in fleet.runs]

        def measure(active: list[int]) -> None:
            blocks = []
            for i in active:
                blocks += self.blocks_of(fleet.runs[i], rounds[i].levels, rounds[i].round)
            # repeat-major across conditions: drift lands on every condition alike
            blocks.sort(key=lambda b: (b.repeat, fleet.runs.index(b.run)))
            fleet.bar.total += sum(len(b.points) for b in blocks)
            fleet.bar.refresh()
            fleet.dispatch(blocks)

        run_rounds(rounds, measure, lambda: time.monotonic() - t0)
        for run in fleet.runs:
            run.finish()

    def blocks_of(self, run: Any, levels: Levels, round_: int) -> list[FleetBlock]:
        """The round's pairing blocks of one sweep with their points not yet measured; an arm this
        build cannot serve gets its refusal recorded here, as the local run records it."""
        from specnb.engine.kernels import Unservable
        from specnb.ledger import utcnow

        by_repeat: dict[int, list[Any]] = {}
        for block in run.plan(levels, round_):
            for pt in block:
                run.planned.append(pt)
                if run.path(pt).exists():
                    run.outcome.skipped.append(run.path(pt))
                elif pt.arm.name in run.refused:
                    if not run.refusal_recorded(pt):
                        run.record_failure(pt, Unservable(run.refused[pt.arm.name]), None, utcnow(), unticked=0,
                                           quiet=True)
                else:
                    by_repeat.setdefault(pt.repeat, []).append(pt)
        return [FleetBlock(run, r, round_, levels, pts) for r, pts in sorted(by_repeat.items())]

    def order(self, fleet: Fleet, blk: FleetBlock) -> _Order:
        run = blk.run
        sizing = {}
        for name in run.workloads:
            p = sizing_path(run.out_dir, name)
            if p.exists():
                sizing[p.relative_to(run.out_dir).as_posix()] = p.read_bytes()
        # a sequential round's record says which panel its points send (specnb.sweep.sequential.round_panels)
        for p in sorted((run.out_dir / "sequential").glob("round-*.json")):
            sizing[p.relative_to(run.out_dir).as_posix()] = p.read_bytes()
        return _Order(key=blk.key, sweep=fleet.runs.index(run), spec=run.spec, repeat=blk.repeat, round=blk.round,
                      levels=blk.levels, pending=[pt.point_id for pt in blk.points], sizing=sizing,
                      identity=run.identity, engine=run.provenance.versions.get("vllm"),
                      argv=list(run.provenance.argv), cwd=os.getcwd(), attempt=blk.attempt, mailbox=fleet.mailbox)

    def needs_sizing(self, blk: FleetBlock) -> bool:
        """Whether the block would size its workloads' panels itself: the first such block of a
        sweep runs alone, so every repeat sends the same number of requests."""
        run = blk.run
        return bool(run.spec.work_floor_tokens) and any(
            not sizing_path(run.out_dir, pt.workload.name).exists() for pt in blk.points)

    def block_specs(self, run: Any) -> list[SweepSpec]:
        """What the run's blocks ask Ray for, as sweeps (one here: every block runs all its arms)."""
        return [run.spec]

    def block_spec(self, blk: FleetBlock) -> SweepSpec:
        """What this block asks Ray for (:func:`block_options` of it)."""
        return blk.run.spec

    def count(self, fleet: Fleet, run: Any, relp: Path, dest: Path) -> None:
        """A file written for ``run``, into its outcome and the progress bar."""
        if relp.parts[0] == "timings":
            run.outcome.timings.append(dest)
        if relp.parts[0] in ("logs", "sizing", "timings") or dest.suffix != ".json":
            return
        name = dest.name
        if ".superseded-" in name:
            run.outcome.superseded.append(dest)
        elif ".failed-" in name:
            run.outcome.failed.append(dest)
            fleet.bar_points(0)
        else:
            run.outcome.written.append(dest)
            fleet.bar_points(1)

    def left_of(self, blk: FleetBlock) -> list[Any]:
        """A lost block's points that have no measurement on the driver."""
        return [pt for pt in blk.points if not blk.run.path(pt).exists()]

    def record_left(self, blk: FleetBlock, left: list[Any], exc: SpecnbError, node: dict[str, Any]) -> None:
        """Each of them recorded as failed, with why and where (the node's own provenance)."""
        from specnb.ledger import utcnow

        prov = lost_provenance(blk.run.provenance, node, blk.key, blk.attempt)
        for pt in left:
            blk.run.record_failure(pt, exc, None, utcnow(), quiet=True, provenance=prov)

    def write_timing(self, fleet: Fleet, run: Any, index: int, ended: str, elapsed_s: float) -> None:
        """The driver's own record: its preflight and search phases (the blocks' phases are in
        their own records, one per block, with the node that ran it), and each block's placement
        and executor overhead."""
        from specnb.ledger import utcnow, write_once
        from specnb.ledger.timing import TIMINGS_DIR, total_phases
        from specnb.sweep.ledgers import timing_record

        phases = run.clock.totals()
        phases["other"] = 0.0  # the driver's waiting is the blocks' time, counted in their records
        blocks = fleet.records.get(index, [])
        if not blocks and not any(phases.values()):
            return
        overhead = [b["overhead_s"] for b in blocks if b.get("ok")]
        executor = {"kind": "ray", "role": "driver", "elapsed_s": round(elapsed_s, 2), "blocks": blocks,
                    "max_blocks": fleet.ex.max_blocks, "retries": fleet.ex.retries,
                    "overhead_s_per_block_median": (sorted(overhead)[len(overhead) // 2] if overhead else None)}
        doc = timing_record(run.spec.name, ended, run.started_at, phases, 0, [], executor=executor)
        doc["finished_at"] = utcnow()
        doc["overhead_share"] = None  # the driver measures nothing: the blocks' records hold the shares
        try:
            run.outcome.timings.append(write_once(run.out_dir / TIMINGS_DIR / f"{_stamp()}.json",
                                                  (json.dumps(doc, indent=2) + "\n").encode()))
        except OSError as exc:
            fleet.echo(f"the driver's timing record was not written: {exc}")
        # the invocation's phases: the driver's and every block's it wrote (the machines' time, not the elapsed)
        run.outcome.phases_s = total_phases(json.loads(p.read_text()) for p in run.outcome.timings if p.exists())


def retry(blk: Any, left: list[Any]) -> Any:
    """A lost block submitted again with what it left."""
    return dataclasses.replace(blk, points=left, attempt=blk.attempt + 1, node=None, submitted=0.0, started=None,
                               history=[])


class Fleet:
    """Dispatches the pairing blocks of one or more runs round by round on Ray: placement, retries,
    the mailbox the blocks' files come through (written by a :class:`FileSink`) and Ctrl-C. What
    a block is comes as an object (``blocks``): :class:`SweepBlocks` for sweeps (a study's
    conditions), :class:`specnb.sweep.anatomy.AnatomyBlocks` for the step anatomy."""

    def __init__(self, runs: list[Any], ex: Any, progress: bool, echo: Callable[[str], None],
                 blocks: Blocks | None = None, ray: Any = None):
        """``ray``: the Ray module (imported here when None; a stand-in for the driver's file and
        bookkeeping rules, which need no cluster)."""
        self.runs, self.ex, self.echo = runs, ex, echo
        self.blocks: Blocks = blocks if blocks is not None else SweepBlocks()
        self.ray = ray if ray is not None else import_ray()
        self.progress = progress
        self.blocks_done = 0
        self.records: dict[int, list[dict[str, Any]]] = collections.defaultdict(list)
        self.inbox: collections.deque[tuple[str, str, Any]] = collections.deque()
        self.sink = FileSink(echo, lambda run, relp, dest: self.blocks.count(self, run, relp, dest))

    # -- Ray ---------------------------------------------------------------------------------
    def connect(self) -> None:
        ray = self.ray
        if not ray.is_initialized():
            address = self.ex.address or os.environ.get("RAY_ADDRESS") or None
            ray.init(address=address, include_dashboard=False, log_to_driver=False,
                     logging_level="ERROR", configure_logging=True)
        alive = [n for n in ray.nodes() if n.get("Alive")]
        self.alive = alive
        cpus = [n["Resources"].get("CPU", 0.0) for n in alive if n["Resources"].get("CPU", 0.0) > 0]
        self.node_cpus = min(cpus) if cpus else None
        self.echo(f"ray: {len(alive)} node(s) alive, {sum(n['Resources'].get('GPU', 0.0) for n in alive):g} GPU(s), "
                  f"{sum(n['Resources'].get('CPU', 0.0) for n in alive):g} CPU(s)")
        # the mailbox lives on the head node: the one node whose loss ends the cluster anyway, so the
        # files it holds outlive any worker node (a driver is normally on the head too)
        head = any(HEAD_RESOURCE in n["Resources"] for n in alive)
        box = ray.remote(num_cpus=0)(_Mailbox)
        self.mailbox = (box.options(resources={HEAD_RESOURCE: 0.001}) if head else box).remote()
        self.task = ray.remote(self.blocks.task_fn)
        from specnb.engine.vllm import installed_vllm

        self.cpu_engine = bool(installed_vllm()["cpu_build"])

    # -- what blocks send ------------------------------------------------------------------------
    def drain(self) -> None:
        """Take what blocks sent and act on it: files written into the run folders, lines said."""
        # taken items stay in the inbox until handled: a Ctrl-C in the middle of a write loses none
        # (the next drain, in cancel_all, writes them; a file already written is the same bytes: skipped)
        for key, kind, payload in self.ray.get(self.mailbox.take.remote()):
            if kind == "files":
                self.inbox.extend((key, kind, item) for item in payload)
            else:
                self.inbox.append((key, kind, payload))
        while self.inbox:
            key, kind, payload = self.inbox[0]
            blk = self.by_key.get(key)
            if kind == "started":
                if blk is not None:
                    blk.node, blk.started = payload, time.monotonic()
                self.say_state()
            elif kind == "echo":
                self.echo(f"[{key} on {_where(blk.node if blk else None)}] {payload}")
            elif kind == "files":
                sweep, rel, data = payload
                self.sink.write(self.runs[sweep], rel, data)
            self.inbox.popleft()

    # -- progress --------------------------------------------------------------------------------
    def bar_points(self, n: int) -> None:
        if n:
            self.bar.update(n)

    def say_state(self) -> None:
        running = sum(1 for b in self.running.values() if b.started is not None)
        queued = len(self.queue) + sum(1 for b in self.running.values() if b.started is None)
        self.bar.set_description(f"ray: blocks {queued} queued, {running} running, {self.blocks_done} done")

    # -- the rounds ------------------------------------------------------------------------------
    def run(self) -> list[Any]:
        from specnb.sweep.progress import progress_bar
        from specnb.sweep.runner import ended_by

        self.connect()
        for run in self.runs:  # every sweep's blocks must fit some node, or Ray would queue them forever
            for spec in self.blocks.block_specs(run):
                self.check_placeable(spec)
        self.by_key: dict[str, FleetBlock] = {}
        self.queue: collections.deque[FleetBlock] = collections.deque()
        self.running: dict[Any, FleetBlock] = {}
        self.bar = progress_bar(0, desc="ray", enabled=self.progress, unit="pt", file=sys.stderr, dynamic_ncols=True)
        t0 = time.monotonic()
        ended = "complete"
        try:
            self.blocks.measure_all(self, t0)
        except BaseException as exc:
            ended = ended_by(exc)
            raise
        finally:
            self.bar.close()
            for i, run in enumerate(self.runs):
                self.blocks.write_timing(self, run, i, ended, time.monotonic() - t0)
            try:
                self.ray.kill(self.mailbox)
            except Exception:  # noqa: BLE001 - Ray is going away anyway
                pass
        return [r.outcome for r in self.runs]

    def check_placeable(self, spec: SweepSpec) -> None:
        """One line, before any block is submitted, when no node of the cluster can hold one of the
        sweep's blocks (too few GPUs, no such accelerator, label or resource), or when this Ray
        does not know an option asked for (labels need a Ray with ``label_selector``)."""
        opts = block_options(spec, self.ex, self.cpu_engine, self.node_cpus)
        try:
            self.task.options(**opts)
        except (ValueError, TypeError) as exc:
            raise FleetError(f"Ray {self.ray.__version__} refuses the block options {opts}: {exc}") from None
        need = {"CPU": float(opts["num_cpus"]), "GPU": float(opts["num_gpus"]), **opts.get("resources", {})}
        if opts.get("accelerator_type"):
            need[f"accelerator_type:{opts['accelerator_type']}"] = 0.001
        labels = opts.get("label_selector") or {}

        def fits(node: dict[str, Any]) -> bool:
            have = node.get("Resources") or {}
            node_labels = node.get("Labels")  # a Ray that does not list labels: Ray judges them itself
            return (all(have.get(k, 0.0) >= v for k, v in need.items() if v > 0)
                    and (node_labels is None or all(node_labels.get(k) == v for k, v in labels.items())))

        if not any(fits(n) for n in self.alive):
            offer = "; ".join(sorted({", ".join(f"{k} {v:g}" for k, v in sorted((n.get("Resources") or {}).items())
                                               if k in ("CPU", "GPU") or k.startswith("accelerator_type") or k in need)
                                     for n in self.alive}))
            raise FleetError(f"sweep {spec.name!r}: no node of the cluster can hold a block asking for "
                             f"{', '.join(f'{k} {v:g}' for k, v in need.items() if v > 0)}"
                             + (f" with labels {labels}" if labels else "") + f" (nodes offer: {offer})")

    def submit(self, blk: FleetBlock) -> None:
        opts = block_options(self.blocks.block_spec(blk), self.ex, self.cpu_engine, self.node_cpus)
        blk.submitted, blk.started, blk.node = time.monotonic(), None, None
        ref = self.task.options(**opts).remote(self.blocks.order(self, blk))
        self.running[ref] = blk
        self.by_key[blk.key] = blk
        self.say_state()

    def dispatch(self, blocks: list[FleetBlock]) -> None:
        ray = self.ray
        self.queue.extend(b for b in blocks if b.points)
        try:
            while self.queue or self.running:
                sizing_runs = {id(b.run) for b in self.running.values() if self.blocks.needs_sizing(b)}
                for nxt in list(self.queue):
                    if self.ex.max_blocks is not None and len(self.running) >= self.ex.max_blocks:
                        break
                    if id(nxt.run) in sizing_runs:  # waits for its sweep's sizing block; other sweeps go on
                        continue
                    self.queue.remove(nxt)
                    self.submit(nxt)
                    if self.blocks.needs_sizing(nxt):
                        sizing_runs.add(id(nxt.run))
                ready, _ = ray.wait(list(self.running), num_returns=1, timeout=self.ex.poll_s)
                self.drain()
                for ref in ready:
                    blk = self.running.pop(ref)
                    try:
                        summary = ray.get(ref)
                    except Exception as exc:  # noqa: BLE001 - judged and recorded below
                        self.drain()  # what the block sent before it ended is on disk first
                        self.lost(blk, exc)
                    else:
                        self.drain()
                        self.finished(blk, summary)
                    self.say_state()
        except BaseException:
            self.cancel_all()
            raise

    def finished(self, blk: FleetBlock, summary: dict[str, Any]) -> None:
        self.blocks_done += 1
        returned = time.monotonic() - blk.submitted
        node = summary.get("node") or blk.node or {}
        self.records[self.runs.index(blk.run)].append({
            "block": blk.key, "attempt": blk.attempt, "node_id": node.get("node_id"), "host": node.get("host"),
            "node_ip": node.get("node_ip"), "gpu_ids": node.get("gpu_ids"), "ok": True,
            "queued_s": round((blk.started or time.monotonic()) - blk.submitted, 2),
            # the node's clock (Unix seconds): when it began and ended the block
            "node_began": summary.get("began"), "node_ended": summary.get("ended"),
            "node_wall_s": round(float(summary.get("wall_s") or 0.0), 2), "returned_s": round(returned, 2),
            # what the executor added to the block: placement, the worker's start, sending files back
            "overhead_s": round(returned - float(summary.get("wall_s") or 0.0), 2)})

    def lost(self, blk: FleetBlock, exc: BaseException) -> None:
        """A block that did not finish: its points without a measurement get a failure record
        with the reason, and it goes back in the queue while retries are left."""
        kind, why = _classify(self.ray, exc)
        node = blk.node or {}
        where = _where(node) + (f" ({node.get('node_ip')})" if node.get("node_ip") else "")
        run = blk.run
        self.records[self.runs.index(run)].append({
            "block": blk.key, "attempt": blk.attempt, "node_id": node.get("node_id"), "host": node.get("host"),
            "ok": False, "error_type": kind.__name__, "reason": why,
            "returned_s": round(time.monotonic() - blk.submitted, 2)})
        left = self.blocks.left_of(blk)
        self.blocks.record_left(blk, left, kind(f"block {blk.key} on {where} (try {blk.attempt + 1} of "
                                                f"{self.ex.retries + 1}): {why}"), node)
        again = kind is not BlockCancelled and blk.attempt < self.ex.retries and left
        if not again:  # these points end here: the progress bar counts them as done, like measured ones
            self.bar_points(len(left))
        self.echo(f"ray: block {blk.key} on {where} ended early ({why.splitlines()[0][:200]}); {len(left)} point(s) "
                  + ("recorded as failed, block submitted again" if again else "recorded as failed"))
        if again:
            self.queue.appendleft(retry(blk, left))
        else:
            self.blocks_done += 1

    def cancel_all(self, grace_s: float = 60.0) -> None:
        """Ctrl-C (or an error) on the driver: every running block is cancelled, so it stops its
        servers; what is still running after ``grace_s`` is killed with its worker."""
        ray = self.ray
        self.queue.clear()
        refs = list(self.running)
        if not refs:
            return
        self.echo(f"ray: cancelling {len(refs)} block(s); each stops its servers")
        for ref in refs:
            try:
                ray.cancel(ref, force=False)
            except Exception:  # noqa: BLE001 - already finished
                pass
        deadline = time.monotonic() + grace_s
        pending = refs
        while pending and time.monotonic() < deadline:
            try:
                _, pending = ray.wait(pending, num_returns=len(pending), timeout=1.0)
                self.drain()
            except KeyboardInterrupt:  # a second Ctrl-C: kill now
                break
        for ref in pending:
            try:
                ray.cancel(ref, force=True)
            except Exception:  # noqa: BLE001
                pass
        self.running.clear()
