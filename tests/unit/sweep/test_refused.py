"""What the engine build cannot serve on this machine is refused before anything starts, and
recorded; an engine that dies at its first request is reported with its cause; a fallback
path is flagged on the points it slows. Against the fake vLLM (seconds); the AVX2 probe is a
hand-made one, as an AMD EPYC machine's extension answers (``_C_AVX2``: no cpu_gemm_wna16, no
oneDNN bf16 matmul). The real probe and the real W4A16 server are in
``tests/integration/test_checkpoints_real.py``."""

from __future__ import annotations

import glob
import json

import pytest

from specnb import paths
from specnb.analysis.text import format_report
from specnb.engine import kernels
from specnb.ledger import Flag, load_ledgers, read_ledger
from specnb.ledger.names import REFUSED_ERROR
from specnb.notebooks.runner import notebook_parameters
from specnb.sweep import SweepSpec, run_sweep
from specnb.sweep.study import Study
from tests.unit.engine.test_kernels import AVX2_PROBE
from tests.unit.fakevllm import fake_model

QUIET = lambda s: None  # noqa: E731


@pytest.fixture
def avx2(monkeypatch):
    monkeypatch.setattr(kernels, "probe", lambda env=None: AVX2_PROBE)


def w4a16(folder):
    fake_model(folder)
    cfg = json.loads((folder / "config.json").read_text())
    cfg.update(torch_dtype="bfloat16", quantization_config={
        "quant_method": "compressed-tensors",
        "config_groups": {"g": {"weights": {"num_bits": 4, "type": "int", "group_size": 64}, "input_activations": None}}})
    (folder / "config.json").write_text(json.dumps(cfg))
    return folder


def study(fake, tmp_path, **kw):
    cfg = json.loads((fake.model / "config.json").read_text())
    (fake.model / "config.json").write_text(json.dumps({**cfg, "torch_dtype": "bfloat16"}))
    (nb,) = glob.glob(str(paths.ROOT / "notebooks" / "[0-9][0-9]_quantization.py"))
    params = {**notebook_parameters(nb), "study": "t", "model": str(fake.model), "served_model_name": "fake",
              "drafters": {"ngram": {"method": "ngram", "num_speculative_tokens": 2, "prompt_lookup_max": 2}},
              "conditions": {"bf16": {}, "w4a16": {"model": str(w4a16(tmp_path / "w4"))}},
              "concurrency": [1], "repeats": 1, "panel_size": 2, "work_floor_tokens": 0, "warmup_requests": 0,
              "max_tokens": 8, "server_args": [], "env": {"FAKE_VLLM_STATE": str(fake.state), "FAKE_VLLM_FALLBACK": "1"},
              "workloads": ["freeform"]}
    params.update(kw)
    return Study.from_parameters("quantization", **params)


def test_a_condition_the_build_cannot_serve_is_recorded_refused_and_the_study_goes_on(fake_vllm, avx2, tmp_path,
                                                                                         capsys):
    folder, outcomes = study(fake_vllm, tmp_path).run(root=tmp_path / "ledgers", progress=False)
    err = capsys.readouterr().err
    refused_lines = [ln for ln in err.splitlines() if ln.startswith("refused: ")]
    assert len(refused_lines) == 2 and all("cpu_gemm_wna16" in ln and "CPU level avx2" in ln for ln in refused_lines)
    assert len(fake_vllm.started) == 2  # baseline and ngram of bf16; nothing for w4a16
    assert not (folder / "w4a16" / "logs").exists()
    failed = sorted((folder / "w4a16").rglob("*.failed-*.json"))
    assert len(failed) == 2
    for p in failed:
        led = read_ledger(p)
        assert led.status == "failed" and led.server is None
        assert led.failure.error_type == REFUSED_ERROR and "W4A16" in led.failure.message
        assert led.provenance.hardware["cpu_isa"]  # the level is in every ledger
        assert led.provenance.hardware["engine_kernels"]["missing"] == ["cpu_gemm_wna16"]
    assert all(not o.failed_points for o in outcomes)  # a refusal is recorded, not retried
    assert any(o.refused for o in outcomes)
    df = load_ledgers(folder)
    ok = df[df["status"] == "ok"]
    assert set(ok["condition"]) == {"bf16"} and len(ok) == 2
    # the fake logs oneDNN's fallback: every point of that server is flagged, and preflight said why
    assert all(Flag.ENGINE_FALLBACK in f.split(",") for f in ok["flags"])
    led = read_ledger(ok["path"].iloc[0])
    assert any("torch's fallback" in n and "float32" in n for n in led.parameters["notes"])
    text = format_report(df, n_boot=50)
    assert "refused before any server started" in text
    assert "w4a16 / baseline: 1 point(s) not measured" in text and "cpu_gemm_wna16" in text


def test_the_same_study_on_a_build_that_has_the_kernel_measures_every_condition(fake_vllm, tmp_path, monkeypatch):
    from tests.unit.engine.test_kernels import AVX512_PROBE

    monkeypatch.setattr(kernels, "probe", lambda env=None: AVX512_PROBE)
    folder, outcomes = study(fake_vllm, tmp_path, env={"FAKE_VLLM_STATE": str(fake_vllm.state)}).run(
        root=tmp_path / "ledgers", progress=False)
    df = load_ledgers(folder)
    assert set(df.loc[df["status"] == "ok", "condition"]) == {"bf16", "w4a16"}
    assert not any(Flag.ENGINE_FALLBACK in f for f in df["flags"])
    assert not any(o.refused for o in outcomes)


def _dead_spec(fake, warmup):
    return SweepSpec.parse(dict(
        name="d", model=str(fake.model), served_model_name="fake", workloads=["freeform"], concurrency=[1, 2],
        repeats=1, panel_size=2, work_floor_tokens=0, warmup_requests=warmup, request_timeout_s=5,
        metrics_interval_s=0.05, ready_timeout_s=30, sampling={"max_tokens": 8},
        env={"FAKE_VLLM_STATE": str(fake.state), "FAKE_VLLM_ENGINE_DEAD": "1"}, arms=[{"name": "baseline"}]))


def test_an_engine_that_dies_at_its_first_warmup_request_fails_its_points_with_the_cause(fake_vllm, tmp_path):
    said = []
    out = run_sweep(_dead_spec(fake_vllm, 2), tmp_path, progress=False, echo=said.append)
    assert len(out.failed) == 2 and not out.written and len(fake_vllm.started) == 1  # no retry of a dead engine
    for p in out.failed:
        f = read_ledger(p).failure
        assert f.error_type == "EngineDiedError"
        assert "the engine died at its first requests: AttributeError" in f.message and "cpu_gemm_wna16" in f.message
        assert "cpu_gemm_wna16" in (f.log_tail or "")
    failed_lines = [s for s in said if s.startswith("FAILED")]
    assert failed_lines and all("\n" not in s and "cpu_gemm_wna16" in s for s in failed_lines)
    assert all("cpu_gemm_wna16" in p for p in out.failed_points)


def test_an_engine_that_dies_during_a_point_names_the_cause_not_a_bare_http_500(fake_vllm, tmp_path):
    out = run_sweep(_dead_spec(fake_vllm, 0), tmp_path, progress=False, echo=QUIET)
    first = read_ledger(sorted(out.failed)[0])
    assert first.failure.error_type in ("EngineDied", "ServerStartError", "EngineDiedError")
    msgs = " ".join(read_ledger(p).failure.message for p in out.failed)
    assert "the engine failed: AttributeError: '_OpNamespace' '_C' object has no attribute 'cpu_gemm_wna16'" in msgs
