"""What several subcommands share: a parser that refuses bad arguments in one line, ``--set``
overrides, the measuring commands' common arguments and exit status, the executor options and
the report printer."""

from __future__ import annotations

import argparse
import dataclasses
import sys
import tomllib
import warnings
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

from specnb.analysis.report import ReportOptions
from specnb.errors import EXIT_BAD_INPUT, EXIT_FAILED_POINTS, SpecnbError
from specnb.ledger import load_ledgers
from specnb.ledger.frame import SkippedLedgersWarning

__all__ = ["Command", "CliArgs", "Parser", "MeasureArgs", "overrides", "load_announced", "print_report", "MeasuringCommand", "add_executor_args",
           "executor_from_args", "echo", "finished"]


@dataclass(frozen=True)
class CliArgs:
    """A command's arguments as typed fields, made once from the parsed namespace
    (:meth:`from_cli_args`, as vLLM's ``bench sweep`` does): what the command reads instead of
    the namespace. A field is named as its argument's ``dest``."""

    @classmethod
    def from_cli_args(cls, a: argparse.Namespace) -> CliArgs:
        return cls(**{f.name: getattr(a, f.name) for f in dataclasses.fields(cls)})


class Command(ABC):
    """One subcommand: ``name`` and ``help`` as ``specnb --help`` lists it, its arguments (added
    by ``add_cli_args``, read once into ``Args``), and what it does with them (``execute``: the
    exit status)."""

    name: ClassVar[str]
    help: ClassVar[str]
    Args: ClassVar[type[CliArgs]]

    @staticmethod
    @abstractmethod
    def add_cli_args(p: argparse.ArgumentParser) -> None:
        """Add the command's arguments to its subparser."""

    @classmethod
    def run(cls, a: argparse.Namespace) -> int:
        """Do the command on the parsed namespace; its exit status."""
        return cls.execute(cls.Args.from_cli_args(a))

    @staticmethod
    @abstractmethod
    def execute(args: Any) -> int:
        """Do the command with its typed arguments; its exit status."""


@dataclass(frozen=True)
class MeasureArgs(CliArgs):
    """A measuring command's arguments, made once from the parsed namespace (:meth:`from_cli_args`):
    what the rest of the command reads instead of the namespace."""

    config: Path
    out: Path | None = None
    overrides: dict[str, Any] = field(default_factory=dict)
    progress: bool = True
    executor: Any = None  # an ExecutorSpec (checked), or None for a command that runs here only
    window_requests: int | None = None  # anatomy's requests per profiled window

    @classmethod
    def from_cli_args(cls, a: argparse.Namespace) -> MeasureArgs:
        """Parsed and checked: ``--set`` items as values, the executor options (where the command
        takes them) as one executor."""
        return cls(config=a.config, out=a.out, overrides=overrides(a.set), progress=not a.no_progress,
                   executor=executor_from_args(a) if hasattr(a, "executor") else None,
                   window_requests=getattr(a, "window_requests", None))


class MeasuringCommand(Command):
    """A command that measures into a resumable folder (``sweep``, ``anatomy``, ``tune``): a
    config file, ``--out``, ``--set`` overrides and ``--no-progress``, each said in its own words."""

    config_help: ClassVar[str]
    out_help: ClassVar[str]
    override_help: ClassVar[str] = "override a top-level setting, value in TOML syntax"
    on_ray: ClassVar[bool] = False  # takes the executor options (here, or on a Ray cluster)

    @classmethod
    def add_cli_args(cls, p: argparse.ArgumentParser) -> None:
        p.add_argument("config", type=Path, help=cls.config_help)
        p.add_argument("--out", type=Path, help=cls.out_help)
        p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help=cls.override_help)
        p.add_argument("--no-progress", action="store_true")
        if cls.on_ray:
            add_executor_args(p)

    Args = MeasureArgs

    @classmethod
    def execute(cls, args: MeasureArgs) -> int:
        """Read the config, measure into ``--out`` (or the default folder), print the summary and
        the run's report; 1 when points failed, 2 when every arm was refused."""
        spec = cls.read(args.config, args.overrides)
        out = args.out or cls.default_out(spec)
        outcome = cls.measure(spec, out, args)
        if getattr(outcome, "refused_all", False):  # measured nothing: the refusal line(s) said why
            return EXIT_BAD_INPUT
        print(outcome.summary(), file=sys.stderr)
        return finished(out, outcome.failed_points, print_report(out))

    @staticmethod
    @abstractmethod
    def read(config: Path, overrides: dict) -> Any:
        """The command's spec from its TOML file and ``--set`` overrides."""

    @staticmethod
    @abstractmethod
    def default_out(spec: Any) -> Path:
        """Where it measures when no ``--out`` is given."""

    @staticmethod
    @abstractmethod
    def measure(spec: Any, out: Path, args: MeasureArgs) -> Any:
        """Measure (resuming ``out``); the outcome."""


class Parser(argparse.ArgumentParser):
    """argparse that refuses bad arguments in one line (its usage block is ``--help``'s)."""

    def error(self, message: str):
        print(f"specnb: {message} (see {self.prog} --help)", file=sys.stderr)
        raise SystemExit(EXIT_BAD_INPUT)


def overrides(items: list[str]) -> dict:
    """``--set KEY=VALUE`` items as a dict, each value in TOML syntax (a bare word is a string)."""
    out = {}
    for item in items:
        if "=" not in item:
            raise SpecnbError(f"--set {item!r}: expected key=value")
        key, value = item.split("=", 1)
        try:
            out[key.strip()] = tomllib.loads(f"v = {value}")["v"]
        except tomllib.TOMLDecodeError:
            out[key.strip()] = value  # a bare string
    return out


def load_announced(out_dir: Path, skip_bad: bool, loader: Any = load_ledgers, announce: bool = True) -> Any:
    """``loader(out_dir)``; with ``skip_bad``, bad files are left out and counted on stderr."""
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always", SkippedLedgersWarning)
        df = loader(out_dir, skip_bad=skip_bad)
    for w in seen:
        if issubclass(w.category, SkippedLedgersWarning):
            if announce:
                print(f"specnb: {w.message}", file=sys.stderr)
        else:
            warnings.warn_explicit(w.message, w.category, w.filename, w.lineno)
    return df


def print_report(folder: Path, opts: ReportOptions | None = None, skip_bad: bool = False) -> int:
    """A run's report (:mod:`specnb.analysis.report`), printed section by section; 1 when the
    folder holds no ledgers, 2 when the report cannot be made (said in one line)."""
    from specnb.analysis.report import report_blocks
    from specnb.ledger.records import load_run

    run = load_announced(folder, skip_bad, load_run)
    if run.tune is None and run.df.empty and not run.anatomy:
        print(f"no ledgers under {folder}", file=sys.stderr)
        return 1
    try:
        for block in report_blocks(run, opts):
            print(block)
    except SpecnbError as exc:
        print(f"specnb: {exc}", file=sys.stderr)
        return 2
    last = run.last_round if run.tune is not None else run
    if last is not None and last.df.empty and not last.anatomy:
        print(f"no ledgers under {last.folder}", file=sys.stderr)
        return 1
    return 0


def add_executor_args(c: argparse.ArgumentParser) -> None:
    c.add_argument("--executor", default="local", metavar="local|ray|ADDRESS",
                   help="where the pairing blocks run: here one after another (local, the default), or on a Ray "
                   "cluster (ray: RAY_ADDRESS or a Ray started here; or its address), each block on one node "
                   "(docs/fleet.md)")
    c.add_argument("--max-blocks", type=int, default=None, metavar="N", help="Ray: blocks running at once")
    c.add_argument("--retries", type=int, default=None, metavar="N",
                   help="Ray: times a block lost with its node is submitted again (default 2)")
    c.add_argument("--accelerator-type", default=None, metavar="TYPE", help="Ray: run blocks on this GPU type only")
    c.add_argument("--node-label", action="append", default=[], metavar="KEY=VALUE",
                   help="Ray: run blocks only on nodes with this label (repeat for several)")


def executor_from_args(a: Any) -> Any:
    """The executor from its options, checked before anything starts."""
    from pydantic import ValidationError

    from specnb.sweep.executor import ExecutorSpec
    from specnb.sweep.spec import SweepError

    labels = {}
    for item in a.node_label:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise SweepError(f"--node-label {item!r}: use KEY=VALUE")
        labels[key] = value
    try:
        ex = ExecutorSpec.model_validate(a.executor)
        ray_opts = {"max_blocks": a.max_blocks, "accelerator_type": a.accelerator_type,
                    "labels": labels or None, "retries": a.retries}
        given = {k: v for k, v in ray_opts.items() if v is not None}
        if given and ex.local:
            raise SweepError(f"--{next(iter(given)).replace('_', '-')} is a Ray option: add --executor ray")
        return ExecutorSpec.model_validate({**ex.model_dump(), **given})
    except ValidationError as exc:
        err = exc.errors()[0]
        raise SweepError(f"--executor: {err['msg'].removeprefix('Value error, ')}") from None


def echo(line: str) -> None:
    print(f"specnb: {line}", file=sys.stderr)


def finished(out: Path, failed_points: list[str], rc: int) -> int:
    """The exit status of a measuring command: 1 when points failed (a rerun measures only them)."""
    if failed_points:
        echo(f"{len(failed_points)} point(s) failed; rerun with --out {out} to measure only them (exit status 1)")
        return EXIT_FAILED_POINTS
    return rc
