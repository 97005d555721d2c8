"""Figures and tables of the calculator notebook (``notebooks/07_calculator.py``).

The calculator puts the seeds' closed-form models (:mod:`specnb.models.theory`) and the step-cost
model (:mod:`specnb.models.stepcost`) in front of a reader with their own numbers: seed 000's "put
your own acceptance rate in", seed 002's best K for an overhead (its Figure 3), its Amdahl
table and curves (Figure 7), seed 000's KV seats, and the speedup-vs-concurrency curve the
step-cost model predicts. The builders live here, not in the notebook, so the notebook stays
narrative and the same figure comes out whether it runs under papermill or behind sliders.

Published (transcribed) and measured data never share an axis (see :mod:`specnb.figures.save`):
where a figure shows both, they sit in separate panels.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd

from specnb.figures.save import PUBLISHED_STYLE, apply_style, arm_colors
from specnb.models.calibration import Calibration
from specnb.models.stepcost import Scenario, predict, predicted_crossing
from specnb.models.theory import (
    acceptance_length,
    alpha_from_acceptance_length,
    amdahl_ceiling,
    amdahl_gain,
    best_k,
    relative_throughput,
    required_decode_speedup,
)

__all__ = [
    "interactive_mode",
    "explore",
    "mal_figure",
    "published_fit_figure",
    "best_k_figure",
    "amdahl_table",
    "amdahl_figure",
    "kv_sessions_figure",
    "stepcost_figure",
    "calibration_figure",
]

_ALPHAS = np.linspace(0.0, 0.99, 199)


def interactive_mode(flag: bool | None) -> bool:
    """Whether to draw sliders: ``flag`` if given; ``None`` means only inside a kernel a Jupyter
    server started (it sets ``JPY_SESSION_NAME``; papermill and nbclient do not)."""
    if flag is not None:
        return bool(flag)
    try:
        from IPython import get_ipython
    except ImportError:
        return False
    shell = get_ipython()
    return shell is not None and hasattr(shell, "kernel") and bool(os.environ.get("JPY_SESSION_NAME"))


def explore(draw: Callable[..., plt.Figure], **sliders: Any) -> None:
    """Sliders over ``draw``'s arguments (ipywidgets.interact); each change redraws the figure."""
    import ipywidgets

    def redraw(**kwargs: Any) -> None:
        draw(**kwargs)
        plt.show()

    ipywidgets.interact(redraw, **sliders)


def _fig(ncols: int, width: float = 5.2, height: float = 3.6) -> tuple[plt.Figure, np.ndarray]:
    apply_style()
    fig, axes = plt.subplots(1, ncols, figsize=(width * ncols, height), squeeze=False)
    return fig, axes[0]


def _mal_curves(ax: plt.Axes, ks: Sequence[int]) -> None:
    for k in sorted(set(ks)):
        ax.plot(_ALPHAS, [acceptance_length(a, k) for a in _ALPHAS], lw=1.2, label=f"K = {k}")
    ax.set_xlabel("alpha: chance one draft token is accepted")
    ax.set_ylabel("mean acceptance length (tokens per step)")
    ax.set_xlim(0, 1)


def mal_figure(alpha: float, k: int, k_values: Sequence[int], published: Mapping[str, float],
               published_k: int, measured: pd.DataFrame | None) -> plt.Figure:
    """MAL(alpha, K) for several K; left: your alpha and seed 000's published lengths, right:
    lengths measured in ledgers (``workload_acceptance`` rows), each on the curve of its own K."""
    fig, (left, right) = _fig(2)
    _mal_curves(left, [*k_values, k, published_k])
    left.plot([alpha], [acceptance_length(alpha, k)], "o", color="black", zorder=5,
              label=f"your alpha {alpha:.2f}, K = {k}: {acceptance_length(alpha, k):.2f}")
    for label, mal in published.items():
        a = alpha_from_acceptance_length(mal, published_k)
        left.axhline(mal, color="grey", lw=1.0, linestyle=PUBLISHED_STYLE["linestyle"])
        left.plot([a], [mal], marker=PUBLISHED_STYLE["marker"], color="grey", linestyle="none")
        left.annotate(f"{label} {mal:g} (alpha {a:.2f} at K = {published_k})", (0.02, mal), xytext=(0, 3),
                      textcoords="offset points", fontsize=8)
    left.set_title("formula; dashed: published (seed 000)")
    left.legend(loc="upper left", bbox_to_anchor=(0.0, 0.9))
    if measured is None or measured.empty:
        _mal_curves(right, k_values)
        right.text(0.5, 0.5, "no measured ledgers", ha="center", transform=right.transAxes)
    else:
        _mal_curves(right, [*k_values, *measured["k"].astype(int)])
        colors = arm_colors(f"{r.arm} / {r.workload}" for r in measured.itertuples())
        for r in measured.itertuples():
            name = f"{r.arm} / {r.workload}"
            right.axhline(r.mean_acceptance_length, color=colors[name], lw=1.0, linestyle=":")
            right.plot([r.alpha], [r.mean_acceptance_length], "o", color=colors[name],
                       label=f"{name}: {r.mean_acceptance_length:.2f} at K = {r.k} "
                             f"({r.tokens_per_step:.2f} per step incl. undrafted)")
        right.legend(loc="upper left", fontsize=7.5)
    right.set_title("formula; dotted: measured (ledgers)")
    fig.tight_layout()
    return fig


def best_k_figure(alpha: float, overhead: float, overheads: Sequence[float], k_max: int = 16) -> plt.Figure:
    """Seed 002 Figure 3: MAL / T(K) against K for several overheads v + d, and the best K as
    the overhead grows (what concurrency does)."""
    fig, (left, right) = _fig(2)
    ks = np.arange(k_max + 1)
    for v in sorted({*overheads, overhead}):
        y = [relative_throughput(alpha, int(k), v) for k in ks]
        kb, sb = best_k(alpha, v, k_max)
        lw = 2.2 if v == overhead else 1.0
        left.plot(ks, y, lw=lw, label=f"v + d = {v:g}: best K = {kb} ({sb:.2f}x)")
        left.plot([kb], [sb], "o", color=left.lines[-1].get_color())
    left.axhline(1.0, color="black", lw=0.8)
    left.set(xlabel="draft length K", ylabel="relative throughput MAL / (1 + (v + d) K)",
             title=f"alpha = {alpha:.2f}")
    left.legend()
    grid = np.linspace(0.0, max(0.5, 1.5 * overhead), 201)
    right.step(grid, [best_k(alpha, v, k_max)[0] for v in grid], where="post", color="black")
    right.plot([overhead], [best_k(alpha, overhead, k_max)[0]], "o", color="C3", label=f"v + d = {overhead:g}")
    right.set(xlabel="per-token step overhead v + d (share of one decode step)", ylabel="best K",
              title="more overhead moves the best K left")
    right.legend()
    fig.tight_layout()
    return fig


def amdahl_table(fractions: Sequence[float], targets: Sequence[float]) -> pd.DataFrame:
    """Seed 002's table: decode speedup needed for each end-to-end target, per decode share."""
    rows = {f"{g:g}x end to end": [required_decode_speedup(f, g) for f in fractions] for g in targets}
    table = pd.DataFrame.from_dict(rows, orient="index", columns=[f"decode = {100 * f:.0f}%" for f in fractions])
    table.loc["ceiling (decode free)"] = [amdahl_ceiling(f) for f in fractions]
    return table


def amdahl_figure(fractions: Sequence[float], decode_fraction: float, target_gain: float) -> plt.Figure:
    """Seed 002 Figure 7: end-to-end gain against decode speedup, with each ceiling 1 / (1 - f)."""
    fig, (ax,) = _fig(1, width=6.4, height=4.0)
    x = np.logspace(0, math.log10(50), 200)
    for f in sorted({*fractions, decode_fraction}):
        (line,) = ax.plot(x, [amdahl_gain(f, v) for v in x], lw=2.2 if f == decode_fraction else 1.2,
                          label=f"decode = {100 * f:.0f}% (ceiling {amdahl_ceiling(f):.1f}x)")
        if f < 1:
            ax.axhline(amdahl_ceiling(f), color=line.get_color(), lw=0.8, linestyle=":")
    need = required_decode_speedup(decode_fraction, target_gain)
    if math.isfinite(need):
        ax.plot([need], [target_gain], "o", color="black",
                label=f"{target_gain:g}x end to end needs {need:.2f}x decode")
    ax.set_xscale("log")
    ax.set(xlabel="decode speedup x", ylabel="end-to-end speedup G = 1 / ((1 - f) + f / x)",
           title="Amdahl: how much decode must speed up")
    ax.legend()
    fig.tight_layout()
    return fig


def kv_sessions_figure(sessions: float, at_context: float, drafter_share: float,
                       measured_pools: Mapping[str, float] | None) -> plt.Figure:
    """Seed 000's KV seats: sessions = pool / context, without and with a drafter taking a share
    of the pool; right: the pools measured in ledgers (tokens per arm)."""
    fig, (left, right) = _fig(2)
    ctx = np.logspace(math.log10(4096), math.log10(1_048_576), 200)
    pool = sessions * at_context
    left.plot(ctx, pool / ctx, label="no drafter", **PUBLISHED_STYLE | {"marker": None})
    left.plot(ctx, pool * (1 - drafter_share) / ctx, label=f"drafter takes {100 * drafter_share:.0f}% of the pool",
              **PUBLISHED_STYLE | {"marker": None})
    for s in (sessions, sessions * (1 - drafter_share)):
        left.plot([at_context], [s], "s", color="black")
        left.annotate(f"{s:.1f}", (at_context, s), xytext=(5, 2), textcoords="offset points")
    left.set(xscale="log", yscale="log", xlabel="context length (tokens)", ylabel="concurrent sessions",
             title="published example (seed 000)")
    left.legend()
    if measured_pools:
        cm = np.logspace(math.log10(256), math.log10(65_536), 200)
        for arm, tokens in sorted(measured_pools.items()):
            right.plot(cm, tokens / cm, label=f"{arm}: {tokens:,.0f} tokens")
        right.set(xscale="log", yscale="log")
        right.legend()
    else:
        right.text(0.5, 0.5, "no measured ledgers", ha="center", transform=right.transAxes)
    right.set(xlabel="context length (tokens)", ylabel="concurrent sessions", title="measured KV pools (ledgers)")
    fig.tight_layout()
    return fig


def stepcost_figure(scenario: Scenario, c_max: float = 512.0) -> plt.Figure:
    """Seed 002 Figure 2 as curves: the step's parts, tok/s of both arms, and their ratio."""
    grid = 2.0 ** np.linspace(0, math.log2(c_max), 161)
    p = predict(scenario, grid)
    kind, at = predicted_crossing(scenario, c_max=c_max)
    fig, axes = _fig(3, width=4.6)
    ax = axes[0]
    ax.plot(grid, p["memory_ms"], label="memory floor (weights + KV reads)")
    ax.plot(grid, p["base_compute_ms"], label="compute, baseline")
    ax.plot(grid, p["spec_compute_ms"], label=f"compute, verifying K = {scenario.k}")
    ax.plot(grid, p["drafting_ms"], label="drafting")
    if scenario.hardware.step_overhead_s > 0:
        ax.plot(grid, p["overhead_ms"], color="grey", label="fixed per-step overhead")
    ax.plot(grid, p["base_step_ms"], color="black", lw=1.8, label="step, baseline")
    ax.plot(grid, p["spec_step_ms"], color="black", lw=1.8, linestyle="--", label="step, speculative")
    ax.set(xscale="log", yscale="log", xlabel="concurrent requests", ylabel="ms per step", title="one decode step")
    ax.legend(fontsize=7)
    ax = axes[1]
    ax.plot(grid, p["base_tok_s"], color="C0", label="aggregate, baseline")
    ax.plot(grid, p["spec_tok_s"], color="C1", label="aggregate, speculative")
    ax.plot(grid, p["base_per_user_tok_s"], color="C0", linestyle=":", label="per user, baseline")
    ax.plot(grid, p["spec_per_user_tok_s"], color="C1", linestyle=":", label="per user, speculative")
    ax.set(xscale="log", yscale="log", xlabel="concurrent requests", ylabel="output tok/s", title="throughput")
    ax.legend(fontsize=7)
    ax = axes[2]
    ax.plot(grid, p["speedup"], color="black")
    ax.axhline(1.0, color="grey", lw=0.8)
    if kind == "crosses":
        ax.axvline(at, color="C3", lw=1.0, linestyle="--")
        ax.annotate(f"crosses 1.0 at c~{at:.0f}", (at, 1.0), xytext=(4, 8), textcoords="offset points", color="C3")
    nofit = grid[~p["spec_fits"].to_numpy()]
    if nofit.size:
        ax.axvspan(nofit.min(), grid.max(), color="grey", alpha=0.15, label="KV pool too small (speculative)")
        ax.legend(fontsize=7)
    ax.set(xscale="log", xlabel="concurrent requests", ylabel="speculative / baseline tok/s",
           title=f"alpha {scenario.alpha:.2f}, K {scenario.k}, tokens/step {p['tokens_per_step'].iloc[0]:.2f}")
    fig.suptitle(f"{scenario.target.name} on {scenario.hardware.name}, drafter {scenario.drafter.name} "
                 f"(prompt {scenario.prompt_tokens:g}, output {scenario.output_tokens:g} tokens)", fontsize=9.5)
    fig.tight_layout()
    return fig


def calibration_figure(cal: Calibration, scenarios: Mapping[str, Scenario],
                       fitted: Mapping[str, Scenario], measured: pd.DataFrame) -> plt.Figure:
    """Predicted against measured, one column per workload: tok/s of both arms (top) and the
    paired speedup with its [min, max] over repeats (bottom). ``scenarios`` use the baseline fit
    alone; ``fitted`` add the drafting costs fitted to the speculative arm."""
    names = sorted(scenarios)
    apply_style()
    fig, axes = plt.subplots(2, len(names), figsize=(5.0 * len(names), 6.6), squeeze=False)
    pts = cal.points
    for j, wl in enumerate(names):
        c = pts.loc[pts["workload"] == wl, "concurrency"]
        grid = 2.0 ** np.linspace(0, math.log2(max(2.0, 2 * c.max())), 81)
        p, pf = predict(scenarios[wl], grid), predict(fitted[wl], grid)
        ax = axes[0, j]
        for spec, color, label in ((False, "C0", "baseline"), (True, "C1", "speculative")):
            m = pts[(pts["workload"] == wl) & (pts["speculative"] == spec)]
            ax.plot(m["concurrency"], m["output_tok_s"], "o", color=color, alpha=0.7, label=f"measured {label}")
        ax.plot(grid, p["base_tok_s"], color="C0", label="model, baseline (fit)")
        ax.plot(grid, p["spec_tok_s"], color="C1", linestyle="--", label="model, speculative (predicted)")
        ax.plot(grid, pf["spec_tok_s"], color="C1", label="model, speculative (+ fitted drafting)")
        ax.set(xscale="log", xlabel="concurrency", ylabel="output tok/s (steady window)", title=wl)
        ax.legend(fontsize=7)
        ax = axes[1, j]
        m = measured[measured["workload"] == wl]
        for arm, g in m.groupby("arm"):
            ax.errorbar(g["concurrency"], g["speedup"], yerr=[g["speedup"] - g["speedup_min"],
                        g["speedup_max"] - g["speedup"]], fmt="o", capsize=3, label=f"measured {arm} [min, max]")
        ax.plot(grid, p["speedup"], color="black", linestyle="--", label="model (predicted)")
        ax.plot(grid, pf["speedup"], color="black", label="model (+ fitted drafting)")
        ax.axhline(1.0, color="grey", lw=0.8)
        ax.set(xscale="log", xlabel="concurrency", ylabel="speculative / baseline")
        ax.legend(fontsize=7)
    fig.tight_layout()
    return fig


def published_fit_figure(loso: pd.DataFrame, summary: pd.DataFrame) -> plt.Figure:
    """Held-out prediction against published speedup, one panel per source.

    ``loso`` is :func:`specnb.models.gpufit.leave_one_source_out` (each point predicted by a fit
    that never saw its source), with :func:`~specnb.models.gpufit.prediction_band`'s columns when the
    band is to be drawn; ``summary`` its :func:`~specnb.models.gpufit.loso_summary`. Along each curve's
    own axis (concurrency, or K for a curve at one batch size): published points (hollow where read
    off a figure or computed, not printed), the held-out prediction (dashed) and its band (shaded,
    sized without the source).
    """
    sources = list(summary["ledger_id"])
    apply_style()
    cols = min(4, len(sources))
    rows = -(-len(sources) // cols)
    fig, axes = plt.subplots(rows, cols, figsize=(4.4 * cols, 3.6 * rows), squeeze=False)
    stats = summary.set_index("ledger_id")
    banded = "band_low" in loso.columns
    for ax, src in zip(axes.flat, sources, strict=False):
        sel = loso[loso["ledger_id"] == src]
        along_k = (sel["axis"] == "num_speculative_tokens").all()
        xcol = "k" if along_k else "concurrency"
        for i, (cond, g) in enumerate(sel.groupby("condition", sort=True)):
            g = g.sort_values(xcol)
            color = f"C{i % 10}"
            ax.plot(g[xcol], g["predicted"], color=color, linestyle="--", lw=1.2)
            if banded:
                ax.fill_between(g[xcol], g["band_low"], g["band_high"], color=color, alpha=0.12, lw=0)
            printed = ~g["inferred"].astype(bool)
            if printed.any():
                ax.plot(g.loc[printed, xcol], g.loc[printed, "value"], "o", color=color, ms=4, label=cond)
            if not printed.all():
                ax.plot(g.loc[~printed, xcol], g.loc[~printed, "value"], "o", mfc="none", color=color, ms=4,
                        label=None if printed.any() else cond)
        ax.axhline(1.0, color="grey", lw=0.8)
        if not along_k and sel["concurrency"].nunique() > 1:
            ax.set_xscale("log", base=2)
        s = stats.loc[src]
        cover = (f", in band {100 * sel['covered'].mean():.0f} %" if banded else "")
        ax.set(xlabel="K (batch size 1)" if along_k else "concurrency", ylabel="speculative / baseline",
               title=f"{src}\nheld out: median off x{s['median_factor']:.2f}, same side {100 * s['same_side_share']:.0f} %"
                     + cover)
        ax.title.set_fontsize(8)
        ax.legend(fontsize=5, loc="lower left")
    for ax in list(axes.flat)[len(sources):]:
        ax.axis("off")
    fig.text(0.99, 0.001, "dots: published (hollow: read off a figure or computed); dashed: the model fitted without "
             "the source; shaded: its 90 % band, sized from the other sources' held-out errors",
             fontsize=7, color="0.35", ha="right", va="bottom", style="italic")
    fig.tight_layout(rect=(0, 0.02, 1, 1))
    return fig
