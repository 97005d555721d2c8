"""``specnb predict FOLDER``: each n-gram and EAGLE-3 arm's acceptance predicted from the target's
own probabilities, printed beside the measured acceptance."""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass
from pathlib import Path

from specnb.commands.common import CliArgs, Command, echo


@dataclass(frozen=True)
class PredictArgs(CliArgs):
    """``specnb predict``'s arguments."""

    folder: Path
    endpoint: str | None
    top: int
    no_progress: bool


class Predict(Command):
    name = "predict"
    help = ("predict each n-gram and EAGLE-3 arm's acceptance from the target's own probabilities (the baseline's "
            "text replayed through vLLM's n-gram rule or the head; a baseline server is started after the measurement) "
            "and print it beside the measured acceptance")

    Args = PredictArgs

    @staticmethod
    def add_cli_args(p: argparse.ArgumentParser) -> None:
        p.add_argument("folder", type=Path, help="a measured run (a sweep folder or a study's run of conditions)")
        p.add_argument("--endpoint", help="attach to this running baseline server instead of launching one")
        p.add_argument("--top", type=int, default=20, help="prompt logprobs per position (vLLM serves up to 20)")
        p.add_argument("--no-progress", action="store_true")

    @staticmethod
    def execute(a: PredictArgs) -> int:
        from specnb.analysis.report import ReportOptions, predicted
        from specnb.drafter.replay import HeadDrafter
        from specnb.ledger.records import load_run
        from specnb.sweep.predict import predict_run  # the engine side, only here

        outcome = predict_run(a.folder, endpoint=a.endpoint, top=a.top, progress=not a.no_progress, echo=echo,
                              head_loader=HeadDrafter)
        print(outcome.summary(), file=sys.stderr)
        lines = predicted(load_run(a.folder), ReportOptions())
        print("\n".join(lines) if lines else "no n-gram or EAGLE-3 arm to predict in this run")
        return 0
