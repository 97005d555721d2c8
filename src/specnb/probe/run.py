"""``specnb probe`` / ``python -m specnb.probe``: time one engine step of a decoder shape over a
grid of batch sizes ``b``, new tokens per sequence ``q`` and cached lengths ``L``, within a time
budget, and write one ledger per shape.

Each cell is the median of repeated steps after a warm-up, with its 10th and 90th percentiles; on
a GPU the step is captured once as a CUDA graph and replayed (as an engine runs decode), eagerly
where capture fails (the ledger says which). Cells run in priority order: decode (q = 1) and the
verification widths of K = 3, 4 and 7 (q = 4, 5, 8) at every b and L first, then the other q; a
cell whose cache and activations would not fit in the device's free memory is skipped, and so is
every cell left when the budget is spent: the ledger lists each skipped cell and why.

A ledger is written after every cell (``<shape>.json``, ``"ended": "running"`` until the shape is
done), so a run that dies keeps what it measured.

torch and the standard library only: on a GPU machine it runs with that machine's python and torch
(``PYTHONPATH=src python3 -m specnb.probe --device cuda``), nothing from this repository's venv.
"""

from __future__ import annotations

import argparse
import functools
import gc
import json
import os
import platform
import re
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from specnb.probe.shapes import ProbeError, Shape, load_shape, shape_names

__all__ = ["Cell", "plan", "main", "probe_shape", "SCHEMA", "DEFAULT_BUDGET_S"]

SCHEMA = "specnb.probe.v1"
KIND = "probe"
DEFAULT_BATCHES = (1, 2, 4, 8, 16, 32, 64, 128, 256)
DEFAULT_QUERIES = (1, 2, 3, 4, 5, 6, 7, 8)
DEFAULT_LENGTHS = (1024, 8192)
PRIORITY_Q = (1, 4, 5, 8)  # decode, and verifying K = 3, 4, 7 drafts
DEFAULT_BUDGET_S = 360.0
GPU_SHAPES = ("llama-3.1-8b", "qwen3-8b", "qwen3-30b-a3b", "gemma-3-27b", "smollm2-135m")
CPU_SHAPES = ("smollm2-135m",)
# a weight or cache buffer at least this large streams from memory whatever is shared: sharing it
# between layers changes a step's time by noise only (far above any device's last-level cache)
SHARE_MIN_BYTES = 256 * 2**20
DTYPES = {"bf16": "bfloat16", "fp16": "float16", "fp32": "float32"}


@dataclass(frozen=True)
class Cell:
    b: int
    q: int
    L: int

    @property
    def tokens(self) -> int:
        return self.b * self.q


def plan(batches: Sequence[int], queries: Sequence[int], lengths: Sequence[int]) -> list[Cell]:
    """Every cell once: the priority widths (decode, K = 3, 4, 7) at every L and b first."""
    first = [q for q in queries if q in PRIORITY_Q]
    rest = [q for q in queries if q not in PRIORITY_Q]
    return [Cell(b, q, L) for qs in (first, rest) for L in lengths for b in batches for q in qs]


def _ints(text: str, what: str) -> tuple[int, ...]:
    try:
        vals = tuple(int(x) for x in text.split(",") if x.strip())
    except ValueError:
        raise ProbeError(f"--{what} takes comma-separated positive integers, got {text!r}") from None
    if not vals or any(v < 1 for v in vals):
        raise ProbeError(f"--{what} takes comma-separated positive integers, got {text!r}")
    return tuple(sorted(set(vals)))


def _cpu_has_bf16() -> bool:
    try:
        flags = Path("/proc/cpuinfo").read_text()
    except OSError:
        return False
    return bool(re.search(r"\b(avx512_bf16|amx_bf16)\b", flags))


@functools.cache
def _nvidia_driver() -> str | None:
    """The driver's version from nvidia-smi, asked once per process (5 s at most)."""
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=5)
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip().splitlines()[0] if out.returncode == 0 and out.stdout.strip() else None


def device_info(torch, device) -> dict:
    info = {"kind": device.type, "torch": torch.__version__, "python": platform.python_version()}
    if device.type == "cuda":
        props = torch.cuda.get_device_properties(device)
        info.update(name=props.name, capability=f"{props.major}.{props.minor}", memory_bytes=props.total_memory,
                    multiprocessors=props.multi_processor_count, cuda=torch.version.cuda, driver=_nvidia_driver())
    else:
        name = None
        try:
            m = re.search(r"^model name\s*:\s*(.+)$", Path("/proc/cpuinfo").read_text(), re.M)
            name = m.group(1).strip() if m else None
        except OSError:
            pass
        info.update(name=name or platform.processor() or "cpu", threads=torch.get_num_threads(),
                    memory_bytes=os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"))
    return info


def free_bytes(torch, device) -> int:
    if device.type == "cuda":
        return int(torch.cuda.mem_get_info(device)[0])
    return int(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_AVPHYS_PAGES"))


def slug(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-") or "device"


def sdpa_backend(torch, device, dtype, shape: Shape | None = None,
                  band: bool = False) -> tuple[object | None, str]:
    """The first scaled-dot-product attention backend that runs every attention call of ``shape``'s
    step on this device and dtype (its heads and head size; grouped-query; no mask, the lower-right
    causal mask, and with ``band`` a dense boolean mask): (the backend, its name)."""
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel
    from torch.nn.attention.bias import causal_lower_right

    hq, hkv, d = (shape.num_attention_heads, shape.num_key_value_heads, shape.head_dim) if shape else (4, 2, 64)
    qh = torch.zeros(1, hq, 3, d, device=device, dtype=dtype)
    kv = torch.zeros(1, hkv, 8, d, device=device, dtype=dtype)
    gqa = hq != hkv
    dense = torch.ones(3, 8, device=device, dtype=torch.bool).tril(5)
    for backend in (SDPBackend.FLASH_ATTENTION, SDPBackend.EFFICIENT_ATTENTION, SDPBackend.CUDNN_ATTENTION,
                    SDPBackend.MATH):
        try:
            with sdpa_kernel([backend]):
                F.scaled_dot_product_attention(qh, kv, kv, attn_mask=causal_lower_right(3, 8), enable_gqa=gqa)
                F.scaled_dot_product_attention(qh[:, :, :1], kv, kv, enable_gqa=gqa)
                if band:
                    F.scaled_dot_product_attention(qh, kv, kv, attn_mask=dense, enable_gqa=gqa)
            return backend, backend.name.lower()
        except Exception:  # noqa: BLE001 - this backend refuses the shape: try the next
            continue
    return None, "default"


def _timer(torch, device) -> Callable[[Callable[[], object]], float]:
    """Milliseconds of one call: CUDA events on a GPU, the monotonic clock elsewhere."""
    if device.type == "cuda":
        def cuda_ms(fn):
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            fn()
            end.record()
            end.synchronize()
            return float(start.elapsed_time(end))
        return cuda_ms

    def cpu_ms(fn):
        t0 = time.perf_counter()
        fn()
        return (time.perf_counter() - t0) * 1e3
    return cpu_ms


def repeat_ms(timer, fn, *, warmup: int = 2, min_repeats: int = 5, max_repeats: int = 50,
              target_ms: float = 300.0) -> list[float]:
    """At least ``min_repeats`` timed calls after ``warmup`` untimed ones, more while the total is
    under ``target_ms``, at most ``max_repeats``."""
    for _ in range(warmup):
        timer(fn)
    times: list[float] = []
    while len(times) < min_repeats or (sum(times) < target_ms and len(times) < max_repeats):
        times.append(timer(fn))
    return times


def _pct(vals: list[float], p: float) -> float:
    s = sorted(vals)
    i = (len(s) - 1) * p
    lo = int(i)
    return s[lo] + (s[min(lo + 1, len(s) - 1)] - s[lo]) * (i - lo)


def _capture(torch, step: Callable[[], object]) -> tuple[Callable[[], object] | None, str | None]:
    """The step captured as a CUDA graph (its replay), or None and why capture failed (the step
    then runs eagerly; an out-of-memory is not a capture failure and propagates)."""
    try:
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for _ in range(2):
                step()
        torch.cuda.current_stream().wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            step()
        return graph.replay, None
    except torch.cuda.OutOfMemoryError:
        torch.cuda.set_stream(torch.cuda.default_stream())
        raise
    except Exception as exc:  # noqa: BLE001 - a step that cannot be captured runs eagerly
        torch.cuda.set_stream(torch.cuda.default_stream())  # a failed capture may leave its stream current
        torch.cuda.synchronize()
        return None, " ".join(str(exc).split())[:200]


@dataclass
class _Ledger:
    path: Path
    doc: dict

    def write(self) -> None:
        tmp = self.path.with_suffix(".json.tmp")
        tmp.write_text(json.dumps(self.doc, indent=1) + "\n")
        tmp.replace(self.path)


def probe_ledgers(folder: Path | str) -> list[tuple[Path, dict]]:
    """The probe ledgers of a run's folder (its other JSON files, such as figures' sidecars, left
    out), by file name."""
    found = []
    for path in sorted(Path(folder).glob("*.json")):
        try:
            doc = json.loads(path.read_text())
        except (OSError, ValueError):
            continue
        if isinstance(doc, dict) and doc.get("kind") == KIND:
            found.append((path, doc))
    return found


def weights_plan(shape: Shape, nbytes: int, free: int) -> bool:
    """Whether the layers must share one layer's weights to fit in ``free`` bytes (a probe ledger
    says so); a ProbeError where even that does not fit, or where the layers are too small to share
    without changing the step's time."""
    from specnb.probe.model import ProbeModel

    if ProbeModel.nbytes(shape, nbytes) <= 0.6 * free:
        return False
    one = ProbeModel.nbytes(shape, nbytes, shared_layers=True)
    if one > 0.6 * free:
        raise ProbeError(f"{shape.name}: one layer and the embeddings ({one / 2**30:.1f} GiB) do not fit in "
                         f"{free / 2**30:.1f} GiB free")
    layer_bytes = shape.layer_params() * nbytes
    if layer_bytes < SHARE_MIN_BYTES:
        raise ProbeError(f"{shape.name}: its weights ({ProbeModel.nbytes(shape, nbytes) / 2**30:.1f} GiB) do not fit "
                         f"in {free / 2**30:.1f} GiB free, and its layers ({layer_bytes / 2**20:.0f} MiB) are too small "
                         "to share without changing the step's time")
    return True


def _probe_doc(torch, model, device, dtype_name: str, nbytes: int, *, backend_name: str, use_graphs: bool,
               budget_s: float, command: str, local: bool) -> dict:
    """A shape's ledger before its first cell: the device, the software, how the step is run."""
    from specnb.probe.model import ProbeModel

    shape = model.shape
    return {
        "schema": SCHEMA, "kind": KIND, "shape": shape.to_dict(), "params": shape.params(),
        "device": device_info(torch, device), "dtype": DTYPES[dtype_name], "attention": f"sdpa:{backend_name}",
        "moe_kernel": model.moe_kernel, "graphs": use_graphs, "weights_shared": model.shared_layers,
        "weights_bytes": ProbeModel.nbytes(shape, nbytes, model.shared_layers), "budget_s": budget_s,
        "started_at": datetime.now(UTC).isoformat(timespec="seconds"), "command": command, "ended": "running",
        "cells": [], "skipped": [],
        "method": "median of repeated steps after 2 warm-up steps; random weights; contiguous KV; "
                  "logits for every new token",
        "window_mask": None if not local else ("exact band" if model.exact_window else
                                               "lower-right causal from the first new token's window "
                                               "(up to q - 1 keys more per token)"),
    }


def probe_shape(shape: Shape, *, device_name: str, dtype_name: str, cells: Iterable[Cell], budget_s: float,
                out: Path, graphs: bool = True, echo: Callable[[str], None] = print,
                command: str = "", repeats: tuple[int, int] = (5, 50)) -> dict:
    """Time every cell that fits, within ``budget_s``; the ledger's document (also written to
    ``out/<shape>.json`` after every cell)."""
    import torch

    from specnb.probe.model import ProbeModel

    device = torch.device(device_name)
    dtype = getattr(torch, DTYPES[dtype_name])
    nbytes = torch.tensor([], dtype=dtype).element_size()
    t_start = time.monotonic()
    if device.type == "cuda":  # the previous shape's weights back to the device, its peak forgotten
        gc.collect()
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats(device)
    shared_layers = weights_plan(shape, nbytes, free_bytes(torch, device))
    model = ProbeModel(shape, device, dtype, shared_layers=shared_layers)
    local = any(shape.is_local(i) for i in range(shape.num_hidden_layers))
    backend, backend_name = sdpa_backend(torch, device, dtype, shape, band=local and model.exact_window)
    use_graphs = graphs and device.type == "cuda" and model.capturable
    timer = _timer(torch, device)
    cells = list(cells)
    doc = _probe_doc(torch, model, device, dtype_name, nbytes, backend_name=backend_name, use_graphs=use_graphs,
                     budget_s=budget_s, command=command, local=local)
    out.mkdir(parents=True, exist_ok=True)
    ledger = _Ledger(out / f"{slug(shape.name)}.json", doc)
    ledger.write()
    echo(f"{shape.name}: {shape.params() / 1e9:.2f} B parameters, {DTYPES[dtype_name]} on {doc['device']['name']}"
         f"{' (layers share weights)' if shared_layers else ''}; attention {backend_name}; "
         f"{'CUDA graphs' if use_graphs else 'eager'}; {len(cells)} cells within {budget_s:.0f} s")
    from contextlib import nullcontext

    from torch.nn.attention import sdpa_kernel

    ctx = sdpa_kernel([backend]) if backend is not None else nullcontext()
    try:
        with ctx, torch.inference_mode():
            for i, cell in enumerate(cells):
                try:
                    why = _measure_cell(torch, model, cell, doc, device, dtype, nbytes, timer, use_graphs, t_start,
                                        budget_s, repeats)
                except Exception as exc:  # noqa: BLE001 - one cell's failure is recorded; the grid goes on
                    oom = device.type == "cuda" and isinstance(exc, torch.cuda.OutOfMemoryError)
                    why = "out of memory" if oom else f"failed: {type(exc).__name__}: {' '.join(str(exc).split())[:200]}"
                    echo(f"  [{i + 1}/{len(cells)}] b={cell.b:<4} q={cell.q} L={cell.L:<6} {why}")
                if device.type == "cuda":  # the cell's cache and graph are gone: give their memory back
                    gc.collect()
                    torch.cuda.synchronize(device)
                    torch.cuda.empty_cache()
                if why:
                    doc["skipped"].append({"b": cell.b, "q": cell.q, "L": cell.L, "why": why})
                else:
                    c = doc["cells"][-1]
                    echo(f"  [{i + 1}/{len(cells)}] b={cell.b:<4} q={cell.q} L={cell.L:<6} {c['median_ms']:9.3f} ms "
                         f"(p10 {c['p10_ms']:.3f}, p90 {c['p90_ms']:.3f}, {c['repeats']} steps"
                         f"{', eager' if use_graphs and not c['graph'] else ''})")
                ledger.write()
        doc["ended"] = "complete"
    except KeyboardInterrupt:
        doc["ended"] = "interrupted"
        raise
    except Exception as exc:
        doc["ended"] = f"failed: {type(exc).__name__}: {' '.join(str(exc).split())[:200]}"
        raise
    finally:
        doc["elapsed_s"] = round(time.monotonic() - t_start, 2)
        if device.type == "cuda":
            doc["device"]["peak_memory_bytes"] = int(torch.cuda.max_memory_allocated(device))
        ledger.write()
    over = sum(1 for s in doc["skipped"] if s["why"].startswith("over the time budget"))
    echo(f"{shape.name}: {len(doc['cells'])} cells measured, {len(doc['skipped'])} skipped"
         f"{f' ({over} over the time budget)' if over else ''} -> {ledger.path}")
    return doc


def _measure_cell(torch, model, cell: Cell, doc: dict, device, dtype, nbytes: int, timer, use_graphs: bool,
                  t_start: float, budget_s: float, repeats: tuple[int, int]) -> str | None:
    """Time one cell into ``doc["cells"]``; the reason it was skipped, or None."""
    from specnb.probe.model import KvCache

    if time.monotonic() - t_start > budget_s:
        return f"over the time budget ({budget_s:.0f} s)"
    shape = model.shape
    capacity = cell.L + cell.q
    free = free_bytes(torch, device)
    act = cell.tokens * (shape.vocab_size * 4 + 4 * max(shape.intermediate_size, shape.hidden_size) * nbytes)
    kv_shared = KvCache.nbytes(shape, cell.b, capacity, nbytes) + act > 0.8 * free
    if kv_shared:
        one = KvCache.nbytes(shape, cell.b, capacity, nbytes, shared=True)
        if one < SHARE_MIN_BYTES or one + act > 0.8 * free:
            return (f"the cache ({KvCache.nbytes(shape, cell.b, capacity, nbytes) / 2**30:.1f} GiB) and activations "
                    f"do not fit in {free / 2**30:.1f} GiB free")
    cache = KvCache(shape, cell.b, capacity, device, dtype, shared=kv_shared)
    tokens = torch.randint(0, shape.vocab_size, (cell.b, cell.q), device=device)

    def step():
        return model.step(tokens, cache, cell.L)

    fn, capture_error = _capture(torch, step) if use_graphs else (None, None)
    times = repeat_ms(timer, fn or step, min_repeats=repeats[0], max_repeats=repeats[1])
    row = {"b": cell.b, "q": cell.q, "L": cell.L, "tokens": cell.tokens,
           "median_ms": round(statistics.median(times), 4), "p10_ms": round(_pct(times, 0.1), 4),
           "p90_ms": round(_pct(times, 0.9), 4), "repeats": len(times), "graph": fn is not None, "kv_shared": kv_shared}
    if capture_error:
        row["capture_error"] = capture_error
    doc["cells"].append(row)
    return None


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="specnb probe", description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    add_cli_args(p)
    return p


def add_cli_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--shape", action="append", default=None,
                   help=f"a shape's name ({', '.join(shape_names())}) or a config.json path; repeat for several "
                        f"(default: {', '.join(GPU_SHAPES)} on a GPU, {', '.join(CPU_SHAPES)} on CPU)")
    p.add_argument("--device", default="auto", help="cuda, cuda:N, cpu, or auto (cuda where there is one)")
    p.add_argument("--dtype", choices=sorted(DTYPES), default=None,
                   help="weights, cache and activations (default bf16 on a GPU and on a CPU with BF16, else fp32)")
    p.add_argument("--batches", default=",".join(map(str, DEFAULT_BATCHES)), help="sequences per step, b")
    p.add_argument("--queries", default=",".join(map(str, DEFAULT_QUERIES)),
                   help="new tokens per sequence, q (1 decodes, K+1 verifies K drafts)")
    p.add_argument("--lengths", default=",".join(map(str, DEFAULT_LENGTHS)), help="cached tokens per sequence, L")
    p.add_argument("--budget-s", type=float, default=DEFAULT_BUDGET_S,
                   help="seconds for the whole run, shared among the shapes (what is left over passes on)")
    p.add_argument("--no-graphs", action="store_true", help="time eager steps on a GPU too")
    p.add_argument("--repeats", default="5,50", help="min,max timed steps per cell (default 5,50)")
    p.add_argument("--out", type=Path, default=None,
                   help="the run's folder (default ledgers/probe/<device>/<UTC time>/)")


def _device(torch, name: str):
    if name == "auto":
        name = "cuda" if torch.cuda.is_available() else "cpu"
    try:
        device = torch.device(name)
    except RuntimeError:
        raise ProbeError(f"--device {name!r}: cuda, cuda:N, cpu or auto") from None
    if device.type == "cuda" and not torch.cuda.is_available():
        raise ProbeError(f"--device {name}: torch sees no CUDA device here (torch {torch.__version__})")
    if device.type not in ("cuda", "cpu"):
        raise ProbeError(f"--device {name}: cuda, cuda:N, cpu or auto")
    return device


def run(a: argparse.Namespace, echo: Callable[[str], None] = print,
        out_folder: Callable[[Path], None] | None = None) -> int:
    """The probe as its arguments ask; ``out_folder`` is told the run's folder before anything is
    measured."""
    batches, queries, lengths = _ints(a.batches, "batches"), _ints(a.queries, "queries"), _ints(a.lengths, "lengths")
    reps = _ints(a.repeats, "repeats")
    if len(reps) != 2 and len(reps) != 1:
        raise ProbeError(f"--repeats takes min,max, got {a.repeats!r}")
    repeats = (reps[0], reps[-1])
    if not a.budget_s > 0:
        raise ProbeError(f"--budget-s must be > 0, got {a.budget_s}")
    import torch

    device = _device(torch, a.device)
    names = a.shape or list(GPU_SHAPES if device.type == "cuda" else CPU_SHAPES)
    shapes = [load_shape(n) for n in names]  # every name checked before anything is measured
    dtype = a.dtype or ("bf16" if device.type == "cuda" or _cpu_has_bf16() else "fp32")
    nbytes = torch.tensor([], dtype=getattr(torch, DTYPES[dtype])).element_size()
    free = free_bytes(torch, device)
    for shape in shapes:  # each must fit (alone) before anything is measured
        weights_plan(shape, nbytes, free)
    info = device_info(torch, device)
    out = a.out or Path("ledgers") / "probe" / slug(info["name"]) / datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    cells = plan(batches, queries, lengths)
    command = " ".join([_prog(sys.argv[0] if sys.argv else ""), *sys.argv[1:]])
    if out_folder is not None:
        out_folder(out)
    t0 = time.monotonic()
    failed = []
    for i, shape in enumerate(shapes):
        left = a.budget_s - (time.monotonic() - t0)
        share = left / (len(shapes) - i)
        try:
            probe_shape(shape, device_name=str(device), dtype_name=dtype, cells=cells, budget_s=max(share, 0.0),
                        out=out, graphs=not a.no_graphs, echo=echo, command=command, repeats=repeats)
        except Exception as exc:  # noqa: BLE001 - one shape's failure (its ledger says it) leaves the others to run
            failed.append(shape.name)
            echo(f"{shape.name}: failed: {type(exc).__name__}: {' '.join(str(exc).split())[:300]}")
    echo(f"probe: {len(shapes)} shape(s) in {time.monotonic() - t0:.0f} s -> {out}"
         + (f"; failed: {', '.join(failed)}" if failed else ""))
    return 1 if failed else 0


def _prog(argv0: str) -> str:
    """How the probe was started, as a user would type it: ``python -m specnb.probe`` or the
    console script's name (``specnb``, whose first argument is ``probe``)."""
    return "python -m specnb.probe" if argv0.endswith("__main__.py") else (Path(argv0).name or "specnb")


def main(argv: list[str] | None = None) -> int:
    p = build_parser()
    a = p.parse_args(argv)
    try:
        return run(a)
    except ProbeError as exc:
        print(f"specnb probe: {exc}", file=sys.stderr)
        return 2
