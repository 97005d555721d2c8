"""Where a sweep's wall time went: one write-once record per sweep invocation.

A sweep spends its time starting and stopping servers, warming them up, sizing the panels,
measuring points, deciding search rounds and waiting for a busy host to quieten; only the
points are the measurement. The runner accounts every second of an invocation to exactly one
phase (:data:`PHASES`; ``other`` is what no phase claimed) and writes
``<sweep folder>/timings/<UTC time>.json`` with ``"kind": "timing"``, once: a resumed run
writes a record of its own, none is rewritten. A run that measured nothing and started no
server (everything already done) writes none. Each launched server start also carries where
its start-up went (:mod:`specnb.engine.startup`).

Frames never read these files (``kind`` is in :data:`specnb.ledger.frame.NOT_MEASURED`);
:func:`read_timings` and :func:`overhead_line` are how reports show them.
"""

from __future__ import annotations

import json
import statistics
from collections.abc import Iterable, Mapping
from enum import StrEnum
from pathlib import Path
from typing import Any

from specnb.ledger.names import EndpointMode

__all__ = ["TIMING_KIND", "TIMINGS_DIR", "Phase", "PHASES", "MEASURING", "read_timings", "spent_s", "total_phases",
           "overhead_line",
           "startup_line", "timing_lines", "format_duration", "STARTUP_SEGMENTS"]

TIMING_KIND = "timing"
TIMINGS_DIR = "timings"


class Phase(StrEnum):
    """Every phase a second of a sweep can belong to, in the order reports list them."""

    PREFLIGHT = "preflight"
    SERVER_START = "server_start"
    SERVER_STOP = "server_stop"
    WARMUP = "warmup"
    SIZING = "sizing"
    MEASURING = "measuring"
    PARSING = "parsing"  # the streams parsed after each point (not the measurement: the server is idle)
    SEARCH = "search"
    HOST_WAIT = "host_wait"
    OTHER = "other"


MEASURING = Phase.MEASURING
PHASES = tuple(Phase)
# how the one-line summary groups them
_GROUPS = {"servers": (Phase.SERVER_START, Phase.SERVER_STOP), "warmup": (Phase.WARMUP,), "sizing": (Phase.SIZING,),
           "measuring": (Phase.MEASURING,), "parsing": (Phase.PARSING,), "search": (Phase.SEARCH,), "host wait": (Phase.HOST_WAIT,),
           "other": (Phase.PREFLIGHT, Phase.OTHER)}
# a server start-up's segments (specnb.engine.startup), each ending at the milestone it is named after
STARTUP_SEGMENTS = {
    "api_server_up": "API server process: start, Python imports (torch, vLLM), arguments",
    "engine_core_up": "engine core process: spawn, imports, engine config",
    "model_load_started": "worker process: spawn, imports, device and thread binding (about 1 s when the worker runs inside the engine core)",
    "weights_loaded": "model weights loaded",
    "engine_ready": "KV cache, profile and warm-up runs (compile and graph capture when on)",
    "api_listening": "API server finishes: tokenizer, chat template, routes",
    "ready": "until /health and /v1/models answer specnb's poll",
}


def format_duration(seconds: float) -> str:
    """``8m12s``, ``1h02m``, ``41s``."""
    s = int(round(seconds))
    if s >= 3600:
        return f"{s // 3600}h{(s % 3600) // 60:02d}m"
    if s >= 60:
        return f"{s // 60}m{s % 60:02d}s"
    return f"{s}s"


def _is_timing(path: Path) -> dict[str, Any] | None:
    try:
        doc = json.loads(path.read_text())
    except (OSError, UnicodeDecodeError, ValueError):
        return None
    return doc if isinstance(doc, dict) and doc.get("kind") == TIMING_KIND else None


def read_timings(folder: Path | str) -> list[dict[str, Any]]:
    """Every timing record under a folder (a sweep, a study's run), oldest first; unreadable
    files are not timing records and are left to the ledger readers to judge."""
    out = []
    for p in sorted(Path(folder).rglob(f"{TIMINGS_DIR}/*.json")):
        doc = _is_timing(p)
        if doc is not None:
            out.append({**doc, "path": str(p)})
    return out


def spent_s(folder: Path | str) -> float:
    """Seconds the invocations recorded under one sweep's folder took (``timings/``, finished or
    interrupted): a local invocation's wall, a Ray driver's elapsed time; a block's record on a node
    is inside its driver's time and is not counted again. A resumed sweep's budget counts from it."""
    total = 0.0
    for p in sorted((Path(folder) / TIMINGS_DIR).glob("*.json")):
        doc = _is_timing(p)
        if doc is None:
            continue
        ex = doc.get("executor")
        try:
            if ex is None:
                total += float(doc.get("wall_s") or 0.0)
            elif isinstance(ex, dict) and ex.get("role") == "driver":
                total += float(ex.get("elapsed_s") or 0.0)
        except (TypeError, ValueError):
            continue  # a record with no number here adds nothing
    return total


def total_phases(records: Iterable[Mapping[str, Any]]) -> dict[str, float]:
    """Seconds per phase summed over records (every phase present, zeros included)."""
    tot = dict.fromkeys(PHASES, 0.0)
    for r in records:
        for k, v in (r.get("phases_s") or {}).items():
            tot[k] = tot.get(k, 0.0) + float(v)
    return tot


def overhead_line(phases: Mapping[str, float], wall_s: float | None = None) -> str:
    """``wall 8m12s: servers 31%, warmup 4%, sizing 3%, measuring 60%, other 2%`` (groups with
    no time left out, measuring always shown)."""
    wall = float(wall_s if wall_s is not None else sum(phases.values()))
    if wall <= 0:
        return "wall 0s"
    parts = []
    for label, keys in _GROUPS.items():
        s = sum(float(phases.get(k, 0.0)) for k in keys)
        if s > 0 or label == "measuring":
            parts.append(f"{label} {s / wall:.0%}")
    return f"wall {format_duration(wall)}: " + ", ".join(parts)


def startup_line(records: Iterable[Mapping[str, Any]]) -> str | None:
    """``4 server starts: median 27 s to ready; longest part: engine_core_up (median 8 s: ...)``
    over the launched, successful starts of the records (None when there were none)."""
    starts = [s for r in records for s in r.get("server_starts") or []
              if s.get("mode") == EndpointMode.LAUNCHED and s.get("ok", True) and s.get("ready_s") is not None]
    if not starts:
        return None
    ready = statistics.median(float(s["ready_s"]) for s in starts)
    text = f"{len(starts)} server start(s): median {ready:.0f} s to ready"
    segs: dict[str, list[float]] = {}
    for s in starts:
        for k, v in ((s.get("startup") or {}).get("segments_s") or {}).items():
            segs.setdefault(k, []).append(float(v))
    if segs:
        top = max(segs, key=lambda k: statistics.median(segs[k]))
        text += (f"; longest part: {top} (median {statistics.median(segs[top]):.0f} s: "
                 f"{STARTUP_SEGMENTS.get(top, top)})")
    return text


def timing_lines(folder: Path | str) -> list[str]:
    """The report's lines on where a folder's sweep time went (none without timing records)."""
    records = read_timings(folder)
    if not records:
        return []
    # a fleet's blocks write records of their own beside their driver's: they are not invocations
    blocks = sum(1 for r in records if (r.get("executor") or {}).get("kind") and (r.get("executor") or {}).get("role") != "driver")
    what = f"{len(records) - blocks} invocation(s)" + (f", {blocks} Ray block record(s)" if blocks else "")
    out = [f"sweep time ({what}): {overhead_line(total_phases(records))}"]
    start = startup_line(records)
    if start:
        out.append(start)
    return out
