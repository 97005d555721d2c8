"""Where a sweep's pairing blocks run, and the one call that runs a sweep on any of them.

``local`` (the default) runs every block here, one after another (:mod:`specnb.sweep.runner`);
``ray`` runs each block as a task on a Ray cluster (:mod:`specnb.sweep.fleet`, docs/fleet.md).
The option is a string where a user types it (``--executor ray``, a notebook's ``executor``
parameter, a Ray address) or a table of Ray options in a parameter file. Nothing here imports
Ray or the engine: a study's parameters are checked without either. ``specnb tune`` runs its
proposal and its rounds through :func:`run_sweep` too, so a tune's sweeps run wherever a sweep's do.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from specnb.sweep.spec import SweepSpec

__all__ = ["EXECUTORS", "ExecutorSpec", "run_sweep"]

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


def run_sweep(spec: SweepSpec, out_dir: str | Path, *, progress: bool = True,
              echo: Callable[[str], None] | None = None, executor: Any = None) -> Any:
    """Run (or resume) a sweep into ``out_dir`` on an executor (default: here); returns its
    :class:`~specnb.sweep.runner.SweepOutcome`. ``executor``: ``"local"``, ``"ray"``, a Ray
    address, a table of Ray options or an :class:`ExecutorSpec`; it is checked before anything
    starts. Every check that can fail on bad input runs before the first server starts."""
    ex = executor if isinstance(executor, ExecutorSpec) else ExecutorSpec.model_validate(executor)
    if ex.local:
        from specnb.sweep.runner import run_sweep_here as run_here

        return run_here(spec, out_dir, progress=progress, echo=echo)
    from specnb.sweep.fleet import run_fleet  # Ray only when it is chosen

    return run_fleet([(spec, Path(out_dir))], ex, progress=progress,
                     echo=echo or (lambda s: print(s, file=sys.stderr)))[0]
