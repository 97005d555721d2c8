"""``make gpu-check``: the GPU parameter files against the installed vLLM's own rules (here the
CPU build, 0.32.0, whose config and argument code is the GPU release's), without a server.

vLLM is imported in a subprocess: importing it loads its plugins, and specnb's CPU plugin would
then patch this test process (the integration tests check that it can)."""

from __future__ import annotations

import importlib.util
import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from specnb import paths
from specnb.notebooks import gpucheck
from tests.hang import guard

GPU_FILES = sorted((paths.ROOT / "notebooks" / "params" / "gpu").glob("*.yaml"))

PROBE = """
import json, sys
from specnb.notebooks import gpucheck
rules = gpucheck.VllmRules.load()
old = gpucheck.VllmRules(version="0.28.0", spec_fields=rules.spec_fields, methods=rules.methods, parser=rules.parser)
files = sys.argv[1:]
print(json.dumps({
    "methods": sorted(rules.methods), "fields": sorted(rules.spec_fields),
    "checked": {f: gpucheck.check_file(f, rules, skip_models=True) for f in files},
    "old": gpucheck.check_file(files[1], old, skip_models=True),
}))
"""


@pytest.fixture(scope="module")
def probe(tmp_path_factory):
    from tests.conftest import require

    require(importlib.util.find_spec("vllm") is not None, "vLLM", "make setup installs the engine")
    tmp = tmp_path_factory.mktemp("gpu")
    (tmp / "concurrency.yaml").write_text(
        "model: meta-llama/Llama-3.1-8B-Instruct\n"
        "server_args: [--max-model-length, '8192']\n"
        "drafters:\n"
        "  ngram: {method: ngram, num_speculative_tokens: 4, prompt_lookup_minimum: 2}\n")
    (tmp / "drafter.yaml").write_text("drafters: {x: {method: eagle9, model: m, num_speculative_tokens: 3}}\n")
    (tmp / "kv.yaml").write_text("contex_tokens: 4096\n")
    planted = [str(tmp / n) for n in ("concurrency.yaml", "drafter.yaml", "kv.yaml")]
    files = [str(f) for f in GPU_FILES] + planted
    out = subprocess.run([sys.executable, "-c", PROBE, *files], capture_output=True, text=True, timeout=guard("vllm_child"),
                         cwd=paths.ROOT, check=True)
    res = json.loads(out.stdout.strip().splitlines()[-1])
    res["planted"] = dict(zip(("concurrency", "drafter", "kv"), planted, strict=True))
    return res


def test_every_gpu_file_passes_against_the_installed_vllm(probe):
    assert {"ngram", "draft_model", "eagle3"} <= set(probe["methods"])
    assert {"prompt_lookup_min", "num_speculative_tokens_per_batch_size"} <= set(probe["fields"])
    results = {f: p for f, p in probe["checked"].items() if f in {str(g) for g in GPU_FILES}}
    assert results and all(not p for p in results.values()), results


def test_planted_mistakes_are_each_reported_in_one_line(probe):
    problems = probe["checked"][probe["planted"]["concurrency"]]
    text = "\n".join(problems)
    assert "SpeculativeConfig has no prompt_lookup_minimum" in text, text
    assert "vllm serve refuses the server arguments" in text and "--max-model-length" in text, text
    assert all("\n" not in p for p in problems)
    assert "eagle9" in "\n".join(probe["checked"][probe["planted"]["drafter"]])
    # a file without server_args inherits the notebook's `--dtype machine`, which is checked as launched
    assert not [p for p in probe["checked"][probe["planted"]["drafter"]] if "server arguments" in p]
    assert "unknown parameter" in probe["checked"][probe["planted"]["kv"]][0]


def test_an_older_engine_is_reported(probe):
    assert probe["old"] and all("or newer" in p for p in probe["old"]), probe["old"]


def test_models_must_be_local_folders_or_in_the_hub_cache(tmp_path, monkeypatch):
    import huggingface_hub

    assert gpucheck.model_problem(str(tmp_path)) is None
    assert "does not exist" in gpucheck.model_problem(str(tmp_path / "nope"))
    monkeypatch.setattr(huggingface_hub, "try_to_load_from_cache",
                        lambda repo, name: "/cache/config.json" if repo == "org/cached" else None)
    assert gpucheck.model_problem("org/cached") is None
    assert f"{gpucheck.hub_cli()} download org/missing" in gpucheck.model_problem("org/missing")


def test_the_hub_commands_named_exist_in_this_environment():
    """huggingface_hub 1.0 removed `huggingface-cli`: the route must name the command the
    installed hub client has, in gpucheck's hint and in docs/gpu.md."""
    here = Path(sys.executable).parent
    cli = gpucheck.hub_cli()
    assert (here / cli).exists() or shutil.which(cli), cli
    for name in set(re.findall(r"\.venv/bin/([A-Za-z_-]+)", (paths.ROOT / "docs" / "gpu.md").read_text())):
        assert (here / name).exists(), f"docs/gpu.md names .venv/bin/{name}, which this environment does not have"


def test_the_calculator_file_needs_a_peak_for_its_precision(tmp_path):
    ok = tmp_path / "calculator.yaml"
    costs = "gpu_costs: published-fit\n"  # stated: the published GPU fit
    ok.write_text("preset: h200-sxm\ncompute_dtype: fp8\n" + costs)
    assert gpucheck.check_file(ok, None) == []
    fp4 = tmp_path / "calculator-fp4.yaml"
    fp4.write_text("preset: h100-sxm\ncompute_dtype: fp4\n")
    assert "no dense_fp4_tflop_s" in gpucheck.check_file(fp4, None)[0]


def test_a_gpu_calculator_file_that_inherits_a_cpu_fitted_cost_is_refused(tmp_path):
    import yaml

    gpu = paths.ROOT / "notebooks" / "params" / "gpu" / "calculator.yaml"
    assert gpucheck.check_file(gpu, None) == []  # the committed file states its drafting costs
    data = yaml.safe_load(gpu.read_text())
    data["gpu_costs"] = "measured on our H200 with specnb calibrate"  # a measurement: drafter_*_ms must be set
    for key in ("drafter_step_overhead_ms", "drafter_per_token_ms"):
        data.pop(key)
    bad = tmp_path / "calculator.yaml"
    bad.write_text(yaml.safe_dump(data))
    problems = gpucheck.check_file(bad, None)
    assert len(problems) == 2 and all("inherits the CPU-fitted default" in p for p in problems)
    assert "drafter_step_overhead_ms" in problems[0] and "drafter_per_token_ms" in problems[1]


def test_a_gpu_calculator_file_must_state_where_its_speculative_costs_come_from(tmp_path):
    import yaml

    gpu = paths.ROOT / "notebooks" / "params" / "gpu" / "calculator.yaml"
    data = yaml.safe_load(gpu.read_text())
    assert data["gpu_costs"] == "published-fit"  # the committed GPU answer is the published fit's
    for stated in (None, ""):
        data["gpu_costs"] = stated
        bad = tmp_path / "calculator.yaml"
        bad.write_text(yaml.safe_dump(data))
        (problem,) = gpucheck.check_file(bad, None)
        assert "gpu_costs is not set" in problem
    data.pop("gpu_costs")
    bad.write_text(yaml.safe_dump(data))
    assert "gpu_costs is not set" in gpucheck.check_file(bad, None)[0]
