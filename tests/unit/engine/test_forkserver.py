"""The fork server (specnb.engine.forkserver): which environments may share one, and the life cycle of
servers forked from it, run with the unit tests' fake vLLM module as the entry it imports (the real
engine's forked starts are every real-server test's: tests/conftest.py asks for them)."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import time

import psutil
import pytest

from specnb.engine import forkserver, server
from specnb.engine.server import ServerStartError, VllmServer, started_together
from tests.hang import guard
from tests.unit.fakevllm import group_members

FAKE_ENTRY = [sys.executable, "-m", "tests.unit.fakevllm"]


def test_an_environment_fits_where_only_lazily_read_vllm_variables_differ():
    own = {"PATH": "/bin", "VLLM_CPU_KVCACHE_SPACE": "1", "VLLM_LOGGING_LEVEL": "INFO", "PYTEST_CURRENT_TEST": "a"}
    read = frozenset({"VLLM_LOGGING_LEVEL"})
    assert forkserver.fits(own, read, {**own, "VLLM_CPU_KVCACHE_SPACE": "4", "PYTEST_CURRENT_TEST": "b"})
    assert forkserver.fits(own, read, {**own, "VLLM_ENABLE_V1_MULTIPROCESSING": "0"})  # added, never read
    assert not forkserver.fits(own, read, {**own, "VLLM_LOGGING_LEVEL": "DEBUG"})  # read while importing
    assert not forkserver.fits(own, read, {**own, "PATH": "/usr/bin"})  # not vLLM's: always equal
    assert not forkserver.fits(own, read, {**own, "HF_HUB_OFFLINE": "1"})
    assert not forkserver.fits(own, read, {k: v for k, v in own.items() if k != "PATH"})


def test_the_imports_record_every_variable_they_look_up(tmp_path, monkeypatch):
    (tmp_path / "stub_reads_env.py").write_text(
        "import os\nA = os.environ.get('VLLM_STUB_A')\nB = os.getenv('VLLM_STUB_B', 'x')\n"
        "C = 'VLLM_STUB_C' in os.environ\nD = os.environ.get('HOME')\n"
        # scans of every variable (tqdm's TQDM_* lookup, the platform module's copy for a child):
        # not reads of each, and a read by name right after one still counts
        "T = {k: v for k, v in os.environ.items() if k.startswith('TQDM_')}\nV = len(list(os.environ.values()))\n"
        "P = dict(os.environ, LC_ALL='C')\nQ = os.environ.copy()\nR = {**os.environ}\nE = os.environ['VLLM_STUB_E']\n")
    monkeypatch.setenv("VLLM_STUB_SCANNED", "1")
    monkeypatch.setenv("VLLM_STUB_E", "1")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "stub_reads_env", raising=False)
    read = forkserver.import_recording_reads(("stub_reads_env",))
    assert {"VLLM_STUB_A", "VLLM_STUB_B", "VLLM_STUB_C", "VLLM_STUB_E"} <= read and "HOME" not in read  # vLLM's only
    assert "VLLM_STUB_SCANNED" not in read, read
    assert type(os.environ) is os._Environ  # put back
    stub = sys.modules["stub_reads_env"]
    assert stub.P["VLLM_STUB_SCANNED"] == stub.Q["VLLM_STUB_SCANNED"] == "1" and stub.P["LC_ALL"] == "C"


def test_the_keys_asked_for_then_the_first_read_by_name_is_a_read(tmp_path):
    """What a copy does (the keys, then each value in their order) but as two statements: the
    read by name counts. Run where the environment's first variable is vLLM's."""
    (tmp_path / "stub_keys_then_read.py").write_text(
        "import os\nK = os.environ.keys()\nF = os.environ[next(iter(K))]\nT = {**os.environ}\n")
    code = ("import sys; from specnb.engine import forkserver as f; "
            "print(sorted(f.import_recording_reads(('stub_keys_then_read',))))")
    env = {"VLLM_STUB_FIRST": "1", "VLLM_STUB_LATER": "1", "PATH": os.environ.get("PATH", ""),
           "PYTHONPATH": os.pathsep.join([str(tmp_path), str(server.paths.ROOT / "src")])}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                         timeout=guard("child_start"), check=True).stdout
    assert out.strip() == "['VLLM_STUB_FIRST']", out


def test_the_entry_modules_are_the_cli_s_or_the_module_s():
    assert forkserver.entry_modules(FAKE_ENTRY) == ("tests.unit.fakevllm",)
    cli = forkserver.entry_modules(["/venv/bin/vllm", "serve"])
    assert "vllm.entrypoints.cli.main" in cli and "vllm.entrypoints.cli.serve" in cli


def test_not_asked_for_or_another_interpreter_means_a_fresh_launch(monkeypatch):
    monkeypatch.delenv(forkserver.OPT_IN, raising=False)
    assert not forkserver.wanted(sys.executable, FAKE_ENTRY)
    monkeypatch.setenv(forkserver.OPT_IN, "1")
    assert not forkserver.wanted("/some/other/python", FAKE_ENTRY)


@pytest.fixture
def forking(monkeypatch):
    """VllmServer forks the fake vLLM module from a fork server; every fork server closed after."""
    monkeypatch.setattr(forkserver, "wanted", lambda python, argv: True)
    monkeypatch.setattr(server, "serve_command", lambda python=None: list(FAKE_ENTRY))
    yield
    forkserver.close_all()


def _fakes() -> list[forkserver.ForkServer]:
    """This process's fork servers of the fake (a real-server test run before may have left its own)."""
    return [fs for fs in forkserver.running() if fs.entry == FAKE_ENTRY]


def _server(tmp_path, name: str, env: dict[str, str] | None = None, **kw) -> VllmServer:
    return VllmServer("m", served_model_name=name, log_path=tmp_path / f"{name}.log", ready_timeout_s=guard("child_start"),
                      stop_grace_s=2, env={"FAKE_VLLM_STATE": str(tmp_path), **(env or {})}, **kw)


def test_a_forked_server_is_its_own_group_answers_and_stops_by_its_id(tmp_path, forking):
    srv = _server(tmp_path, "a", env={"VLLM_TEST_FLAG": "7"})
    with srv as ep:
        # the fake imports no engine launcher vLLM could be asked to fork with: its "engine core" is its own
        assert ep.launcher == "fork-server" and ep.describe()["launcher"] == "fork-server"
        pid = srv.proc.pid
        assert ep.pid == pid and os.getsid(pid) == pid and os.getpgid(pid) == pid
        (fs,) = _fakes()
        assert psutil.Process(pid).ppid() == fs.proc.pid  # forked, not launched
        assert server.attach(ep.base_url).model == "a"
        (core,) = [p for p in group_members(pid) if p.pid != pid]  # the fake's "engine core", in its group
        assert core.environ()["VLLM_TEST_FLAG"] == "7"  # started with the server's own environment
    assert srv.proc.returncode == 0  # the fake (aiohttp) exits cleanly on TERM
    assert group_members(pid) == []


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="needs two CPUs to narrow the launcher's set")
def test_a_forked_server_runs_on_the_launchers_cpus_not_the_fork_servers(tmp_path, forking):
    # Intel OpenMP's fork handler left a forked child bound to one CPU (its engine core then decoded on
    # one core of two): the child takes the CPU set of the thread that launches it, as a fresh process would
    everything = os.sched_getaffinity(0)
    one = {min(everything)}
    wide, pinned = _server(tmp_path, "wide"), _server(tmp_path, "pinned")
    try:
        wide.start()  # the fork server starts with every CPU
        os.sched_setaffinity(0, one)
        try:
            pinned.launch()
        finally:
            os.sched_setaffinity(0, everything)
        pinned.wait_ready()
        assert {wide.launcher, pinned.launcher} == {"fork-server"}
        (fs,) = _fakes()
        assert set(psutil.Process(fs.proc.pid).cpu_affinity()) == everything
        assert set(psutil.Process(wide.proc.pid).cpu_affinity()) == everything
        assert set(psutil.Process(pinned.proc.pid).cpu_affinity()) == one
    finally:
        wide.stop()
        pinned.stop()


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="needs two CPUs to tell one from all")
def test_a_forked_server_forks_its_engine_core_on_the_launchers_cpus_and_says_so(tmp_path, forking):
    # the fake, imported by the fork server, brings a stand-in for vLLM's engine launcher (spawn, as the
    # CPU platform asks): the forked server has it fork the "engine core" instead; the fake pins every
    # child it forks to one CPU, as Intel OpenMP's fork handler does, and the core still gets them all
    everything = os.sched_getaffinity(0)
    srv = _server(tmp_path, "e", env={"FAKE_VLLM_ENGINE_LAUNCHER": "1", "FAKE_VLLM_PIN_AT_FORK": "1"})
    try:
        ep = srv.start()
        assert ep.launcher == "fork-server+engine-core" and ep.describe()["launcher"] == ep.launcher
        pid = srv.proc.pid
        (core,) = [p for p in group_members(pid) if p.pid != pid]
        assert core.ppid() == pid and set(core.cpu_affinity()) == everything
        # forked, not spawned: no fresh interpreter's command line, and the fork's line in the server's log
        assert "spawn_main" not in " ".join(core.cmdline())
        assert f"{forkserver.FORK_LINE} {core.pid} forked from the API server (pid {pid}), CPUs {sorted(everything)}" \
            in srv.log_path.read_text()
        # the port was bound before the engine core was forked: the core let go of it, so once the API
        # server is gone its port refuses connections instead of taking them for nobody to answer
        assert not [c for c in core.net_connections("all") if c.status == psutil.CONN_LISTEN]
        os.kill(pid, signal.SIGKILL)
        assert srv.proc.wait(timeout=guard("child_start")) == -signal.SIGKILL
        with pytest.raises(ConnectionRefusedError):
            socket.create_connection(("127.0.0.1", int(ep.base_url.rsplit(":", 1)[1])), timeout=guard("child_start"))
        assert core.is_running()  # the fake's engine core outlives its API server; the group's stop ends it
    finally:
        srv.stop()
    assert group_members(pid) == []


def test_a_killed_forked_server_is_seen_dead_with_its_signal(tmp_path, forking):
    srv = _server(tmp_path, "k")
    with srv:
        os.kill(srv.proc.pid, signal.SIGKILL)
        assert srv.proc.wait(timeout=guard("child_start")) == -signal.SIGKILL
        assert not srv.alive()


def test_servers_share_a_fork_server_unless_a_variable_outside_vllm_differs(tmp_path, forking):
    a = _server(tmp_path, "a", env={"VLLM_CPU_KVCACHE_SPACE": "1"})
    b = _server(tmp_path, "b", env={"VLLM_CPU_KVCACHE_SPACE": "2"})
    c = _server(tmp_path, "c", env={"SPECNB_TEST_OTHER": "1"})
    try:
        for s in (a, b, c):
            s.start()
        assert {s.launcher for s in (a, b, c)} == {"fork-server"}
        parents = {s.proc.pid: psutil.Process(s.proc.pid).ppid() for s in (a, b, c)}
        assert parents[a.proc.pid] == parents[b.proc.pid] != parents[c.proc.pid]
        assert len(_fakes()) == 2
    finally:
        for s in (a, b, c):
            s.stop()


def test_a_vllm_variable_read_while_importing_keeps_servers_apart(tmp_path, forking):
    """Started together: the two that differ only in a variable the imports never read share a fork
    server; the one that differs in a variable they read gets its own."""
    servers = {"a": _server(tmp_path, "a", env={"VLLM_CPU_KVCACHE_SPACE": "1"}),
               "b": _server(tmp_path, "b", env={"VLLM_CPU_KVCACHE_SPACE": "2"}),
               "c": _server(tmp_path, "c", env={"VLLM_CPU_KVCACHE_SPACE": "2", "VLLM_FAKE_READ_AT_IMPORT": "x"})}
    with started_together(servers):
        assert {s.launcher for s in servers.values()} == {"fork-server"}
        parents = {n: psutil.Process(s.proc.pid).ppid() for n, s in servers.items()}
        assert parents["a"] == parents["b"] != parents["c"], parents
        assert len(_fakes()) == 2


def test_past_the_fork_servers_a_process_may_run_a_launch_says_which_variables_differ(tmp_path, forking, monkeypatch):
    monkeypatch.setattr(forkserver, "MAX_SERVERS", len(forkserver.running()) + 1)  # a real-server test's may run
    a = _server(tmp_path, "a", env={"SPECNB_TEST_OTHER": "1"})
    b = _server(tmp_path, "b", env={"SPECNB_TEST_OTHER": "2", "VLLM_CPU_KVCACHE_SPACE": "3"})
    with a, b:
        assert (a.launcher, b.launcher) == ("fork-server", "exec")
        said = next(line for line in b.log_path.read_text().splitlines() if "launched afresh" in line)
        # the names of what differs (never the values), the lazily read VLLM_ variable not among them
        assert said.endswith("(one differs in SPECNB_TEST_OTHER)"), said


def test_a_forked_server_s_exit_code_is_its_own(tmp_path, forking):
    srv = _server(tmp_path, "dies", env={"FAKE_VLLM_START_FAIL": "1"})
    with pytest.raises(ServerStartError, match="exited with code"):
        srv.start()
    assert srv.launcher == "fork-server" and srv.proc.returncode not in (None, 0)


def test_a_fork_server_that_cannot_import_its_entry_launches_afresh(tmp_path, forking, monkeypatch):
    from tests.unit.fakevllm import fake_python

    # the fork server imports the entry's module, which does not exist; the fresh launch runs the fake
    monkeypatch.setattr(server, "serve_command", lambda python=None: [str(python), "-m", "specnb_no_such_module"])
    srv = _server(tmp_path, "fallback", python=str(fake_python(tmp_path)))
    with srv as ep:
        assert ep.launcher == "exec"
        log = srv.log_path.read_text()
        assert "launched afresh" in log and "specnb_no_such_module" in log


def _ignored(pid: int) -> int:
    """The signals a process ignores (/proc/<pid>/status SigIgn), as a bit mask."""
    with open(f"/proc/{pid}/status") as fh:
        return int(next(line for line in fh if line.startswith("SigIgn:")).split()[1], 16)


def test_a_forked_server_keeps_a_fresh_pythons_signal_dispositions(tmp_path, forking):
    """A fresh Python ignores SIGPIPE (a client hanging up mid-stream raises BrokenPipeError); a forked
    server that took the default instead would die of the first closed socket it wrote to."""
    srv = _server(tmp_path, "signals")
    with srv:
        assert _ignored(srv.proc.pid) & (1 << (signal.SIGPIPE - 1))
        assert not _ignored(srv.proc.pid) & (1 << (signal.SIGTERM - 1))


def test_a_fork_answered_to_an_interrupted_request_is_stopped_not_left_running(tmp_path, forking):
    """A request interrupted after it was written (Ctrl-C while waiting) leaves its answer unread: the
    next request skips it, and the server forked for it, which nobody holds, is stopped."""
    first = _server(tmp_path, "first")
    with first:
        (fs,) = _fakes()
        orphan = dict(argv=[*FAKE_ENTRY, "--port", str(server.free_port()), "--served-model-name", "orphan"],
                      env=first.environment({"FAKE_VLLM_STATE": str(tmp_path)}), cwd=str(server.paths.ROOT),
                      log=str(tmp_path / "orphan.log"))
        fs.proc.stdin.write((json.dumps({"op": "fork", "seq": -1, **orphan}) + "\n").encode())  # never read
        deadline = time.monotonic() + guard("child_start")
        while not (tmp_path / "orphan.log").exists():  # forked: the child opens its log at once
            assert time.monotonic() < deadline, "the stale fork never ran"
            time.sleep(0.05)
        (stale,) = [c for c in psutil.Process(fs.proc.pid).children() if c.pid != first.proc.pid]
        assert fs.poll(first.proc.pid) is None  # answered after the stale line, which it dropped
        deadline = time.monotonic() + guard("child_start")
        while True:
            try:
                if stale.status() == psutil.STATUS_ZOMBIE:
                    break
            except psutil.NoSuchProcess:
                break
            assert time.monotonic() < deadline, "the server forked for the interrupted request still runs"
            time.sleep(0.1)
        assert first.alive()


@pytest.mark.parametrize("held", [False, True], ids=["pipe-closed", "pipe-held-by-a-forked-worker"])
def test_the_fork_server_stops_its_servers_when_its_starter_is_sigkilled(tmp_path, held):
    """However the starter dies: its end of the fork server's pipe closes, or, where a process it
    forked without exec (a parse worker) still holds it, the fork server sees its starter gone."""
    pid_file, holder_file = tmp_path / "server.pid", tmp_path / "holder.pid"
    parent = tmp_path / "parent.py"
    parent.write_text(
        "import sys, time\n"
        "from specnb.engine import forkserver, server\n"
        "forkserver.wanted = lambda python, argv: True\n"
        f"server.serve_command = lambda python=None: {FAKE_ENTRY!r}\n"
        f"srv = server.VllmServer('m', served_model_name='k', log_path={str(tmp_path / 'k.log')!r}, ready_timeout_s=60,\n"
        f"                        env={{'FAKE_VLLM_STATE': {str(tmp_path)!r}}})\n"
        "srv.start()\n"
        "assert srv.launcher == 'fork-server', srv.log_path.read_text()\n"
        + (f"import os\nif os.fork() == 0:\n    open({str(holder_file)!r}, 'w').write(str(os.getpid()))\n"
           "    time.sleep(300)\n    os._exit(0)\n" if held else "")
        + f"open({str(pid_file)!r}, 'w').write(str(srv.pid))\n"
        "time.sleep(300)\n"
    )
    proc = subprocess.Popen([sys.executable, str(parent)], cwd=str(server.paths.ROOT))
    try:
        deadline = time.monotonic() + guard("child_start")
        while not pid_file.exists() or not pid_file.read_text():
            assert time.monotonic() < deadline and proc.poll() is None, "the parent did not start the server"
            time.sleep(0.1)
        server_pid = int(pid_file.read_text())
        proc.kill()
        proc.wait()
        deadline = time.monotonic() + guard("child_start")
        while group_members(server_pid):
            if time.monotonic() > deadline:
                os.killpg(server_pid, signal.SIGKILL)
                pytest.fail("the forked server outlived its SIGKILLed starter")
            time.sleep(0.1)
    finally:
        if proc.poll() is None:
            proc.kill()
        if holder_file.exists() and holder_file.read_text():
            with contextlib.suppress(ProcessLookupError):
                os.kill(int(holder_file.read_text()), signal.SIGKILL)
