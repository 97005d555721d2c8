"""``specnb watch URL --run RUN``: a live vLLM endpoint's speculative decoding, window by window,
held against what a run measured (:mod:`specnb.analysis.watch`): pays here, past the threshold,
acceptance fallen, speculation silently off, or idle."""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from urllib.parse import urlparse

from specnb import paths
from specnb.analysis.pairing import AnalysisError
from specnb.commands.common import CliArgs, Command
from specnb.errors import EXIT_BAD_INPUT, EXIT_INTERRUPTED, SpecnbError


def load_expectation(run: Path, arm: str | None, workload: str | None):
    """The run's answer (a sweep, tune or policy run folder, or a ``specnb policy`` file)."""
    from specnb.analysis.watch import expectation
    from specnb.ledger.records import load_run

    if run.suffix == ".json":
        try:
            doc = json.loads(run.read_text())
            folder, workload = Path(doc["source"]), workload or doc.get("workload")
        except (OSError, ValueError, KeyError, TypeError):
            raise SpecnbError(f"--run {run}: not a run folder or a policy file written by specnb policy") from None
    else:
        folder = run
    if not folder.is_dir():
        raise SpecnbError(f"--run {run}: no such run folder")
    rec = load_run(folder)
    if rec.tune is not None:
        rec = rec.last_round or rec
    if rec.df.empty:
        raise SpecnbError(f"--run {run}: no ledgers under {rec.folder}")
    try:
        return expectation(rec.df, paths.portable(str(rec.folder)), arm=arm, workload=workload)
    except AnalysisError as exc:
        raise SpecnbError(str(exc)) from None


def load_map_line(folder: Path, exp):
    """The break-even map run's line for the run's drafter kind and K (:mod:`specnb.analysis.breakeven`),
    on the run's workload where the map has it (else the map's only one)."""
    from specnb.analysis.breakeven import break_even_line, kind_of
    from specnb.ledger.records import load_run

    if exp is None:
        raise SpecnbError("--map needs --run: the run's drafter says which of the map's kinds to read")
    if not folder.is_dir():
        raise SpecnbError(f"--map {folder}: no such run folder")
    rec = load_run(folder)
    if rec.df.empty:
        raise SpecnbError(f"--map {folder}: no ledgers under {rec.folder}")
    kind = kind_of(exp.speculative_config)
    if kind is None or exp.k is None:
        raise SpecnbError(f"--map: the run's {exp.arm} has no speculative config to find its kind by")
    try:
        return break_even_line(rec.df, paths.portable(str(rec.folder)), kind, exp.k, exp.workload)
    except AnalysisError as exc:
        raise SpecnbError(f"--map: {exc}") from None


def check_endpoint(url: str, exp) -> list[str]:
    """Refusals (one line each) when the endpoint cannot be held against the run: unreachable,
    no speculative metrics, another model or another K than the run measured."""
    from specnb.engine.metrics import SPEC_ACCEPTED_PER_POS, SPEC_DRAFTS
    from specnb.engine.watch import read, served_models

    snap = read(url)
    if not snap.has(SPEC_DRAFTS):
        return [f"{url} exports no speculative-decoding metrics ({SPEC_DRAFTS}): the endpoint runs no drafter"]
    if exp is None:
        return []
    out = []
    models = served_models(url)
    # the same model: the run's served name, or the checkpoint folder it was started from (a server
    # may serve the same checkpoint under another name)
    names = {Path(i).name for i, _ in models} | {Path(r).name for _, r in models if r}
    if exp.model and models and not names & {Path(exp.model).name, exp.checkpoint}:
        served = ", ".join(i if not r or Path(r).name == i else f"{i} ({Path(r).name})" for i, r in models)
        ran = exp.model if not exp.checkpoint else f"{exp.model} ({exp.checkpoint})"
        out.append(f"{url} serves {served}; the run measured {ran}: measure this model first")
    k = len(snap.by_label(SPEC_ACCEPTED_PER_POS, "position"))
    if exp.k and k and k != exp.k:
        out.append(f"{url} drafts {k} token(s) per step; the run's {exp.arm} drafts {exp.k}: another drafter config")
    return out


@dataclass(frozen=True)
class WatchArgs(CliArgs):
    """``specnb watch``'s arguments."""

    url: str
    run: Path | None
    arm: str | None
    workload: str | None
    map: Path | None
    interval: float
    window: float
    once: bool
    json: bool
    count: int | None


class Watch(Command):
    name = "watch"
    help = ("watch a live vLLM endpoint's acceptance, drafting and batch against a run's measured threshold and "
            "acceptance (one line per interval)")

    Args = WatchArgs

    @staticmethod
    def add_cli_args(p: argparse.ArgumentParser) -> None:
        p.add_argument("url", help="the endpoint's base URL (http://HOST:PORT), whose /metrics is read")
        p.add_argument("--run", type=Path, help="a run folder (sweep, tune or policy run) or a specnb policy file "
                       "whose measured answer the endpoint is held against")
        p.add_argument("--arm", help="the run's drafter arm the endpoint serves (needed when it has several)")
        p.add_argument("--workload", help="the run's workload the traffic looks like (needed when it has several)")
        p.add_argument("--map", type=Path, help="a break-even map run (notebooks/12_map.py): each window's acceptance "
                       "length is also judged against the break-even of the run's drafter kind and K at its load")
        p.add_argument("--interval", type=float, default=10.0, metavar="S", help="seconds between reads (default 10)")
        p.add_argument("--window", type=float, default=60.0, metavar="S",
                       help="seconds of counters each line covers (default 60)")
        p.add_argument("--once", action="store_true", help="one whole window, then exit 0 (pays or idle), 1 (a "
                       "warning) or 2 (cannot tell)")
        p.add_argument("--json", action="store_true", help="one JSON object per line")
        p.add_argument("--count", type=int, default=None, help=argparse.SUPPRESS)  # tests: stop after N lines

    @staticmethod
    def execute(a: WatchArgs) -> int:
        from specnb.analysis.watch import judge, status_line
        from specnb.engine.watch import windows

        u = urlparse(a.url)
        if u.scheme not in ("http", "https") or not u.netloc:
            raise SpecnbError(f"{a.url!r}: give the endpoint as http://HOST:PORT")
        if a.interval <= 0 or a.window <= 0:
            raise SpecnbError("--interval and --window take seconds above 0")
        exp = load_expectation(a.run, a.arm, a.workload) if a.run else None
        line = load_map_line(a.map, exp) if a.map else None
        refused = check_endpoint(a.url, exp)
        for why in refused:
            print(f"specnb: {why}", file=sys.stderr)
        if refused:
            return EXIT_BAD_INPUT
        if exp is not None and not a.json:
            th = f"{exp.threshold_running:.1f} running" if exp.threshold_running is not None else exp.kind
            acc = f"{exp.acceptance_floor:.0%}" if exp.acceptance_floor is not None else "-"
            mapped = (f"; break-even from {line.run} ({line.kind} K={line.k})" if line else "")
            print(f"watching {a.url} against {exp.run} ({exp.arm} on {exp.workload}; threshold {th}; "
                  f"acceptance floor {acc}{mapped})", file=sys.stderr)
        interval = min(a.interval, a.window) if a.once else a.interval
        verdict = None
        try:
            for w in windows(a.url, interval_s=interval, window_s=a.window, full_only=a.once,
                             count=1 if a.once else a.count):
                verdict, why = judge(w, exp, line)
                if a.json:
                    print(json.dumps({"time": datetime.now(UTC).isoformat(timespec="seconds"),
                                      "verdict": verdict.value, "why": why, **w.to_dict(),
                                      "run": exp.run if exp else None, "arm": exp.arm if exp else None,
                                      "workload": exp.workload if exp else None,
                                      "map": line.run if line else None}), flush=True)
                else:
                    print(status_line(w, verdict, why), flush=True)
        except KeyboardInterrupt:  # the way a watch loop ends: nothing to keep or resume
            return EXIT_INTERRUPTED
        return verdict.exit_status if a.once and verdict is not None else 0


@dataclass(frozen=True)
class WatchPlotArgs(CliArgs):
    """``specnb watchplot``'s arguments."""

    log: Path
    run: Path | None
    arm: str | None
    workload: str | None
    out: Path | None


class WatchPlot(Command):
    name = "watch-plot"
    help = "draw a specnb watch --json log against the run's acceptance band and threshold band"

    Args = WatchPlotArgs

    @staticmethod
    def add_cli_args(p: argparse.ArgumentParser) -> None:
        p.add_argument("log", type=Path, help="a file of specnb watch --json lines")
        p.add_argument("--run", type=Path, help="the run to draw the bands of (default: the run the log names)")
        p.add_argument("--arm", help="the run's drafter arm (default: the log's)")
        p.add_argument("--workload", help="the run's workload (default: the log's)")
        p.add_argument("--out", type=Path, help="folder for the figure (default: beside the log)")

    @staticmethod
    def execute(a: WatchPlotArgs) -> int:
        import re

        import pandas as pd

        try:
            text = a.log.read_text()
        except OSError as exc:
            raise SpecnbError(f"{a.log}: cannot read the log ({exc.strerror or exc})") from None
        rows = []
        for n, line in enumerate(text.splitlines(), 1):
            if not line.strip().startswith("{"):
                continue  # status lines and notes a tee caught
            try:
                rows.append(json.loads(line))
            except ValueError:
                raise SpecnbError(f"{a.log}:{n}: not a JSON line (write the log with specnb watch --json)") from None
        log = pd.DataFrame(rows)
        need = {"verdict", "acceptance_rate", "running_mean", "draft_tokens"}
        if log.empty or not need <= set(log.columns):
            raise SpecnbError(f"{a.log}: no specnb watch --json lines (each needs {', '.join(sorted(need))})")
        named = [r for r in log.get("run", pd.Series(dtype=object)).dropna().unique()]
        run = a.run or (paths.resolve(named[0]) if len(named) == 1 else None)
        if run is None:
            raise SpecnbError(f"{a.log}: the log names {len(named)} runs; give the one to draw against (--run)")
        pick = lambda col, given: given or (log[col].dropna().iloc[0] if col in log and log[col].notna().any()  # noqa: E731
                                            else None)
        exp = load_expectation(Path(run), pick("arm", a.arm), pick("workload", a.workload))
        from specnb.figures.save import save_figure
        from specnb.figures.watch import watch_figure

        fig = watch_figure(log, exp)
        stem = re.sub(r"[^a-z0-9-]+", "-", a.log.stem.lower()).strip("-") or "log"
        written = save_figure(fig, f"watch-{stem}"[:80], [a.log, run], out_dir=a.out or a.log.parent,
                              caption=f"specnb watch log {a.log.name} held to {exp.run} ({exp.arm} on {exp.workload})")
        for path in written.values():
            print(path)
        return 0
