"""``specnb report`` over every committed run, against a copy of its output stored before the
report moved into one pipeline (issue 42): a refactor that changes a line fails here, and a line
changed on purpose (a bug fixed) is a new stored copy in the same commit that names it.

The copies are in ``report_golden/`` (stdout, then stderr, then the exit status), one per run
folder, the checkout's root written as ``<root>``. Remake them after a deliberate change with

    .venv/bin/python -m tests.unit.analysis.test_report_golden

Decimals may move by one unit of their last printed digit (a bootstrap quantile at a rounding
boundary on another CPU family's SIMD sums); any other difference fails.
"""

from __future__ import annotations

import contextlib
import io
import re
import sys
from pathlib import Path

import pytest

from specnb import paths
from specnb.cli import main

GOLDEN = Path(__file__).parent / "report_golden"
_NUMBER = re.compile(r"-?\d+(?:\.\d+)?")


def committed_runs() -> list[str]:
    """Every committed run folder (ledgers/<axis>/<name>/<run>), the published tables and the
    watch logs (specnb watch-plot draws them; they hold no points) left out."""
    return sorted(str(p.relative_to(paths.ROOT)) for p in paths.LEDGERS.glob("*/*/*")
                  if p.is_dir() and p.parts[-3] not in ("published", "watch"))


def stored_name(run: str) -> str:
    return run.removeprefix("ledgers/").replace("/", "__") + ".txt"


def report_of(run: str) -> str:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        rc = main(["report", str(paths.ROOT / run)])
    text = f"{out.getvalue()}\n--- stderr\n{err.getvalue()}\n--- exit {rc}\n"
    return text.replace(str(paths.ROOT), "<root>")


def within_last_digit(a: str, b: str) -> bool:
    """Same text between the numbers, each number within one unit of its last printed digit."""
    if _NUMBER.split(a) != _NUMBER.split(b):
        return False
    for x, y in zip(_NUMBER.findall(a), _NUMBER.findall(b), strict=True):
        places = len(x.partition(".")[2])
        if not places and x != y:  # counts, levels, K: exact
            return False
        if abs(float(x) - float(y)) > 1.5 * 10 ** -places:
            return False
    return True


@pytest.mark.parametrize("run", committed_runs())
def test_report_of_every_committed_run_is_unchanged(run):
    stored = GOLDEN / stored_name(run)
    assert stored.exists(), f"no stored report for {run}: remake them (see this module's docstring)"
    want, got = stored.read_text().splitlines(), report_of(run).splitlines()
    changed = [f"- {w}\n+ {g}" for w, g in zip(want, got, strict=False) if w != g and not within_last_digit(w, g)]
    assert len(want) == len(got) and not changed, (
        f"specnb report {run} changed ({len(want)} -> {len(got)} lines):\n" + "\n".join(changed[:10]))


def test_every_stored_report_has_its_run():
    runs = {stored_name(r) for r in committed_runs()}
    assert runs and {p.name for p in GOLDEN.glob("*.txt")} == runs


def test_last_digit_tolerance_is_only_that():
    assert within_last_digit("1.50x [1.31, 1.73]", "1.51x [1.31, 1.73]")
    assert not within_last_digit("1.50x [1.31, 1.73]", "1.53x [1.31, 1.73]")
    assert not within_last_digit("1.50x pays", "1.50x loses")
    assert not within_last_digit("c=4", "c=5")


if __name__ == "__main__":
    GOLDEN.mkdir(exist_ok=True)
    for old in GOLDEN.glob("*.txt"):
        old.unlink()
    for run in committed_runs():
        (GOLDEN / stored_name(run)).write_text(report_of(run))
        print(run, file=sys.stderr)
