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


def _ordered(df: pd.DataFrame) -> pd.DataFrame:
    """Means over repeats per (arm, level): the baseline first, then the arms as they come."""
    g = df.groupby(["arm", "concurrency"], sort=False, as_index=False)[[*PARTS, "cycle_ms",
                                                                       "emitted_tokens_per_step"]].mean()
    arms = list(dict.fromkeys(df["arm"]))
    arms = sorted(arms, key=lambda a: (a != "baseline", arms.index(a)))
    g["_arm"] = g["arm"].map({a: i for i, a in enumerate(arms)})
    return g.sort_values(["_arm", "concurrency"]).reset_index(drop=True)


def _positions(g: pd.DataFrame) -> np.ndarray:
    """x of each bar: the levels of an arm side by side, a gap between arms."""
    return np.arange(len(g)) + g["_arm"].to_numpy() * 0.8


def step_bars(ax: Axes, df: pd.DataFrame, *, shares: bool = False, per_token: bool = False) -> None:
    """Stacked bars, one per arm and level of :func:`specnb.analysis.anatomy.anatomy_frame` (the
    mean over its repeats): ms per decode step, per emitted token, or each part's share."""
    g = _ordered(df)
    x = _positions(g)
    bottom = np.zeros(len(g))
    for p in PARTS:
        v = g[p].to_numpy(dtype=float)
        if shares:
            v = v / g["cycle_ms"].to_numpy(dtype=float)
        elif per_token:
            v = v / g["emitted_tokens_per_step"].replace(0, np.nan).to_numpy(dtype=float)
        ax.bar(x, v, bottom=bottom, color=PART_COLORS[p], label=PART_LABELS[p], width=0.8, edgecolor="white",
               linewidth=0.4)
        bottom += np.nan_to_num(v)
    ax.set_xticks(x, [str(c) for c in g["concurrency"]], fontsize=7)
    ax.set_xlabel("concurrency, per arm", fontsize=7, labelpad=26)
    for arm, part in g.groupby("arm", sort=False):
        xs = x[part.index.to_numpy()]
        name = arm if len(arm) <= 12 else arm[:arm.rfind("-", 0, 13) + 1] + "\n" + arm[arm.rfind("-", 0, 13) + 1:]
        ax.text(xs.mean(), -0.08, name, transform=ax.get_xaxis_transform(), ha="center", va="top", fontsize=6.5)
    if shares:
        ax.set_ylabel("share of a decode step")
        ax.set_ylim(0, 1)
    else:
        ax.set_ylabel("ms per output token (profiled)" if per_token else "ms per decode step (profiled)")


def step_anatomy_figure(df: pd.DataFrame):
    """Three panels: ms per step, ms per output token (what the drafter must win back), shares."""
    fig, axes = new_figure(ncols=3, width=4.8, height=3.8)
    step_bars(axes[0][0], df)
    axes[0][0].set_title("a decode step, by part")
    step_bars(axes[0][1], df, per_token=True)
    axes[0][1].set_title("per token it emits")
    step_bars(axes[0][2], df, shares=True)
    axes[0][2].set_title("shares of the step")
    h, lab = axes[0][0].get_legend_handles_labels()
    fig.legend(h[::-1], lab[::-1], loc="outside right center", fontsize=7, frameon=False)
    return fig
