"""``specnb probe``: the step-time probe (:mod:`specnb.probe`) and its figures."""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass
from pathlib import Path

from specnb.commands.common import CliArgs, Command


@dataclass(frozen=True)
class ProbeArgs(CliArgs):
    """``specnb probe``'s arguments."""

    shape: list[str] | None
    device: str
    dtype: str | None
    batches: str
    queries: str
    lengths: str
    budget_s: float
    no_graphs: bool
    repeats: str
    out: Path | None
    no_figure: bool


class Probe(Command):
    name = "probe"
    help = "time one engine step of a decoder shape over batch, new tokens and cached length (torch only, no vLLM)"

    Args = ProbeArgs

    @staticmethod
    def add_cli_args(p: argparse.ArgumentParser) -> None:
        from specnb.probe.run import add_cli_args

        add_cli_args(p)
        p.add_argument("--no-figure", action="store_true", help="write the ledgers only")

    @staticmethod
    def execute(a: ProbeArgs) -> int:
        from specnb.probe.run import ProbeError, run

        folder: list = []
        try:
            rc = run(a, out_folder=folder.append)
        except ProbeError as exc:
            print(f"specnb probe: {exc}", file=sys.stderr)
            return 2
        if rc == 0 and not a.no_figure and folder:
            from specnb.figures.probe import draw_run

            for path in draw_run(folder[0]):
                print(path)
        return rc
