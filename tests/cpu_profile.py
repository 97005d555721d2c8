"""Where a test pass's time goes, test by test: each phase's wall time and how busy the machine's
cores were meanwhile (the host's busy CPU seconds, ``specnb.engine.hostload.busy_seconds``), one
JSON line per phase.

A pytest plugin, loaded by name: ``make test PYTEST_ARGS="-p tests.cpu_profile"`` (or a pytest
command with ``-p tests.cpu_profile``) appends to ``$SPECNB_CPU_PROFILE`` (default
``/tmp/specnb-cpu-profile.jsonl``). ``python -m tests.cpu_profile FILE`` then prints, per test
module, the wall seconds, the busy share and the core-seconds left idle: a phase with idle cores
is one that could run beside another, a busy one only gets shorter by doing less. A figure to
read, never an assertion.

Each line also has its phase's start (``start``, seconds since the epoch) and its xdist worker, so
a pass run on workers (make test's first) is printed per worker too: when each ended, its phases'
summed time, and the seconds it stood idle while another still ran (a long file handed out last
ends the pass alone).
"""

from __future__ import annotations

import json
import os
import sys
import time
from collections import defaultdict
from pathlib import Path

import pytest

from specnb.engine.hostload import busy_seconds

CORES = os.cpu_count() or 1
DEFAULT = "/tmp/specnb-cpu-profile.jsonl"


def _phase(item, when: str):
    start, t0, busy0 = time.time(), time.monotonic(), busy_seconds()
    yield
    wall, busy = time.monotonic() - t0, busy_seconds() - busy0
    share = min(1.0, busy / (wall * CORES)) if wall > 0 else 0.0
    row = {"id": item.nodeid, "when": when, "start": round(start, 3), "s": round(wall, 3), "busy": round(share, 3),
           "run": os.environ.get("PYTEST_XDIST_TESTRUNUID", ""),
           "worker": os.environ.get("PYTEST_XDIST_WORKER", "")}
    with open(os.environ.get("SPECNB_CPU_PROFILE", DEFAULT), "a") as f:
        f.write(json.dumps(row) + "\n")


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_setup(item):
    yield from _phase(item, "setup")


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_call(item):
    yield from _phase(item, "call")


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_teardown(item, nextitem):  # noqa: ARG001 - pytest's hook signature
    yield from _phase(item, "teardown")


def summary(rows: list[dict], cores: int) -> list[str]:
    """Per module, slowest first: wall s, busy share, idle core-seconds; then the whole pass."""
    by: dict[str, list[float]] = defaultdict(lambda: [0.0, 0.0])
    for r in rows:
        acc = by[r["id"].split("::")[0]]
        acc[0] += r["s"]
        acc[1] += r["s"] * r["busy"]
    lines = [f"{'wall s':>8} {'busy':>5} {'idle core-s':>11}  module"]
    for mod, (wall, busy) in sorted(by.items(), key=lambda kv: -kv[1][0]):
        if wall >= 1:
            lines.append(f"{wall:8.1f} {busy / wall:5.0%} {(wall - busy) * cores:11.1f}  {mod}")
    wall, busy = sum(w for w, _ in by.values()), sum(b for _, b in by.values())
    if wall:
        lines.append(f"{wall:8.1f} {busy / wall:5.0%} {(wall - busy) * cores:11.1f}  all ({len(rows)} phases, "
                     f"{cores} cores)")
    return lines


def workers(rows: list[dict]) -> list[str]:
    """Per xdist worker of the file's last run on workers (rows appended by several runs, or by make
    test's second pass, which has none, are left out): its end after the run's first start, its
    phases' summed seconds and how long it stood idle at the end while another worker still ran;
    none for a single worker."""
    timed = [r for r in rows if "start" in r and r.get("worker") and r.get("run")]
    if not timed:
        return []
    last = max(timed, key=lambda r: r["start"])["run"]
    timed = [r for r in timed if r["run"] == last]
    names = sorted({r["worker"] for r in timed})
    if len(names) < 2:
        return []
    first = min(r["start"] for r in timed)
    end = {w: max(r["start"] + r["s"] for r in timed if r["worker"] == w) - first for w in names}
    final = max(end.values())
    lines = [f"{'ends s':>8} {'phases s':>9} {'idle at end':>11}  worker"]
    for w in names:
        phases = sum(r["s"] for r in timed if r["worker"] == w)
        lines.append(f"{end[w]:8.1f} {phases:9.1f} {final - end[w]:11.1f}  {w}")
    return lines


if __name__ == "__main__":
    path = Path(sys.argv[1] if len(sys.argv) > 1 else DEFAULT)
    rows = [json.loads(x) for x in path.read_text().splitlines() if x.strip()]
    print("\n".join(summary(rows, CORES) + workers(rows)))
