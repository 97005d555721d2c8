"""The ``specnb`` subcommands, one module each: its arguments (``add_cli_args``) and what it
does with them (``run``, returning the exit status). :mod:`specnb.cli` builds the parser from
:data:`COMMANDS` and dispatches; what several commands share (the one-line argument errors,
``--set`` overrides, the executor options, the report printer) is in :mod:`.common`.

A command's module imports the engine side only inside ``run``, so ``specnb report`` and
``specnb --help`` start without loading vLLM.
"""

from __future__ import annotations

from specnb.commands.alerts import Alerts
from specnb.commands.anatomy import Anatomy
from specnb.commands.common import Command
from specnb.commands.mix import Mix
from specnb.commands.policy import Policy
from specnb.commands.predict import Predict
from specnb.commands.probe import Probe
from specnb.commands.report import Report
from specnb.commands.schema import Schema
from specnb.commands.sweep import Sweep
from specnb.commands.tune import Tune
from specnb.commands.watch import Watch, WatchPlot

__all__ = ["COMMANDS", "Command"]

# in the order ``specnb --help`` lists them
COMMANDS: tuple[type[Command], ...] = (Sweep, Anatomy, Report, Policy, Tune, Predict, Probe, Schema, Mix, Watch, WatchPlot,
                                        Alerts)
