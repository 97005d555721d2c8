"""``make -B figures`` on the committed ledgers rewrites nothing: every figure and every executed
notebook comes out byte for byte as committed, so ``git status`` stays clean.

It runs the real target (out-of-date notebooks listed by make, executed in parallel) in a copy
of the checkout made into its own git repository, with this checkout's venv and
``SPECNB_ROOT`` pointing at the copy; no server starts. Notebooks whose axis has no committed
ledgers yet cannot run in analysis mode and are left out (named in the output). Marked integration because it runs
every notebook (about 40 s on two cores).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import time

import pytest

from specnb import paths

COPIED = ("Makefile", "pyproject.toml", "notebooks", "figures", "ledgers", "src")
# notebooks that read no axis folder of their own (the Makefile's ledger_dirs says the same)
OWN_LEDGERS = {"index": ".", "calculator": "concurrency", "policy": "proposal"}


def _with_committed_ledgers() -> tuple[list[str], list[str]]:
    """Notebooks whose ledgers are committed (the others cannot run in analysis mode yet)."""
    have, missing = [], []
    for nb in sorted((paths.ROOT / "notebooks").glob("[0-9][0-9]_*.py")):
        axis = nb.stem.split("_", 1)[1]
        folders = {axis, OWN_LEDGERS.get(axis, axis)}
        (have if all((paths.LEDGERS / f).is_dir() for f in folders) else missing).append(nb.stem)
    return have, missing


def _git(cwd, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True, text=True).stdout


def test_make_figures_twice_leaves_git_status_clean(tmp_path):
    venv = paths.ROOT / ".venv"
    if not (venv / "bin" / "python").exists():
        pytest.skip("no .venv: run `make setup`")
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
                         env=env, capture_output=True, text=True, timeout=600)
    took = time.monotonic() - t0
    assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-3000:]
    print(f"make -B figures: {took:.1f} s")
    status = _git(repo, "status", "--porcelain")
    if status:
        diff = _git(repo, "diff", "--stat")
        pytest.fail(f"make -B figures changed committed outputs (commit the result of `make figures`):\n"
                    f"{status}\n{diff}")
