"""``specnb policy FOLDER``: vLLM's dynamic speculation schedule (K per batch-size range)
derived from a run, printed as a ``--speculative-config`` and written once to a file."""

from __future__ import annotations

import argparse
import json
from dataclasses import dataclass
from pathlib import Path

from specnb.analysis.schedule import RULES, derive_policy, format_policy
from specnb.commands.common import CliArgs, Command
from specnb.errors import SpecnbError
from specnb.ledger import load_ledgers, write_once


@dataclass(frozen=True)
class PolicyArgs(CliArgs):
    """``specnb policy``'s arguments."""

    folder: Path
    workload: str | None
    method: str | None
    rule: str
    max_batch: int | None
    out: Path | None


class Policy(Command):
    name = "policy"
    help = ("derive vLLM's dynamic speculation schedule (K per batch-size range) from a run, print it as a "
            "--speculative-config and write it to a file")

    Args = PolicyArgs

    @staticmethod
    def add_cli_args(p: argparse.ArgumentParser) -> None:
        p.add_argument("folder", type=Path, help="a run with one arm per K (or one K and the baseline)")
        p.add_argument("--workload", help="the workload your traffic looks like (needed when the run has several)")
        p.add_argument("--method", help="the drafter method to schedule (needed when the run's arms use several, "
                       "e.g. ngram and eagle3: one schedule per method)")
        p.add_argument("--rule", choices=RULES, default="lower_bound",
                       help="per level keep the best K or K = 0 (the off arm where measured, else the baseline), "
                       "whichever has the higher 95%% lower bound (default) or point estimate")
        p.add_argument("--max-batch", type=int, default=None, help="end of the last range (default: the run's "
                       "--max-num-seqs, else 256)")
        p.add_argument("--out", type=Path,
                       help="where to write the policy (default: <folder>/policy-<workload>.json)")

    @staticmethod
    def execute(a: PolicyArgs) -> int:
        df = load_ledgers(a.folder)
        if df.empty:
            raise SpecnbError(f"no ledgers under {a.folder}")
        config, chosen, doc = derive_policy(df, workload=a.workload, rule=a.rule, max_batch=a.max_batch,
                                            source=str(a.folder), method=a.method)
        print(format_policy(config, chosen, a.rule))
        workload = json.loads(doc)["workload"]
        stem = workload.replace('/', '_').replace(':', '-') + (f"-{a.method}" if a.method else "")
        out = a.out or a.folder / f"policy-{stem}.json"
        try:
            write_once(out, doc.encode())
        except FileExistsError:
            raise SpecnbError(f"{out} exists (policies are written once): choose another --out") from None
        print(f"written: {out}  (measure it: an arm with speculative_config = {{policy_file = \"{out}\"}})")
        return 0
