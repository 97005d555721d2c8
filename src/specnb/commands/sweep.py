"""``specnb sweep CONFIG``: run or resume a sweep (here or on a Ray cluster), then print its report."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from specnb import paths
from specnb.commands.common import MeasureArgs, MeasuringCommand, echo
from specnb.ledger.runs import new_run_name


class Sweep(MeasuringCommand):
    name = "sweep"
    help = "run or resume a sweep, then print the paired table"
    config_help = "sweep TOML file"
    out_help = "ledger folder (default: ledgers/<name>/<UTC time>); an existing folder of the same sweep resumes"
    on_ray = True

    @staticmethod
    def read(config: Path, overrides: dict) -> Any:
        from specnb.sweep.spec import SweepSpec

        return SweepSpec.from_toml(config, overrides)

    @staticmethod
    def default_out(spec: Any) -> Path:
        return paths.LEDGERS / spec.name / new_run_name()

    @staticmethod
    def measure(spec: Any, out: Path, args: MeasureArgs) -> Any:
        from specnb.sweep.executor import run_sweep  # the engine side (here or on Ray), only for a sweep

        return run_sweep(spec, out, progress=args.progress, echo=echo, executor=args.executor)
