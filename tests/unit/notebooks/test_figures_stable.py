"""Every notebook in analysis mode (``measure = False``) on the committed ledgers, through
``make -B figures``: each runs without an error and saves its figures (an axis notebook at least
one drawn from its own axis' ledgers, every file and source there), and the run rewrites nothing:
every figure and every executed notebook comes out byte for byte as committed, so ``git status``
stays clean.

It runs the real target (out-of-date notebooks listed by make, executed in parallel) in a copy
of the checkout made into its own git repository, with this checkout's venv and
``SPECNB_ROOT`` pointing at the copy; no server starts, so it runs in ``make test-unit`` (about
50 s on two cores: one notebook run each, where a separate analysis-mode run per notebook
used to execute them all a second time). Notebooks whose axis has no committed ledgers yet
cannot run in analysis mode and are left out (named in the output).
"""

from __future__ import annotations

import json
import math
import os
import re
import shutil
import subprocess
import time
from pathlib import Path

import pytest

from specnb import paths
from tests.hang import guard
from tests.notebook_outputs import axis, errors, ledger_folders, ledger_map

COPIED = ("Makefile", "pyproject.toml", "notebooks", "figures", "ledgers", "src", "drafters")  # drafters: the trained heads the drafter notebook reads
# 76-130 s on two busy cores (make test's first pass, 2026-12-07): handed out first (tests/conftest.py)
pytestmark = pytest.mark.long(130)


def _with_committed_ledgers() -> tuple[list[str], list[str]]:
    """Notebooks whose ledgers are committed: every folder it reads (notebooks/ledgers.txt, the
    Makefile's ledger_dirs) is there; the others cannot run in analysis mode yet."""
    have, missing = [], []
    mapping = ledger_map()
    for nb in sorted((paths.ROOT / "notebooks").glob("[0-9][0-9]_*.py")):
        folders = ledger_folders(axis(nb), mapping)
        (have if all((paths.LEDGERS / f).is_dir() for f in folders) else missing).append(nb.stem)
    return have, missing


def test_the_makefile_reads_the_one_notebook_to_ledger_map():
    """``make figures`` re-executes a notebook when a ledger of the folders notebooks/ledgers.txt
    names for it changes: what the Makefile made of the file is the file, axis by axis."""
    env = {k: v for k, v in os.environ.items() if k not in ("MAKEFLAGS", "MFLAGS", "MAKELEVEL")}
    out = subprocess.run(["make", "-s", "-f", "Makefile", "print-ledger-dirs"], cwd=paths.ROOT, env=env,
                         capture_output=True, text=True, timeout=guard("child_start"), check=True).stdout
    made = {line.split(":", 1)[0]: line.split(":", 1)[1].split() for line in out.splitlines()}
    axes = [axis(nb) for nb in sorted((paths.ROOT / "notebooks").glob("[0-9][0-9]_*.py"))]
    mapping = ledger_map()
    assert sorted(made) == sorted(axes)
    assert made == {a: ledger_folders(a, mapping) for a in axes}
    assert set(mapping) <= set(axes), "notebooks/ledgers.txt names an axis no notebook has"


def _git(cwd, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True, text=True).stdout


def test_make_figures_twice_leaves_git_status_clean(tmp_path):
    venv = paths.ROOT / ".venv"
    from tests.conftest import require

    require((venv / "bin" / "python").exists(), "the project's .venv", "make setup makes it")
    repo = tmp_path / "checkout"
    repo.mkdir()
    for name in COPIED:  # copy2 keeps modification times, so the venv's stamp stays up to date
        src = paths.ROOT / name
        if src.is_dir():
            shutil.copytree(src, repo / name, ignore=shutil.ignore_patterns("__pycache__", "*.egg-info", "logs"))
        else:
            shutil.copy2(src, repo / name)
    _git(repo, "init", "-q")
    _git(repo, "add", "-A")
    _git(repo, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "as committed")
    env = {k: v for k, v in os.environ.items() if k not in ("MAKEFLAGS", "MFLAGS", "MAKELEVEL")}
    env["SPECNB_ROOT"] = str(repo)
    notebooks, missing = _with_committed_ledgers()
    if missing:
        print(f"left out, no committed ledgers: {', '.join(missing)}")
    t0 = time.monotonic()
    run = subprocess.run(["make", "-B", "figures", f"VENV={venv}", f"NOTEBOOKS={' '.join(notebooks)}"], cwd=repo,
                         env=env, capture_output=True, text=True, timeout=guard("make_figures"))
    took = time.monotonic() - t0
    assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-3000:]
    print(f"make -B figures: {took:.1f} s")
    # each notebook ran to the end and saved what it draws, from files that exist
    every_sidecar = [json.loads(p.read_text()) for p in sorted((repo / "figures").glob("*.json"))]
    for nb in notebooks:
        assert errors(repo / "notebooks" / "executed" / f"{nb}.ipynb") == [], nb
        axis_name = axis(nb)
        sidecars = [s for s in every_sidecar if s.get("notebook") == nb]
        if axis_name == "index":
            continue
        assert sidecars, f"{nb}: an axis notebook must save at least one figure"
        for side in sidecars:
            for f in side["files"]:
                assert (repo / "figures" / f).stat().st_size > 1000, f
            for src in side["sources"]:
                assert (repo / src).exists() or Path(src).exists(), f"{nb}: {src}"
        if axis_name != "calculator":
            assert any(src.startswith(f"ledgers/{axis_name}/") for s in sidecars for src in s["sources"]), \
                f"{nb}: at least one figure must be drawn from this axis' committed ledgers"
    status = _git(repo, "status", "--porcelain")
    changed = [line[3:] for line in status.splitlines()]
    # a text output whose only change is float noise in the last printed digits (the same fit on
    # another CPU family's SIMD kernels, AVX2 against AVX-512) is the same figure: what matters is
    # compared, to a millionth of each number; anything else that changed fails
    real = [f for f in changed if Path(f).suffix not in TEXT_OUTPUTS or not (repo / f).is_file()
            or not same_but_float_noise(_git(repo, "show", f"HEAD:{f}"), (repo / f).read_text())]
    if real:
        diff = _git(repo, "diff", "--stat")
        pytest.fail(f"make -B figures changed committed outputs (commit the result of `make figures`):\n"
                    f"{status}\n{diff}")


TEXT_OUTPUTS = (".svg", ".ipynb", ".json")
_NUMBER = re.compile(r"-?\d+\.\d+(?:e[-+]?\d+)?")


def same_but_float_noise(before: str, after: str, rel: float = 1e-6, abs_: float = 1e-5) -> bool:
    """Whether two text files differ only in the last digits of their decimal numbers: the same
    text between the numbers, and every number within ``rel`` (or ``abs_``) of its counterpart."""
    if before == after:
        return True
    if _NUMBER.split(before) != _NUMBER.split(after):
        return False
    a, b = _NUMBER.findall(before), _NUMBER.findall(after)
    return len(a) == len(b) and all(math.isclose(float(x), float(y), rel_tol=rel, abs_tol=abs_) for x, y in zip(a, b, strict=True))


def test_float_noise_is_told_apart_from_a_changed_figure():
    svg = "<path d=\"L 194.610758 124.422615 L 198.0 1.5\"/>"
    assert same_but_float_noise(svg, svg.replace("124.422615", "124.422614"))
    assert not same_but_float_noise(svg, svg.replace("124.422615", "124.5"))  # moved: a different figure
    assert not same_but_float_noise(svg, svg.replace("L 198.0", "M 198.0"))  # the text itself changed
    assert not same_but_float_noise("speedup 1.50x", "speedup 1.51x")
