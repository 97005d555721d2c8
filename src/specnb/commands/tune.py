"""``specnb tune CONFIG``: a K sweep with an off arm, the schedule derived from it, measured
against the baseline and the best static K, re-derived until it wins (or says where it cannot)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from specnb import paths
from specnb.commands.common import MeasureArgs, MeasuringCommand, echo
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
    def read(config: Path, overrides: dict) -> Any:
        from specnb.sweep.tune import TuneSpec  # the engine side, only for a tune

        return TuneSpec.from_toml(config, overrides)

    @staticmethod
    def default_out(spec: Any) -> Path:
        return paths.LEDGERS / "tune" / spec.proposal.name / new_run_name()

    @staticmethod
    def measure(spec: Any, out: Path, args: MeasureArgs) -> Any:
        from specnb.sweep.tune import run_tune

        return run_tune(spec, out, progress=args.progress, echo=echo, executor=args.executor)
