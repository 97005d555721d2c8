"""``make gpu-check``: every GPU parameter file against the installed vLLM, in seconds, measuring nothing.

A GPU run that dies after twenty minutes of server starts on a typo, a method the engine does
not know, a flag it does not take or a checkpoint that is not on the machine wastes the GPU.
For each ``notebooks/params/gpu/<axis>[-variant].yaml`` this checks, without starting a server:

- the keys are parameters of the axis notebook, and every condition builds a valid sweep;
- the installed vLLM is at least the release the sweep needs (:mod:`specnb.engine.releases`);
- each ``--speculative-config`` names only fields of vLLM's ``SpeculativeConfig`` and a
  ``method`` it knows;
- the server arguments (the sweep's, the condition's, the arm's) parse with vLLM's own
  ``vllm serve`` argument parser;
- every model and drafter is a local folder or is in the local Hugging Face cache (servers run
  with ``HF_HUB_OFFLINE=1``); ``--skip-models`` leaves this out;
- the calculator's file names a hardware preset with a peak for its ``compute_dtype`` and says where
  its speculative costs come from (``gpu_costs``: the published GPU fit, or the measurement behind
  its ``drafter_*_ms``).

``python -m specnb.notebooks.gpucheck notebooks/params/gpu/*.yaml [--skip-models]``: one line per
problem and exit 1, or one ``ok`` line per file and exit 0.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import io
import shutil
import sys
import typing
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from specnb import paths
from specnb.errors import SpecnbError
from specnb.notebooks.runner import notebook_parameters, notebook_source, parameter_comments, read_params

__all__ = ["check_file", "check_files", "VllmRules", "main", "model_problem"]


@dataclasses.dataclass
class VllmRules:
    """What the installed vLLM accepts: speculative-config fields and methods, server arguments."""

    version: str | None
    spec_fields: set[str]
    methods: set[str]
    parser: Any

    @classmethod
    def load(cls) -> VllmRules:
        from vllm.config.speculative import SpeculativeConfig  # noqa: I001 - the engine, imported only here

        from specnb.engine.vllm import installed_vllm

        fields = {f.name for f in dataclasses.fields(SpeculativeConfig)}
        hint = typing.get_type_hints(SpeculativeConfig).get("method")
        methods = {a for a in _literals(hint)}
        return cls(version=installed_vllm()["version"], spec_fields=fields, methods=methods, parser=_serve_parser())

    def parse_args(self, model: str, args: list[str]) -> str | None:
        """None when ``vllm serve`` would take ``args``; else argparse's own complaint."""
        err = io.StringIO()
        try:
            with contextlib.redirect_stderr(err):
                self.parser.parse_args(["--model", model, *args])
        except SystemExit:
            lines = [x for x in err.getvalue().strip().splitlines() if x.strip()]
            return lines[-1] if lines else "rejected"
        return None


def _literals(tp: Any) -> list[str]:
    out: list[str] = []
    for arg in typing.get_args(tp) or ():
        if isinstance(arg, str):
            out.append(arg)
        else:
            out += _literals(arg)
    return out


def _serve_parser() -> Any:
    try:  # vLLM >= 0.29
        from vllm.entrypoints.launchers.cli_args import make_arg_parser
    except ImportError:  # older releases
        from vllm.entrypoints.openai.cli_args import make_arg_parser
    try:
        from vllm.utils.argparse_utils import FlexibleArgumentParser
    except ImportError:
        from vllm.utils import FlexibleArgumentParser
    return make_arg_parser(FlexibleArgumentParser(prog="vllm serve"))


def model_problem(model: str) -> str | None:
    """None when ``model`` is a local folder or a hub id in the local cache."""
    p = Path(model)
    if p.is_absolute() or model.startswith((".", "models/")):
        return None if paths.resolve(model).exists() else f"model folder {model} does not exist"
    if paths.resolve(model).exists():
        return None
    try:
        from huggingface_hub import try_to_load_from_cache
    except ImportError:
        return None
    hit = try_to_load_from_cache(model, "config.json")
    if isinstance(hit, str):
        return None
    return (f"model {model} is not in the local Hugging Face cache (servers run offline): "
            f"{hub_cli()} download {model}")


def hub_cli() -> str:
    """The Hugging Face command line this environment has: ``hf`` (huggingface_hub 0.34 on; the
    only one from 1.0, which removed ``huggingface-cli``), else the old ``huggingface-cli``."""
    here = Path(sys.executable).parent
    for name in ("hf", "huggingface-cli"):
        if (here / name).exists() or shutil.which(name):
            return name
    return "hf"


def cpu_fitted_defaults(source: Path, params: dict[str, Any]) -> list[str]:
    """The notebook's parameters whose default was fitted to the CPU runs (their comment says
    "fitted") that a GPU file leaves unset: a CPU cost in a GPU model makes its answer meaningless."""
    defaults = notebook_parameters(source)
    return [f"{k} inherits the CPU-fitted default {defaults[k]!r} ({comment}): set it for this hardware "
            "(measured there, or 0 with that stated)"
            for k, comment in parameter_comments(source).items() if "fitted" in comment and k not in params]


def calculator_cost_problems(source: Path, params: dict[str, Any]) -> list[str]:
    """A GPU calculator file must state where its speculative costs come from: ``gpu_costs`` is
    ``"published-fit"`` (fitted to the published GPU curves, which replace ``drafter_*_ms``) or a
    sentence naming the measurement behind the ``drafter_*_ms`` it sets (none inherited from the CPU fit)."""
    stated = params.get("gpu_costs")
    if not isinstance(stated, str) or not stated.strip():
        return ['gpu_costs is not set: say where the speculative costs come from ("published-fit", or the '
                "measurement behind drafter_*_ms); a spec-sheet preset with no such costs is far too kind"]
    if stated == "published-fit":
        return []
    return cpu_fitted_defaults(source, params)


def check_file(path: Path | str, rules: VllmRules | None, *, skip_models: bool = False) -> list[str]:
    """Every problem with one GPU parameter file, one line each (empty: it would run)."""
    from specnb.sweep.preflight import check_engine_release
    from specnb.sweep.study import Study

    path = Path(path)
    name = path.name
    axis = path.stem.split("-")[0]
    try:
        source = notebook_source(axis)
        if source is None:
            raise SpecnbError(f"no notebook for axis {axis!r}")
        params = read_params(path, source)
        if axis == "calculator":
            from specnb.models.hardware import load_hardware

            merged = {**notebook_parameters(source), **params}
            load_hardware(merged["preset"]).for_dtype(merged.get("compute_dtype", "bf16"))
            return [f"{name}: {problem}" for problem in calculator_cost_problems(source, params)]
        merged = {**notebook_parameters(source), **params}
        specs = Study.from_namespace(axis, merged).specs()
    except SpecnbError as exc:
        return [f"{name}: {exc}"]
    problems: list[str] = []
    models: set[str] = set()
    for cond, spec in specs.items():
        where = f"{name} [{cond}]"
        if rules is not None:
            try:
                check_engine_release(spec, rules.version)
            except SpecnbError as exc:
                problems.append(f"{where}: {exc}")
        if spec.model:
            models.add(spec.model)
        for arm in spec.arms:
            if arm.endpoint is not None:
                continue
            cfg = arm.speculative_config or {}
            if cfg.get("model"):
                models.add(str(cfg["model"]))
            if rules is None:
                continue
            unknown = sorted(set(cfg) - rules.spec_fields)
            if unknown:
                problems.append(f"{where} arm {arm.name}: vLLM {rules.version}'s SpeculativeConfig has no "
                                f"{', '.join(unknown)}")
            if cfg.get("method") and rules.methods and cfg["method"] not in rules.methods:
                problems.append(f"{where} arm {arm.name}: vLLM {rules.version} knows no speculative method "
                                f"{cfg['method']!r} (known: {', '.join(sorted(rules.methods))})")
            # as launched: the notebooks' `--dtype machine` becomes a dtype vLLM knows (auto on a GPU build)
            from specnb.engine.kernels import resolve_dtype  # the engine side, as for vLLM's own rules

            bad = rules.parse_args(spec.model or "model", resolve_dtype([*spec.server_args, *arm.server_args]))
            if bad:
                problems.append(f"{where} arm {arm.name}: vllm serve refuses the server arguments: {bad}")
    if not skip_models:
        problems += [f"{name}: {p}" for m in sorted(models) if (p := model_problem(m))]
    return sorted(set(problems), key=problems.index)


def check_files(files: Iterable[Path | str], *, skip_models: bool = False,
                rules: VllmRules | None = None) -> dict[str, list[str]]:
    """:func:`check_file` for each file, with vLLM's rules loaded once."""
    rules = rules or VllmRules.load()
    return {str(f): check_file(f, rules, skip_models=skip_models) for f in files}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m specnb.notebooks.gpucheck",
                                description="Check GPU parameter files against the installed vLLM (no server).")
    p.add_argument("files", type=Path, nargs="+")
    p.add_argument("--skip-models", action="store_true", help="do not look for the checkpoints")
    a = p.parse_args(argv)
    try:
        rules = VllmRules.load()
    except ImportError as exc:
        print(f"specnb: vLLM cannot be imported here ({exc}): `make setup EXTRA=gpu`", file=sys.stderr)
        return 2
    results = check_files(a.files, skip_models=a.skip_models, rules=rules)
    bad = 0
    for f, problems in results.items():
        for line in problems:
            print(line)
        bad += len(problems)
        if not problems:
            print(f"{Path(f).name}: ok (vLLM {rules.version})")
    return 1 if bad else 0


if __name__ == "__main__":
    raise SystemExit(main())
