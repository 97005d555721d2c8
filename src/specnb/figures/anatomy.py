"""Step anatomy figures (seed 002's Figure 6, per arm and level): where a decode step's time
goes, in milliseconds and as shares of the step, and the seed 004 rule beside it."""

from __future__ import annotations

import numpy as np
import pandas as pd
from matplotlib.axes import Axes

from specnb.analysis.anatomy import PART_LABELS, PARTS
from specnb.figures.panels import new_figure

# one colour per part, the target's own work in blues, the drafter in red, overheads in greys
PART_COLORS = {"prepare_ms": "#9ecae1", "forward_ms": "#2171b5", "logits_ms": "#6baed6", "sample_ms": "#fd8d3c",
               "draft_ms": "#cb181d", "bookkeep_ms": "#bdbdbd", "unscoped_ms": "#e0e0e0", "between_ms": "#737373"}

__all__ = ["PART_COLORS", "step_bars", "step_anatomy_figure"]


def _labels(df: pd.DataFrame) -> list[str]:
    return [f"{a}\nc={c}" for a, c in zip(df["arm"], df["concurrency"], strict=True)]


def step_bars(ax: Axes, df: pd.DataFrame, *, shares: bool = False, per_token: bool = False) -> None:
    """Stacked bars, one per row of :func:`specnb.analysis.anatomy.anatomy_frame` (mean over its
    repeats when there are several): ms per decode step, or each part's share of the step."""
    g = df.groupby(["arm", "concurrency"], sort=False, as_index=False)[[*PARTS, "cycle_ms",
                                                                       "emitted_tokens_per_step"]].mean()
    x = np.arange(len(g))
    bottom = np.zeros(len(g))
    for p in PARTS:
        v = g[p].to_numpy(dtype=float)
        if shares:
            v = v / g["cycle_ms"].to_numpy(dtype=float)
        elif per_token:
            v = v / g["emitted_tokens_per_step"].replace(0, np.nan).to_numpy(dtype=float)
        ax.bar(x, v, bottom=bottom, color=PART_COLORS[p], label=PART_LABELS[p], width=0.7, edgecolor="white",
               linewidth=0.4)
        bottom += np.nan_to_num(v)
    ax.set_xticks(x, _labels(g), fontsize=7)
    if shares:
        ax.set_ylabel("share of a decode step")
        ax.set_ylim(0, 1)
    else:
        ax.set_ylabel("ms per output token (profiled)" if per_token else "ms per decode step (profiled)")


def step_anatomy_figure(df: pd.DataFrame):
    """Three panels: ms per step, ms per output token (what the drafter must win back), shares."""
    fig, axes = new_figure(ncols=3, width=4.6, height=3.6)
    step_bars(axes[0][0], df)
    axes[0][0].set_title("a decode step, by part")
    step_bars(axes[0][1], df, per_token=True)
    axes[0][1].set_title("per token it emits")
    step_bars(axes[0][2], df, shares=True)
    axes[0][2].set_title("shares of the step")
    h, lab = axes[0][0].get_legend_handles_labels()
    fig.legend(h[::-1], lab[::-1], loc="outside right center", fontsize=7, frameon=False)
    return fig
