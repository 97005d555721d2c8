"""The parameter lines every axis notebook shares live in one place (specnb.notebooks.defaults):
each notebook holds them as written there, and one rewrite changes them everywhere."""

from __future__ import annotations

import shutil

from specnb import paths
from specnb.ledger.runs import AXES
from specnb.notebooks import defaults
from specnb.notebooks.runner import notebook_parameters, notebook_source

AXIS_NOTEBOOKS = [notebook_source(a) for a in AXES if notebook_source(a) is not None]


def test_every_axis_notebook_holds_the_shared_lines_as_written_once():
    assert len(AXIS_NOTEBOOKS) >= 8
    for nb in AXIS_NOTEBOOKS:
        assert set(defaults.COMMON) <= set(notebook_parameters(nb)), nb.name
        assert defaults.differences(nb) == [], f"{nb.name}: run `make notebook-defaults`"
    assert defaults.main([]) == 0


def test_one_edit_is_written_into_every_notebook(tmp_path, monkeypatch):
    copies = []
    for nb in AXIS_NOTEBOOKS:
        copies.append(tmp_path / nb.name)
        shutil.copy2(nb, copies[-1])
    line = defaults.COMMON["server_args"]
    changed = line.replace('"2048"', '"4096"')
    assert changed != line
    monkeypatch.setitem(defaults.COMMON, "server_args", changed)
    assert all(defaults.differences(c) == ["server_args"] for c in copies)
    assert defaults.main(["--write", *map(str, copies)]) == 0
    for c, nb in zip(copies, AXIS_NOTEBOOKS, strict=True):
        assert notebook_parameters(c)["server_args"][-1] == "4096"
        before, after = nb.read_text().splitlines(), c.read_text().splitlines()
        assert [a for a, b in zip(before, after, strict=True) if a != b] == [line]  # nothing else moved
    assert paths.ROOT.joinpath("Makefile").read_text().count("specnb.notebooks.defaults --write") == 1
