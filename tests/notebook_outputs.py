"""What the notebook tests of every pass read: an executed notebook's errors, a notebook's axis, and
which ledger folders each notebook reads (``notebooks/ledgers.txt``, the file the Makefile's
``ledger_dirs`` is made from). Neutral ground: unit tests import this, never an integration module.
"""

from __future__ import annotations

from pathlib import Path

import nbformat

from specnb import paths

LEDGER_MAP = paths.ROOT / "notebooks" / "ledgers.txt"


def axis(nb: str | Path) -> str:
    """``notebooks/01_concurrency.py`` -> ``concurrency``."""
    return Path(nb).stem.split("_", 1)[1]


def errors(nb_path: Path) -> list[str]:
    """The exception names of the error outputs of an executed notebook (empty: it ran through)."""
    nb = nbformat.read(nb_path, as_version=4)
    return [o.get("ename", "") for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", [])
            if o.get("output_type") == "error"]


def ledger_map(path: Path = LEDGER_MAP) -> dict[str, list[str]]:
    """The axes that read other ledger folders than their own, with those folders (under
    ``ledgers/``; ``.`` is all of them), as ``notebooks/ledgers.txt`` lists them."""
    out: dict[str, list[str]] = {}
    for line in path.read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if line:
            name, folders = line.split(":", 1)
            out[name.strip()] = folders.split()
    return out


def ledger_folders(axis_name: str, mapping: dict[str, list[str]] | None = None) -> list[str]:
    """The ledger folders a notebook of this axis reads: the map's, or the axis' own folder."""
    mapping = ledger_map() if mapping is None else mapping
    return mapping.get(axis_name, [axis_name])
