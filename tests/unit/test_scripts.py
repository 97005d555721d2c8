"""The files around the package: every Python file under ``scripts/``, ``tools/`` and
``benchmarks/`` imports against this checkout (a renamed module or a moved data folder fails
here, not in the hands of whoever runs the script next), answers ``--help`` where it is a
command, and passes the same lint as the package."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from specnb import paths
from tests.hang import guard

FOLDERS = ("scripts", "tools", "benchmarks")
FILES = sorted(p for d in FOLDERS for p in (paths.ROOT / d).rglob("*.py") if "out" not in p.relative_to(paths.ROOT).parts)
IMPORT = ("import importlib.util, os, sys\n"
          "path = sys.argv[1]\n"
          "sys.path[:0] = [os.path.dirname(path)]\n"
          "name = os.path.splitext(os.path.basename(path))[0]\n"
          "spec = importlib.util.spec_from_file_location(name, path)\n"
          "sys.modules[name] = module = importlib.util.module_from_spec(spec)\n"
          "spec.loader.exec_module(module)\n")


def _rel(p: Path) -> str:
    return str(p.relative_to(paths.ROOT))


def test_there_are_files_to_check():
    assert {p.parts[len(paths.ROOT.parts)] for p in FILES} == set(FOLDERS)


@pytest.mark.parametrize("path", FILES, ids=_rel)
def test_every_module_imports(path):
    out = subprocess.run([sys.executable, "-c", IMPORT, str(path)], capture_output=True, text=True, timeout=guard("child_start"),
                         cwd=paths.ROOT)
    assert out.returncode == 0, f"{_rel(path)} does not import: {out.stderr.strip().splitlines()[-1:]}"


COMMANDS = [p for p in FILES if 'if __name__ == "__main__"' in p.read_text() and "argparse" in p.read_text()]


@pytest.mark.parametrize("path", COMMANDS, ids=_rel)
def test_every_command_answers_help(path):
    out = subprocess.run([sys.executable, str(path), "--help"], capture_output=True, text=True, timeout=guard("child_start"),
                         cwd=paths.ROOT)
    assert out.returncode == 0 and "usage" in out.stdout.lower(), f"{_rel(path)} --help: {out.stderr[-300:]}"


def test_every_folder_make_lint_covers_is_linted():
    """`make lint`'s folders, in the unit pass: the library and the tests as well as the scripts (a
    lint error in src/ went unseen for three commits when only these three folders were checked)."""
    ruff = shutil.which("ruff") or str(Path(sys.executable).parent / "ruff")
    folders = ("src", "tests", *FOLDERS)
    assert set(folders) <= set(re.search(r"ruff check ([^\n]+)", (paths.ROOT / "Makefile").read_text()).group(1).split())
    out = subprocess.run([ruff, "check", *folders], capture_output=True, text=True, timeout=guard("child_start"),
                         cwd=paths.ROOT)
    assert out.returncode == 0, out.stdout[-2000:]


def test_vulture_finds_no_dead_code_in_the_package(tmp_path):
    """`make lint`'s dead-code check in the unit pass: vulture at pyproject.toml's settings (80 %
    confidence, the names it may not count, each with why) finds nothing in src/, and at that
    confidence it does find code planted after a return."""
    vulture = shutil.which("vulture") or str(Path(sys.executable).parent / "vulture")
    out = subprocess.run([vulture], capture_output=True, text=True, timeout=guard("child_start"), cwd=paths.ROOT)
    assert out.returncode == 0, out.stdout[-2000:]
    planted = tmp_path / "planted.py"
    planted.write_text("def used():\n    return 1\n\n\ndef helper():\n    x = 2\n    return used()\n    y = 3\n")
    out = subprocess.run([vulture, str(planted), "--min-confidence", "80"], capture_output=True, text=True,
                         timeout=guard("child_start"), cwd=tmp_path)
    assert out.returncode != 0 and "unreachable code after 'return'" in out.stdout, out.stdout


def test_the_local_clusters_nodes_offer_the_cpus_it_may_use():
    """tools/local_cluster.py run under taskset offers each node the CPUs it may use, not the machine's."""
    code = IMPORT + "print(module.parser().parse_args(['--', 'true']).cpus)\n"
    tool = str(paths.ROOT / "tools" / "local_cluster.py")
    pin = f"import os\nos.sched_setaffinity(0, {{{max(os.sched_getaffinity(0))}}})\n"  # what taskset -c N does
    one = subprocess.run([sys.executable, "-c", pin + code, tool],
                         capture_output=True, text=True, timeout=guard("child_start"), check=True)
    assert float(one.stdout) == 1.0, one.stdout
    every = subprocess.run([sys.executable, "-c", code, tool], capture_output=True, text=True,
                           timeout=guard("child_start"), check=True)
    assert float(every.stdout) == len(os.sched_getaffinity(0)), every.stdout
