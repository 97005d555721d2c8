"""``specnb tune CONFIG``: a K sweep with an off arm, the schedule derived from it, measured
against the baseline and the best static K, re-derived until it wins (or says where it cannot)."""

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
from specnb.ledger.runs import new_run_name


class Tune(MeasuringCommand):
    name = "tune"
    help = ("measure a K sweep with an off arm, derive the schedule, measure it against the baseline and the best "
            "static K, re-derive until it wins (or say where it cannot)")

    config_help = "tune TOML: a proposal sweep and a [tune] table"
    out_help = "tune folder (default: ledgers/tune/<name>/<UTC time>); an existing one resumes"
    override_help = "override a setting (tune.<key> for the [tune] table), value in TOML syntax"
    on_ray = True

    @staticmethod
    def run(a: argparse.Namespace) -> int:
        from specnb.sweep.tune import TuneSpec, run_tune  # the engine side, only for a tune

        spec = TuneSpec.from_toml(a.config, overrides(a.set))
        executor = executor_from_args(a)
        out = a.out or paths.LEDGERS / "tune" / spec.proposal.name / new_run_name()
        outcome = run_tune(spec, out, progress=not a.no_progress, echo=echo, executor=executor)
        print(outcome.summary(), file=sys.stderr)
        return finished(out, outcome.failed_points, print_report(out))
