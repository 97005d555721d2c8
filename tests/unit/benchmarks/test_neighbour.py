"""benchmarks/neighbour.py refuses bad input in one line before any server starts (the real
measurement is tests/integration/test_neighbour_real.py)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.hang import guard

ROOT = Path(__file__).resolve().parents[3]


@pytest.mark.parametrize("args", [["--rounds", "0"], ["--hogs", "0"], ["--requests", "-1"], ["--tokens", "0"]])
def test_bad_counts_are_one_line_and_start_nothing(args):
    proc = subprocess.run([sys.executable, "benchmarks/neighbour.py", *args, "--endpoint", "http://127.0.0.1:9"],
                          cwd=ROOT, capture_output=True, text=True, timeout=guard("child_start"))
    assert proc.returncode == 2 and proc.stdout == ""
    assert proc.stderr.strip() == "--rounds, --hogs, --requests and --tokens must be at least 1"
