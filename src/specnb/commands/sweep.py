"""``specnb sweep CONFIG``: run or resume a sweep (here or on a Ray cluster), then print its report."""

from __future__ import annotations

import argparse
import sys

from specnb import paths
from specnb.commands.common import (
    MeasuringCommand,
    echo,
    executor_from_args,
    finished,
    overrides,
    print_report,
)
from specnb.errors import EXIT_BAD_INPUT
from specnb.ledger.runs import new_run_name


class Sweep(MeasuringCommand):
    name = "sweep"
    help = "run or resume a sweep, then print the paired table"
    config_help = "sweep TOML file"
    out_help = "ledger folder (default: ledgers/<name>/<UTC time>); an existing folder of the same sweep resumes"
    on_ray = True

    @staticmethod
    def run(a: argparse.Namespace) -> int:
        from specnb.sweep.executor import run_sweep  # the engine side (here or on Ray), only for a sweep
        from specnb.sweep.spec import SweepSpec

        spec = SweepSpec.from_toml(a.config, overrides(a.set))
        executor = executor_from_args(a)
        out = a.out or paths.LEDGERS / spec.name / new_run_name()
        outcome = run_sweep(spec, out, progress=not a.no_progress, echo=echo, executor=executor)
        if outcome.refused_all:  # measured nothing: the refusal line(s) said why; the records are there
            return EXIT_BAD_INPUT
        print(outcome.summary(), file=sys.stderr)
        return finished(out, outcome.failed_points, print_report(out))
