"""The real-server time budget of a full test run (tests/conftest.py), on fake sessions."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from tests import conftest as budget


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
    monkeypatch.setattr(budget, "_spent", state)
    return state


def test_only_a_full_run_is_held_to_the_budget():
    assert budget._full_run(_Config())
    assert budget._full_run(_Config(["tests/integration/", "tests/unit", "tests/browser"]))
    assert not budget._full_run(_Config(["tests/integration/test_sweep_real.py"]))
    assert budget._full_run(_Config(markexpr="integration or browser or serial"))  # `make test`'s second pass
    assert not budget._full_run(_Config(markexpr="integration"))
    assert not budget._full_run(_Config(["tests/integration/test_sweep_real.py"], markexpr="integration or browser or serial"))
    assert not budget._full_run(_Config(keyword="predict"))


def test_an_over_budget_full_run_fails_and_says_why(spent):
    for when, d in (("setup", 30.0), ("call", budget.INTEGRATION_BUDGET_S), ("teardown", 1.0)):
        budget.pytest_runtest_logreport(SimpleNamespace(keywords={"integration": 1}, duration=d, when=when))
    budget.pytest_runtest_logreport(SimpleNamespace(keywords={}, duration=500.0, when="call"))  # a unit test
    assert spent["tests"] == 1 and spent["integration"] == budget.INTEGRATION_BUDGET_S + 31
    session = SimpleNamespace(config=_Config(), exitstatus=0)
    budget.pytest_sessionfinish(session, 0)
    assert session.exitstatus == pytest.ExitCode.TESTS_FAILED
    assert "over their budget" in session.config.lines[-1]
    part = SimpleNamespace(config=_Config(["tests/integration/test_sweep_real.py"]), exitstatus=0)
    budget.pytest_sessionfinish(part, 0)  # a chosen subset is reported, never failed
    assert part.exitstatus == 0 and "real-server tests:" in part.config.lines[0]


def test_within_budget_it_only_reports(spent):
    budget.pytest_runtest_logreport(SimpleNamespace(keywords={"integration": 1}, duration=60.0, when="call"))
    session = SimpleNamespace(config=_Config(), exitstatus=0)
    budget.pytest_sessionfinish(session, 0)
    assert session.exitstatus == 0 and session.config.lines == [session.config.lines[0]]


def test_the_budget_in_server_starts_catches_growth_the_seconds_budget_lets_through(spent, monkeypatch):
    monkeypatch.setattr(budget, "INTEGRATION_BUDGET_STARTS", 45)
    monkeypatch.setattr(budget, "INTEGRATION_BUDGET_S", 40 * 60)
    # a slow day: 30 min of real-server time, but starts took 55 s: 33 starts' worth, within both
    budget.pytest_runtest_logreport(SimpleNamespace(keywords={"integration": 1}, duration=1800.0, when="call"))
    budget.record_server_start(55.0)
    slow = SimpleNamespace(config=_Config(), exitstatus=0)
    budget.pytest_sessionfinish(slow, 0)
    assert slow.exitstatus == 0 and "32.7 times the shared sweep's 55.0 s start (its servers side by side) (budget 45)" in slow.config.lines[0]
    # a fast day on a suite that grew: the same 30 min, within the seconds budget, with 35 s starts
    # is 51 starts' worth
    budget.record_server_start(35.0)
    grown = SimpleNamespace(config=_Config(), exitstatus=0)
    budget.pytest_sessionfinish(grown, 0)
    assert grown.exitstatus == pytest.ExitCode.TESTS_FAILED
    assert "51.4 server starts' worth, over their budget of 45" in grown.config.lines[-1]
    # no shared server started (a run that never reached one): the seconds budget alone
    budget.record_server_start(None)
    alone = SimpleNamespace(config=_Config(), exitstatus=0)
    budget.pytest_sessionfinish(alone, 0)
    assert alone.exitstatus == 0 and "times the shared" not in alone.config.lines[0]


def test_the_budget_follows_the_cpu_family():
    assert budget.cpu_family("avx2") == "avx2" and budget.cpu_family("none") == "avx2"
    for isa in ("avx512", "avx512_bf16", "amx_bf16"):
        assert budget.cpu_family(isa) == "avx512"
    assert budget.INTEGRATION_BUDGET_S == budget.INTEGRATION_BUDGETS_S[budget.cpu_family()]
    assert budget.INTEGRATION_BUDGETS_S["avx512"] <= budget.INTEGRATION_BUDGETS_S["avx2"] < 60 * 60


def test_the_shared_pair_is_launched_at_the_first_browser_test(monkeypatch):
    """make test's second pass: the browser tests (no vLLM) run after the serial ones, so the
    shared pair starts beside the browser tests; not without them, not before the first of them
    (the serial tests time things), and not in an xdist worker (each would launch its own)."""
    import tests.integration.conftest as integration

    calls: list = []
    monkeypatch.setattr(integration, "launch_pair_early", calls.append)
    monkeypatch.setattr(budget, "_early_pair", {})  # this session's own plan is not touched
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
    import tests.integration.conftest as integration

    class NoFactory:
        def mktemp(self, *a, **kw):
            raise AssertionError("a second pair was being made")

    monkeypatch.setattr(integration, "_EARLY", {})
    monkeypatch.setattr(integration, "_PAIR_CLAIMED", [True])
    integration.launch_pair_early(NoFactory())
    assert integration._EARLY == {}
