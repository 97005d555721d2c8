"""The vLLM floor: pyproject's gpu extra names the first release with every feature the GPU
parameter files use, and a sweep refuses an older engine in one line before any server."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import pytest

from specnb import paths
from specnb.engine.releases import ENGINE_FLOOR, FEATURES, features_of, parse_version, required_release
from specnb.notebooks.runner import notebook_parameters, read_params
from specnb.sweep import SweepError, SweepSpec
from specnb.sweep.preflight import check_engine_release
from specnb.sweep.study import Study

GPU_FILES = sorted((paths.ROOT / "notebooks" / "params" / "gpu").glob("*.yaml"))


def _notebook(axis: str) -> Path:
    return next((paths.ROOT / "notebooks").glob(f"[0-9][0-9]_{axis}.py"))


def _drafters(path: Path) -> list[dict]:
    """The speculative configs a GPU file's sweeps launch; a policy file (``policy_from``) also
    launches the dynamic schedule it derives from a proposal run."""
    params = read_params(path, _notebook(path.stem.split("-")[0]))
    configs = list(params.get("drafters", {}).values())
    if params.get("policy_from"):
        configs.append({"method": "ngram", "num_speculative_tokens": 4, "prompt_lookup_min": 2,
                        "prompt_lookup_max": 4, "num_speculative_tokens_per_batch_size": [[1, 256, 4]]})
    return configs


def test_parse_version():
    assert parse_version("0.32.0+cpu") == (0, 32, 0)
    assert parse_version("0.29") == (0, 29, 0)
    assert parse_version("v0.27.1rc2") == (0, 27, 1)
    assert parse_version(None) is None and parse_version("dev") is None


def test_features_of_each_drafter_kind():
    assert features_of(None) == set()
    assert features_of({"method": "ngram", "num_speculative_tokens": 4}) == {"per_request_spec_metrics"}
    assert "draft_model" in features_of({"model": "x", "num_speculative_tokens": 4})
    assert "draft_model" in features_of({"method": "draft_model", "model": "x", "num_speculative_tokens": 4})
    assert "eagle3_positions" in features_of({"method": "eagle3", "model": "h", "num_speculative_tokens": 3})
    dyn = {"method": "ngram", "num_speculative_tokens": 4, "num_speculative_tokens_per_batch_size": [[1, 4, 4]]}
    assert "dynamic_speculation" in features_of(dyn)
    assert required_release([dyn])[0] == FEATURES["dynamic_speculation"][0]


def test_pyproject_gpu_floor_is_what_the_gpu_parameter_files_need():
    extras = tomllib.loads((paths.ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    floor = next(re.search(r"vllm>=([\d.]+)", d).group(1) for d in extras["gpu"] if d.startswith("vllm"))
    need, _ = required_release(c for f in GPU_FILES for c in _drafters(f))
    assert parse_version(floor) == need >= ENGINE_FLOOR, (
        f"pyproject allows vllm>={floor}, the GPU parameter files need {'.'.join(map(str, need))}: "
        "set the gpu extra's floor to it")


# only the files that launch a drafter have one to check (the calculator's and the quantization
# axis's files launch none): a case with nothing to check is not generated
DRAFTING_FILES = [p for p in GPU_FILES if _drafters(p)]


def test_the_drafter_checks_cover_the_files_that_launch_drafters():
    assert DRAFTING_FILES and len(DRAFTING_FILES) < len(GPU_FILES)
    assert not any(_drafters(p) for p in set(GPU_FILES) - set(DRAFTING_FILES))


@pytest.mark.parametrize("path", DRAFTING_FILES, ids=lambda p: p.stem)
def test_gpu_files_use_explicit_ngram_ranges_and_named_draft_models(path):
    """vLLM sets prompt_lookup_min = prompt_lookup_max when only max is given (n-gram then drafts
    only on exact max-gram matches), and a draft model arm names its method."""
    configs = _drafters(path)
    assert configs
    for cfg in configs:
        if cfg.get("method") == "ngram":
            assert {"prompt_lookup_min", "prompt_lookup_max"} <= set(cfg), cfg
            assert cfg["prompt_lookup_min"] < cfg["prompt_lookup_max"], cfg
        if cfg.get("model") and cfg.get("method") not in ("eagle", "eagle3", "mtp"):
            assert cfg.get("method") == "draft_model", cfg


def _spec(cfg: dict | None = None, endpoint: str | None = None) -> SweepSpec:
    arms = [{"name": "baseline"},
            {"name": "spec", "speculative_config": cfg or {"method": "ngram", "num_speculative_tokens": 4}}]
    if endpoint:
        arms = [{"name": "baseline", "endpoint": endpoint}, {"name": "spec", "endpoint": endpoint}]
    return SweepSpec.parse(dict(name="t", model="some/hub-id", concurrency=[1], workloads=["copy"], arms=arms))


def test_an_older_engine_is_refused_in_one_line():
    with pytest.raises(SweepError) as err:
        check_engine_release(_spec(), version="0.28.0")
    msg = str(err.value)
    assert "\n" not in msg and "0.29.0 or newer" in msg and "per-request" in msg
    with pytest.raises(SweepError, match=r"0\.27\.0.*#49343"):
        check_engine_release(_spec({"method": "eagle3", "model": "h", "num_speculative_tokens": 3}),
                             version="0.26.1")
    dyn = {"method": "ngram", "num_speculative_tokens": 4, "prompt_lookup_max": 4,
           "num_speculative_tokens_per_batch_size": [[1, 2, 4], [3, 256, 0]]}
    with pytest.raises(SweepError, match=r"needs 0\.32\.0"):
        check_engine_release(_spec(dyn), version="0.31.0")


def test_the_cpu_build_and_newer_engines_pass_and_attached_servers_are_not_checked():
    check_engine_release(_spec(), version="0.32.0+cpu")
    check_engine_release(_spec(), version="0.33.0")
    check_engine_release(_spec(endpoint="http://127.0.0.1:9"), version="0.20.0")  # not launched by us
    check_engine_release(_spec(), version="unknown-build")


def test_every_gpu_file_builds_its_sweeps():
    for path in GPU_FILES:
        axis = path.stem.split("-")[0]
        if axis == "calculator":
            continue
        params = {**notebook_parameters(_notebook(axis)), **read_params(path, _notebook(axis))}
        assert Study.from_parameters(axis, **params).specs()
