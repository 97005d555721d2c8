"""Shared test set-up: tests under ``tests/integration/`` are marked ``integration`` (a real
vLLM-CPU server), tests under ``tests/browser/`` are marked ``browser`` (headless Chromium);
``make test-unit`` deselects both."""

from __future__ import annotations

import functools
import os
import sys
from pathlib import Path

import pytest

# The first pass runs two xdist workers on the machine's cores: each worker's OpenMP (torch's,
# oneDNN's, the BLAS) gets its share of the cores, not all of them, or its threads spin at a barrier
# while the other worker holds a core (the committed head's replay took 36 s beside the other
# worker with two threads, 6.6 s with one; the pass's CPU time fell from 480 to 391 core-seconds).
# Before any test imports torch; a value the caller set is kept.
if os.environ.get("PYTEST_XDIST_WORKER_COUNT"):
    _cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    os.environ.setdefault("OMP_NUM_THREADS", str(max(1, _cores // int(os.environ["PYTEST_XDIST_WORKER_COUNT"]))))


from specnb import paths
from specnb.engine.forkserver import OPT_IN as FORK_OPT_IN
from specnb.engine.vllm import TWO_PROCESSES_OPT_IN
from specnb.ledger.suite import cpu_family

# Every single-worker vLLM-CPU server the tests launch runs its worker inside the engine core
# (two processes, about 8 s less per start; specnb.engine.vllm.TWO_PROCESSES): the tests check
# what specnb does, not which layout is faster. The shared baseline server (tests/shared_pair.py)
# keeps vLLM's own three-process layout, so both are started on every run.
os.environ.setdefault(TWO_PROCESSES_OPT_IN, "1")
# ... and is forked from a fork server that imported vLLM's entry point once (specnb.engine.forkserver:
# about 6 s and 6 core-seconds less per start, the engine core still spawned afresh); the ledgers
# record it (server.launcher) and test_sweep_real.py checks that the forked servers keep the CPUs.
os.environ.setdefault(FORK_OPT_IN, "1")

DEFAULT_MODEL = paths.MODELS / "SmolLM2-135M-Instruct"


def worker_cpus(cpus: list[int], worker: str, workers: int) -> list[int]:
    """The CPUs of xdist worker ``worker`` (gwN) of ``workers``: its slice of ``cpus``; all of them
    where there are fewer CPUs than workers."""
    if len(cpus) < workers:
        return cpus
    i = int(worker.removeprefix("gw")) % workers  # a worker xdist restarted gets the next id (gw2)
    return cpus[i * len(cpus) // workers:(i + 1) * len(cpus) // workers]


# the real-server modules that read the shared sweep (tests/integration/conftest.py: 40-50 s of
# servers and points) run on one worker, as one scope; every other module is a scope of its own
SHARED_SWEEP_GROUP = "real_sweep"


def _real_server_module(path: str) -> str | None:
    """The module's path under tests/integration/ (None: not a real-server module)."""
    path = path.replace("\\", "/")
    return path.split("tests/integration/", 1)[1] if "tests/integration/" in path else None


def real_server_scope(nodeid: str, root: Path) -> str:
    """The scope a pinned real-server run (--pin-workers) hands to one worker for ``nodeid``: the shared sweep's
    group for a module that names its fixture, else the test's module. Read from the module's text:
    xdist's controller has the ids, not the tests (each worker checks it against the fixtures its
    tests use, :func:`check_scopes`)."""
    module = nodeid.split("::", 1)[0]
    if _real_server_module(module) is not None and "real_sweep" in _module_text(root / module):
        return SHARED_SWEEP_GROUP
    return module


@functools.cache
def _module_text(path: Path) -> str:
    try:
        return path.read_text()
    except OSError:
        return ""


def check_scopes(items, root: Path) -> None:
    """A test that uses the shared sweep (directly or through another fixture) runs in its scope."""
    for item in items:
        if "real_sweep" in getattr(item, "fixturenames", ()) and real_server_scope(item.nodeid, root) != SHARED_SWEEP_GROUP:
            raise pytest.UsageError(f"{item.nodeid} uses the shared sweep through a fixture its module does not "
                                    "name: name real_sweep in the module (tests/conftest.py, real_server_scope)")


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config, log):
    """``--pin-workers``: whole scopes to each worker (:func:`real_server_scope`), handed out in the
    order collected (the shared sweep's first: pytest_collection_modifyitems)."""
    if not config.getoption("--pin-workers", False):
        return None
    from xdist.scheduler import LoadScopeScheduling

    root = config.rootpath

    class RealServerScheduling(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return real_server_scope(nodeid, root)

    return RealServerScheduling(config, log)


def pytest_addoption(parser):
    parser.addoption("--pin-workers", action="store_true",
                     help="confine each xdist worker to its own share of the CPUs (real-server tests two at a time on four or more cores: docs/timing.md)")


def pytest_configure(config):
    """With ``--pin-workers`` each xdist worker runs on its own share of the CPUs: every server, client
    and child a test starts inherits it, a launched server's OpenMP threads are bound to it
    (specnb.engine.vllm.engine_environment) and a point's busy-host check reads only those CPUs
    (specnb.engine.hostload), so the two workers' tests neither share a core nor count each other
    as a neighbour. Two servers side by side, each on its own core, decoded 1.46 times what one
    decodes on both, but a whole test on one core took about 1.6 times as long (its API server,
    client and pytest share the core): on two cores `make test` keeps one real-server test at a time
    (2026-12-07; docs/timing.md)."""
    worker = os.environ.get("PYTEST_XDIST_WORKER")
    if config.getoption("--pin-workers", False) and worker and hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, worker_cpus(sorted(os.sched_getaffinity(0)), worker,
                                            int(os.environ["PYTEST_XDIST_WORKER_COUNT"])))


def pytest_collection_modifyitems(config, items):
    from tests.hang import guard

    # every test's hang guard (pytest-timeout), unless it names its own: 10 x the longest test
    # phase measured on this CPU family (tests/hang.py)
    phase_guard = pytest.mark.timeout(guard("test_phase"))
    for item in items:
        if item.get_closest_marker("timeout") is None:
            item.add_marker(phase_guard)
        where = str(item.fspath).replace("\\", "/")
        if "tests/integration/" in where:
            item.add_marker(pytest.mark.integration)
        elif "tests/browser/" in where:
            item.add_marker(pytest.mark.browser)
    # files marked long (seconds measured) first, longest first, the rest in collection order (a stable
    # sort; the first pass runs with --no-loadscope-reorder): xdist hands a file out as a worker frees,
    # and the figures test (76-130 s) handed out last ran alone for the pass's last 86 s (2026-12-07)
    longest = {}
    for item in items:
        mark = item.get_closest_marker("long")
        if mark is not None:
            seconds = mark.args[0] if mark.args else mark.kwargs.get("seconds")
            if seconds is None:
                raise pytest.UsageError(f"{item.path}: pytest.mark.long needs the seconds measured, e.g. long(60)")
            longest[item.path] = max(longest.get(item.path, 0.0), float(seconds))
    # a pinned real-server run (--pin-workers): the shared sweep's scope first, the longest (40-50 %
    # of the step), so one worker starts it at once and the other takes the remaining modules one by one
    pinned = config.getoption("--pin-workers", False)
    if pinned:
        check_scopes(items, config.rootpath)
    items.sort(key=lambda item: (-longest.get(item.path, 0.0),
                                 pinned and real_server_scope(item.nodeid, config.rootpath) != SHARED_SWEEP_GROUP))


# The suite's real-server time: set-up, call and tear-down of every test under tests/integration
# (servers and sweeps), summed and printed at the end of a run with the shared sweep's server start
# beside it (the day's unit of time), and beside it the newest recorded clean-clone run of this CPU
# family (ledgers/suite, specnb.ledger.suite: tools/time_suite.py writes them). A figure to measure
# and to shrink, never an assertion: this machine's speed moves by a quarter within the hour, and a
# suite that failed on the clock would fail a submission on a slow hour.
def measured_line(family: str) -> str:
    from specnb.ledger.suite import describe, latest

    run = latest(family)
    return f"last recorded: {describe(run)}" if run else "no clean-clone run recorded for it (tools/time_suite.py)"


# CI=true: a component the suite needs (Chromium, Playwright, JupyterLab, Ray, the CPU models, an
# engine flag) that is missing fails, with one line naming it and how to install it; a run outside
# CI skips instead, saying why (-ra lists the reasons). And in CI no test passes on a skip at all:
# a skip from any source (a skipif mark, importorskip, pytest.skip) is reported as a failure.
IN_CI = os.environ.get("CI", "").strip().lower() in ("1", "true", "yes")


def on_one_cpu(cpu: int, fn):
    """``fn()`` run on a thread confined to ``cpu`` (as under taskset: the thread and every process
    it starts), its result returned and its exception raised here."""
    import threading

    got: dict = {}

    def confined() -> None:
        try:
            os.sched_setaffinity(0, {cpu})  # this thread only
            got["result"] = fn()
        except BaseException as exc:  # noqa: BLE001 - raised on the caller's thread below
            got["error"] = exc

    thread = threading.Thread(target=confined)
    thread.start()
    thread.join()
    if "error" in got:
        raise got["error"]
    return got["result"]


def require(present: bool, what: str, install: str) -> None:
    """Go on when ``present``; else fail in CI (``what`` is missing: ``install``), skip elsewhere."""
    if present:
        return
    line = f"missing: {what} ({install})"
    if IN_CI:
        pytest.fail(line, pytrace=False)
    pytest.skip(line)


def _skip_reason(longrepr) -> str:
    return longrepr[2] if isinstance(longrepr, tuple) and len(longrepr) == 3 else str(longrepr)


def skip_fails_in_ci(report) -> None:
    """In CI, a skipped test or collector is reported as failed, with the skip's reason."""
    if IN_CI and report.skipped and not hasattr(report, "wasxfail"):
        report.outcome = "failed"
        report.longrepr = f"skipped under CI=true, where no test passes on a skip: {_skip_reason(report.longrepr)}"


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    skip_fails_in_ci(report)
    if SPENT["start_s"] is not None and not SPENT.get("reported"):  # to the xdist controller, which prints it
        report.user_properties.append((START_PROPERTY, SPENT["start_s"]))
        SPENT["reported"] = True


@pytest.hookimpl(hookwrapper=True)
def pytest_make_collect_report(collector):
    outcome = yield
    skip_fails_in_ci(outcome.get_result())


FAMILY = cpu_family()
SPENT: dict = {"integration": 0.0, "tests": 0, "start_s": None}


def record_server_start(seconds: float) -> None:
    """The seconds the shared sweep's servers took to start side by side: this run's unit of time."""
    SPENT["start_s"] = seconds


START_PROPERTY = "specnb_shared_start_s"


def pytest_runtest_logreport(report):
    for key, value in getattr(report, "user_properties", ()):
        if key == START_PROPERTY:
            SPENT["start_s"] = value
    if "integration" in report.keywords:
        SPENT["integration"] += report.duration
        if report.when == "call":
            SPENT["tests"] += 1


# the tmp_path factory, while the shared pair is to be launched at the first browser test
EARLY_PAIR: dict = {}


def pytest_collection_finish(session):
    """When browser tests run before the real-server ones (``make test``'s second pass), the shared
    vLLM pair is launched as the first browser test starts, so it starts beside them
    (tests/shared_pair.py), not beside the timing-sensitive serial tests before them; not
    in an xdist worker, where every worker would launch its own."""
    EARLY_PAIR.clear()
    items = session.items
    if os.environ.get("PYTEST_XDIST_WORKER") or not any(i.get_closest_marker("browser") for i in items):
        return
    if any("_shared_pair" in getattr(i, "fixturenames", ()) for i in items):
        EARLY_PAIR["factory"] = session.config._tmp_path_factory


def pytest_runtest_setup(item):
    if EARLY_PAIR and item.get_closest_marker("browser"):
        from tests.shared_pair import launch_pair_early

        try:
            launch_pair_early(EARLY_PAIR.pop("factory"))
        except Exception as exc:  # noqa: BLE001 - the first test that needs the pair launches it then
            print(f"the shared vLLM pair was not launched early ({exc}); its first user launches it")


@pytest.hookimpl(trylast=True)
def pytest_sessionfinish(session, exitstatus):
    early = sys.modules.get("tests.shared_pair")
    if early is not None:  # a shared pair launched early that no test took (an interrupted run)
        early.stop_early_pair()
    if not SPENT["tests"]:
        return
    spent, start = SPENT["integration"], SPENT["start_s"]
    in_starts = "" if not start else f", {spent / start:.1f} times the shared sweep's {start:.1f} s start (its servers side by side)"
    from specnb.ledger.provenance import cpu_isa

    level, emulated = cpu_isa()  # make test-as-avx2: the other family's choices, not its speed
    as_what = f", emulating {level}: its choices, not its speed" if emulated else ""
    line = (f"real-server tests: {spent:.0f} s over {SPENT['tests']} tests{in_starts}; a figure, not a budget "
            f"(this CPU family, {FAMILY}{as_what}; {measured_line(FAMILY)})")
    reporter = session.config.pluginmanager.get_plugin("terminalreporter")
    if reporter is not None:
        reporter.write_line(line)
