"""The steady window of a closed-loop point: one definition, for the load driver and for every
analysis that reads a point's requests again.

A closed loop at concurrency N keeps N connection *slots* busy, each sending its next request
the moment its previous one ends, until the point's requests run out. Exactly N requests are in
flight from the moment the last slot sent its first request to the moment the first slot ran out
of work: the steady window, ``[max over slots of its first start, min over slots of its last
end]``. Throughput counted inside it is what a server at concurrency N delivers, free of the
ramp-up and drain tails. A point has no steady window when fewer than N slots sent anything, or
when the window is empty; readers then fall back to the wall clock (first send to last answer),
as an open loop always does.

Request sidecars name a request's slot ``slot`` (``worker`` in those written before
2026-12-01): :func:`slot_column` reads either.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pandas as pd

__all__ = ["steady_window", "frame_window", "slot_column"]


def steady_window(slots: Sequence[int], starts: Sequence[float], ends: Sequence[float],
                  n_slots: int) -> tuple[float, float] | None:
    """``(start, end)`` of the steady window of requests given by their slot, send time and end
    time; None when fewer than ``n_slots`` slots sent a request or the window is empty."""
    if not len(slots):
        return None
    s, a, b = np.asarray(slots), np.asarray(starts, float), np.asarray(ends, float)
    ids = np.unique(s)
    if len(ids) != n_slots:
        return None
    lo = max(a[s == i].min() for i in ids)
    hi = min(b[s == i].max() for i in ids)
    return (float(lo), float(hi)) if hi > lo else None


def slot_column(req: pd.DataFrame) -> str:
    """The column of a request frame that names each request's connection slot."""
    return "slot" if "slot" in req.columns else "worker"


def frame_window(req: pd.DataFrame, concurrency: int) -> tuple[float, float]:
    """The steady window of a point's request frame (its sidecar), or its wall clock when it has
    none: an open loop (its requests were due at scheduled times: ``scheduled_s``), or a closed
    loop that never had all its slots busy."""
    col = slot_column(req)
    open_loop = "scheduled_s" in req.columns and req["scheduled_s"].notna().any()
    win = None if open_loop or col not in req.columns else steady_window(
        req[col].to_numpy(), req["start_s"].to_numpy(float), req["end_s"].to_numpy(float), concurrency)
    if win is None:
        return float(req["start_s"].min()), float(req["end_s"].max())
    return win
