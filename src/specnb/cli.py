"""``specnb``: run a sweep from a TOML file, print the paired table, export the schema.

    specnb sweep configs/cpu-demo.toml --out ledgers/mine/run1
    specnb sweep configs/cpu-demo.toml --set repeats=1 --set 'concurrency=[1,2]'
    specnb report ledgers/mine/run1
    specnb tune configs/cpu-tune.toml                 # proposal -> schedule -> verified config
    specnb tune configs/cpu-tune.toml --set tune.max_rounds=2 --out ledgers/tune/cpu/run1
    specnb report ledgers/mine/run1 --n-boot 5000 --seed 1 --context 2048
    specnb predict ledgers/temperature/cpu/<run>      # n-gram acceptance from the target's probabilities
    specnb schema --out schemas/
    specnb mix traffic.jsonl --tokenizer models/SmolLM2-135M-Instruct
    specnb mix traffic.jsonl --ledgers ledgers/cpu-demo/run1 --arm ngram-k4 --concurrency 1
    specnb mix --serve http://127.0.0.1:8000 prompts.jsonl --save answered.jsonl

Exit status: 0 when every point of the sweep has a measurement; 1 when the run finished but
some points failed (they are listed, and a rerun with the same ``--out`` measures only them);
2 for bad input, refused in one line on stderr before any server starts (or a ledger that
cannot be read or written, named), and for a sweep whose every arm this engine build cannot
serve here (its refusal is the one line; the failure records are written for ``specnb report``);
130 after Ctrl-C (finished points are kept).
"""

from __future__ import annotations

import argparse

from specnb.commands import COMMANDS
from specnb.commands.common import Parser
from specnb.errors import EXIT_BAD_INPUT, exit_code

__all__ = ["main", "build_parser"]


def build_parser() -> argparse.ArgumentParser:
    """``specnb``'s parser: one subparser per command of :data:`specnb.commands.COMMANDS`."""
    p = Parser(prog="specnb", description="Paired speculative-decoding sweeps on vLLM.")
    sub = p.add_subparsers(dest="cmd", required=True)
    for cmd in COMMANDS:
        cmd.add_cli_args(sub.add_parser(cmd.name, help=cmd.help))
    return p


def main(argv: list[str] | None = None) -> int:
    try:
        a = build_parser().parse_args(argv)
    except SystemExit as exc:  # --help, or a bad argument already said in one line
        return exc.code if isinstance(exc.code, int) else EXIT_BAD_INPUT
    (cmd,) = (c for c in COMMANDS if c.name == a.cmd)
    return exit_code(lambda: cmd.run(a), "rerun with the same --out to resume", also=(FileNotFoundError,))


if __name__ == "__main__":
    raise SystemExit(main())
