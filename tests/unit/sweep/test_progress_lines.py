"""Progress as plain lines: a point per line, and with ``tenths`` a line every tenth of the way with
the time left (a long loop of small steps, such as ``make drafter``'s training)."""

from __future__ import annotations

import io

from specnb.sweep.progress import LineProgress, progress_bar


def test_tenths_print_once_per_tenth_with_the_time_left():
    out = io.StringIO()
    bar = LineProgress(20, desc="training", unit="batch", file=out, tenths=True)
    for _ in range(20):
        bar.update(1)
    lines = out.getvalue().splitlines()
    assert [line.split(",")[0] for line in lines] == [f"[{n}/20 batch" for n in range(2, 21, 2)]
    assert all(line.endswith("min left") for line in lines)


def test_without_tenths_updates_print_nothing():
    out = io.StringIO()
    bar = LineProgress(20, desc="sweep", file=out)
    bar.update(20)
    assert out.getvalue() == ""


def test_progress_bar_in_a_file_gives_lines_with_tenths(monkeypatch):
    monkeypatch.setenv("SPECNB_PROGRESS", "lines")
    out = io.StringIO()
    bar = progress_bar(10, desc="states", unit="conv", file=out, tenths=True)
    bar.update(10)
    assert "states: about 0.0 min left" in out.getvalue()
