"""The suite's harness (tests/conftest.py) on fake sessions: the real-server time printed, never a
failure; in CI a missing component or a skip fails; the shared pair's early launch."""

from __future__ import annotations

import json
import os
import re
import threading
from types import SimpleNamespace

import pytest

from specnb import paths
from tests import conftest as budget
from tests.hang import guard

pytest_plugins = ["pytester"]


class _Config:
    def __init__(self, args=(), keyword="", markexpr=""):
        self.args = list(args)
        self.option = SimpleNamespace(keyword=keyword, markexpr=markexpr)
        self.lines: list[str] = []
        reporter = SimpleNamespace(write_line=self.lines.append)
        self.pluginmanager = SimpleNamespace(get_plugin=lambda name: reporter)

    def getini(self, name):
        assert name == "testpaths"
        return ["tests/unit", "tests/browser", "tests/integration"]


@pytest.fixture
def spent(monkeypatch):
    state = {"integration": 0.0, "tests": 0, "start_s": None}
    monkeypatch.setattr(budget, "SPENT", state)
    return state


def test_the_real_server_time_is_printed_and_never_fails_a_run(spent):
    """However long the real-server tests took, the run's status is theirs: the time is a figure."""
    for when, d in (("setup", 30.0), ("call", 9000.0), ("teardown", 1.0)):
        budget.pytest_runtest_logreport(SimpleNamespace(keywords={"integration": 1}, duration=d, when=when))
    budget.pytest_runtest_logreport(SimpleNamespace(keywords={}, duration=500.0, when="call"))  # a unit test
    assert spent["tests"] == 1 and spent["integration"] == 9031.0
    budget.record_server_start(55.0)
    session = SimpleNamespace(config=_Config(), exitstatus=0)
    budget.pytest_sessionfinish(session, 0)
    assert session.exitstatus == 0
    (line,) = session.config.lines
    assert line.startswith("real-server tests: 9031 s over 1 tests, 164.2 times the shared sweep's 55.0 s start")
    assert "not a budget" in line and budget.FAMILY in line
    budget.record_server_start(None)  # a run that never reached the shared sweep: seconds alone
    alone = SimpleNamespace(config=_Config(), exitstatus=0)
    budget.pytest_sessionfinish(alone, 0)
    assert alone.exitstatus == 0 and "times the shared" not in alone.config.lines[0]


def test_an_emulated_run_says_so_beside_its_figure(spent, monkeypatch):
    """`make test-as-avx2` on a CPU with more: the printed figure is this family's, said to be
    run with the other family's choices (on an AVX2-only CPU the emulation changes nothing)."""
    from specnb.ledger.provenance import EMULATE_ENV, cpu_isa

    budget.pytest_runtest_logreport(SimpleNamespace(keywords={"integration": 1}, duration=10.0, when="call"))
    monkeypatch.setenv(EMULATE_ENV, "avx2")
    session = SimpleNamespace(config=_Config(), exitstatus=0)
    budget.pytest_sessionfinish(session, 0)
    (line,) = session.config.lines
    assert ("emulating avx2: its choices, not its speed" in line) == cpu_isa()[1]
    assert f"this CPU family, {budget.FAMILY}" in line


def test_no_test_or_hook_in_the_suite_fails_on_the_clock():
    """The harness holds no time budget, and no test compares a wall-clock figure with a bound a
    machine ten times slower would miss: grep for the budget names and the tight client ratios, and
    parse every test file for a wait written as a number (tests/hang.py: each bound is a guard, ten
    times a measured figure it names)."""
    from specnb import paths
    from tests.hang import written_bounds

    harness = (paths.ROOT / "tests" / "conftest.py").read_text()
    assert "BUDGET" not in harness and "exitstatus =" not in harness
    files = sorted((paths.ROOT / "tests").rglob("*.py"))
    for path in files:
        text = path.read_text()
        # a latency or lateness in ms held to a few ms, or a client figure held to a few percent
        assert not re.search(r"(lateness|itl|tpot)_ms\"\]\s*<\s*\d{1,2}\b", text), path
        assert not re.search(r"p50_(itl|tpot)_ms\"\] == pytest\.approx\([^)]*rel=0\.0\d", text), path
    found = written_bounds(files)
    assert not found, "waits written as numbers (take them from tests.hang.guard):\n" + "\n".join(found)


def test_the_clock_check_finds_each_kind_of_written_wait(tmp_path):
    """The parse finds what the regexes it replaced missed (``monotonic() - t0 < X``, an elapsed
    time held in a name), deadlines, children's and tests' timeouts and a real server's start
    timeout; it passes a guard, a rate (a share of a core) and a fake server's start timeout."""
    from tests.hang import written_bounds

    bad = tmp_path / "integration" / "test_bad.py"
    bad.parent.mkdir()
    bad.write_text(
        "import subprocess, time\nimport pytest\nfrom time import monotonic\n"
        "def test_a():\n    t0 = time.monotonic()\n    assert time.monotonic() - t0 < 5\n"
        "def test_b():\n    t0 = monotonic()\n    took = monotonic() - t0\n    assert took >= 0.1\n"
        "def test_c():\n    deadline = time.perf_counter() + 30\n"
        "def test_d(proc):\n    subprocess.run(['x'], timeout=60)\n    proc.wait(timeout=2 * 5)\n"
        "@pytest.mark.timeout(120)\ndef test_e():\n    VllmServer('m', ready_timeout_s=300)\n")
    found = written_bounds([bad])
    assert sorted(line.split(": ")[1] for line in found) == sorted([
        "an elapsed time held to a number", "an elapsed time held to a number", "a deadline a number of seconds away",
        "a child process's timeout written as a number", "a child process's timeout written as a number",
        "a test's timeout written as a number", "a real server's start timeout written as a number"]), found
    good = tmp_path / "unit" / "test_good.py"
    good.parent.mkdir()
    good.write_text(
        "import subprocess, time\nimport pytest\nfrom tests.hang import guard\n"
        "def test_a():\n    t0 = time.monotonic()\n    assert time.monotonic() - t0 < guard('child_start')\n"
        "def test_b():\n    t0 = time.perf_counter()\n    share = 1.0 / (time.perf_counter() - t0)\n    assert share > 0.3\n"
        "def test_c(proc):\n    subprocess.run(['x'], timeout=guard('child_start'))\n"
        "    VllmServer('m', ready_timeout_s=1.5)  # a fake server's timeout: the unit test's input\n")
    assert written_bounds([good]) == []


def test_every_hang_guard_is_ten_times_a_measured_figure_and_pytest_timeout_is_one():
    import tomllib

    from specnb import paths
    from tests.hang import FACTOR, FIGURES, guard

    assert FACTOR >= 10
    for name, fig in FIGURES.items():
        assert fig.avx512_s > 0 and fig.where, name
        for family in ("avx2", "avx512"):
            assert guard(name, family) >= 10 * fig.seconds(family)
    ini = tomllib.loads((paths.ROOT / "pyproject.toml").read_text())["tool"]["pytest"]["ini_options"]["timeout"]
    assert ini >= max(guard("test_phase", f) for f in ("avx2", "avx512"))


def test_the_cpu_family_names_the_engine_build():
    assert budget.cpu_family("avx2") == "avx2" and budget.cpu_family("none") == "avx2"
    for isa in ("avx512", "avx512_bf16", "amx_bf16"):
        assert budget.cpu_family(isa) == "avx512"
    for family in ("avx2", "avx512"):  # the closing line names the family's last recorded clean clone
        assert budget.measured_line(family).startswith("last recorded: "), family


def test_a_missing_component_fails_in_ci_and_skips_elsewhere(monkeypatch):
    monkeypatch.setattr(budget, "IN_CI", True)
    budget.require(True, "chromium", "apt-get install chromium")  # present: nothing happens
    with pytest.raises(pytest.fail.Exception, match=r"missing: chromium \(apt-get install chromium\)"):
        budget.require(False, "chromium", "apt-get install chromium")
    monkeypatch.setattr(budget, "IN_CI", False)
    with pytest.raises(pytest.skip.Exception, match="missing: ray"):
        budget.require(False, "ray", "make test installs the dev extra")


def test_in_ci_a_skip_from_any_source_is_reported_as_a_failure(monkeypatch):
    def report(outcome="skipped", **kw):
        return SimpleNamespace(outcome=outcome, skipped=outcome == "skipped",
                               longrepr=("x.py", 3, "Skipped: no ray"), **kw)

    monkeypatch.setattr(budget, "IN_CI", True)
    r = report()
    budget.skip_fails_in_ci(r)
    assert r.outcome == "failed" and "no test passes on a skip: Skipped: no ray" in r.longrepr
    x = report(wasxfail="known")  # an expected failure is not a skip
    budget.skip_fails_in_ci(x)
    assert x.outcome == "skipped"
    ok = report("passed")
    budget.skip_fails_in_ci(ok)
    assert ok.outcome == "passed"
    monkeypatch.setattr(budget, "IN_CI", False)
    outside = report()
    budget.skip_fails_in_ci(outside)
    assert outside.outcome == "skipped"


_SKIPPING = {
    "test_skips.py": """
import pytest

def test_skipped_inside():
    pytest.skip("no ray")

@pytest.mark.skipif(True, reason="a skipif mark")
def test_skipped_by_mark():
    pass

@pytest.mark.xfail(reason="known", strict=True)
def test_expected_failure():
    assert False

def test_passes():
    pass
""",
    "test_module_skip.py": "import pytest\npytest.importorskip('no_such_module_anywhere')\n\ndef test_never():\n    pass\n",
}


@pytest.mark.parametrize("ci", ["true", ""])
def test_the_skip_hook_end_to_end_through_pytest(pytester, monkeypatch, ci):
    """The suite's own hooks (tests/conftest.py) in a real pytest run, in a subprocess with CI set or
    not: under CI=true a skip inside a test, a skipif mark and a module's importorskip each fail the
    run, with the skip's reason; an expected failure stays one; elsewhere they are skips."""
    from specnb import paths

    pytester.makeconftest("from tests.conftest import pytest_make_collect_report, pytest_runtest_makereport\n")
    pytester.makepyfile(**{name[:-3]: text for name, text in _SKIPPING.items()})
    monkeypatch.setenv("CI", ci)
    monkeypatch.setenv("PYTHONPATH", str(paths.ROOT))
    # a collector's error interrupts a run (as it would make test's): go on, to count the tests too
    r = pytester.runpytest_subprocess("-p", "no:cacheprovider", "-rA", "--continue-on-collection-errors")
    out = r.stdout.str()
    if ci:
        # the skipif mark skips in set-up and the module's skip in collection: both report as errors
        r.assert_outcomes(passed=1, failed=1, errors=2, xfailed=1)
        assert r.ret == 1
        for reason in ("no ray", "a skipif mark", "no_such_module_anywhere"):
            assert re.search(f"skipped under CI=true, where no test passes on a skip: .*{reason}", out), out
    else:
        r.assert_outcomes(passed=1, skipped=3, xfailed=1)
        assert r.ret == 0 and "skipped under CI" not in out


def test_the_shared_pair_is_launched_at_the_first_browser_test(monkeypatch):
    """make test's second pass: the browser tests (no vLLM) run after the serial ones, so the
    shared pair starts beside the browser tests; not without them, not before the first of them
    (the serial tests time things), and not in an xdist worker (each would launch its own)."""
    import tests.shared_pair as shared

    calls: list = []
    monkeypatch.setattr(shared, "launch_pair_early", calls.append)
    monkeypatch.setattr(budget, "EARLY_PAIR", {})  # this session's own plan is not touched
    monkeypatch.delenv("PYTEST_XDIST_WORKER", raising=False)

    def item(browser: bool, fixtures: tuple = ()):
        return SimpleNamespace(get_closest_marker=lambda m: (m == "browser" and browser) or None,
                               fixturenames=list(fixtures))

    def run(*items):
        budget.pytest_collection_finish(SimpleNamespace(items=list(items),
                                                        config=SimpleNamespace(_tmp_path_factory="factory")))
        for it in items:
            budget.pytest_runtest_setup(it)

    serial, lab, bench = item(False), item(True), item(False, ("baseline_server", "_shared_pair"))
    budget.pytest_collection_finish(SimpleNamespace(items=[serial, lab, bench],
                                                    config=SimpleNamespace(_tmp_path_factory="factory")))
    budget.pytest_runtest_setup(serial)
    assert calls == []  # not beside the serial tests
    budget.pytest_runtest_setup(lab)
    budget.pytest_runtest_setup(item(True))
    assert calls == ["factory"]  # once, at the first browser test
    run(item(False, ("_shared_pair",)))  # no browser test
    run(item(True), item(False, ("real_sweep",)))  # nobody needs the pair
    monkeypatch.setenv("PYTEST_XDIST_WORKER", "gw0")
    run(item(True), item(False, ("_shared_pair",)))
    assert calls == ["factory"]


def test_no_second_pair_is_launched_once_the_session_made_its_own(monkeypatch):
    """Browser tests after the first real-server test: the pair is claimed, nothing more starts."""
    import tests.shared_pair as shared

    class NoFactory:
        def mktemp(self, *a, **kw):
            raise AssertionError("a second pair was being made")

    monkeypatch.setattr(shared, "EARLY", {})
    monkeypatch.setattr(shared, "PAIR_CLAIMED", [True])
    shared.launch_pair_early(NoFactory())
    assert shared.EARLY == {}


class _Launchable:
    """A stand-in for a VllmServer: records the thread that launched it, and its stop."""

    def __init__(self, fail: bool = False):
        self.fail, self.thread, self.stopped = fail, None, False

    def launch(self, base_env=None):
        self.thread, self.base_env = threading.current_thread(), base_env
        if self.fail:
            raise RuntimeError("no start")

    def stop(self):
        self.stopped = True


@pytest.mark.parametrize("fail", [False, True])
def test_the_early_pair_is_launched_off_the_tests_thread_which_lives_until_it_stops(tmp_path, monkeypatch, fail):
    """The first launch of a session may wait for the fork server's imports: the browser test that
    triggers the early launch does not wait for it; the launching thread outlives the servers (a
    server launched afresh gets SIGTERM when its launching thread ends); a failed launch stops what
    it launched and leaves the session fixture to make its own pair."""
    import tests.shared_pair as shared

    (tmp_path / "config.json").write_text("{}")
    pair = {"baseline": _Launchable(), "ngram": _Launchable(fail=fail)}
    monkeypatch.setattr(shared, "MODEL", tmp_path)
    monkeypatch.setattr(shared, "make_pair", lambda factory: pair)
    monkeypatch.setattr(shared, "EARLY", {})
    monkeypatch.setattr(shared, "PAIR_CLAIMED", [])
    monkeypatch.setattr(shared, "LAUNCHER", [])
    shared.launch_pair_early("factory")
    (launcher,) = shared.LAUNCHER
    taken = shared.take_early_pair()
    assert pair["baseline"].thread is launcher and launcher is not threading.current_thread()
    if fail:
        assert taken == {} and pair["baseline"].stopped and pair["ngram"].stopped and launcher.release.is_set()
        launcher.join(5)
        assert not launcher.is_alive()
        return
    assert taken == pair and launcher.is_alive()  # the servers run: their launching thread with them
    assert pair["baseline"].base_env == launcher.environ  # a copy taken on the test's thread
    shared.release_launcher()
    launcher.join(5)
    assert not launcher.is_alive()


@pytest.mark.parametrize("ci,rc", [("true", 1), ("", 0)])
def test_where_chromium_cannot_be_installed_ci_fails_naming_it(tmp_path, ci, rc):
    """tools/install_chromium.sh (`make chromium`, a prerequisite of `make test`) on a machine with
    no chromium and no apt-get: under CI=true it fails in one line naming chromium; elsewhere it
    says the browser tests will skip and exits 0."""
    import subprocess

    from specnb import paths

    env = {"PATH": str(tmp_path), "SPECNB_CHROMIUM": str(tmp_path / "no-chromium"), "CI": ci}
    r = subprocess.run(["/bin/bash", str(paths.ROOT / "tools" / "install_chromium.sh")], env=env,
                       capture_output=True, text=True, timeout=guard("child_start"))
    assert r.returncode == rc, r.stderr
    (line,) = r.stderr.strip().splitlines()
    assert "chromium" in line and "no apt-get" in line
    assert ("will skip" in line) == (rc == 0)


def test_make_test_as_avx2_runs_make_test_with_an_avx2_machines_choices(tmp_path):
    """`make test-as-avx2` runs `make test` (here a stand-in for make that reports what it was given)
    with specnb's probe lowered to AVX2 and oneDNN and ATen capped there, on any machine."""
    import json
    import os
    import subprocess
    import sys

    from specnb import paths
    from specnb.ledger.provenance import EMULATE_ENV

    names = [EMULATE_ENV, "ONEDNN_MAX_CPU_ISA", "ATEN_CPU_CAPABILITY"]
    stand_in = tmp_path / "make.py"
    stand_in.write_text("import json, os, sys\n"
                        f"print(json.dumps({{'argv': sys.argv[1:], 'env': {{k: os.environ.get(k) for k in {names!r}}}}}))\n")
    env = {k: v for k, v in os.environ.items() if k not in ("MAKEFLAGS", "MFLAGS", "MAKELEVEL", *names)}
    r = subprocess.run(["make", "-s", "-f", "Makefile", "test-as-avx2", f"MAKE={sys.executable} {stand_in}"], cwd=paths.ROOT, env=env,
                       capture_output=True, text=True, timeout=guard("child_start"))
    assert r.returncode == 0, r.stderr
    got = json.loads(r.stdout.strip().splitlines()[-1])
    assert got["argv"] == ["test"]
    assert got["env"] == {EMULATE_ENV: "avx2", "ONEDNN_MAX_CPU_ISA": "AVX2", "ATEN_CPU_CAPABILITY": "avx2"}


def test_the_cpu_profile_records_each_phase_and_sums_modules(pytester, tmp_path, monkeypatch):
    """The profile plugin (tests/cpu_profile.py) writes one line per phase of a real pytest run, and
    its summary adds a module's phases: wall, busy share, idle core-seconds; on xdist workers, when
    each ended and how long it stood idle while another ran."""
    from tests.cpu_profile import summary, workers

    out = tmp_path / "p.jsonl"
    pytester.makepyfile(test_a="import time\ndef test_one():\n    time.sleep(0.2)\ndef test_two():\n    pass\n")
    monkeypatch.setenv("SPECNB_CPU_PROFILE", str(out))
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(paths.ROOT), os.environ.get("PYTHONPATH", "")]))
    res = pytester.runpytest_subprocess("-p", "tests.cpu_profile", "-q", "-p", "no:cacheprovider")
    res.assert_outcomes(passed=2)
    rows = [json.loads(x) for x in out.read_text().splitlines()]
    assert [(r["id"].split("::")[1], r["when"]) for r in rows] == [
        (t, w) for t in ("test_one", "test_two") for w in ("setup", "call", "teardown")]
    assert all(0 <= r["busy"] <= 1 for r in rows) and rows[1]["s"] >= 0.2
    lines = summary([{"id": "m.py::a", "s": 10.0, "busy": 0.5}, {"id": "m.py::b", "s": 10.0, "busy": 1.0},
                     {"id": "n.py::c", "s": 4.0, "busy": 0.0}], cores=2)
    assert lines[1].split() == ["20.0", "75%", "10.0", "m.py"]
    assert lines[2].split() == ["4.0", "0%", "8.0", "n.py"]
    assert lines[-1].split()[:4] == ["24.0", "62%", "18.0", "all"]
    assert all(r["start"] > 0 for r in rows) and workers(rows) == []  # one process: no per-worker lines
    earlier = [{"id": "m.py::a", "start": 1.0, "s": 5000.0, "worker": "gw0", "run": "r0"}]  # another run, appended before
    two = workers(earlier + [{"id": "m.py::a", "start": 100.0, "s": 50.0, "worker": "gw0", "run": "r1"},
                             {"id": "n.py::b", "start": 100.0, "s": 20.0, "worker": "gw1", "run": "r1"},
                             {"id": "n.py::c", "start": 125.0, "s": 5.0, "worker": "gw1", "run": "r1"},
                             {"id": "o.py::d", "start": 160.0, "s": 900.0, "worker": "", "run": ""}])  # a pass without workers
    assert [line.split() for line in two[1:]] == [["50.0", "50.0", "0.0", "gw0"], ["30.0", "25.0", "20.0", "gw1"]]


_SCHEDULED = {
    "test_plain.py": "def test_plain():\n    pass\n",
    "test_short.py": "import pytest\npytestmark = pytest.mark.long(10)\n\ndef test_short():\n    pass\n",
    "test_longest.py": "import pytest\npytestmark = pytest.mark.long(50)\n\ndef test_one():\n    pass\n\ndef test_two():\n    pass\n",
    "test_threads.py": "import os\n\ndef test_threads():\n    open('threads.txt', 'w').write(os.environ.get('OMP_NUM_THREADS', 'unset'))\n",
}


def test_the_first_pass_hands_out_long_files_first_and_shares_the_cores(pytester, monkeypatch):
    """make test's first pass (xdist, --no-loadscope-reorder): files marked long come first, the
    longest first, each file's tests in order and the rest as collected, so no long file is handed
    out last to run alone; each worker's OpenMP gets its share of the cores (not all of them),
    unless the caller set it."""
    from specnb import paths

    pytester.makeconftest("from tests.conftest import pytest_collection_modifyitems\n")
    pytester.makepyfile(**{name[:-3]: text for name, text in _SCHEDULED.items()})
    monkeypatch.setenv("PYTHONPATH", str(paths.ROOT))
    for name in ("OMP_NUM_THREADS", "PYTEST_XDIST_WORKER", "PYTEST_XDIST_WORKER_COUNT"):  # this run's own worker's
        monkeypatch.delenv(name, raising=False)
    order = pytester.runpytest_subprocess("-p", "no:cacheprovider", "--collect-only", "-q").stdout.lines
    ids = [line for line in order if "::" in line]
    assert ids == ["test_longest.py::test_one", "test_longest.py::test_two", "test_short.py::test_short",
                   "test_plain.py::test_plain", "test_threads.py::test_threads"], order
    share = max(1, (os.cpu_count() or 1) // 2)
    r = pytester.runpytest_subprocess("-p", "no:cacheprovider", "-n", "2", "--dist", "loadfile", "--no-loadscope-reorder",
                                      "test_threads.py")
    r.assert_outcomes(passed=1)
    assert (pytester.path / "threads.txt").read_text() == str(share)
    r = pytester.runpytest_subprocess("-p", "no:cacheprovider", "test_threads.py")  # one process: untouched
    r.assert_outcomes(passed=1)
    assert (pytester.path / "threads.txt").read_text() == "unset"
    monkeypatch.setenv("OMP_NUM_THREADS", "7")
    r = pytester.runpytest_subprocess("-p", "no:cacheprovider", "-n", "2", "test_threads.py")
    r.assert_outcomes(passed=1)
    assert (pytester.path / "threads.txt").read_text() == "7"


_PINNED_CONFTEST = """import json, os
import pytest
from tests.conftest import pytest_addoption, pytest_configure, pytest_collection_modifyitems, pytest_xdist_make_scheduler

@pytest.fixture(scope="session")
def real_sweep():
    return 1

@pytest.fixture
def note():
    def write(name):
        with open(os.environ["WHERE"], "a") as f:
            f.write(json.dumps([name, os.environ.get("PYTEST_XDIST_WORKER"), sorted(os.sched_getaffinity(0))]) + "\\n")
    return write
"""
_PINNED = {
    "test_shared_a.py": "def test_a(real_sweep, note):\n    note('a')\n",
    "test_shared_b.py": "def test_b1(note):\n    note('b1')\n\ndef test_b2(real_sweep, note):\n    note('b2')\n",
    "test_own.py": "def test_own(note):\n    note('own')\n",
}


def test_the_real_server_step_gives_each_worker_its_cpus_and_the_shared_sweeps_users_one_worker(pytester, monkeypatch):
    """A pinned real-server run (-n 2 --pin-workers --dist loadscope; docs/timing.md): every module that uses the
    shared sweep runs on one worker (the fixture is made once), the other modules are groups of their
    own; each worker runs on its own share of the CPUs, and without --pin-workers on all of them."""
    import json

    from specnb import paths
    from tests.conftest import worker_cpus

    assert worker_cpus([0, 1], "gw0", 2) == [0] and worker_cpus([0, 1], "gw1", 2) == [1]
    assert worker_cpus([0, 1, 2, 3, 4], "gw1", 2) == [2, 3, 4] and worker_cpus([5], "gw1", 2) == [5]
    pytester.makeconftest(_PINNED_CONFTEST)
    folder = pytester.path / "tests" / "integration"  # where the suite's real-server modules are
    folder.mkdir(parents=True)
    for name, text in _PINNED.items():
        (folder / name).write_text(text)
    monkeypatch.setenv("PYTHONPATH", str(paths.ROOT))
    for name in ("PYTEST_XDIST_WORKER", "PYTEST_XDIST_WORKER_COUNT"):
        monkeypatch.delenv(name, raising=False)
    cpus = sorted(os.sched_getaffinity(0))

    def run(*args: str) -> dict[str, tuple[str, list[int]]]:
        where = pytester.path / "where.jsonl"
        where.write_text("")
        monkeypatch.setenv("WHERE", str(where))
        r = pytester.runpytest_subprocess("-p", "no:cacheprovider", "-n", "2", "--dist", "loadscope",
                                          "--no-loadscope-reorder", *args, "tests/integration")
        r.assert_outcomes(passed=4)
        return {name: (worker, on) for name, worker, on in map(json.loads, where.read_text().splitlines())}

    ran = run("--pin-workers")
    assert ran["a"][0] == ran["b1"][0] == ran["b2"][0], ran  # the shared sweep's users: one worker
    for worker, on in ran.values():
        assert on == worker_cpus(cpus, worker, 2), ran
    if len(cpus) >= 2:
        assert ran["own"][0] != ran["a"][0] and set(ran["own"][1]).isdisjoint(ran["a"][1]), ran
    assert all(on == cpus for _, on in run().values())  # not pinned unless asked
