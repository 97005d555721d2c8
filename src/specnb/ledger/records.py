"""Everything a report reads of one run folder, loaded once: its point ledgers as a frame, the
per-category acceptance, the conversation turns, and the records beside the points (``specnb
predict``'s predictions and lossless margins, the search and timing records, a tune's rounds).

:func:`load_run` is the only place the report pipeline (:mod:`specnb.analysis.report`) touches
files: every section of the report is a function of a :class:`RunRecords`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from specnb.ledger.frame import load_ledgers, load_spec_by_category, load_turns
from specnb.ledger.names import PLAIN_CONDITION, LoadMode
from specnb.ledger.runs import TuneRecords, read_tune, search_lines, sequential_lines
from specnb.ledger.store import read_records
from specnb.ledger.timing import timing_lines

__all__ = ["ANATOMY_KIND", "ANATOMY_RUN_KIND", "MARGINS_DIR", "MARGINS_KIND", "PREDICTED_DIR", "PREDICTED_KIND", "RunRecords", "load_anatomy", "load_margins",
           "load_predicted", "load_run"]

MARGINS_DIR = "margins"
MARGINS_KIND = "lossless_margins"
PREDICTED_DIR = "predicted"  # <condition>/predicted/<arm>/<workload>/<baseline point>.json
PREDICTED_KIND = "predicted_acceptance"
ANATOMY_KIND = "step_anatomy"  # specnb anatomy: one profiled window
ANATOMY_RUN_KIND = "anatomy_run"


def load_margins(folder: str | Path) -> pd.DataFrame:
    """Every first difference recorded by ``specnb predict`` under ``folder``, one row each:
    condition, arm, workload, concurrency, repeat, reference, position, tokens, in flight,
    margin (nats), margin_is_bound, argmax_is_base, as_close_share, typical_gap_p50."""
    rows = []
    for path, doc in read_records(folder, f"{MARGINS_DIR}/**/*.json", MARGINS_KIND):
        head = {k: doc.get(k) for k in ("condition", "arm", "workload", "concurrency", "repeat", "reference")}
        rows += [{**head, **d, "path": str(path)} for d in doc.get("divergences") or []]
    out = pd.DataFrame(rows)
    if len(out):
        out["condition"] = out["condition"].fillna(PLAIN_CONDITION)
    return out


def load_predicted(folder: str | Path) -> pd.DataFrame:
    """Every prediction record under ``folder`` (a run, a condition or a study tree), one row
    each: condition, arm, workload, concurrency, repeat, temperature, the summed counts and
    rates of :func:`summarize_steps`, path."""
    rows = []
    for path, doc in read_records(folder, f"{PREDICTED_DIR}/**/*.json", PREDICTED_KIND):
        rows.append({k: doc.get(k) for k in ("condition", "arm", "workload", "concurrency", "repeat", "temperature",
                                             "baseline_point", "baseline_started_at", "created_at", "requests")}
                    | dict(doc.get("results") or {}) | {"per_request": doc.get("per_request") or [], "path": str(path)})
    out = pd.DataFrame(rows)
    if len(out):  # a sweep outside a study has the frame's plain condition
        out["condition"] = out["condition"].fillna(PLAIN_CONDITION)
    return out


def load_anatomy(folder: str | Path) -> list[dict[str, Any]]:
    """Every ``step_anatomy`` record under ``folder`` (ok and failed), by arm, workload, level, repeat."""
    out = [{**doc, "path": str(p)} for p, doc in read_records(folder, "anatomy-c*.json", ANATOMY_KIND)
           if ".superseded-" not in p.name]  # a window a node sent twice: the first stands
    return sorted(out, key=lambda d: (d["arm"], d["workload"], d["concurrency"], d["repeat"], d["status"]))


@dataclass
class RunRecords:
    """One run folder as the report reads it. For a tune run (``specnb tune``), ``tune`` holds
    its records and ``last_round`` the records of its last round folder, whose table the report
    prints; ``df`` is then that round's frame."""

    folder: Path
    df: pd.DataFrame
    categories: pd.DataFrame = field(default_factory=pd.DataFrame)
    turns: pd.DataFrame = field(default_factory=pd.DataFrame)
    margins: pd.DataFrame = field(default_factory=pd.DataFrame)
    predicted: pd.DataFrame = field(default_factory=pd.DataFrame)
    search: list[str] = field(default_factory=list)
    timing: list[str] = field(default_factory=list)
    tune: TuneRecords | None = None
    last_round: RunRecords | None = None
    anatomy: list[dict[str, Any]] = field(default_factory=list)  # a step-anatomy run's windows (it holds no points)
    cache: dict = field(default_factory=dict, repr=False, compare=False)  # what the report's sections share


def load_run(folder: Path | str, *, skip_bad: bool = False) -> RunRecords:
    """The records of ``folder`` (a sweep, a study's run of conditions, or a tune run). With
    ``skip_bad`` unreadable ledgers are left out and counted in a
    :class:`~specnb.ledger.frame.SkippedLedgersWarning` (the frame's, once), else the first stops
    the load naming it."""
    from specnb.ledger.runs import is_tune_run

    folder = Path(folder)
    if is_tune_run(folder):
        rounds = sorted(p for p in folder.glob("round-*") if p.is_dir())
        last = load_run(rounds[-1], skip_bad=skip_bad) if rounds else None
        return RunRecords(folder=folder, df=last.df if last else pd.DataFrame(), tune=read_tune(folder),
                          last_round=last)
    df = load_ledgers(folder, skip_bad=skip_bad)
    if df.empty:
        return RunRecords(folder=folder, df=df, anatomy=load_anatomy(folder))
    import warnings

    from specnb.ledger.frame import SkippedLedgersWarning

    with warnings.catch_warnings():  # the frame's warning said it once
        warnings.simplefilter("ignore", SkippedLedgersWarning)
        categories = load_spec_by_category(folder, skip_bad=skip_bad)
        conversation = "load_mode" in df.columns and (df["load_mode"] == LoadMode.CONVERSATION.shape).any()
        turns = load_turns(folder, skip_bad=skip_bad) if conversation else pd.DataFrame()
    return RunRecords(folder=folder, df=df, categories=categories, turns=turns, margins=load_margins(folder),
                      predicted=load_predicted(folder), search=search_lines(folder) + sequential_lines(folder), timing=timing_lines(folder))
