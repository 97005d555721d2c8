"""Whether to attach the drafter, per endpoint and workload, with the evidence.

Below the threshold concurrency the drafter pays; the acceptance rate there is read
against seed 004's rule of thumb (worth it above about 2/3, off below 1/2, measure in
between), next to the acceptance length and the share of output the drafter supplied.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from specnb.analysis.pairing import AnalysisError, curve_label
from specnb.analysis.speedups import Speedups
from specnb.analysis.thresholds import Threshold, curve_rows, interp, thresholds
from specnb.models import theory

__all__ = ["Decision", "decide"]


@dataclass(frozen=True)
class Decision:
    """Attach the drafter or not, for one endpoint and workload, with the evidence."""

    group: dict[str, Any]
    threshold: Threshold
    at_concurrency: float  # where acceptance was read: the threshold, or the range end that matters
    acceptance_rate: float | None
    acceptance_length: float | None
    accepted_output_share: float | None
    speedup: float | None  # mean curve, at at_concurrency
    per_user_speedup: float | None
    verdict: str | None  # theory.acceptance_verdict(acceptance_rate)
    method: str | None

    @property
    def label(self) -> str:
        return curve_label(self.group)


def decide(sp: Speedups, *, serving_concurrency: float | None = None,
           metric: str = "speedup") -> list[Decision]:
    """Per curve: attach the drafter below the threshold or not, and the acceptance there.

    Acceptance is read at ``serving_concurrency`` when given (seed 004: at the real batch
    size), else at the interpolated crossing of the estimates, or for a curve whose estimates
    never cross at the end of the range that decides it (the largest c for one above 1.0
    throughout, the smallest for one below); interpolated in log2(concurrency), nearest measured
    level outside the range.
    """
    if serving_concurrency is not None and not serving_concurrency > 0:
        raise AnalysisError(f"serving_concurrency must be > 0, got {serving_concurrency}")
    out = []
    for th in thresholds(sp, metric):
        rows = curve_rows(sp, th.group)
        cs = rows["level"].to_numpy(float)
        if serving_concurrency is not None:
            at = float(serving_concurrency)
        elif th.concurrency is not None:
            at = th.concurrency
        else:
            at = float(th.c_max if th.kind == "above" else th.c_min)

        def read(col: str, rows: pd.DataFrame = rows, cs: np.ndarray = cs, at: float = at) -> float | None:
            return interp(cs, pd.to_numeric(rows[col], errors="coerce").to_numpy(float), at)

        rate = read("acceptance_rate")
        out.append(Decision(
            group=dict(th.group), threshold=th, at_concurrency=at, acceptance_rate=rate,
            acceptance_length=read("acceptance_length"),
            accepted_output_share=read("accepted_output_share"),
            speedup=read(metric), per_user_speedup=read("per_user_speedup"),
            verdict=None if rate is None else theory.acceptance_verdict(min(max(rate, 0.0), 1.0)),
            method=rows["method"].iloc[0] if "method" in rows.columns and len(rows) else None,
        ))
    return out
