"""``make gpu-check``: the GPU parameter files against the installed vLLM's own rules (here the
CPU build, 0.32.0, whose config and argument code is the GPU release's), without a server."""

from __future__ import annotations

import pytest

from specnb import paths
from specnb.sweep import gpucheck

GPU_FILES = sorted((paths.ROOT / "notebooks" / "params" / "gpu").glob("*.yaml"))


@pytest.fixture(scope="module")
def rules():
    pytest.importorskip("vllm")
    return gpucheck.VllmRules.load()


def test_every_gpu_file_passes_against_the_installed_vllm(rules):
    assert "ngram" in rules.methods and "draft_model" in rules.methods and "eagle3" in rules.methods
    assert {"prompt_lookup_min", "num_speculative_tokens_per_batch_size"} <= rules.spec_fields
    results = gpucheck.check_files(GPU_FILES, skip_models=True, rules=rules)
    assert results and all(not p for p in results.values()), results


def test_planted_mistakes_are_each_reported_in_one_line(rules, tmp_path):
    bad = tmp_path / "concurrency.yaml"
    bad.write_text(
        "model: meta-llama/Llama-3.1-8B-Instruct\n"
        "server_args: [--max-model-length, '8192']\n"
        "drafters:\n"
        "  ngram: {method: ngram, num_speculative_tokens: 4, prompt_lookup_minimum: 2}\n")
    problems = gpucheck.check_file(bad, rules, skip_models=True)
    text = "\n".join(problems)
    assert "SpeculativeConfig has no prompt_lookup_minimum" in text, text
    assert "vllm serve refuses the server arguments" in text and "--max-model-length" in text, text
    assert all("\n" not in p for p in problems)
    typo = tmp_path / "drafter.yaml"
    typo.write_text("drafters: {x: {method: eagle9, model: m, num_speculative_tokens: 3}}\n")
    assert "eagle9" in "\n".join(gpucheck.check_file(typo, rules, skip_models=True))
    unknown = tmp_path / "kv.yaml"
    unknown.write_text("contex_tokens: 4096\n")
    assert "unknown parameter" in gpucheck.check_file(unknown, rules, skip_models=True)[0]


def test_an_older_engine_is_reported(rules, tmp_path):
    old = gpucheck.VllmRules(version="0.28.0", spec_fields=rules.spec_fields, methods=rules.methods,
                             parser=rules.parser)
    problems = gpucheck.check_file(GPU_FILES[1], old, skip_models=True)
    assert problems and all("0.29.0 or newer" in p for p in problems), problems


def test_models_must_be_local_folders_or_in_the_hub_cache(tmp_path, monkeypatch):
    import huggingface_hub

    assert gpucheck._model_problem(str(tmp_path)) is None
    assert "does not exist" in gpucheck._model_problem(str(tmp_path / "nope"))
    monkeypatch.setattr(huggingface_hub, "try_to_load_from_cache",
                        lambda repo, name: "/cache/config.json" if repo == "org/cached" else None)
    assert gpucheck._model_problem("org/cached") is None
    assert "huggingface-cli download org/missing" in gpucheck._model_problem("org/missing")


def test_the_calculator_file_needs_a_peak_for_its_precision(tmp_path):
    ok = tmp_path / "calculator.yaml"
    ok.write_text("preset: h200-sxm\ncompute_dtype: fp8\n")
    assert gpucheck.check_file(ok, None) == []
    fp4 = tmp_path / "calculator-fp4.yaml"
    fp4.write_text("preset: h100-sxm\ncompute_dtype: fp4\n")
    assert "no dense_fp4_tflop_s" in gpucheck.check_file(fp4, None)[0]
