"""Facets over a tidy frame with seaborn: one panel per metric, one line per arm.

Where a figure is "the same plot for several metrics, hue by arm", seaborn's ``relplot`` on a
long frame says it in one call: the per-repeat rows go in, each line is their mean and the band
runs from the lowest to the highest repeat (``errorbar=("pi", 100)``, a percentile interval:
computed, not resampled, so the figure is byte-stable). Paired speedups keep the matplotlib
panels of :mod:`specnb.figures.panels`: their bands are the bootstrap's interval over server
starts and prompts, which seaborn cannot compute from the rows.
"""

from __future__ import annotations

from collections.abc import Mapping

import pandas as pd
import seaborn as sns

from specnb.figures.panels import concurrency_axis
from specnb.figures.save import apply_style, arm_colors

__all__ = ["metric_lines"]


def metric_lines(rows: pd.DataFrame, metrics: Mapping[str, str], *, x: str = "concurrency", hue: str = "arm",
                 colors: Mapping[str, str] | None = None, height: float = 3.2, aspect: float = 1.06) -> sns.FacetGrid:
    """One panel per ``metrics`` column (title = its label) against ``x`` (log2 concurrency),
    one line per ``hue``: mean over the rows, band = their range."""
    long = rows.melt(id_vars=[x, hue], value_vars=list(metrics), var_name="metric", value_name="value")
    long["metric"] = long["metric"].map(metrics)
    colors = dict(colors or arm_colors(rows[hue]))
    apply_style()
    g = sns.relplot(long, x=x, y="value", hue=hue, col="metric", col_order=list(metrics.values()),
                    hue_order=sorted(set(rows[hue])), palette=colors, kind="line", marker="o", markersize=4,
                    errorbar=("pi", 100), err_kws={"alpha": 0.15, "lw": 0}, height=height, aspect=aspect,
                    facet_kws={"sharey": False})
    g.set_titles("{col_name}")
    g.set_axis_labels("", "")
    for ax in g.axes.flat:
        concurrency_axis(ax, rows[x])
        ax.set_ylim(bottom=0)
    return g
