"""``specnb alerts RUN --out DIR``: the run's measured threshold and acceptance as a Prometheus
rule file and a Grafana dashboard (:mod:`specnb.analysis.alerts`), scoped to one endpoint."""

from __future__ import annotations

import argparse
import json
from dataclasses import dataclass
from pathlib import Path

from specnb.commands.common import CliArgs, Command
from specnb.commands.watch import load_expectation, load_map_line
from specnb.errors import SpecnbError


@dataclass(frozen=True)
class AlertsArgs(CliArgs):
    """``specnb alerts``'s arguments."""

    run: Path
    out: Path
    selector: str
    arm: str | None
    workload: str | None
    map: Path | None
    window: int
    for_s: int


class Alerts(Command):
    name = "alerts"
    help = ("write Prometheus alerting rules and a Grafana dashboard that hold a served drafter to a run's "
            "measured threshold and acceptance")

    Args = AlertsArgs

    @staticmethod
    def add_cli_args(p: argparse.ArgumentParser) -> None:
        p.add_argument("run", type=Path, help="a run folder (sweep, tune or policy run) or a specnb policy file")
        p.add_argument("--out", type=Path, required=True, help="folder for the rule file and the dashboard")
        p.add_argument("--selector", default="", help="label matchers scoping every expression to one endpoint, "
                       "e.g. 'job=\"vllm\",instance=\"10.0.0.5:8000\"'")
        p.add_argument("--arm", help="the run's drafter arm (needed when it has several)")
        p.add_argument("--workload", help="the run's workload (needed when it has several)")
        p.add_argument("--map", type=Path, help="a break-even map run (notebooks/12_map.py): adds the alert that "
                       "judges a window's acceptance length against the break-even at its load")
        p.add_argument("--window", type=int, default=300, metavar="S", help="rate window in seconds (default 300)")
        p.add_argument("--for", dest="for_s", type=int, default=600, metavar="S",
                       help="how long a condition holds before its alert fires (default 600)")

    @staticmethod
    def execute(a: AlertsArgs) -> int:
        import yaml

        from specnb.analysis.alerts import check_selector, dashboard, rule_groups

        check_selector(a.selector)
        if a.window < 1 or a.for_s < 0:
            raise SpecnbError("--window takes seconds above 0 and --for seconds from 0")
        exp = load_expectation(a.run, a.arm, a.workload)
        line = load_map_line(a.map, exp) if a.map else None
        a.out.mkdir(parents=True, exist_ok=True)
        stem = f"specnb-{exp.arm}-{exp.workload}".replace("/", "_")
        rules = a.out / f"{stem}.rules.yml"
        board = a.out / f"{stem}.dashboard.json"
        head = (f"# specnb alerts {a.run}: {exp.arm} on {exp.workload}, measured in {exp.run} "
                f"(engine vLLM {exp.engine_version or '?'}, model {exp.model or '?'})\n")
        rules.write_text(head + yaml.safe_dump(rule_groups(exp, a.selector, a.window, a.for_s, line), sort_keys=False,
                                               width=120))
        board.write_text(json.dumps(dashboard(exp, a.selector, a.window), indent=1) + "\n")
        print(rules)
        print(board)
        return 0
