"""``specnb report`` over every committed run, against a copy of its output stored before the
report moved into one pipeline (issue 42): a refactor that changes a line fails here, and a line
changed on purpose (a bug fixed) is a new stored copy in the same commit that names it.

The copies are in ``report_golden/`` (stdout, then stderr, then the exit status), one per run
folder, the checkout's root written as ``<root>``. Remake the copies a deliberate change moved,
naming their runs (``--all``: every run; a new run gets its first copy either way):

    .venv/bin/python -m tests.unit.analysis.test_report_golden ledgers/concurrency/cpu-demo/<run> ...
    .venv/bin/python -m tests.unit.analysis.test_report_golden --all

It prints each copy it rewrote and by how many lines, and leaves alone a copy whose only change is
the last-digit drift the test tolerates (nothing to record).

Decimals may move by one unit of their last printed digit (a bootstrap quantile at a rounding
boundary on another CPU family's SIMD sums); any other difference fails.
"""

from __future__ import annotations

import contextlib
import difflib
import io
import re
import sys
from pathlib import Path

import pytest

from specnb import paths
from specnb.cli import main as cli_main

GOLDEN = Path(__file__).parent / "report_golden"
# 38 stored reports, 47-62 s on two busy cores (make test's first pass, 2026-12-07): handed out early
pytestmark = pytest.mark.long(62)
_NUMBER = re.compile(r"-?\d+(?:\.\d+)?")


def committed_runs() -> list[str]:
    """Every committed run folder (ledgers/<axis>/<name>/<run>), the published tables, the watch
    logs (specnb watch-plot draws them), the step-time probes (python -m specnb.figures.probe
    draws them) and the drafters' training curves (make drafter) left out: they hold no points."""
    return sorted(str(p.relative_to(paths.ROOT)) for p in paths.LEDGERS.glob("*/*/*")
                  if p.is_dir() and p.parts[-3] not in ("published", "watch", "probe", "suite",
                                                                            "drafter-training"))


def stored_name(run: str) -> str:
    return run.removeprefix("ledgers/").replace("/", "__") + ".txt"


def report_of(run: str) -> str:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        rc = cli_main(["report", str(paths.ROOT / run)])
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


def test_the_update_rewrites_the_runs_it_is_given_and_nothing_else(tmp_path, monkeypatch, capsys):
    import tests.unit.analysis.test_report_golden as golden

    monkeypatch.setattr(golden, "GOLDEN", tmp_path)
    runs = committed_runs()[:3]
    for run in runs:
        (tmp_path / stored_name(run)).write_text(report_of(run))
    first, second, third = runs
    text = (tmp_path / stored_name(second)).read_text()
    (tmp_path / stored_name(second)).write_text(text + "a line the report no longer prints\n")
    drift = _NUMBER.sub(lambda m: m.group(0) if "." not in m.group(0) else m.group(0)[:-1] + str(
        (int(m.group(0)[-1]) + 1) % 10 if m.group(0)[-1] != "9" else 8), (tmp_path / stored_name(third)).read_text(), count=1)
    (tmp_path / stored_name(third)).write_text(drift)
    assert golden.update([second, third]) == {second: 1}  # the third: last-digit drift, left alone
    assert (tmp_path / stored_name(second)).read_text() == report_of(second)
    assert (tmp_path / stored_name(third)).read_text() == drift
    err = capsys.readouterr().err
    assert f"{second}: rewritten, 1 line(s) changed" in err and f"{third}: unchanged" in err
    assert golden.main([]) == 2
    with pytest.raises(SystemExit, match="not a committed run folder"):
        golden.update(["ledgers/nope"])


def test_last_digit_tolerance_is_only_that():
    assert within_last_digit("1.50x [1.31, 1.73]", "1.51x [1.31, 1.73]")
    assert not within_last_digit("1.50x [1.31, 1.73]", "1.53x [1.31, 1.73]")
    assert not within_last_digit("1.50x pays", "1.50x loses")
    assert not within_last_digit("c=4", "c=5")


def update(runs: list[str], out=None) -> dict[str, int]:
    """Rewrite the stored copies of ``runs``: {run: lines changed} for each copy written (a new run:
    its line count), none for a copy whose only difference is last-digit drift."""
    out = out or sys.stderr
    GOLDEN.mkdir(exist_ok=True)
    known = set(committed_runs())
    written: dict[str, int] = {}
    for run in runs:
        run = run.rstrip("/")
        if run not in known:
            raise SystemExit(f"{run}: not a committed run folder (ledgers/<axis>/<study>/<run>)")
        path, got = GOLDEN / stored_name(run), report_of(run)
        if path.exists():
            want = path.read_text()
            old, new = want.splitlines(), got.splitlines()
            # lines replaced, inserted or deleted (an inserted section shifts the rest: not a change to them)
            changed = sum(max(i2 - i1, j2 - j1) for op, i1, i2, j1, j2 in
                          difflib.SequenceMatcher(a=old, b=new, autojunk=False).get_opcodes() if op != "equal")
            if want == got or (len(old) == len(new) and all(a == b or within_last_digit(a, b)
                                                            for a, b in zip(old, new, strict=True))):
                print(f"{run}: unchanged (at most last-digit drift): not rewritten", file=out)
                continue
        else:
            changed = len(got.splitlines())
        path.write_text(got)
        written[run] = changed
        print(f"{run}: rewritten, {changed} line(s) changed", file=out)
    return written


def main(argv: list[str]) -> int:
    if not argv:
        print("name the runs whose copies to rewrite (ledgers/<axis>/<study>/<run>), or --all", file=sys.stderr)
        return 2
    runs = committed_runs() if argv == ["--all"] else argv
    update(runs)
    stale = {p.name for p in GOLDEN.glob("*.txt")} - {stored_name(r) for r in committed_runs()}
    for name in sorted(stale):
        print(f"{name}: its run is gone; delete the copy if that is meant", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
