"""Where measuring work runs, and the one call that runs it there: :func:`run_jobs`.

A job is work made of pairing blocks: a sweep (:class:`SweepJob`: its blocks' points measured)
or a sweep's step anatomy (:class:`AnatomyJob`: a profiled window per point). ``local`` (the
default) runs every block here, one after another (:mod:`specnb.sweep.runner`); ``ray`` runs
each block as a task on a Ray cluster (:mod:`specnb.sweep.fleet`, docs/fleet.md). Every job's
checks run before the first block of any of them. Sweeps (:func:`run_sweep`), a study's
conditions, ``specnb tune``'s proposal and rounds, and ``specnb anatomy`` all go through it.

The option is a string where a user types it (``--executor ray``, a notebook's ``executor``
parameter, a Ray address) or a table of Ray options in a parameter file. Nothing here imports
Ray or the engine: a study's parameters are checked without either.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, Protocol

from pydantic import BaseModel, ConfigDict, Field, model_validator

from specnb.sweep.spec import SweepSpec

__all__ = ["EXECUTORS", "ExecutorSpec", "Job", "SweepJob", "AnatomyJob", "run_jobs", "run_sweep", "run_anatomy"]

EXECUTORS = ("local", "ray")


class ExecutorSpec(BaseModel):
    """Where a sweep's pairing blocks run: here, one after another (``local``), or on a Ray cluster."""

    model_config = ConfigDict(extra="forbid")

    kind: Literal["local", "ray"] = "local"
    address: str | None = Field(None, description="Ray cluster address (None: RAY_ADDRESS, else a Ray started here)")
    max_blocks: int | None = Field(None, ge=1, description="blocks running at once (None: as many as the cluster fits)")
    retries: int = Field(2, ge=0, description="times a block lost with its node or worker is submitted again")
    accelerator_type: str | None = Field(None, description="Ray accelerator type every block runs on (e.g. H100)")
    labels: dict[str, str] = Field(default_factory=dict, description="node labels every block runs on (Ray's label_selector)")
    resources: dict[str, float] = Field(default_factory=dict, description="custom Ray resources every block asks for")
    cpus_per_block: float | None = Field(None, gt=0, description="CPUs a block asks for (None: 1 beside GPUs; "
                                         "a whole node's on the CPU engine)")
    poll_s: float = Field(0.5, gt=0, le=10, description="seconds between the driver's looks at the mailbox")

    @model_validator(mode="before")
    @classmethod
    def _from_text(cls, v: Any) -> Any:
        """``"local"``, ``"ray"``, or a Ray address (``host:port``, ``ray://host:10001``, ``auto``)."""
        if isinstance(v, ExecutorSpec):
            return v.model_dump()
        if v is None or v == "":
            return {"kind": "local"}
        if isinstance(v, str):
            text = v.strip()
            if text in EXECUTORS:
                return {"kind": text}
            if text == "auto" or ":" in text:
                return {"kind": "ray", "address": text.removeprefix("ray:") if text.startswith("ray:") and
                        not text.startswith("ray://") else text}
            raise ValueError(f"executor {v!r}: use 'local', 'ray' or a Ray address (host:port, ray://host:10001, auto)")
        return v

    @property
    def local(self) -> bool:
        return self.kind == "local"


Echo = Callable[[str], None]


class Job(Protocol):
    """Measuring work made of pairing blocks, as the executor runs it."""

    def check(self) -> Any:
        """Every check that can fail on bad input; nothing written, nothing started."""

    def start(self, checked: Any, echo: Echo, *, again: bool = False) -> Any:
        """An invocation begun: its records (its folder, what it says before its first block),
        timed from its checks (``again``: a later invocation of this call, its checks passed)."""

    def runs(self, started: Any, *, progress: bool, echo: Echo, repeats: int | None = None) -> Any:
        """The invocation's run over its blocks (``repeats``: its first repeats only), ready to
        run here (``.run()``) or to hand to the fleet with :meth:`blocks`."""

    def blocks(self) -> Any:
        """What its blocks are, for the dispatcher on Ray (:class:`specnb.sweep.fleet.Blocks`)."""


@dataclass(frozen=True)
class SweepJob:
    """A sweep measured into its folder: a block is one arm's server in one repeat, its points
    measured in turn."""

    spec: SweepSpec
    out: Path

    def check(self) -> Any:
        from specnb.sweep.runner import check

        return check(self.spec)

    def start(self, checked: Any, echo: Echo, *, again: bool = False) -> Any:
        from specnb.sweep.runner import announce, preflight

        pre = preflight(self.spec, Path(self.out), checked.again() if again else checked)
        if not again:
            announce(self.spec, Path(self.out), pre, echo)
        return pre

    def runs(self, started: Any, *, progress: bool, echo: Echo, repeats: int | None = None) -> Any:
        from specnb.sweep.runner import BlockRunner

        spec = self.spec if repeats is None else self.spec.model_copy(update={"repeats": repeats})
        return BlockRunner(spec, Path(self.out), started, echo=echo, progress=progress)

    def blocks(self) -> Any:
        from specnb.sweep.fleet import SweepBlocks

        return SweepBlocks()


@dataclass(frozen=True)
class AnatomyJob:
    """A sweep's step anatomy: a block is one arm's server in one repeat, a profiled window per
    point (:mod:`specnb.sweep.anatomy`)."""

    spec: SweepSpec
    out: Path
    window_requests: int | None = None

    def check(self) -> Any:
        from specnb.sweep.anatomy import check

        check(self.spec, self.window_requests)  # its run resolves the rest as it is made

    def start(self, checked: Any, echo: Echo, *, again: bool = False) -> Any:
        return None

    def runs(self, started: Any, *, progress: bool, echo: Echo, repeats: int | None = None) -> Any:
        from specnb.sweep.anatomy import AnatomyRun

        return AnatomyRun(self.spec, Path(self.out), self.window_requests, progress, echo)

    def blocks(self) -> Any:
        from specnb.sweep.anatomy import AnatomyBlocks

        return AnatomyBlocks()


def _executor(executor: Any) -> ExecutorSpec:
    return executor if isinstance(executor, ExecutorSpec) else ExecutorSpec.model_validate(executor)


def run_jobs(jobs: Sequence[Job], executor: Any = None, *, progress: bool = True, echo: Echo | None = None) -> list[Any]:
    """Run (or resume) jobs of one kind on an executor (default: here); returns their outcomes in
    order. Every job's checks run before any job writes a file. Here, several sweeps run repeat
    by repeat (each sweep's first repeat, then each one's second...): drift over the hours lands
    on every sweep alike; on Ray every block of every job is a task."""
    ex = _executor(executor)
    echo = echo or (lambda s: print(s, file=sys.stderr))
    if len({type(j) for j in jobs}) > 1:
        raise ValueError("run_jobs runs jobs of one kind at a time")
    if not ex.local:
        from specnb.sweep.fleet import import_ray

        import_ray()  # before anything is checked or written: a missing Ray is said first
    checked = [job.check() for job in jobs]
    if not ex.local:
        from specnb.sweep.fleet import Fleet

        runs = [job.runs(job.start(c, echo), progress=False, echo=echo) for job, c in zip(jobs, checked, strict=True)]
        return Fleet(runs, ex, progress, echo, jobs[0].blocks()).run() if jobs else []
    if len(jobs) <= 1 or not all(isinstance(j, SweepJob) for j in jobs):
        return [job.runs(job.start(c, echo), progress=progress, echo=echo).run()
                for job, c in zip(jobs, checked, strict=True)]
    outcomes: list[Any] = [None] * len(jobs)
    for r in range(max(j.spec.repeats for j in jobs)):  # several sweeps here: repeat by repeat
        for i, (job, c) in enumerate(zip(jobs, checked, strict=True)):
            if r < job.spec.repeats:  # each part an invocation of its own (its own timing record)
                o = job.runs(job.start(c, echo, again=r > 0), progress=progress, echo=echo, repeats=r + 1).run()
                outcomes[i] = o if outcomes[i] is None else outcomes[i].merge(o)
    return outcomes


def run_sweep(spec: SweepSpec, out_dir: str | Path, *, progress: bool = True,
              echo: Echo | None = None, executor: Any = None) -> Any:
    """Run (or resume) a sweep into ``out_dir`` on an executor (default: here); returns its
    :class:`~specnb.sweep.runner.SweepOutcome`. ``executor``: ``"local"``, ``"ray"``, a Ray
    address, a table of Ray options or an :class:`ExecutorSpec`; it is checked before anything
    starts. Every check that can fail on bad input runs before the first server starts."""
    return run_jobs([SweepJob(spec, Path(out_dir))], executor, progress=progress, echo=echo)[0]


def run_anatomy(spec: SweepSpec, out_dir: str | Path, *, window_requests: int | None = None, progress: bool = True,
                echo: Echo | None = None, executor: Any = None) -> Any:
    """Profile one window per (arm, workload, level, repeat) into ``out_dir`` (resumable), on an
    executor (as :func:`run_sweep`'s); returns its :class:`~specnb.sweep.anatomy.AnatomyOutcome`.
    Bad input is refused before anything starts."""
    return run_jobs([AnatomyJob(spec, Path(out_dir), window_requests)], executor, progress=progress, echo=echo)[0]
