"""Hardware for the step-cost model: what one serving replica moves and computes per second.

Presets live in ``data/hardware.toml``: GPU entries are spec-sheet peaks (a server never
reaches them), a ``measured`` entry is calibrated from ledgers on this machine and names the
record of how (:func:`calibration_record`). Every key carries its unit in its name.
"""

from __future__ import annotations

import json
import math
import tomllib
from dataclasses import dataclass, field, replace
from importlib import resources
from pathlib import Path
from typing import Any

from specnb.errors import SpecnbError, read_toml

__all__ = ["StepCostError", "PresetError", "Hardware", "HARDWARE_FIELDS", "COMPUTE_DTYPES", "hardware_presets",
           "load_hardware", "preset_kind", "calibration_record", "positive"]

_GIB = 2**30
COMPUTE_DTYPES = ("bf16", "fp8", "fp4")

class StepCostError(SpecnbError):
    """Bad input to the step-cost model; one line for the user."""


class PresetError(StepCostError):
    """An unknown or malformed hardware preset."""


def positive(name: str, value: float, *, zero_ok: bool = False) -> None:
    if value is None or not math.isfinite(value) or value < 0 or (value == 0 and not zero_ok):
        raise StepCostError(f"{name} must be {'>= 0' if zero_ok else '> 0'}, got {value}")


@dataclass(frozen=True)
class Hardware:
    """What one serving replica can move and compute per second, plus its fixed step cost."""

    name: str
    bandwidth_bytes_s: float  # effective memory bandwidth
    flop_s: float  # effective dense BF16 FLOP/s
    step_overhead_s: float = 0.0  # fixed cost per engine step (scheduler, launches, sampling)
    memory_bytes: float | None = None  # device memory; None = do not check capacity
    source: str = ""
    # dense tensor peaks by precision ("bf16", "fp8", "fp4"); flop_s is the one in use
    peaks_flop_s: dict[str, float] = field(default_factory=dict)
    compute_dtype: str = "bf16"

    def __post_init__(self) -> None:
        positive("bandwidth_bytes_s", self.bandwidth_bytes_s)
        positive("flop_s", self.flop_s)
        positive("step_overhead_s", self.step_overhead_s, zero_ok=True)
        if self.memory_bytes is not None:
            positive("memory_bytes", self.memory_bytes)

    def for_dtype(self, dtype: str) -> Hardware:
        """The same hardware computing at its ``dtype`` peak: ``"fp8"`` for an FP8 W8A8 target,
        ``"fp4"`` for NVFP4 W4A4 (a weight-only FP4 target still computes in ``"bf16"``)."""
        if dtype not in COMPUTE_DTYPES:
            raise StepCostError(f"compute dtype {dtype!r}: use one of {', '.join(COMPUTE_DTYPES)}")
        if dtype == self.compute_dtype:
            return self
        if dtype not in self.peaks_flop_s:
            raise PresetError(f"preset {self.name!r} has no dense_{dtype}_tflop_s"
                              + (" (no FP4 tensor cores: NVFP4 runs there as weight-only FP4; use bf16)"
                                 if dtype == "fp4" else ""))
        return replace(self, flop_s=self.peaks_flop_s[dtype], compute_dtype=dtype)


HARDWARE_FIELDS: dict[str, str] = {
    "description": "what the entry is",
    "kind": "'spec-sheet' (vendor peak numbers) or 'measured' (calibrated here)",
    "memory_bandwidth_tb_s": "memory bandwidth, TB/s (10^12 bytes per second)",
    "dense_bf16_tflop_s": "dense (no 2:4 sparsity) BF16 tensor FLOP/s, in 10^12",
    "dense_fp8_tflop_s": "dense FP8 tensor FLOP/s, in 10^12",
    "dense_fp4_tflop_s": "dense FP4 tensor FLOP/s, in 10^12 (absent: no FP4 tensor cores)",
    "memory_gib": "device memory, GiB",
    "step_overhead_ms": "fixed cost per engine step, ms",
    "source": "where the numbers come from",
    "calibration": "file next to hardware.toml that records how a measured entry was derived",
}
_REQUIRED = ("description", "kind", "memory_bandwidth_tb_s", "dense_bf16_tflop_s", "source")


def _data_file(name: str) -> Path:
    return Path(str(resources.files("specnb.models") / "data" / name))


def _hardware(name: str, entry: Any, where: str) -> Hardware:
    if not isinstance(entry, dict):
        raise PresetError(f"{where}: preset {name!r} is not a table")
    unknown = sorted(set(entry) - set(HARDWARE_FIELDS))
    if unknown:
        raise PresetError(f"{where}: preset {name!r} has unknown key(s) {unknown} "
                          f"(known, units in the names: {sorted(HARDWARE_FIELDS)})")
    missing = [k for k in _REQUIRED if k not in entry]
    if missing:
        raise PresetError(f"{where}: preset {name!r} lacks {missing}")
    if entry["kind"] not in ("spec-sheet", "measured"):
        raise PresetError(f"{where}: preset {name!r} kind must be 'spec-sheet' or 'measured', got {entry['kind']!r}")
    nums = ("memory_bandwidth_tb_s", "dense_bf16_tflop_s", "dense_fp8_tflop_s", "dense_fp4_tflop_s", "memory_gib",
            "step_overhead_ms")
    for key in nums:
        if key in entry and (isinstance(entry[key], bool) or not isinstance(entry[key], (int, float))):
            raise PresetError(f"{where}: preset {name!r} {key} must be a number, got {entry[key]!r}")
    try:
        return Hardware(
            name=name,
            bandwidth_bytes_s=float(entry["memory_bandwidth_tb_s"]) * 1e12,
            flop_s=float(entry["dense_bf16_tflop_s"]) * 1e12,
            step_overhead_s=float(entry.get("step_overhead_ms", 0.0)) / 1e3,
            memory_bytes=float(entry["memory_gib"]) * _GIB if "memory_gib" in entry else None,
            source=str(entry["source"]),
            peaks_flop_s={d: float(entry[f"dense_{d}_tflop_s"]) * 1e12 for d in COMPUTE_DTYPES
                          if f"dense_{d}_tflop_s" in entry},
        )
    except StepCostError as exc:
        raise PresetError(f"{where}: preset {name!r}: {exc}") from None


def hardware_presets(path: Path | str | None = None) -> dict[str, Hardware]:
    """Every preset in ``data/hardware.toml`` (or ``path``), validated, by name."""
    path = Path(path) if path is not None else _data_file("hardware.toml")
    data = read_toml(path, PresetError)
    return {name: _hardware(name, entry, path.name) for name, entry in data.items()}


def load_hardware(name: str, path: Path | str | None = None) -> Hardware:
    """One preset by name; an unknown name is refused with the list of known ones."""
    presets = hardware_presets(path)
    if name not in presets:
        raise PresetError(f"unknown hardware preset {name!r} (known: {', '.join(sorted(presets))})")
    return presets[name]


def preset_kind(name: str, path: Path | str | None = None) -> str:
    """A preset's ``kind``: ``spec-sheet`` (vendor peaks) or ``measured`` (calibrated here)."""
    path = Path(path) if path is not None else _data_file("hardware.toml")
    load_hardware(name, path)  # validated; an unknown name is the one-line error
    return str(tomllib.loads(path.read_text())[name]["kind"])


def calibration_record(name: str, path: Path | str | None = None) -> dict[str, Any]:
    """The JSON a measured preset names under ``calibration``: its ledgers, target and fit."""
    path = Path(path) if path is not None else _data_file("hardware.toml")
    entry = tomllib.loads(path.read_text()).get(name)
    if entry is None:
        load_hardware(name, path)  # raises the one-line unknown-preset error
    if "calibration" not in entry:
        raise PresetError(f"preset {name!r} is a {entry.get('kind')} entry with no calibration record")
    return json.loads((path.parent / entry["calibration"]).read_text())
