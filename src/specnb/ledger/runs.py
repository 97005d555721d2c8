"""Where a study's runs live: ``ledgers/<axis>/<study>/<run>/<condition>/...``.

A run folder is write-once like every ledger: a new measurement goes into a new run (a UTC
time stamp, so names sort by time), an interrupted one resumes when given the same name,
and analysis reads the newest run unless told otherwise.
"""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

from specnb import paths
from specnb.errors import SpecnbError, plain_name

__all__ = ["AXES", "RunError", "new_run_name", "run_folder", "latest_run", "find_run"]

AXES = ("concurrency", "quantization", "drafter", "temperature", "kv", "parallelism", "proposal", "policy")


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
