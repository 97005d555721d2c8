"""Where a study's runs live: ``ledgers/<axis>/<study>/<run>/<condition>/...``.

A run folder is write-once like every ledger: a new measurement goes into a new run (a UTC
time stamp, so names sort by time), an interrupted one resumes when given the same name,
and analysis reads the newest run unless told otherwise. A run that ended with failed points
says which to whoever started it (:func:`report_failed_points`, read back by the notebook
runner with :func:`read_failed_points`).
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from specnb import paths
from specnb.errors import SpecnbError, plain_name

__all__ = ["AXES", "RunError", "new_run_name", "run_folder", "latest_run", "find_run", "OUTCOME_FILE_ENV",
           "report_failed_points", "read_failed_points", "report_refused_all", "read_refused_all", "search_record",
           "search_lines", "sequential_record", "sequential_lines", "TuneRecords", "read_tune", "is_tune_run"]

# Set by the notebook runner for the kernel it starts: the measuring notebook appends the points
# that failed, so `make measure-<axis>` exits non-zero although the notebook itself finished.
OUTCOME_FILE_ENV = "SPECNB_OUTCOME_FILE"

AXES = ("concurrency", "quantization", "drafter", "temperature", "kv", "parallelism", "proposal", "policy", "tune",
        "serving", "context", "map")


class RunError(SpecnbError):
    """A run folder that cannot be named or found; one line for the user."""


def new_run_name() -> str:
    """A fresh run name: the UTC time, so runs sort by time."""
    return datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")


def run_folder(axis: str, study: str, run: str, root: Path | str | None = None) -> Path:
    try:
        plain_name(run, "run name")
    except ValueError as exc:
        raise RunError(str(exc)) from None
    return Path(root or paths.LEDGERS) / axis / study / run


def latest_run(axis: str, study: str, root: Path | str | None = None) -> Path | None:
    """The newest run folder of a study (run names sort by time), or None."""
    base = Path(root or paths.LEDGERS) / axis / study
    if not base.is_dir():
        return None
    runs = sorted(p for p in base.iterdir() if p.is_dir() and not p.name.startswith("."))
    return runs[-1] if runs else None


def find_run(axis: str, study: str, run: str = "", root: Path | str | None = None) -> Path:
    """The named run, or the newest one; a one-line error when there is none."""
    if run:
        folder = run_folder(axis, study, run, root)
        if not folder.is_dir():
            raise RunError(f"no run {run!r} under {folder.parent}")
        return folder
    folder = latest_run(axis, study, root)
    if folder is None:
        raise RunError(f"no runs under {Path(root or paths.LEDGERS) / axis / study}: "
                       "measure first (measure = True, or `make measure-<axis>`)")
    return folder


def report_failed_points(points: list[str]) -> None:
    """Append failed points (``"<point id> (<why>)"``) to the file the notebook runner named in
    ``SPECNB_OUTCOME_FILE``; nothing when it named none (a notebook run by hand)."""
    target = os.environ.get(OUTCOME_FILE_ENV)
    if not target or not points:
        return
    with open(target, "a", encoding="utf-8") as fh:
        for p in points:
            fh.write(json.dumps(p) + "\n")


def report_refused_all(lines: list[str]) -> None:
    """A study whose every condition was refused (nothing measurable by this engine build here):
    its refusal lines, for the notebook runner to say alone and exit 2 on."""
    target = os.environ.get(OUTCOME_FILE_ENV)
    if not target or not lines:
        return
    with open(target, "a", encoding="utf-8") as fh:
        for line in lines:
            fh.write(json.dumps({"refused_all": line}) + "\n")


def _outcome_records(path: Path | str) -> list[Any]:
    try:
        lines = Path(path).read_text(encoding="utf-8").splitlines()
    except OSError:
        return []
    return [json.loads(ln) for ln in lines if ln.strip()]


def read_failed_points(path: Path | str) -> list[str]:
    """What :func:`report_failed_points` wrote (empty when the file is missing)."""
    return [r for r in _outcome_records(path) if isinstance(r, str)]


def read_refused_all(path: Path | str) -> list[str]:
    """What :func:`report_refused_all` wrote (empty when the file is missing)."""
    return [r["refused_all"] for r in _outcome_records(path) if isinstance(r, dict) and "refused_all" in r]


def search_record(out_dir: Path | str, round_: int) -> Path:
    """Where a sweep's adaptive search writes round ``round_``'s decision (written once)."""
    return Path(out_dir) / "search" / f"round-{round_:02d}.json"


def sequential_record(out_dir: Path | str, round_: int) -> Path:
    """Where a sequential sweep writes round ``round_``'s looks and choices (written once)."""
    return Path(out_dir) / "sequential" / f"round-{round_:02d}.json"


_LEVEL_NAME = {"concurrency": "c", "rate": "rate", "conversation": "users"}


def sequential_lines(folder: Path | str) -> list[str]:
    """The report's lines on each sequential sweep under ``folder`` (:mod:`specnb.sweep.sequential`):
    the rule, how its rounds ended, what each round spent its repeat on (another start, or a larger
    panel), and per drafter and level where it stopped: decided after n repeats (early when its
    level was measured fewer repeats than the last look's), open at its last look, or open when the
    rounds stopped. No interval: each level's interval is its row of the table, the same one the
    rounds read."""
    root = Path(folder)
    out: list[str] = []
    for seq_dir in sorted({p.parent for p in root.rglob("sequential/round-*.json")}):
        where = seq_dir.parent.relative_to(root).as_posix()
        label = f"sequential ({where})" if where != "." else "sequential"
        docs = []
        for f in sorted(seq_dir.glob("round-*.json")):
            try:
                doc = json.loads(f.read_text())
                if not isinstance(doc, dict) or not isinstance(doc.get("looks", []), list):
                    raise ValueError("not a sequential record")
                docs.append(doc)
            except (OSError, ValueError) as exc:
                out.append(f"{label}: {f.name} unreadable ({exc})")
        if docs:
            try:
                out += _sequential_run_lines(label, docs)
            except (TypeError, ValueError, KeyError, AttributeError) as exc:
                out.append(f"{label}: round-{docs[-1].get('round')} unreadable ({type(exc).__name__}: {exc})")
    return out


def _sequential_run_lines(label: str, docs: list[dict[str, Any]]) -> list[str]:
    last, rule = docs[-1], docs[-1].get("rule") or {}
    stopped = last.get("stopped")
    state = (f"stopped before round {last.get('round')}: {stopped}" if stopped
             else f"round {last.get('round')} chosen, no stop recorded after it (the run was cut short or is still "
                  "running; rerunning with the same folder resumes it)")
    if "looks" not in rule:  # a record of the rule before the one interval: its stops were made by that rule
        return [f"{label}: its rounds were chosen by an earlier rule (looks after {rule.get('first')}..{rule.get('last')} "
                f"repeats, each a t interval over starts only, Bonferroni over the looks); {state}. The table reads "
                "its repeats with the current rule (docs/statistics.md), which looks only where the arm orders are "
                "balanced, so its rows may differ from the stops recorded then"]
    looks_at = ", ".join(str(n) for n in rule.get("looks") or [])
    per_look = rule.get("per_look_alpha")
    out = [f"{label}: looks after {looks_at} repeats, alpha {rule.get('alpha')} per drafter and level over all its "
           f"looks ({'?' if per_look is None else f'{100 * (1 - float(per_look)):.2f} %'} each, calibrated); {state}"]
    for doc in docs:
        if doc.get("levels") and doc.get("spend"):
            out.append(f"  round {doc.get('round')} (repeat {int(doc.get('repeat', 0)) + 1}): "
                       + "; ".join(str(x) for x in doc["spend"]))
    name = _LEVEL_NAME.get(str(last.get("load", "concurrency")), "c")
    looks = last.get("looks", [])
    measured: dict[tuple[Any, Any], int] = {}  # per level, the most repeats any of its arms has
    for lk in looks:
        key = (lk.get("workload"), lk.get("level"))
        measured[key] = max(measured.get(key, 0), len(lk.get("ratios") or []))
    last_look = int((rule.get("looks") or [rule.get("last") or 0])[-1])
    for lk in looks:
        look = lk.get("look") or {}
        head = f"  {lk.get('arm') or '(no pair)'} / {lk.get('workload')} {name}={float(lk.get('level')):g}: "
        n_have = len(lk.get("ratios") or [])
        st = str(lk.get("state", ""))
        noise = _noise_text(lk.get("noise"))
        if st.startswith("decided"):
            n, m = int(look.get("n") or 0), measured[(lk.get("workload"), lk.get("level"))]
            if n < m:
                tail = f" (its level went on to {m} repeats for another arm)"
            elif m < last_look:
                tail = f": stopped early, {last_look - m} repeat(s) not needed"
            else:
                tail = ": decided at the last look"
            out.append(f"{head}{st[len('decided: '):]} after {n} repeats{tail}")
        elif st == "open at the last look":
            out.append(f"{head}undecided at the last look ({n_have} repeats){noise}")
        else:
            out.append(f"{head}open after {n_have} repeat(s): undecided when the rounds stopped "
                       f"({stopped or 'cut short'}){noise}")
    return out


def _noise_text(noise: dict[str, Any] | None) -> str:
    """What would narrow an open level's interval: more starts, or a larger panel."""
    if not noise or noise.get("prompt_var") is None:
        return ""
    if noise.get("dominant") == "prompts":
        return "; the panel's prompts dominate its interval: a larger panel_size narrows it, more repeats barely"
    return "; the starts dominate its interval: more repeats narrow it"


def search_lines(folder: Path | str) -> list[str]:
    """The report's lines on how each adaptive search (:mod:`specnb.sweep.search`) under
    ``folder`` ended: per sweep, the last round's decision for every curve and why the search
    stopped (none without search records).

    A search whose last record has no ``stopped`` was cut short (the run died or was stopped
    between rounds): that is said, not hidden.
    """
    root = Path(folder)
    out: list[str] = []
    for search_dir in sorted({p.parent for p in root.rglob("search/round-*.json")}):  # search_record's names
        rounds = sorted(search_dir.glob("round-*.json"))
        try:
            last, err = json.loads(rounds[-1].read_text()), ""
            if not isinstance(last, dict):
                last, err = None, "not a JSON object"
        except (OSError, ValueError) as exc:
            last, err = None, str(exc)
        where = search_dir.parent.relative_to(root).as_posix()
        label = f"search ({where})" if where != "." else "search"
        if last is None:
            out.append(f"{label}: {rounds[-1].name} unreadable ({err})")
            continue
        stopped = last.get("stopped")
        state = (f"stopped before round {last.get('round')}: {stopped}" if stopped
                 else f"ended during round {last.get('round')} (no stop decision recorded: the run was cut short "
                      "or is still running; rerunning with the same folder resumes it)")
        out.append(f"{label}: {len(rounds)} round(s) decided, {state}")
        for c in last.get("curves", []):
            left = f" (c={c['level']} not measured: the search stopped)" if stopped and c.get("level") else ""
            out.append(f"  {c.get('arm')} / {c.get('workload')}: {c.get('reason')}{left}")
    return out


@dataclass(frozen=True)
class TuneRecords:
    """What ``specnb tune`` wrote under ``<run>/tune/``: its rounds in order and, once it
    finished, its result (the config to deploy)."""

    folder: Path
    rounds: list[dict[str, Any]]
    result: dict[str, Any] | None


def is_tune_run(folder: Path | str) -> bool:
    """A folder ``specnb tune`` wrote (its ``tune/`` records), not the ``tune`` axis folder above runs."""
    rec = Path(folder) / "tune"
    return rec.is_dir() and any(rec.glob("candidate-*.json"))


def read_tune(folder: Path | str) -> TuneRecords | None:
    """The tune records of ``folder``; None where it has no ``tune/`` folder. A record that
    cannot be read raises :class:`~specnb.ledger.store.LedgerError` naming it."""
    from specnb.ledger.store import read_json

    rec = Path(folder) / "tune"
    if not rec.is_dir():
        return None
    res = rec / "result.json"
    return TuneRecords(folder=Path(folder), rounds=[read_json(f) for f in sorted(rec.glob("round-*.json"))],
                       result=read_json(res) if res.is_file() else None)
