"""``specnb watch``'s eyes: a live endpoint's ``/metrics`` read every interval, counters summed
over engines and taken as deltas over the window, gauges averaged over the window's reads.

Plain HTTP GETs with the standard library (no session to keep), so a watch loop is one process
with nothing to stop but itself; the verdict is :func:`specnb.analysis.watch.judge`'s.
"""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from specnb.analysis.watch import WindowStats
from specnb.engine.metrics import (
    RUNNING,
    SPEC_ACCEPTED,
    SPEC_ACCEPTED_PER_POS,
    SPEC_DRAFT_TOKENS,
    SPEC_DRAFTS,
    WAITING,
    MetricsError,
    Snapshot,
    parse_metrics,
)
from specnb.errors import SpecnbError

__all__ = ["GENERATION", "WatchError", "read", "served_models", "window", "windows"]

GENERATION = "vllm:generation_tokens_total"


class WatchError(SpecnbError):
    """The endpoint cannot be watched (unreachable, not vLLM, no metrics): said in one line."""


def _get(url: str, timeout_s: float) -> str:
    try:
        with urllib.request.urlopen(url, timeout=timeout_s) as resp:  # noqa: S310 - a URL the user gave
            return resp.read().decode()
    except urllib.error.HTTPError as exc:
        raise WatchError(f"GET {url}: HTTP {exc.code}") from None
    except (urllib.error.URLError, OSError, ValueError) as exc:
        reason = getattr(exc, "reason", exc)
        raise WatchError(f"GET {url}: {reason}") from None


def read(base_url: str, timeout_s: float = 5.0) -> Snapshot:
    """One read of ``<base_url>/metrics``."""
    text = _get(base_url.rstrip("/") + "/metrics", timeout_s)
    try:
        snap = parse_metrics(text)
    except MetricsError as exc:
        raise WatchError(f"{base_url}/metrics: {exc}") from None
    if not snap.has(RUNNING):
        raise WatchError(f"{base_url}/metrics has no {RUNNING}: not a vLLM server")
    return snap


def served_models(base_url: str, timeout_s: float = 5.0) -> list[tuple[str, str | None]]:
    """The models the endpoint serves (``/v1/models``): each one's id (its served name) and root
    (the checkpoint it was loaded from, where the server says)."""
    try:
        doc = json.loads(_get(base_url.rstrip("/") + "/v1/models", timeout_s))
        return [(m["id"], m.get("root")) for m in doc.get("data", [])]
    except (ValueError, KeyError, TypeError, AttributeError):
        raise WatchError(f"{base_url}/v1/models: not an OpenAI-compatible model list") from None


@dataclass
class _Read:
    t: float
    snap: Snapshot


def window(first: _Read, reads: list[_Read]) -> WindowStats:
    """The window from ``first`` to the last of ``reads`` (gauges averaged over all of them)."""
    last = reads[-1]
    spec = last.snap.has(SPEC_DRAFTS)

    def delta(name: str) -> float:
        return max(0.0, last.snap.total(name) - first.snap.total(name))  # a restart: counted from zero

    gauges = [first, *reads]
    return WindowStats(
        seconds=last.t - first.t,
        drafts=delta(SPEC_DRAFTS) if spec else None,
        draft_tokens=delta(SPEC_DRAFT_TOKENS) if spec else None,
        accepted_tokens=delta(SPEC_ACCEPTED) if spec else None,
        output_tokens=delta(GENERATION),
        running_mean=sum(r.snap.total(RUNNING) for r in gauges) / len(gauges),
        waiting_mean=sum(r.snap.total(WAITING) for r in gauges) / len(gauges),
        positions=(len(last.snap.by_label(SPEC_ACCEPTED_PER_POS, "position")) or None) if spec else None)


def windows(base_url: str, *, interval_s: float, window_s: float, full_only: bool = False, count: int | None = None,
            sleep: Callable[[float], None] = time.sleep, clock: Callable[[], float] = time.monotonic,
            ) -> Iterator[WindowStats]:
    """A window after every read (one every ``interval_s``) over the reads of the last
    ``window_s`` seconds; with ``full_only`` none until a whole window has passed. ``count``
    windows, or without end."""
    reads: deque[_Read] = deque([_Read(clock(), read(base_url))])
    made = 0
    while count is None or made < count:
        sleep(interval_s)
        reads.append(_Read(clock(), read(base_url)))
        while len(reads) > 2 and reads[-1].t - reads[1].t >= window_s:
            reads.popleft()
        if full_only and reads[-1].t - reads[0].t + 1e-6 < window_s:
            continue
        made += 1
        yield window(reads[0], list(reads)[1:])
