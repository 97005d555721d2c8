"""``specnb anatomy CONFIG``: profile one window per arm and level and split each engine step
into drafting, verification, sampling and scheduling (vLLM's torch profiler)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from specnb import paths
from specnb.commands.common import MeasureArgs, MeasuringCommand, echo, finished, print_report
from specnb.ledger.runs import new_run_name


class Anatomy(MeasuringCommand):
    name = "anatomy"
    help = ("profile one window per arm and level on servers of their own and split each engine step into drafting, "
            "verification, sampling and scheduling (vLLM's torch profiler)")
    config_help = "sweep TOML file (its arms, levels, workloads and sampling)"
    out_help = "record folder (default: ledgers/anatomy/<name>/<UTC time>); an existing one resumes"
    on_ray = True  # each (arm, repeat) block can run as a task on a Ray cluster

    @classmethod
    def add_cli_args(cls, p: argparse.ArgumentParser) -> None:
        super().add_cli_args(p)
        p.add_argument("--window-requests", type=int, default=None, metavar="N",
                       help="requests per profiled window (default: the level; at least the level)")

    @staticmethod
    def read(config: Path, overrides: dict) -> Any:
        from specnb.sweep.spec import SweepSpec

        return SweepSpec.from_toml(config, overrides)

    @staticmethod
    def default_out(spec: Any) -> Path:
        return paths.LEDGERS / "anatomy" / spec.name / new_run_name()

    @staticmethod
    def measure(spec: Any, out: Path, args: MeasureArgs) -> Any:
        from specnb.sweep.executor import run_anatomy  # the engine side, when it runs

        return run_anatomy(spec, out, window_requests=args.window_requests, progress=args.progress, echo=echo,
                           executor=args.executor)

    @classmethod
    def execute(cls, args: MeasureArgs) -> int:
        """The run's report: its windows' table (the report's anatomy section, as ``specnb report`` prints it)."""
        spec = cls.read(args.config, args.overrides)
        out = args.out or cls.default_out(spec)
        outcome = cls.measure(spec, out, args)
        print(outcome.summary(), file=sys.stderr)
        return finished(out, outcome.failed, print_report(out))
