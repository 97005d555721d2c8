"""KV-capacity parsing, environment, argv, start/stop of fake server processes, and attach."""

from __future__ import annotations

import json
import os
import signal
import stat
import sys
import time
from pathlib import Path

import psutil
import pytest

from specnb.engine import server
from specnb.engine.server import (
    ServerError,
    ServerStartError,
    VllmServer,
    attach,
    engine_environment,
    parse_kv_capacity,
    recorded_environment,
)
from tests.hang import guard
from tests.unit.fakevllm import FakeVllm, group_members, plain_python

CPU_LINE = ("(EngineCore pid=2276) INFO 11-29 07:58:32 [kv_cache_utils.py:2327] CPU KV cache size: "
            "46,592 tokens, Maximum concurrency for 2,048 tokens per request: 22.75x")

# ----------------------------------------------------------------------------- KV capacity


def test_parse_kv_capacity_cpu_one_line():
    log = "INFO 11-29 07:58:30 [core.py:93] Initializing a V1 LLM engine\n" + CPU_LINE + "\nINFO ready\n"
    kv = parse_kv_capacity(log)
    assert kv.device == "CPU"
    assert kv.tokens == [46592]
    assert kv.total_tokens == 46592
    assert kv.tokens_per_request == 2048
    assert kv.max_concurrency == [22.75]
    assert kv.as_dict() == {
        "device": "CPU", "tokens_per_engine": [46592], "total_tokens": 46592,
        "tokens_per_request": 2048, "max_concurrency_per_engine": [22.75],
    }


def test_parse_kv_capacity_gpu_two_lines():
    log = ("INFO 05-01 12:00:00 [kv_cache_utils.py:716] GPU KV cache size: 1,234,560 tokens\n"
           "INFO 05-01 12:00:00 [kv_cache_utils.py:720] Maximum concurrency for 32,768 tokens per request: 37.68x\n")
    kv = parse_kv_capacity(log)
    assert kv.device == "GPU"
    assert kv.tokens == [1234560]
    assert kv.total_tokens == 1234560
    assert kv.tokens_per_request == 32768
    assert kv.max_concurrency == [37.68]


def test_parse_kv_capacity_two_engines_data_parallel():
    log = (
        "(EngineCore_DP0 pid=11) INFO 11-29 07:58:32 [kv_cache_utils.py:2327] CPU KV cache size: 46,592 tokens, "
        "Maximum concurrency for 2,048 tokens per request: 22.75x\n"
        "(EngineCore_DP1 pid=12) INFO 11-29 07:58:33 [kv_cache_utils.py:2327] CPU KV cache size: 40,000 tokens, "
        "Maximum concurrency for 2,048 tokens per request: 19.53x\n"
    )
    kv = parse_kv_capacity(log)
    assert kv.device == "CPU"
    assert kv.tokens == [46592, 40000]
    assert kv.total_tokens == 86592
    assert kv.tokens_per_request == 2048
    assert kv.max_concurrency == [22.75, 19.53]


def test_parse_kv_capacity_no_match():
    kv = parse_kv_capacity("INFO nothing about the cache here\nKV cache size: lots\n")
    assert kv.device is None
    assert kv.tokens == []
    assert kv.max_concurrency == []
    assert kv.tokens_per_request is None
    assert kv.total_tokens is None
    assert parse_kv_capacity("").as_dict()["total_tokens"] is None


# ----------------------------------------------------------------------------- environment


def test_recorded_environment_keeps_behaviour_and_drops_secrets():
    env = {
        "VLLM_CPU_KVCACHE_SPACE": "1", "VLLM_HOST_IP": "127.0.0.1", "CUDA_VISIBLE_DEVICES": "0",
        "OMP_NUM_THREADS": "2", "HF_HUB_OFFLINE": "1", "LD_PRELOAD": "/x/libiomp5.so",
        "HF_TOKEN": "hf_secret", "VLLM_API_KEY": "sk-secret", "OPENAI_API_KEY": "sk-secret",
        "AWS_SECRET_ACCESS_KEY": "secret", "PATH": "/usr/bin", "HOME": "/root",
        "HF_HUB_OFFLINE_EXTRA": "1", "MY_LD_PRELOAD": "x",
    }
    out = recorded_environment(env)
    assert out == {
        "CUDA_VISIBLE_DEVICES": "0", "HF_HUB_OFFLINE": "1", "LD_PRELOAD": "/x/libiomp5.so",
        "OMP_NUM_THREADS": "2", "VLLM_CPU_KVCACHE_SPACE": "1", "VLLM_HOST_IP": "127.0.0.1",
    }
    assert list(out) == sorted(out)


def test_engine_environment_cpu_build():
    env = engine_environment(cpu_build=True, ncpu=2)
    assert env["VLLM_CPU_OMP_THREADS_BIND"] == "0-1"
    assert env["VLLM_HOST_IP"] == "127.0.0.1"
    assert "VLLM_CPU_KVCACHE_SPACE" in env
    assert env["HF_HUB_OFFLINE"] == "1"
    assert engine_environment(cpu_build=True, ncpu=1)["VLLM_CPU_OMP_THREADS_BIND"] == "0"
    assert engine_environment(cpu_build=True, ncpu=16)["VLLM_CPU_OMP_THREADS_BIND"] == "0-15"


def test_a_server_is_bound_to_the_cpus_its_launcher_may_use(monkeypatch):
    """A specnb run confined to some CPUs (taskset, a test worker with its own core) binds its
    servers' OpenMP threads there, not to CPUs 0 to n - 1 of the machine."""
    from specnb.engine import hostload
    from specnb.engine.vllm import cpu_list

    assert cpu_list([0, 1, 2, 5]) == "0-2,5" and cpu_list([3]) == "3" and cpu_list([7, 4, 5, 4]) == "4-5,7"
    monkeypatch.setattr(hostload, "usable_cpus", lambda: [1])
    assert engine_environment(cpu_build=True)["VLLM_CPU_OMP_THREADS_BIND"] == "1"
    monkeypatch.setattr(hostload, "usable_cpus", lambda: [2, 3, 6])
    assert engine_environment(cpu_build=True)["VLLM_CPU_OMP_THREADS_BIND"] == "2-3,6"
    assert engine_environment(cpu_build=True, ncpu=2)["VLLM_CPU_OMP_THREADS_BIND"] == "0-1"  # told: as told


def test_two_processes_only_when_asked_for_on_a_single_worker_cpu_server(monkeypatch, tmp_path):
    import specnb.engine.server as server_mod

    key = "VLLM_ENABLE_V1_MULTIPROCESSING"
    monkeypatch.setattr(server_mod, "installed_vllm", lambda: {"cpu_build": True})
    monkeypatch.delenv(key, raising=False)

    def env(args, **kw):
        return VllmServer("m", log_path=tmp_path / "s.log", args=args, **kw).environment()

    monkeypatch.delenv("SPECNB_CPU_TWO_PROCESSES", raising=False)
    assert key not in env(["--enforce-eager"])  # vLLM's own layout unless asked
    monkeypatch.setenv("SPECNB_CPU_TWO_PROCESSES", "1")
    assert env(["--enforce-eager"])[key] == "0" and env(["--data-parallel-size", "1"])[key] == "0"
    for layout in (["--data-parallel-size", "2"], ["--tensor-parallel-size=3"], ["-pp", "2"], ["-tp", "x"]):
        assert key not in env(layout), layout  # vLLM's worker processes are needed there
    assert env([], env={key: "1"})[key] == "1"  # a sweep's own value wins
    monkeypatch.setattr(server_mod, "installed_vllm", lambda: {"cpu_build": False})
    assert key not in env([])  # a GPU server keeps vLLM's layout


def test_engine_environment_gpu_build_has_no_cpu_settings():
    env = engine_environment(cpu_build=False)
    assert not [k for k in env if k.startswith("VLLM_CPU_")]
    assert "LD_PRELOAD" not in env
    assert env["VLLM_HOST_IP"] == "127.0.0.1"
    assert env["VLLM_SERVER_DEV_MODE"] == "1"


def test_server_environment_precedence(monkeypatch, tmp_path):
    monkeypatch.setenv("VLLM_HOST_IP", "10.0.0.5")
    monkeypatch.setenv("OMP_NUM_THREADS", "3")
    srv = VllmServer("m", log_path=tmp_path / "s.log", env={"OMP_NUM_THREADS": "1"})
    env = srv.environment()
    assert env["VLLM_HOST_IP"] == "10.0.0.5"  # the caller's environment beats the defaults
    assert env["OMP_NUM_THREADS"] == "1"  # explicit overrides beat both
    assert env["VLLM_NO_USAGE_STATS"] == "1"  # defaults fill the rest


# ----------------------------------------------------------------------------- argv


def test_argv_with_speculative_config(tmp_path):
    spec = {"method": "ngram", "num_speculative_tokens": 4, "prompt_lookup_max": 4, "prompt_lookup_min": 2}
    srv = VllmServer("/models/SmolLM2", served_model_name="smol", speculative_config=spec,
                     args=["--max-model-len", "2048"], log_path=tmp_path / "s.log", python="/py")
    argv = srv.argv(8123)
    assert argv[:3] == ["/py", "-m", "vllm.entrypoints.openai.api_server"]
    assert argv[argv.index("--host") + 1] == "127.0.0.1"
    assert argv[argv.index("--port") + 1] == "8123"
    assert argv[argv.index("--model") + 1] == "/models/SmolLM2"
    assert argv[argv.index("--served-model-name") + 1] == "smol"
    assert argv[argv.index("--max-model-len") + 1] == "2048"
    assert argv.count("--speculative-config") == 1
    assert json.loads(argv[argv.index("--speculative-config") + 1]) == spec


def test_argv_without_speculative_config(tmp_path):
    srv = VllmServer("/models/SmolLM2", log_path=tmp_path / "s.log", python="/py")
    argv = srv.argv(9000)
    assert "--speculative-config" not in argv
    assert argv[0] == "/py"
    assert argv[argv.index("--served-model-name") + 1] == "/models/SmolLM2"
    assert argv[argv.index("--host") + 1] == "127.0.0.1"
    assert "9000" in argv


def test_argv_uses_vllm_serve_where_the_build_has_the_cli(tmp_path):
    """`vllm serve MODEL` (the model first) when a `vllm` script sits beside the interpreter;
    the deprecated module entry point with --model only where it does not."""
    bindir = tmp_path / "bin"
    bindir.mkdir()
    (bindir / "python").write_text("")
    cli = bindir / "vllm"
    cli.write_text("#!/bin/sh\n")
    cli.chmod(0o755)
    argv = VllmServer("/models/SmolLM2", log_path=tmp_path / "s.log", python=str(bindir / "python")).argv(9000)
    assert argv[:3] == [str(cli), "serve", "/models/SmolLM2"]
    assert "--model" not in argv and argv[argv.index("--port") + 1] == "9000"


def test_the_current_interpreter_serves_with_the_cli_when_vllm_metadata_resolves(tmp_path, monkeypatch):
    import importlib.metadata as md

    from specnb.engine import vllm as engine_vllm

    has_cli = (Path(sys.executable).parent / "vllm").is_file()
    argv = VllmServer("m", log_path=tmp_path / "s.log").argv(1)
    try:
        md.version("vllm")
        named = True
    except md.PackageNotFoundError:
        named = False
    assert (argv[1] == "serve") == (has_cli and named)

    def missing(name):  # a CPU build without the dist-info shim: `vllm serve` would die at start
        raise md.PackageNotFoundError(name)

    monkeypatch.setattr(engine_vllm.md, "version", missing)
    assert VllmServer("m", log_path=tmp_path / "s.log").argv(1)[:3] == [sys.executable, "-m",
                                                                        "vllm.entrypoints.openai.api_server"]


# ----------------------------------------------------------------------------- start / stop


def script(path, text: str):
    path.write_text(text)
    path.chmod(path.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    return path


def test_start_failure_raises_with_log_tail(tmp_path):
    exe = script(tmp_path / "fakepy", "#!/bin/sh\necho 'boom: bad flag'\nexit 3\n")
    log = tmp_path / "logs" / "s.log"
    srv = VllmServer("m", python=str(exe), log_path=log, ready_timeout_s=guard("child_start"))
    with pytest.raises(ServerStartError) as info:
        srv.start()
    err = info.value
    assert "boom" in err.log_tail
    assert "exited with code 3" in err.short and "not ready" not in err.short  # the exit, not the timeout
    assert "boom: bad flag" in str(err)
    assert log.read_text().startswith("# specnb: ")
    assert srv.proc.returncode == 3
    assert not srv.alive()
    assert srv.proc.pid not in server.live_servers()


def test_stop_kills_a_group_that_ignores_term(tmp_path, monkeypatch):
    child_pid_file = tmp_path / "child.pid"
    exe = script(tmp_path / "stubborn", (
        "#!/bin/sh\n"
        "trap '' TERM\n"
        "sleep 300 &\n"
        f"echo $! > '{child_pid_file}'\n"
        "echo started\n"
        "while true; do sleep 0.1; done\n"
    ))
    srv = VllmServer("m", python=str(exe), log_path=tmp_path / "s.log", ready_timeout_s=1.5, stop_grace_s=0.5)
    with pytest.raises(ServerStartError, match="not ready") as info:
        srv.start()
    assert "started" in info.value.log_tail
    pgid = srv.proc.pid
    child = int(child_pid_file.read_text())
    assert srv.proc.returncode == -signal.SIGKILL  # TERM was ignored: the KILL fallback ran

    deadline = time.monotonic() + guard("child_start")  # SIGKILL is delivered asynchronously
    while group_members(pgid) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert group_members(pgid) == []
    if psutil.pid_exists(child):
        try:
            assert psutil.Process(child).status() == psutil.STATUS_ZOMBIE
        except psutil.NoSuchProcess:
            pass
    assert pgid not in server.live_servers()

    signalled: list = []
    monkeypatch.setattr(server, "stop_group", lambda *a, **kw: signalled.append(a))
    srv.stop()  # idempotent: nothing left to signal or wait for
    assert signalled == [] and srv.proc.returncode == -signal.SIGKILL


def fake_vllm(tmp_path):
    """The plainest fake vLLM process (tests/unit/fakevllm.py): dies of SIGTERM, no handler."""
    return plain_python(tmp_path, cpu_line=CPU_LINE)


def test_start_and_stop_a_fake_server(tmp_path):
    srv = VllmServer("/models/SmolLM2", served_model_name="smol", python=str(fake_vllm(tmp_path)),
                     log_path=tmp_path / "s.log", ready_timeout_s=30, stop_grace_s=2,
                     env={"VLLM_TEST_FLAG": "7", "VLLM_API_KEY": "sk-secret"},
                     speculative_config={"method": "ngram", "num_speculative_tokens": 4})
    with srv as ep:
        assert srv.alive()
        assert ep.mode == "launched"
        assert ep.model == "smol"
        assert ep.pid == srv.proc.pid
        port = int(ep.base_url.rsplit(":", 1)[1])
        assert ep.base_url == f"http://127.0.0.1:{port}"
        assert ep.argv == srv.argv(port)
        assert ep.engine_version == "0.32.0"
        assert ep.kv.device == "CPU"
        assert ep.kv.tokens == [46592]
        assert ep.kv.max_concurrency == [22.75]
        assert ep.env["VLLM_TEST_FLAG"] == "7"
        assert "VLLM_API_KEY" not in ep.env
        assert ep.ready_s > 0
        assert srv.endpoint is ep
        assert attach(ep.base_url).model == "smol"
        pgid = srv.proc.pid
    assert not srv.alive()
    assert srv.proc.returncode == -signal.SIGTERM
    assert group_members(pgid) == []
    assert pgid not in server.live_servers()


def test_servers_launched_together_are_waited_for_one_by_one(tmp_path):
    exe = str(fake_vllm(tmp_path))
    servers = [VllmServer("m", served_model_name=f"s{i}", python=exe, log_path=tmp_path / f"s{i}.log",
                          ready_timeout_s=30, stop_grace_s=2) for i in range(2)]
    with pytest.raises(RuntimeError, match="before launch"):
        servers[0].wait_ready()
    try:
        for srv in servers:
            srv.launch()
        assert all(srv.proc.poll() is None and srv.endpoint is None for srv in servers)  # not waited for yet
        eps = [srv.wait_ready() for srv in servers]
        assert [ep.model for ep in eps] == ["s0", "s1"] and len({ep.base_url for ep in eps}) == 2
        assert all(srv.alive() and srv.endpoint is ep for srv, ep in zip(servers, eps, strict=True))
    finally:
        for srv in servers:
            srv.stop()
    assert not any(srv.alive() for srv in servers)


def test_started_together_stops_every_server_also_when_the_block_fails(tmp_path):
    exe = str(fake_vllm(tmp_path))
    servers = {f"s{i}": VllmServer("m", served_model_name=f"s{i}", python=exe, log_path=tmp_path / f"s{i}.log",
                                   ready_timeout_s=30, stop_grace_s=2) for i in range(2)}
    with pytest.raises(KeyError):
        with server.started_together(servers) as eps:
            assert {name: ep.model for name, ep in eps.items()} == {"s0": "s0", "s1": "s1"}
            assert all(srv.alive() for srv in servers.values())
            raise KeyError("a test fails while both serve")
    assert not any(srv.alive() for srv in servers.values())


def test_alive_with_grace_waits_out_a_server_whose_socket_closed_first(tmp_path):
    """A point fails on refused connections while the killed leader has not been collected yet:
    ``alive(grace_s=...)`` sees /health gone and waits for the exit; plain ``alive()`` does not."""
    exe = plain_python(tmp_path, cpu_line=CPU_LINE, linger=True)
    srv = VllmServer("m", served_model_name="smol", python=str(exe), log_path=tmp_path / "s.log",
                     ready_timeout_s=30, stop_grace_s=2)
    with srv:
        t0 = time.monotonic()
        assert srv.alive(grace_s=2 * guard("child_start"))  # healthy: answered at once, no waiting
        assert time.monotonic() - t0 < guard("child_start")  # not the grace
        srv.proc.send_signal(signal.SIGUSR1)
        time.sleep(0.3)
        assert srv.alive()  # the process is still there, its socket is not
        assert not srv.alive(grace_s=5.0)
        assert srv.proc.returncode == 9


def test_restart_with_same_log_reports_only_this_start(tmp_path):
    exe = str(fake_vllm(tmp_path))
    for _ in range(2):
        srv = VllmServer("m", served_model_name="smol", python=exe, log_path=tmp_path / "same.log",
                         ready_timeout_s=30, stop_grace_s=2)
        with srv as ep:
            pass
    assert ep.kv.tokens == [46592]


# ----------------------------------------------------------------------------- attach


@pytest.fixture
def http_server():
    """Start the fake vLLM (tests/unit/fakevllm.py) with only the given routes (every other one
    answers 404); yields a function giving its URL."""
    servers = []

    def start(routes: dict[str, object]) -> str:
        servers.append(FakeVllm(routes=routes))
        return servers[-1].start()

    yield start
    for s in servers:
        s.stop()


def test_attach_unreachable_raises_quickly():
    t0 = time.monotonic()
    with pytest.raises(ServerError, match="cannot reach"):
        attach("http://127.0.0.1:9", timeout=2)
    assert time.monotonic() - t0 < guard("child_start")


def test_attach_to_running_server(http_server):
    url = http_server({
        "/v1/models": {"object": "list", "data": [{"id": "smol"}, {"id": "other"}]},
        "/version": {"version": "0.32.0"},
        "POST /reset_prefix_cache": b"",
    })
    ep = attach(url + "/")
    assert ep.model == "smol"
    assert ep.engine_version == "0.32.0"
    assert ep.mode == "attached"
    assert ep.base_url == url
    assert ep.pid is None
    assert ep.reset_prefix_cache() is True
    assert attach(url, "other").model == "other"
    with pytest.raises(ServerError, match="does not serve"):
        attach(url, "llama")


def test_attach_without_version_route(http_server):
    url = http_server({"/v1/models": {"data": [{"id": "smol"}]}})
    ep = attach(url)
    assert ep.model == "smol"
    assert ep.engine_version is None
    assert ep.reset_prefix_cache() is False  # 404: the server refused


def test_attach_to_server_without_models(http_server):
    url = http_server({"/v1/models": {"data": []}})
    with pytest.raises(ServerError, match="serves no models"):
        attach(url)


def test_attach_to_non_json_models_raises(http_server):
    url = http_server({"/v1/models": b"<html>not an API</html>"})
    with pytest.raises(ServerError):
        attach(url)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_PDEATHSIG is Linux-only")
def test_server_dies_with_a_sigkilled_parent(tmp_path):
    """atexit and signal handlers do not run on SIGKILL (a killed notebook kernel): the
    server must still go, by the death signal asked for before exec."""
    import subprocess

    pid_file = tmp_path / "server.pid"
    parent = tmp_path / "parent.py"
    parent.write_text(
        "import sys, time\n"
        "from specnb.engine.server import VllmServer\n"
        f"srv = VllmServer('/m', served_model_name='smol', python={str(fake_vllm(tmp_path))!r},\n"
        f"                 log_path={str(tmp_path / 's.log')!r}, ready_timeout_s=30)\n"
        "srv.start()\n"
        f"open({str(pid_file)!r}, 'w').write(str(srv.pid))\n"
        "time.sleep(300)\n"
    )
    proc = subprocess.Popen([sys.executable, str(parent)])
    try:
        deadline = time.monotonic() + guard("child_start")
        while not pid_file.exists() or not pid_file.read_text():
            assert time.monotonic() < deadline and proc.poll() is None, "parent did not start the server"
            time.sleep(0.1)
        server_pid = int(pid_file.read_text())
        assert psutil.pid_exists(server_pid)
        proc.kill()
        proc.wait()
        deadline = time.monotonic() + guard("child_start")
        while time.monotonic() < deadline:
            try:
                if psutil.Process(server_pid).status() == psutil.STATUS_ZOMBIE:
                    break
            except psutil.NoSuchProcess:
                break
            time.sleep(0.1)
        else:
            os.killpg(server_pid, signal.SIGKILL)
            pytest.fail("the server outlived its SIGKILLed parent")
    finally:
        if proc.poll() is None:
            proc.kill()
