"""``specnb report FOLDER``: the run's report (:mod:`specnb.analysis.report`), the text every
notebook prints for its run."""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from pathlib import Path

from specnb.analysis import DEFAULT_N_BOOT, DEFAULT_SEED
from specnb.analysis.estimator import Scope
from specnb.analysis.latency import parse_slos
from specnb.analysis.report import ReportOptions
from specnb.commands.common import CliArgs, Command, print_report


@dataclass(frozen=True)
class ReportArgs(CliArgs):
    """``specnb report``'s arguments."""

    folder: Path
    scope: str
    n_boot: int
    seed: int
    context: int | None
    slo: list[str]
    skip_bad: bool

    @property
    def options(self) -> ReportOptions:
        """What the report's sections read (the SLOs parsed: a bad one is refused in one line)."""
        return ReportOptions(n_boot=self.n_boot, seed=self.seed, context_tokens=self.context,
                             slos=parse_slos(self.slo), scope=Scope(self.scope))


class Report(Command):
    name = "report"
    help = ("print the paired table of a ledger folder, one interval per level (docs/statistics.md), what holds across "
            "the levels, and whether to attach the drafter")
    Args = ReportArgs

    @staticmethod
    def add_cli_args(p: argparse.ArgumentParser) -> None:
        p.add_argument("folder", type=Path)
        p.add_argument("--scope", choices=[s.value for s in Scope], default=Scope.PROMPTS.value,
                       help="what the intervals cover: new prompts like the panel's (default) or this panel only")
        p.add_argument("--n-boot", type=int, default=DEFAULT_N_BOOT, help="goodput's bootstrap replicates (--slo)")
        p.add_argument("--seed", type=int, default=DEFAULT_SEED, help="goodput's bootstrap seed (--slo)")
        p.add_argument("--context", type=int, default=None, metavar="TOKENS",
                       help="also report concurrent sessions the KV pool holds at this context length")
        p.add_argument("--slo", action="append", default=[], metavar="KEY=VALUE",
                       help="an SLO for goodput: ttft_ms, itl_p99_ms, e2el_ms (at most) or decode_tok_s (at least); "
                       "repeat for several; the report then names the arm and level with the most goodput")
        p.add_argument("--skip-bad", action="store_true",
                       help="leave out ledger files that cannot be read (counted on stderr) instead of stopping")

    @staticmethod
    def execute(a: ReportArgs) -> int:
        return print_report(a.folder, a.options, a.skip_bad)
