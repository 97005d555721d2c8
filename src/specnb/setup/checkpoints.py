"""Checkpoints derived locally from the bf16 default model: INT8, INT4 and noisy drafts.

The quantization and drafter-type studies need more than one model, and these machines
have no model hub. Everything here is made from the bf16 folder that
:func:`specnb.setup.machine.prepare_default_model` builds, in seconds, with no calibration data:

- **W8A8** (compressed-tensors ``int-quantized``): int8 weights with one scale per output
  channel, activations quantized per token at run time (``dynamic``), which vLLM serves
  with its ``CompressedTensorsW8A8Int8`` scheme.
- **W4A16** (compressed-tensors ``pack-quantized``): int4 weights, one scale per group of
  64 input columns, eight values packed in each int32, served on CPU by
  ``CPUWNA16LinearKernel``. The group must divide every layer's input width: SmolLM2's
  hidden size 576 rules out the usual 128.
- **Noise drafts**: the target with seeded Gaussian noise of ``sigma`` x each 2-D weight's
  standard deviation. Same tokenizer and vocabulary, so vLLM's ``draft_model`` method
  takes it; ``sigma`` turns the acceptance rate down in a controlled, repeatable way.

Scales are round-to-nearest min-max (compressed-tensors' ``memoryless_minmax`` rule,
``absmax / (2**(bits-1) - 0.5)``), computed by compressed-tensors itself, and its own
compressors write the stored tensors, so the files follow the format vLLM parses. Every
weight is then within half a quantization step of its original value.

Only the decoder's linear projections are quantized. The token embedding is a table
lookup, not a matmul, and vLLM accepts only weight-only INT schemes for it; in this model
``lm_head`` is tied to that same table (``tie_word_embeddings``), so quantizing the head
would untie it and store a second 49152 x 576 matrix; and the head's errors go straight
into the logits that pick every token. llm-compressor's recipes leave it out for the
same reasons (``ignore: ["lm_head"]``).

A build writes into a hidden temporary folder next to the destination and renames it
into place only when complete, under a lock on the models folder; a folder whose
``specnb-provenance.json`` matches the recipe and the source's hash is left alone.
"""

from __future__ import annotations

import contextlib
import fcntl
import functools
import hashlib
import importlib.metadata as md
import json
import math
import os
import platform
import shutil
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import torch

from specnb.errors import SpecnbError

__all__ = [
    "CheckpointError",
    "BuildResult",
    "PROVENANCE_FILE",
    "W4A16_GROUP_SIZE",
    "DEFAULT_SIGMAS",
    "DEFAULT_SEED",
    "weight_scheme",
    "quantization_config",
    "is_quantized_weight",
    "quantize_weight",
    "dequantize_weight",
    "add_noise",
    "noise_name",
    "fingerprint",
    "build_w8a8",
    "build_w4a16",
    "build_noise_draft",
    "build_all",
]

PROVENANCE_FILE = "specnb-provenance.json"
PROVENANCE_VERSION = 1
# Part of every recipe: bump it when the tensors a recipe produces change, so folders
# built by older code are rebuilt instead of silently reused.
RECIPE_REVISION = 1
W4A16_GROUP_SIZE = 64
DEFAULT_SIGMAS = (0.05,)
DEFAULT_SEED = 0
WEIGHTS_FILE = "model.safetensors"
# Never quantized: the embedding table and the (tied) output head; see the module docstring.
IGNORED = ("lm_head",)
_KEEP_SUBSTRINGS = ("embed_tokens", "lm_head")


class CheckpointError(SpecnbError):
    """A checkpoint cannot be built from what was given."""


@dataclass
class BuildResult:
    """What a build did: ``built`` is False when a complete folder was already there."""

    path: Path
    built: bool
    build_s: float | None

    def describe(self) -> str:
        how = f"built in {self.build_s:.1f} s" if self.built else "already complete"
        return f"{self.path} ({how})"


# --------------------------------------------------------------------------- schemes

def weight_scheme(kind: str, group_size: int = W4A16_GROUP_SIZE) -> Any:
    """The compressed-tensors ``QuantizationScheme`` for ``kind`` ("w8a8" or "w4a16")."""
    from compressed_tensors.quantization.quant_scheme import preset_name_to_scheme

    if kind == "w8a8":
        # int8 weights per output channel + dynamic symmetric per-token int8 activations:
        # the combination vLLM's _is_dynamic_token_w8a8 recognises.
        return preset_name_to_scheme("W8A8", ["Linear"])
    if kind == "w4a16":
        if not isinstance(group_size, int) or group_size < 8 or group_size % 8:
            raise CheckpointError(f"group size {group_size!r} must be a positive multiple of 8")
        scheme = preset_name_to_scheme("W4A16", ["Linear"])
        scheme.weights.group_size = group_size
        return scheme
    raise CheckpointError(f"unknown quantization kind {kind!r}; known: w8a8, w4a16")


def _format(kind: str) -> str:
    return {"w8a8": "int-quantized", "w4a16": "pack-quantized"}[kind]


def quantization_config(kind: str, group_size: int = W4A16_GROUP_SIZE) -> dict[str, Any]:
    """The ``quantization_config`` block of config.json, as llm-compressor would write it."""
    import compressed_tensors
    from compressed_tensors.quantization import QuantizationConfig, QuantizationStatus

    qc = QuantizationConfig(
        config_groups={"group_0": weight_scheme(kind, group_size)},
        format=_format(kind),
        quantization_status=QuantizationStatus.COMPRESSED,
        ignore=list(IGNORED),
    )
    block = qc.model_dump(mode="json")
    # The same envelope as compressed-tensors' ModelCompressor.update_config.
    block.update({"version": compressed_tensors.__version__, "sparsity_config": {}, "transform_config": {}})
    return dict(sorted(block.items()))


def is_quantized_weight(name: str, tensor: torch.Tensor) -> bool:
    """True for the decoder's linear weights (2-D ``*.weight`` outside embedding and head)."""
    return (
        name.endswith(".weight") and tensor.ndim == 2 and not any(s in name for s in _KEEP_SUBSTRINGS)
    )


# --------------------------------------------------------------------------- quantize

def _compressor(kind: str) -> Any:
    from compressed_tensors.compressors import BaseCompressor

    return BaseCompressor.get_value_from_registry(_format(kind))


def quantize_weight(
    weight: torch.Tensor, kind: str, group_size: int = W4A16_GROUP_SIZE
) -> dict[str, torch.Tensor]:
    """Round-to-nearest quantize one linear weight ``[out, in]``; return the stored tensors.

    W8A8: ``weight`` int8 ``[out, in]`` and ``weight_scale`` float32 ``[out, 1]``.
    W4A16: ``weight_packed`` int32 ``[out, in/8]``, ``weight_scale`` ``[out, in/group]`` in
    the weight's dtype and ``weight_shape`` int64 ``[2]``.
    """
    from compressed_tensors.quantization.utils.helpers import calculate_qparams

    if weight.ndim != 2:
        raise CheckpointError(f"expected a 2-D weight, got shape {tuple(weight.shape)}")
    scheme = weight_scheme(kind, group_size)
    out_f, in_f = weight.shape
    w = weight.detach().float()
    if kind == "w8a8":
        lo, hi = w.amin(dim=1, keepdim=True), w.amax(dim=1, keepdim=True)
        # vLLM holds per-channel int8 scales in float32 (ChannelQuantScaleParameter).
        scale_dtype = torch.float32
    else:
        if in_f % group_size:
            raise CheckpointError(
                f"input width {in_f} is not a multiple of the group size {group_size}"
            )
        groups = w.reshape(out_f, in_f // group_size, group_size)
        lo, hi = groups.amin(dim=-1), groups.amax(dim=-1)
        # vLLM's WNA16 scales live in the activation dtype; store them so.
        scale_dtype = weight.dtype if weight.dtype.is_floating_point else torch.float32
    scale, zero_point = calculate_qparams(lo, hi, scheme.weights)
    # Quantize with the scale exactly as stored, so the integers match what vLLM multiplies.
    # Rounding it up, never down, keeps every weight inside the range (no clamping), so
    # the error stays within half a step even for a bf16 scale.
    stored = scale.to(scale_dtype)
    low = stored.float() < scale
    if low.any():
        stored = torch.where(low, torch.nextafter(stored, torch.full_like(stored, math.inf)), stored)
    scale = stored
    out = _compressor(kind).compress(
        {"weight": w, "weight_scale": scale.float(), "weight_zero_point": zero_point}, scheme
    )
    out["weight_scale"] = out["weight_scale"].to(scale_dtype)
    return {k: v.contiguous() for k, v in out.items()}


def dequantize_weight(
    tensors: dict[str, torch.Tensor], kind: str, group_size: int = W4A16_GROUP_SIZE
) -> torch.Tensor:
    """Invert :func:`quantize_weight` (float32), with compressed-tensors' own decompressor."""
    scheme = weight_scheme(kind, group_size)
    sd = {k: (v.float() if k == "weight_scale" else v) for k, v in tensors.items()}
    return _compressor(kind).decompress(sd, scheme)["weight"].float()


# --------------------------------------------------------------------------- noise

def _tensor_seed(seed: int, name: str) -> int:
    # One generator per tensor, seeded from (seed, name): the result does not depend on
    # the order tensors are visited in, nor on which other tensors exist.
    return int.from_bytes(hashlib.sha256(f"{seed}:{name}".encode()).digest()[:8], "little") >> 1


def add_noise(tensor: torch.Tensor, sigma: float, seed: int, name: str) -> torch.Tensor:
    """``tensor`` + N(0, (sigma * std(tensor))^2), deterministic in (seed, name); same dtype."""
    if not (isinstance(sigma, int | float) and math.isfinite(sigma) and sigma >= 0):
        raise CheckpointError(f"sigma must be a finite number >= 0, got {sigma!r}")
    w = tensor.detach().float()
    gen = torch.Generator(device="cpu").manual_seed(_tensor_seed(seed, name))
    noise = torch.randn(w.shape, generator=gen, dtype=torch.float32)
    return (w + noise * (sigma * w.std())).to(tensor.dtype)


def noise_name(source_name: str, sigma: float) -> str:
    """Folder name of a noise draft, e.g. ``SmolLM2-135M-Instruct-noise0.05``."""
    return f"{source_name}-noise{sigma:g}"


# --------------------------------------------------------------------------- files

def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 22), b""):
            h.update(block)
    return h.hexdigest()


@functools.lru_cache(maxsize=16)
def _sha256_cached(path: str, size: int, mtime_ns: int) -> str:  # noqa: ARG001 (cache key)
    return _sha256(Path(path))


def fingerprint(source: Path) -> dict[str, str]:
    """sha256 of the source's config and weights: a derived folder is stale when it changes."""
    files = sorted(p for p in source.iterdir() if p.suffix == ".safetensors" or p.name == "config.json")
    out = {}
    for p in files:
        st = p.stat()
        out[p.name] = _sha256_cached(str(p.resolve()), st.st_size, st.st_mtime_ns)
    return out


def _check_source(source: Path) -> None:
    if not (source / "config.json").is_file() or not any(source.glob("*.safetensors")):
        raise CheckpointError(
            f"source model {source} is missing or incomplete: run `python -m specnb.setup.machine model`"
        )
    if (source / "model.safetensors.index.json").exists():
        raise CheckpointError(f"{source}: sharded checkpoints are not supported (one model.safetensors)")


def _load_state(source: Path) -> dict[str, torch.Tensor]:
    from safetensors.torch import load_file

    return load_file(str(source / WEIGHTS_FILE))


def _copy_side_files(source: Path, out: Path) -> None:
    """Tokenizer, chat template, generation config: everything but weights and config."""
    for p in source.iterdir():
        if p.is_file() and p.suffix != ".safetensors" and p.name not in ("config.json", PROVENANCE_FILE):
            shutil.copy2(p, out / p.name)


def _versions() -> dict[str, str | None]:
    out: dict[str, str | None] = {"python": platform.python_version()}
    for dist in ("specnb", "torch", "safetensors", "compressed-tensors", "transformers"):
        try:
            out[dist] = md.version(dist)
        except md.PackageNotFoundError:
            out[dist] = None
    return out


def _read_provenance(folder: Path) -> dict[str, Any] | None:
    try:
        return json.loads((folder / PROVENANCE_FILE).read_text())
    except (OSError, ValueError):
        return None


def _complete(dest: Path, recipe: dict[str, Any], source_hash: dict[str, str]) -> bool:
    prov = _read_provenance(dest)
    return (
        prov is not None
        and prov.get("recipe") == recipe
        and prov.get("source", {}).get("sha256") == source_hash
        and (dest / "config.json").is_file()
        and (dest / WEIGHTS_FILE).is_file()
    )


@contextlib.contextmanager
def _folder_lock(folder: Path) -> Iterator[None]:
    # A lock on the models folder itself: two `make setup` runs never build the same
    # checkpoint at once, and no lock file is left behind.
    fd = os.open(folder, os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        fcntl.flock(fd, fcntl.LOCK_UN)
        os.close(fd)


def _build(
    source: Path,
    dest: Path,
    recipe: dict[str, Any],
    make: Callable[[Path], dict[str, Any]],
    *,
    force: bool = False,
) -> BuildResult:
    """Build ``dest`` with ``make(tmp)`` unless a matching complete folder is there."""
    source, dest = Path(source), Path(dest)
    _check_source(source)
    if dest.resolve() == source.resolve():
        raise CheckpointError(f"destination {dest} is the source model; choose another folder")
    dest.parent.mkdir(parents=True, exist_ok=True)
    source_hash = fingerprint(source)
    with _folder_lock(dest.parent):
        if not force and _complete(dest, recipe, source_hash):
            return BuildResult(dest, built=False, build_s=None)
        if dest.exists() and _read_provenance(dest) is None:
            raise CheckpointError(
                f"{dest} exists but was not built by specnb (no {PROVENANCE_FILE}); "
                "move it away or choose another destination"
            )
        for stale in dest.parent.glob(f".{dest.name}.partial-*"):
            shutil.rmtree(stale, ignore_errors=True)  # left by a killed build
        t0 = time.monotonic()
        tmp = Path(tempfile.mkdtemp(prefix=f".{dest.name}.partial-", dir=dest.parent))
        umask = os.umask(0)
        os.umask(umask)
        tmp.chmod(0o777 & ~umask)  # mkdtemp makes it private; the models folder is shared
        try:
            stats = make(tmp)
            _copy_side_files(source, tmp)
            build_s = time.monotonic() - t0
            prov = {
                "specnb_checkpoint": PROVENANCE_VERSION,
                "recipe": recipe,
                "source": {"name": source.name, "sha256": source_hash},
                "tensors": stats,
                "versions": _versions(),
                "created_utc": datetime.now(UTC).isoformat(timespec="seconds"),
                "build_s": round(build_s, 2),
            }
            (tmp / PROVENANCE_FILE).write_text(json.dumps(prov, indent=2) + "\n")
            old = None
            if dest.exists():
                old = dest.parent / f".{dest.name}.partial-old-{os.getpid()}"
                dest.rename(old)
            tmp.rename(dest)
            if old is not None:
                shutil.rmtree(old, ignore_errors=True)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
    return BuildResult(dest, built=True, build_s=build_s)


def _save(state: dict[str, torch.Tensor], out: Path) -> None:
    from safetensors.torch import save_file

    save_file({k: v.contiguous() for k, v in state.items()}, str(out / WEIGHTS_FILE), metadata={"format": "pt"})


def _quantized_folder(source: Path, out: Path, kind: str, group_size: int) -> dict[str, Any]:
    state = _load_state(source)
    new: dict[str, torch.Tensor] = {}
    quantized = kept = 0
    for name, t in state.items():
        if is_quantized_weight(name, t):
            prefix = name[: -len(".weight")]
            for k, v in quantize_weight(t, kind, group_size).items():
                new[f"{prefix}.{k}"] = v
            quantized += 1
        else:
            new[name] = t
            kept += 1
    if not quantized:
        raise CheckpointError(f"{source}: no linear weights found to quantize")
    _save(new, out)
    cfg = json.loads((source / "config.json").read_text())
    cfg["quantization_config"] = quantization_config(kind, group_size)
    (out / "config.json").write_text(json.dumps(cfg, indent=2, sort_keys=True) + "\n")
    return {"quantized": quantized, "kept": kept}


# --------------------------------------------------------------------------- builders

def _recipe_quant(kind: str, group_size: int | None) -> dict[str, Any]:
    scheme = weight_scheme(kind, group_size or W4A16_GROUP_SIZE)
    return {
        "revision": RECIPE_REVISION,
        "kind": kind,
        "format": _format(kind),
        "weights": scheme.weights.model_dump(mode="json"),
        "input_activations": (
            scheme.input_activations.model_dump(mode="json") if scheme.input_activations else None
        ),
        "not_quantized": list(_KEEP_SUBSTRINGS),
        "method": "round-to-nearest min-max, no calibration data",
    }


def build_w8a8(source: Path, dest: Path | None = None, *, force: bool = False) -> BuildResult:
    """INT8 W8A8 (per-channel weights, dynamic per-token activations) next to ``source``."""
    source = Path(source)
    dest = Path(dest or source.parent / f"{source.name}-W8A8")
    return _build(
        source, dest, _recipe_quant("w8a8", None),
        lambda out: _quantized_folder(source, out, "w8a8", W4A16_GROUP_SIZE), force=force,
    )


def build_w4a16(
    source: Path, dest: Path | None = None, *, group_size: int = W4A16_GROUP_SIZE, force: bool = False
) -> BuildResult:
    """INT4 W4A16 (``pack-quantized``, one scale per ``group_size`` columns) next to ``source``."""
    source = Path(source)
    dest = Path(dest or source.parent / f"{source.name}-W4A16-G{group_size}")
    recipe = _recipe_quant("w4a16", group_size)
    return _build(
        source, dest, recipe, lambda out: _quantized_folder(source, out, "w4a16", group_size), force=force
    )


def build_noise_draft(
    source: Path,
    sigma: float,
    dest: Path | None = None,
    *,
    seed: int = DEFAULT_SEED,
    force: bool = False,
) -> BuildResult:
    """A draft model: ``source`` with seeded noise of ``sigma`` x std on every 2-D weight."""
    if not (isinstance(sigma, int | float) and math.isfinite(sigma) and sigma >= 0):
        raise CheckpointError(f"sigma must be a finite number >= 0, got {sigma!r}")
    source = Path(source)
    dest = Path(dest or source.parent / noise_name(source.name, sigma))
    recipe = {
        "revision": RECIPE_REVISION,
        "kind": "noise",
        "sigma": float(sigma),
        "seed": int(seed),
        "method": "w + N(0, (sigma * std(w))^2) on every 2-D weight; generator seeded by sha256(seed:name)",
    }

    def make(out: Path) -> dict[str, Any]:
        state = _load_state(source)
        noisy = 0
        for name, t in state.items():
            if t.ndim == 2 and t.is_floating_point():
                state[name] = add_noise(t, sigma, seed, name)
                noisy += 1
        _save(state, out)
        shutil.copy2(source / "config.json", out / "config.json")
        return {"noisy": noisy, "kept": len(state) - noisy}

    return _build(source, dest, recipe, make, force=force)


def build_all(
    source: Path,
    *,
    sigmas: tuple[float, ...] | list[float] = DEFAULT_SIGMAS,
    seed: int = DEFAULT_SEED,
    force: bool = False,
) -> list[BuildResult]:
    """Every checkpoint the CPU studies use: W8A8, W4A16-G64 and one noise draft per sigma."""
    results = [build_w8a8(source, force=force), build_w4a16(source, force=force)]
    results += [build_noise_draft(source, s, seed=seed, force=force) for s in sigmas]
    return results
