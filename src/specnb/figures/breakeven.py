"""The break-even map's figure (:mod:`specnb.analysis.breakeven`): per drafter kind and K, the
paired speedup against measured acceptance length (one line per level, the real drafters as
stars), and the break-even acceptance length against concurrency with its band."""

from __future__ import annotations

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
from matplotlib.figure import Figure

from specnb.figures import panels

__all__ = ["map_figure"]


def _curve_panel(ax, g: pd.DataFrame, title: str) -> None:
    levels = sorted(g["concurrency"].unique())
    colors = plt.get_cmap("viridis")(np.linspace(0.1, 0.8, max(len(levels), 1)))
    for color, c in zip(colors, levels, strict=True):
        ce = g[g["cell"] & (g["concurrency"] == c)].sort_values("acceptance_length")
        if len(ce):
            err = [ce["speedup"] - ce["speedup_lo"], ce["speedup_hi"] - ce["speedup"]]
            ax.errorbar(ce["acceptance_length"], ce["speedup"], yerr=err, fmt="o-", color=color, capsize=2,
                        ms=4, lw=1.2, label=f"c={c:g}")
        real = g[~g["cell"].astype(bool) & (g["concurrency"] == c)]
        for r in real.to_dict("records"):
            ax.errorbar([r["acceptance_length"]], [r["speedup"]],
                        yerr=[[r["speedup"] - r["speedup_lo"]], [r["speedup_hi"] - r["speedup"]]],
                        fmt="*", ms=11, color=color, mec="black", mew=0.6, capsize=2)
    ax.axhline(1.0, color="0.3", lw=0.8, ls="--")
    ax.set_xlabel("measured acceptance length (tokens per drafted step)")
    ax.set_ylabel("paired speedup (on / off)")
    ax.set_title(title, fontsize=9)
    ax.legend(fontsize=7, loc="upper left")


def _short(kinds: list[str]) -> dict[str, str]:
    """A kind as a legend names it: its method (a draft model's folder after ':' dropped), the whole
    name where two kinds would read the same."""
    short = {k: k.split("(")[0].split(":")[0] for k in kinds}
    return {k: (s if list(short.values()).count(s) == 1 else k) for k, s in short.items()}


def _break_even_panel(ax, be: pd.DataFrame, real: pd.DataFrame) -> None:
    colors = plt.get_cmap("tab10")
    names = _short(sorted(set(be["kind"])))
    for i, ((kind, k), g) in enumerate(be.groupby(["kind", "k"], sort=True)):
        g = g.sort_values("concurrency")
        color = colors(i % 10)
        x = g["concurrency"].to_numpy(float)
        top = max(max(r["lengths"]) for r in g.to_dict("records"))
        bottom = min(min(r["lengths"]) for r in g.to_dict("records"))
        # a band end outside the cells is drawn to the cells' edge (the end lies beyond it)
        side = {"below": bottom, "above": top}  # "n/a" (an interval end missing): no band there
        lo = [r["band_lo"] if r["band_lo_where"] == "inside" else side.get(r["band_lo_where"], np.nan)
              for r in g.to_dict("records")]
        hi = [r["band_hi"] if r["band_hi_where"] == "inside" else side.get(r["band_hi_where"], np.nan)
              for r in g.to_dict("records")]
        ax.fill_between(x, lo, hi, color=color, alpha=0.18, lw=0)
        y = g["break_even"].to_numpy(float)
        label = f"{names[kind]} K={k}"
        ax.plot(x, y, "o-", color=color, label=label)
        for r in g.to_dict("records"):
            if r["where"] != "inside":  # no crossing among the cells: an arrow to the side it lies on
                ax.annotate("pays at every length" if r["where"] == "below" else "costs at every length",
                            (r["concurrency"], bottom if r["where"] == "below" else top), fontsize=6,
                            color=color, xytext=(3, -8 if r["where"] == "below" else 4), textcoords="offset points")
        mine = real[(real["kind"] == kind) & (real["k"] == k)]
        if len(mine):
            ax.plot(mine["concurrency"], mine["acceptance_length"], "*", ms=11, color=color, mec="black", mew=0.6,
                    label=f"{names[kind]} K={k}: its real drafter's acceptance")
    levels = sorted(be["concurrency"].unique())
    panels.concurrency_axis(ax, [int(c) for c in levels])
    ax.set_ylabel("acceptance length")
    ax.set_title("break-even acceptance length\n(band: where the cells' intervals include 1.0)", fontsize=9)
    ax.legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.2), ncol=2, frameon=False)


def map_figure(cells: pd.DataFrame, be: pd.DataFrame) -> Figure:
    """One speedup-against-acceptance panel per (condition, workload, kind, K), and the break-even
    panel (``be``: :func:`specnb.analysis.breakeven.break_even`) on the right."""
    keys = [k for k in ("condition", "workload", "kind", "k") if k in cells.columns]
    groups = list(cells.groupby(keys, sort=True)) if len(cells) else []
    fig, axes = panels.new_figure(ncols=len(groups) + 1, width=4.4, height=3.8)
    for ax, (key, g) in zip(axes[0], groups, strict=False):
        named = dict(zip(keys, key, strict=True))
        cond = f"{named['condition']} · " if named.get("condition") not in (None, "default") else ""
        _curve_panel(ax, g, f"{cond}{named['workload']} · {named['kind']} K={named['k']}")
    if len(be):
        _break_even_panel(axes[0][-1], be, cells[~cells["cell"].astype(bool)] if len(cells) else cells)
    else:
        axes[0][-1].text(0.5, 0.5, "no curve with two acceptance lengths", ha="center", va="center")
    fig.tight_layout()
    return fig
