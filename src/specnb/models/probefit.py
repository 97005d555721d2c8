"""The step-cost model's hardware terms from a step-time probe ledger (``specnb probe``).

A probe ledger times one engine step of a decoder shape on one device for a grid of batch size
b, new tokens per sequence q and cached length L (:mod:`specnb.probe`). The step-cost model
(:mod:`specnb.models.stepcost`) prices the same step as

    T(b, q, L) = fixed + max((weight bytes + b * KV bytes read) / bandwidth, 2 * params * b * q / FLOP/s)

(a local layer of a sliding-window model reads at most its window of KV). :func:`fit_probe` fits
the three hardware terms, fixed cost, effective bandwidth and effective FLOP/s, to the probe's
medians (least squares on log step time, :mod:`specnb.models.optimize`) and returns them as a
:class:`~specnb.models.hardware.Hardware` that says where it came from; the calculator uses it in
place of a preset's spec-sheet peaks (its ``probe`` parameter).

What it is not: a probe's step is torch's, not vLLM's (docs/gpu.md, "the step-time probe", says
how far apart they were on this CPU), and a mixture of experts is not in the step-cost model, so
its ledgers are refused here.
"""

from __future__ import annotations

import itertools
import json
import math
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np

from specnb.models.hardware import Hardware, StepCostError
from specnb.models.optimize import fit_least_squares, uncertainty_factors
from specnb.probe.run import KIND, probe_ledgers

__all__ = ["ProbeFit", "read_probe", "probe_arrays", "probe_step_s", "fit_probe", "answer_basis", "TERMS"]

TERMS = ("bandwidth_bytes_s", "flop_s", "step_overhead_s")
_BYTES = {"bfloat16": 2, "float16": 2, "float32": 4}


def read_probe(path: Path | str) -> tuple[dict[str, Any], Path]:
    """A probe ledger from its file, or the one ledger of a probe run's folder; one line if not."""
    path = Path(path)
    if path.is_dir():
        found = probe_ledgers(path)
        if len(found) != 1:
            raise StepCostError(f"{path}: {len(found)} probe ledgers in the folder; name one file")
        return found[0][1], found[0][0]
    try:
        doc = json.loads(path.read_text())
    except OSError as exc:
        raise StepCostError(f"{path}: {exc.strerror}") from None
    except ValueError:
        raise StepCostError(f"{path}: not JSON") from None
    if not isinstance(doc, dict) or doc.get("kind") != KIND:
        raise StepCostError(f"{path}: not a step-time probe ledger (specnb probe writes them)")
    return doc, path


def probe_arrays(doc: dict[str, Any]) -> dict[str, np.ndarray]:
    """Per cell: b, q, KV bytes read per sequence, and the measured median step (s)."""
    shape = doc["shape"]
    if shape.get("num_experts"):
        raise StepCostError(f"{shape['name']}: a mixture of experts is not in the step-cost model; "
                            "fit the hardware from a dense shape's probe ledger")
    if doc["dtype"] not in _BYTES:
        raise StepCostError(f"probe dtype {doc['dtype']!r}: one of {sorted(_BYTES)} is needed")
    width = _BYTES[doc["dtype"]]
    per_layer = 2 * shape["num_key_value_heads"] * shape["head_dim"] * width  # K and V, one token, one layer
    layers = shape["num_hidden_layers"]
    window, pattern = shape.get("sliding_window"), shape.get("sliding_window_pattern")
    # local layers as the probe runs them (specnb.probe.shapes.Shape.is_local): every pattern-th is global
    local = sum(1 for i in range(layers) if (i + 1) % pattern != 0) if window and pattern else 0
    cells = [c for c in doc.get("cells", []) if c.get("median_ms")]
    if not cells:
        raise StepCostError(f"{shape['name']}: the probe ledger has no measured cell")
    b = np.array([c["b"] for c in cells], float)
    q = np.array([c["q"] for c in cells], float)
    seen = np.array([c["L"] + c["q"] for c in cells], float)
    kv = per_layer * ((layers - local) * seen + local * (np.minimum(seen, window) if local else 0.0))
    return {"b": b, "q": q, "kv_bytes": kv, "step_s": np.array([c["median_ms"] for c in cells]) / 1e3,
            "L": np.array([c["L"] for c in cells], float)}


def probe_step_s(hw: Hardware, weight_bytes: float, params: float, b: np.ndarray, q: np.ndarray,
                 kv_bytes: np.ndarray) -> np.ndarray:
    """The step-cost model's time of a probe cell (no drafter, no prefill: the step as measured)."""
    memory = (weight_bytes + b * kv_bytes) / hw.bandwidth_bytes_s
    compute = 2.0 * params * b * q / hw.flop_s
    return hw.step_overhead_s + np.maximum(memory, compute)


@dataclass(frozen=True)
class ProbeFit:
    """The fitted hardware, how well it reproduces the probe's cells, and each term's one-sigma
    multiplicative uncertainty (``inf``: these cells do not determine it)."""

    hardware: Hardware
    n: int
    rms_log_error: float
    worst_factor: float
    uncertainty: dict[str, float]
    path: str

    def unidentified(self, factor: float = 3.0) -> list[str]:
        return sorted(k for k, v in self.uncertainty.items() if not v <= factor)

    def summary(self) -> str:
        hw = self.hardware
        unc = ", ".join(f"{k} x/{v:.3g}" if math.isfinite(v) else f"{k} undetermined"
                        for k, v in sorted(self.uncertainty.items()))
        return (f"{hw.bandwidth_bytes_s / 1e9:.4g} GB/s, {hw.flop_s / 1e12:.4g} TFLOP/s, "
                f"{1e3 * hw.step_overhead_s:.3g} ms fixed per step, fitted to {self.n} probe cells "
                f"(rms log error {self.rms_log_error:.3f}, worst cell off by x{self.worst_factor:.2f}; {unc})")


def fit_probe(source: Path | str | dict[str, Any], *, like: Hardware | None = None) -> ProbeFit:
    """Fit fixed cost, effective bandwidth and FLOP/s to a probe ledger (a file, a run folder with
    one ledger, or the ledger's dict). ``like``: a preset of the same device; its memory and its
    peaks' ratios carry over (FLOP/s at fp8 or fp4 = the fitted value times the preset's
    fp8 / bf16 peak ratio), so ``for_dtype`` still works on the result."""
    doc, path = (source, "<dict>") if isinstance(source, dict) else read_probe(source)
    arr = probe_arrays(doc)
    width = _BYTES[doc["dtype"]]
    params = float(doc["params"])
    weight_bytes = params * width
    if arr["b"].size < len(TERMS) + 1:
        raise StepCostError(f"{arr['b'].size} probe cell(s) cannot fit {len(TERMS)} terms; probe a wider grid")

    def hardware(x: np.ndarray) -> Hardware:
        x = np.clip(x, -60.0, 80.0)
        bw, flop, fixed = (float(np.exp(v)) for v in x)
        return Hardware("probe", bw, flop, max(fixed, 1e-9))

    def res(x: np.ndarray) -> np.ndarray:
        return np.log(probe_step_s(hardware(x), weight_bytes, params, arr["b"], arr["q"], arr["kv_bytes"])) \
            - np.log(arr["step_s"])

    t = arr["step_s"]
    tokens = arr["b"] * arr["q"]
    guess = np.log([weight_bytes / (0.5 * t.min()), 2.0 * params * tokens.max() / t.max(), 0.3 * t.min()])
    starts = [guess + np.log(10.0) * np.array(s) for s in itertools.product((-1.0, 0.0, 1.0), repeat=3)]
    x = fit_least_squares(res, starts)
    r = res(x)
    fitted = hardware(x)
    device = doc.get("device") or {}
    when = str(doc.get("started_at", ""))[:10]
    source_line = (f"step-time probe {path} ({device.get('name', '?')}, {doc['shape']['name']} {doc['dtype']}, "
                   f"{arr['b'].size} cells, {when})")
    peaks = {"bf16": fitted.flop_s}
    memory = device.get("memory_bytes")
    name = f"probe:{device.get('name', '?')}"
    if like is not None:
        base = like.peaks_flop_s.get("bf16") or like.flop_s
        peaks = {d: fitted.flop_s * p / base for d, p in like.peaks_flop_s.items()} or peaks
        memory = like.memory_bytes or memory
        name = f"{like.name} (probe)"
    hw = replace(fitted, name=name, source=source_line, peaks_flop_s=peaks, compute_dtype="bf16",
                 memory_bytes=float(memory) if memory else None)
    return ProbeFit(hw, int(r.size), float(np.sqrt(np.mean(r**2))), float(np.exp(np.max(np.abs(r)))),
                    uncertainty_factors(res, x, TERMS), str(path))


def answer_basis(preset_kind: str, probe: ProbeFit | None, gpu_costs: str | None) -> str:
    """Where a calculator answer's step costs come from, in one phrase: the hardware terms (a probe
    of the device, a preset measured here, or a spec sheet) and the speculative costs (the
    published step model, a named measurement, or the drafter costs as given)."""
    if probe is not None:
        hw = f"hardware fitted to a step-time probe of this device ({probe.hardware.source})"
    elif preset_kind == "measured":
        hw = "hardware from a preset measured here"
    else:
        hw = "hardware from a spec sheet's peaks (no server reaches them)"
    if gpu_costs == "published-fit":
        costs = "speculative costs from the published step model (fitted to ledgers/published)"
    elif gpu_costs:
        costs = f"speculative costs from {gpu_costs}"
    else:
        costs = "speculative costs as drafter_*_ms give them"
    return f"{hw}; {costs}"
