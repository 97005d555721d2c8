"""Every axis notebook prints its run's report, and it is the text ``specnb report`` prints on
that run: the executed notebook's last cell is read (its ``$ specnb report <run>`` line names
the run) and held against the report stored for that run, which
``tests/unit/analysis/test_report_golden.py`` holds against the live command."""

from __future__ import annotations

import json
import re

import pytest

from specnb import paths
from tests.unit.analysis.test_report_golden import GOLDEN, stored_name, within_last_digit

EXECUTED = paths.ROOT / "notebooks" / "executed"
AXIS_NOTEBOOKS = sorted(p.stem for p in (paths.ROOT / "notebooks").glob("[0-9][0-9]_*.py")
                        if "open_axis(" in p.read_text())
_COMMAND = re.compile(r"^\$ specnb report (\S+)$", re.M)


def printed_reports(name: str) -> dict[str, str]:
    """Run folder -> the report text the executed notebook printed for it."""
    nb = json.loads((EXECUTED / f"{name}.ipynb").read_text())
    text = "".join("".join(o.get("text", "")) for c in nb["cells"] if c["cell_type"] == "code"
                   for o in c.get("outputs", []) if o.get("output_type") == "stream" and o.get("name") == "stdout")
    heads = list(_COMMAND.finditer(text))
    out = {}
    for h, nxt in zip(heads, heads[1:] + [None], strict=True):
        body = text[h.end() + 1: nxt.start() if nxt else None]
        out[h.group(1)] = body
    return out


@pytest.mark.parametrize("name", AXIS_NOTEBOOKS)
def test_the_notebook_prints_the_report_specnb_report_prints(name):
    reports = printed_reports(name)
    assert reports, f"{name}: the executed notebook prints no report (its last cell: nb.report())"
    for run, body in reports.items():
        stored = GOLDEN / stored_name(run)
        assert stored.exists(), f"{name} reports {run}, which is not a committed run"
        cli = stored.read_text().split("\n--- stderr\n")[0]
        want, got = cli.splitlines(), body.splitlines()
        changed = [f"- {w}\n+ {g}" for w, g in zip(want, got, strict=False) if w != g and not within_last_digit(w, g)]
        assert len(want) == len(got) and not changed, f"{name}: {run}: the notebook's report differs:\n" + "\n".join(changed[:5])


def test_the_reader_finds_each_report_apart():
    assert AXIS_NOTEBOOKS and "01_concurrency" in AXIS_NOTEBOOKS
