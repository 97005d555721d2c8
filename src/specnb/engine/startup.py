"""Where a vLLM server's start-up time goes, read from its own log.

vLLM stamps every log line with the process that wrote it (``APIServer``, ``EngineCore``,
``Worker``) and the local time to the second. A launched server's log (one start of it:
:meth:`specnb.engine.server.VllmServer.start_log`) and the wall time specnb launched it give
the milestones of a start, in seconds from the launch:

- ``api_server_up``: the API server's first line (its Python imports and argument parsing done);
- ``engine_core_up``: the engine core process says it initializes the engine (a second process:
  spawned, imports again);
- ``model_load_started``: a worker starts loading the model (on the CPU build a third process,
  the multiprocessing executor vLLM forces there for OpenMP; on one GPU, the engine core itself);
- ``weights_loaded``: the weights are in memory;
- ``engine_ready``: KV cache allocated, profile and warm-up runs done (``torch.compile`` and
  CUDA graph capture happen here when they are on);
- ``api_listening``: the API server starts listening;
- ``ready``: ``/health`` and ``/v1/models`` answered specnb's poll (``Endpoint.ready_s``).

:func:`startup_breakdown` turns them into consecutive segments and names the longest. The
log's one-second resolution bounds every segment's precision; a milestone the log lacks
(another vLLM version words it otherwise) merges its segment into the next one.
"""

from __future__ import annotations

import re
import time
from datetime import UTC, datetime
from typing import Any

from specnb.ledger.timing import STARTUP_SEGMENTS

__all__ = ["MILESTONES", "SEGMENTS", "startup_breakdown", "parse_log_lines"]

_ANSI = re.compile(r"\x1b\[[0-9;]*m")
_LINE = re.compile(
    r"^\((?P<proc>[A-Za-z][\w-]*) pid=\d+\)\s+(?P<level>[A-Z]+)\s+(?P<ts>\d\d-\d\d \d\d:\d\d:\d\d)\s+"
    r"\[[^\]]*\]\s?(?P<msg>.*)$"
)

# (milestone, how its line is recognised: process prefix or None, message pattern)
_RULES: tuple[tuple[str, str | None, re.Pattern[str]], ...] = (
    ("api_server_up", "APIServer", re.compile(r"")),
    ("engine_core_up", None, re.compile(r"Initializing a V1 LLM engine|Initializing an? .*LLM engine")),
    ("model_load_started", None, re.compile(r"Starting to load model")),
    ("weights_loaded", None, re.compile(r"Loading weights took|Model loading took")),
    ("engine_ready", None, re.compile(r"init engine \(profile, create kv cache, warmup model\) took")),
    ("api_listening", "APIServer", re.compile(r"Starting vLLM (API )?server on")),
)
MILESTONES = tuple(name for name, _, _ in _RULES) + ("ready",)

# what each segment (from the previous milestone to this one) holds
SEGMENTS = STARTUP_SEGMENTS
assert tuple(SEGMENTS) == MILESTONES

_DURATIONS = {
    "compile_s": re.compile(r"torch\.compile takes ([\d.]+) ?s"),
    "graph_capture_s": re.compile(r"Graph capturing finished in ([\d.]+) secs?"),
    "weights_s": re.compile(r"Loading weights took ([\d.]+) seconds"),
    "init_engine_s": re.compile(r"init engine \(profile, create kv cache, warmup model\) took ([\d.]+) ?s"),
}


def parse_log_lines(log_text: str) -> list[tuple[str, str, str]]:
    """``(process, 'MM-DD HH:MM:SS', message)`` for every line vLLM's logger stamped."""
    out = []
    for raw in log_text.splitlines():
        m = _LINE.match(_ANSI.sub("", raw).strip())
        if m:
            out.append((m["proc"], m["ts"], m["msg"]))
    return out


def _epoch(stamp: str, launched_at: float) -> float:
    """A log stamp (local time, no year) as epoch seconds, in the launch's year."""
    year = time.localtime(launched_at).tm_year
    t = time.mktime(time.strptime(f"{year}-{stamp}", "%Y-%m-%d %H:%M:%S"))
    if t - launched_at > 180 * 86400:  # launched on 31 December, logged on 1 January
        t = time.mktime(time.strptime(f"{year + 1}-{stamp}", "%Y-%m-%d %H:%M:%S"))
    return t


def startup_breakdown(log_text: str, launched_at: float, ready_s: float | None = None) -> dict[str, Any]:
    """Milestones (seconds from launch), segments between them, the longest segment, and the
    durations vLLM states itself (weights, init engine, compile, graph capture)."""
    lines = parse_log_lines(log_text)
    found: dict[str, float] = {}
    for proc, stamp, msg in lines:
        for name, who, pattern in _RULES:
            if name in found or (who is not None and not proc.startswith(who)) or not pattern.search(msg):
                continue
            found[name] = round(_epoch(stamp, launched_at) - launched_at, 1)
    if ready_s is not None:
        found["ready"] = round(ready_s, 1)
    segments: dict[str, float] = {}
    prev = 0.0
    for name in MILESTONES:
        if name in found:
            segments[name] = round(max(found[name] - prev, 0.0), 1)
            prev = max(prev, found[name])
    stated = {}
    for key, pattern in _DURATIONS.items():
        values = [float(m.group(1)) for _, _, msg in lines for m in [pattern.search(msg)] if m]
        if values:
            stated[key] = round(sum(values), 2)
    dominant = max(segments, key=segments.get) if segments else None
    return {
        "launched_at": datetime.fromtimestamp(launched_at, UTC).isoformat(timespec="seconds"),
        "milestones_s": found,
        "segments_s": segments,
        "dominant": dominant,
        "stated_s": stated,
        "resolution_s": 1.0,  # vLLM's log stamps are whole seconds
    }
