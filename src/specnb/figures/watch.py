"""A ``specnb watch --json`` log drawn against the run it was held to: acceptance over time
against the run's mean, its lowest point and the window's alert line (the lowest point less
ACCEPTANCE_Z standard errors of that window's draft tokens), and running requests against the measured
threshold with its interval. Each window's verdict colours its marker."""

from __future__ import annotations

import numpy as np
import pandas as pd
from matplotlib.lines import Line2D

from specnb.analysis.alerts import threshold_of
from specnb.analysis.watch import ACCEPTANCE_Z, MIN_DRAFT_TOKENS, Expectation
from specnb.figures.panels import new_figure

__all__ = ["VERDICT_COLORS", "watch_figure"]

VERDICT_COLORS = {"pays": "#2ca02c", "idle": "#bdbdbd", "above_threshold": "#d62728", "acceptance_fell": "#ff7f0e",
                  "spec_off": "#9467bd", "cannot_tell": "#7f7f7f",
                  "below_break_even": "#8c564b"}


def _minutes(log: pd.DataFrame) -> np.ndarray:
    """Minutes since the first line (its ``time``; the line's order where a log has no times)."""
    t = pd.to_datetime(log["time"], utc=True, errors="coerce") if "time" in log else pd.Series(pd.NaT, index=log.index)
    if t.notna().all() and len(t):
        return ((t - t.iloc[0]).dt.total_seconds() / 60).to_numpy(float)
    return np.arange(len(log), dtype=float)


def watch_figure(log: pd.DataFrame, exp: Expectation):
    """Two panels over the log's time: acceptance (with the run's band) and running requests
    (with the threshold band). ``log``: one row per ``--json`` line."""
    fig, axes = new_figure(ncols=1, nrows=2, width=9.0, height=2.6)
    ax_acc, ax_run = axes[0, 0], axes[1, 0]
    x = _minutes(log)
    xlabel = "minutes since the first window" if "time" in log and x.size and x[-1] != len(log) - 1 else "window"
    colors = [VERDICT_COLORS.get(v, "#7f7f7f") for v in (log["verdict"] if "verdict" in log else ["cannot_tell"] * len(log))]

    acc = pd.to_numeric(log.get("acceptance_rate"), errors="coerce").to_numpy(float)
    tokens = pd.to_numeric(log.get("draft_tokens"), errors="coerce").to_numpy(float)
    judged = np.nan_to_num(tokens) >= MIN_DRAFT_TOKENS
    ax_acc.plot(x, acc, color="#444444", lw=0.8, zorder=1)
    ax_acc.scatter(x[judged], acc[judged], c=[c for c, j in zip(colors, judged, strict=True) if j], s=14, zorder=2)
    if (~judged).any():  # too few draft tokens in the window: acceptance not judged
        ax_acc.scatter(x[~judged], acc[~judged], s=14, zorder=2, facecolors="white",
                       edgecolors=[c for c, j in zip(colors, judged, strict=True) if not j],
                       label=f"not judged (< {MIN_DRAFT_TOKENS} draft tokens)")
    if exp.acceptance_rate is not None:
        ax_acc.axhline(exp.acceptance_rate, color="#2ca02c", lw=0.8, ls=":",
                       label=f"run mean {exp.acceptance_rate:.0%}")
    if exp.acceptance_floor is not None:
        ax_acc.axhline(exp.acceptance_floor, color="#2ca02c", lw=1.0, label=f"run's lowest point {exp.acceptance_floor:.0%}")
        line = np.array([exp.acceptance_floor - (exp.acceptance_margin(d) or np.nan) if d > 0 else np.nan
                         for d in np.nan_to_num(tokens)])
        ax_acc.step(x, line, where="mid", color="#ff7f0e", lw=0.9, ls="--",
                    label=f"alert line (lowest less {ACCEPTANCE_Z:g} s.e. of the window)")
    ax_acc.set_ylim(0, 1.02)
    ax_acc.set_ylabel("acceptance rate")
    ax_acc.set_title(f"{exp.arm} on {exp.workload}, held to {exp.run}", loc="left")
    ax_acc.legend(fontsize=6.5, loc="upper left", bbox_to_anchor=(1.01, 1.0), frameon=False)

    run = pd.to_numeric(log.get("running_mean"), errors="coerce").to_numpy(float)
    ax_run.plot(x, run, color="#444444", lw=0.8, zorder=1)
    ax_run.scatter(x, run, c=colors, s=14, zorder=2)
    th, meaning = threshold_of(exp)
    if th is not None:
        ax_run.axhline(th, color="#d62728", lw=1.0, label=f"threshold {th:.1f} running\n({meaning})")
        if exp.threshold_lo is not None:
            hi = exp.threshold_hi if exp.threshold_hi is not None else th
            upper = (f"to {exp.threshold_hi:.1f}" if exp.threshold_hi is not None
                     else "upward\n(its upper bound lies past the measured range)")
            ax_run.axhspan(exp.threshold_lo, hi, color="#ffdd57", alpha=0.35, lw=0,
                           label=f"threshold interval from {exp.threshold_lo:.1f} {upper}")
    placed = [lv.running for lv in exp.levels if lv.running]
    if placed:
        ax_run.axhspan(min(placed), max(placed), color="#9ecae1", alpha=0.15, lw=0, label="measured range")
    ax_run.set_ylim(bottom=0)
    ax_run.set_ylabel("running requests (mean)")
    ax_run.set_xlabel(xlabel)
    ax_run.legend(fontsize=6.5, loc="upper left", bbox_to_anchor=(1.01, 1.0), frameon=False)
    seen = set(log["verdict"]) if "verdict" in log else set()
    handles = [Line2D([], [], ls="", marker="o", ms=4, color=c, label=v) for v, c in VERDICT_COLORS.items() if v in seen]
    if handles:
        fig.legend(handles=handles, loc="outside lower center", ncols=len(handles), fontsize=6.5, frameon=False,
                   title="verdict", title_fontsize=6.5)
    return fig
