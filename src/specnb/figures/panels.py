"""Panels the axis notebooks share: speedup curves with their interval, absolute throughput,
acceptance, heatmaps and bars. Each function draws on a given matplotlib ``Axes`` from a tidy
table, so a notebook composes figures in a few lines and every figure looks alike.

The reading rules of the seeds are built in: the 1.0 line is always drawn on a speedup axis;
a crossing of 1.0 is marked with its interval, not as a bare point; concurrency is on a log2
axis (the levels are powers of two); intervals are drawn as bands or error bars and the
number of repeats they rest on is written in the legend or title.
"""

from __future__ import annotations

import weakref
from collections.abc import Sequence

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
from matplotlib.axes import Axes

from specnb.analysis.text import format_threshold
from specnb.analysis.thresholds import thresholds
from specnb.figures.save import apply_style, arm_colors

__all__ = [
    "speedup_curves", "throughput_curves", "acceptance_curves", "mark_crossing", "heatmap",
    "grouped_bars", "new_figure", "concurrency_axis", "published_note", "crossings", "mark_best",
    "curves_against", "frontier", "latency_vs_rate", "curves", "fit_ratio_axis",
]


def new_figure(ncols: int = 1, nrows: int = 1, width: float = 4.2, height: float = 3.2,
               sharey: bool = False) -> tuple[plt.Figure, np.ndarray]:
    apply_style()
    fig, axes = plt.subplots(nrows, ncols, figsize=(width * ncols, height * nrows), squeeze=False,
                             sharey=sharey, layout="constrained")
    return fig, axes


def concurrency_axis(ax: Axes, levels: Sequence[int]) -> None:
    ax.set_xscale("log", base=2)
    lv = sorted({int(c) for c in levels})
    ax.set_xticks(lv, [str(c) for c in lv])
    ax.minorticks_off()
    ax.set_xlabel("concurrent requests")


def _band(ax: Axes, x, y, lo, hi, color: str, label: str, ls: str = "-", marker: str = "o") -> None:
    ax.plot(x, y, ls=ls, marker=marker, color=color, label=label, ms=4)
    if lo is not None and hi is not None and np.isfinite(np.asarray(lo, float)).any():
        ax.fill_between(x, lo, hi, color=color, alpha=0.15, lw=0)


# per group of axes sharing a y axis: the estimates drawn so far, and which axes say they cut an interval
_RATIO_AXES: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def fit_ratio_axis(ax: Axes, estimates, lo=None, hi=None, *, bars: bool = False) -> None:
    """Fit a ratio axis (speedups: 1.0 always in view) to the estimates drawn on it, not to their
    intervals: an interval of a few starts with one degree of freedom can run to 0.05x or 40x and
    would flatten every curve. Intervals that run past the axis are cut at it and the axis says so.
    Called by each panel that draws ratios; calls on the same axes add up."""
    # axes sharing their y axis (sharey=True) share one range: fitted to all of them
    key = min(ax.get_shared_y_axes().get_siblings(ax), key=id)
    seen = _RATIO_AXES.setdefault(key, {"points": [1.0], "notes": set()})
    seen["points"] += [float(v) for v in np.asarray(estimates, float) if np.isfinite(v)]
    top, bottom = max(seen["points"]), min(seen["points"])
    pad = 0.35 * max(top - bottom, 0.3)
    low, high = (0.0 if bars else max(0.0, bottom - pad)), top + pad
    ax.set_ylim(low, high)
    cut = lo is not None and hi is not None and any(
        e > high or e < low for e in np.r_[np.asarray(lo, float), np.asarray(hi, float)] if np.isfinite(e))
    if cut and id(ax) not in seen["notes"]:
        seen["notes"].add(id(ax))
        ax.text(0.99, 0.01, "intervals cut at the axis", transform=ax.transAxes, fontsize=6.5, color="0.4",
                ha="right", va="bottom", style="italic")


def speedup_curves(ax: Axes, table: pd.DataFrame, *, hue: str = "arm", y: str = "speedup",
                   lo: str | None = "speedup_lo", hi: str | None = "speedup_hi",
                   colors: dict[str, str] | None = None, ls: str = "-", label_suffix: str = "",
                   title: str | None = None) -> None:
    """Speedup vs concurrency, one line per ``hue`` value, band = interval, 1.0 line drawn."""
    colors = colors or arm_colors(table[hue])
    for key, g in table.sort_values("concurrency").groupby(hue, sort=True):
        band = (g[lo], g[hi]) if lo in g and hi in g else (None, None)
        _band(ax, g["concurrency"], g[y], *band, color=colors.get(key, "k"), label=f"{key}{label_suffix}",
              ls=ls)
        fit_ratio_axis(ax, g[y], *band)
    ax.axhline(1.0, color="0.3", lw=0.9, ls=":")
    concurrency_axis(ax, table["concurrency"])
    ax.set_ylabel("speedup (drafter on / off)")
    if title:
        ax.set_title(title)


def mark_crossing(ax: Axes, at: float | None, lo: float | None = None, hi: float | None = None,
                  color: str = "k") -> None:
    """Where a curve crosses 1.0: the bracket between the last level it pays at and the first it
    loses at (family-wise) as a horizontal bar, and the estimates' interpolated crossing as an
    open marker (interpolated, not measured)."""
    if lo is not None and hi is not None and np.isfinite(lo) and np.isfinite(hi):
        ax.plot([lo, hi], [1.0, 1.0], color=color, lw=4, alpha=0.35, solid_capstyle="butt")
    if at is None or not np.isfinite(at):
        return
    ax.plot([at], [1.0], marker="v", color=color, ms=7, ls="none", mfc="none")
    ax.annotate(f"c≈{at:.1f} (interp.)", (at, 1.0), textcoords="offset points", xytext=(4, 6), fontsize=8,
                color=color)


def crossings(ax: Axes | None, table: pd.DataFrame, title: str, *, hue: str = "arm",
              colors: dict[str, str] | None = None, metric: str = "speedup") -> list[str]:
    """Mark where each curve of ``table`` crosses 1.0 (the bracket the answer across levels gives,
    :mod:`specnb.analysis.thresholds`, and the interpolated crossing of the estimates), and return
    one markdown line per curve.

    ``table`` is (a slice of) :func:`specnb.analysis.tables.summarize`'s table, which carries its
    :class:`~specnb.analysis.speedups.Speedups` in ``attrs``.
    """
    sp = table.attrs.get("speedups")
    if sp is None:
        raise ValueError("table has no speedups attached: build it with specnb.analysis.summarize")
    colors = colors or arm_colors(table[hue])
    keys = [k for k in sp.group_keys if k in table]
    wanted = {tuple(r) for r in table[keys].drop_duplicates().itertuples(index=False)}
    lines = []
    for th in thresholds(sp, metric):
        if tuple(th.group.get(k) for k in keys) not in wanted:
            continue
        key = th.group.get(hue)
        if ax is not None and (th.bracketed or th.kind == "crosses"):
            mark_crossing(ax, th.concurrency if th.kind == "crosses" else None,
                          th.lo if th.bracketed else None, th.hi if th.bracketed else None, color=colors.get(key, "k"))
        text = format_threshold(th, omit=tuple(k for k in th.group if k != hue))
        lines.append(f"- **{title}**: {text}")
    return lines


def throughput_curves(ax: Axes, table: pd.DataFrame, *, hue: str = "arm",
                      colors: dict[str, str] | None = None, title: str | None = None) -> None:
    """Absolute output tok/s of the baseline (dashed, grey) and each drafter arm vs concurrency."""
    colors = colors or arm_colors(table[hue])
    base_done = False
    for key, g in table.sort_values("concurrency").groupby(hue, sort=True):
        if not base_done and "base_tok_s" in g:
            b = table.drop_duplicates("concurrency").sort_values("concurrency")
            ax.plot(b["concurrency"], b["base_tok_s"], ls="--", marker="s", color="0.45", ms=3.5,
                    label="no drafter")
            base_done = True
        ax.plot(g["concurrency"], g["spec_tok_s"], marker="o", ms=4, color=colors.get(key, "k"), label=str(key))
    concurrency_axis(ax, table["concurrency"])
    ax.set_ylabel("output tok/s (all users)")
    ax.set_ylim(bottom=0)
    if title:
        ax.set_title(title)


def acceptance_curves(ax: Axes, table: pd.DataFrame, *, hue: str = "arm",
                      colors: dict[str, str] | None = None, title: str | None = None) -> None:
    """Mean acceptance length (solid, left) and the share of output the drafter supplied
    (dotted, right): n-gram's acceptance length counts only steps with a draft."""
    colors = colors or arm_colors(table[hue])
    ax2 = ax.twinx()
    for key, g in table.sort_values("concurrency").groupby(hue, sort=True):
        c = colors.get(key, "k")
        ax.plot(g["concurrency"], g["acceptance_length"], marker="o", ms=4, color=c, label=f"{key}")
        if "accepted_output_share" in g and g["accepted_output_share"].notna().any():
            ax2.plot(g["concurrency"], 100 * g["accepted_output_share"], ls=":", marker=".", color=c)
    concurrency_axis(ax, table["concurrency"])
    ax.set_ylabel("mean acceptance length (tokens/step)")
    ax.set_ylim(bottom=1.0)
    ax2.set_ylabel("output supplied by drafter, % (dotted)")
    ax2.set_ylim(0, 100)
    ax2.spines["right"].set_visible(True)
    ax2.grid(False)
    if title:
        ax.set_title(title)


def heatmap(ax: Axes, pivot: pd.DataFrame, *, fmt: str = "{:.2f}", center: float | None = 1.0,
            cmap: str = "RdBu", title: str | None = None, cbar_label: str = "") -> None:
    """A labelled heatmap; with ``center`` the colours diverge around it (1.0 for speedups)."""
    from matplotlib.colors import TwoSlopeNorm

    data = pivot.to_numpy(dtype=float)
    norm = None
    if center is not None and np.isfinite(data).any():
        # symmetric in ratio around the centre: 0.8x and 1.25x are equally saturated, and a
        # 0.99x next to a 1.8x stays pale instead of taking the darkest colour of its half
        finite = data[np.isfinite(data) & (data > 0)]
        span = max(float(finite.max()) / center, center / float(finite.min()), 1.01) if finite.size else 1.01
        norm = TwoSlopeNorm(vcenter=center, vmin=center / span, vmax=center * span)
    im = ax.imshow(data, cmap=cmap, norm=norm, aspect="auto")
    ax.set_xticks(range(pivot.shape[1]), [str(c) for c in pivot.columns], rotation=30, ha="right")
    ax.set_yticks(range(pivot.shape[0]), [str(i) for i in pivot.index])
    ax.grid(False)
    for (i, j), v in np.ndenumerate(data):
        if np.isfinite(v):
            strong = norm is not None and abs(float(norm(v)) - 0.5) > 0.35
            ax.text(j, i, fmt.format(v), ha="center", va="center", fontsize=8,
                    color="white" if strong else "black")
    cb = ax.figure.colorbar(im, ax=ax, shrink=0.85)
    cb.set_label(cbar_label)
    if title:
        ax.set_title(title)


def grouped_bars(ax: Axes, table: pd.DataFrame, *, group: str, hue: str, y: str,
                 lo: str | None = None, hi: str | None = None, colors: dict[str, str] | None = None,
                 order: Sequence[str] | None = None, title: str | None = None, ylabel: str = "",
                 ratio: bool = False) -> None:
    """Bars of ``y`` per ``group`` (x) and ``hue`` (colour), error bars from ``lo``/``hi``
    (``ratio``: the bars are ratios, the axis fitted to them: :func:`fit_ratio_axis`)."""
    groups = list(order) if order is not None else list(dict.fromkeys(table[group]))
    hues = list(dict.fromkeys(table[hue]))
    colors = colors or arm_colors(hues)
    width = 0.8 / max(len(hues), 1)
    for k, h in enumerate(hues):
        sub = table[table[hue] == h].set_index(group).reindex(groups)
        x = np.arange(len(groups)) + (k - (len(hues) - 1) / 2) * width
        err = None
        if lo and hi and lo in sub and hi in sub:
            err = np.vstack([(sub[y] - sub[lo]).clip(lower=0), (sub[hi] - sub[y]).clip(lower=0)])
        ax.bar(x, sub[y], width=width * 0.92, color=colors.get(h, "0.5"), label=str(h), yerr=err,
               capsize=2.5, error_kw={"lw": 0.8})
        if err is not None and ratio:
            fit_ratio_axis(ax, sub[y], sub[lo], sub[hi], bars=True)
    ax.set_xticks(range(len(groups)), groups)
    ax.set_ylabel(ylabel)
    if title:
        ax.set_title(title)


def published_note(ax: Axes, text: str) -> None:
    """Label a panel as transcribed published data (never drawn on a measured axis)."""
    ax.text(0.01, 0.99, text, transform=ax.transAxes, fontsize=7, color="0.35", va="top", ha="left",
            style="italic")



def mark_best(ax: Axes, table: pd.DataFrame, *, group: str, hue: str, y: str, top: str,
              order: Sequence[str]) -> pd.Series:
    """Star the bar of :func:`grouped_bars` with the highest ``y`` (drawn above ``top``, e.g.
    its max over repeats) and return that row."""
    best = table.loc[table[y].idxmax()]
    hues = list(dict.fromkeys(table[hue]))
    x = list(order).index(best[group]) + (hues.index(best[hue]) - (len(hues) - 1) / 2) * 0.8 / len(hues)
    ax.plot([x], [best[top] * 1.04], marker="*", ms=11, color="k", ls="none")
    return best


def curves_against(ax: Axes, table: pd.DataFrame, x: str, y: str, *, lo: str | None = None,
                   hi: str | None = None, colors: dict[str, str] | None = None, scale: float = 1.0) -> None:
    """``y`` against a condition's parameter ``x`` (e.g. temperature), one line per arm and
    concurrency: colour by arm, line style by concurrency, band from ``lo``/``hi``."""
    colors = colors or arm_colors(table["arm"])
    levels = sorted(table["concurrency"].unique())
    styles = ["-", "--", "-.", ":"]
    for (arm, c), g in table.sort_values(x).groupby(["arm", "concurrency"]):
        ls = styles[levels.index(c) % len(styles)]
        ax.plot(g[x], g[y] * scale if scale != 1.0 else g[y], ls=ls, marker="o", ms=4, color=colors[arm],
                label=f"{arm}, c={c}")
        if lo and hi:
            ax.fill_between(g[x], g[lo], g[hi], color=colors[arm], alpha=0.12, lw=0)
            if scale == 1.0:
                fit_ratio_axis(ax, g[y], g[lo], g[hi])


def frontier(ax: Axes, table: pd.DataFrame, *, colors: dict[str, str] | None = None,
             title: str | None = None) -> None:
    """Per-user decode tok/s (x) against aggregate output tok/s (y), one curve per arm across its
    levels (labelled with the level), the Pareto front over every arm marked with rings and a
    step line (table: :func:`specnb.analysis.latency.frontier`)."""
    colors = colors or arm_colors(table["arm"])
    by_rate = "rate_rps" in table.columns and table["rate_rps"].notna().all()
    level = "rate_rps" if by_rate else "concurrency"
    for arm, g in table.sort_values(level).groupby("arm", sort=True):
        ax.errorbar(g["per_user_tok_s"], g["output_tok_s"],
                    xerr=[g["per_user_tok_s"] - g["per_user_tok_s_min"], g["per_user_tok_s_max"] - g["per_user_tok_s"]],
                    yerr=[g["output_tok_s"] - g["output_tok_s_min"], g["output_tok_s_max"] - g["output_tok_s"]],
                    marker="o", ms=4, lw=1.2, elinewidth=0.6, capsize=0, color=colors.get(arm, "k"), label=str(arm))
        for r in g.itertuples(index=False):
            ax.annotate(f"{getattr(r, level):g}", (r.per_user_tok_s, r.output_tok_s), textcoords="offset points",
                        xytext=(3, 3), fontsize=7, color=colors.get(arm, "k"))
    front = table[table["pareto"]].sort_values("per_user_tok_s")
    ax.plot(front["per_user_tok_s"], front["output_tok_s"], ls="none", marker="o", ms=10, mfc="none", mec="0.2",
            mew=0.9, label="Pareto front")
    ax.plot(front["per_user_tok_s"], front["output_tok_s"], ls=":", color="0.2", lw=0.9, drawstyle="steps-post")
    ax.set_xlabel("per-user decode tok/s (mean 1 / TPOT)")
    ax.set_ylabel("aggregate output tok/s")
    ax.set_ylim(bottom=0)
    ax.set_xlim(left=0)
    if title:
        ax.set_title(title + (" (labels: rate, req/s)" if by_rate else " (labels: concurrency)"))


def latency_vs_rate(ax: Axes, table: pd.DataFrame, metric: str, *, colors: dict[str, str] | None = None,
                    title: str | None = None) -> None:
    """A latency percentile (e.g. ``p99_ttft_ms``) against offered rate, one line per arm, band =
    min-max over repeats where the table has it (:func:`specnb.analysis.latency.latency_by_rate`)."""
    colors = colors or arm_colors(table["arm"])
    for arm, g in table.sort_values("rate_rps").groupby("arm", sort=True):
        lo, hi = (g.get(f"{metric}_min"), g.get(f"{metric}_max"))
        _band(ax, g["rate_rps"], g[metric], lo, hi, color=colors.get(arm, "k"), label=str(arm))
    ax.set_xlabel("offered rate, requests/s")
    ax.set_ylabel(metric.replace("_ms", ", ms").replace("_", " "))
    ax.set_ylim(bottom=0)
    if title:
        ax.set_title(title)


def curves(ax: Axes, table: pd.DataFrame, y: str, *, lo: str | None = None, hi: str | None = None,
           x: str = "concurrency", hue: str = "arm", colors: dict[str, str] | None = None,
           ylabel: str = "", title: str | None = None) -> None:
    """Any measure against concurrency, one line per ``hue`` value, band from ``lo``/``hi``."""
    colors = colors or arm_colors(table[hue])
    for key, g in table.sort_values(x).groupby(hue, sort=True):
        band = (g[lo], g[hi]) if lo and hi and lo in g and hi in g else (None, None)
        _band(ax, g[x], g[y], *band, color=colors.get(key, "k"), label=str(key))
    if x == "concurrency":
        concurrency_axis(ax, table[x])
    ax.set_ylabel(ylabel or y)
    ax.set_ylim(bottom=0)
    if title:
        ax.set_title(title)
