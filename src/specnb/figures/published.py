"""The seeds' published numbers as figures of their own, never on a measured axis.

Each function reads its transcribed ledger (:mod:`specnb.ledger.published`), draws it in the
published style with a note naming the write-up, and returns the figure and the ledger files
it was drawn from (for :func:`specnb.figures.save.save_figure`'s sidecar). The seeds
themselves warn that their series ran different serving configurations: compare where
curves cross 1.0, not their height.
"""

from __future__ import annotations

import matplotlib.pyplot as plt

from specnb.figures.panels import concurrency_axis, grouped_bars, new_figure, published_note
from specnb.figures.save import PUBLISHED_STYLE, arm_colors
from specnb.ledger.published import load_published

__all__ = ["concurrency_seeds", "quantization_seed000", "temperature_seed000", "parallelism_seed002"]

# seed 000's concurrency table: the three checkpoint rows (one drafter)
_SEED000_ROWS = ["NVFP4-GPTQ, 131k, batch 256", "KV fp8, 256k, edge budget", "INT4, 256k, edge budget"]


def _one_line(ax: plt.Axes) -> None:
    ax.axhline(1.0, color="0.3", lw=0.9, ls=":")


def concurrency_seeds() -> tuple[plt.Figure, list[str]]:
    """Seed 000's speedup per concurrency for three checkpoints, and seed 002's crossover."""
    t0 = load_published("thakicloud-concurrency-speedup")
    t0 = t0[(t0.metric == "speedup_x") & t0.condition.isin(_SEED000_ROWS)].dropna(subset=["value"])
    t2 = load_published("primalabs-crossover")
    fig, axes = new_figure(ncols=2, width=4.4)
    pcol = arm_colors(t0.condition)
    for cond, g in t0.groupby("condition"):
        axes[0][0].plot(g.concurrency.astype(int), g.value, color=pcol[cond], label=cond, **PUBLISHED_STYLE)
    _one_line(axes[0][0])
    concurrency_axis(axes[0][0], t0.concurrency.astype(int))
    axes[0][0].set(ylabel="speedup (on / off)", title="seed 000: one drafter, three checkpoints")
    axes[0][0].legend(loc="lower left", fontsize=7)
    for metric, lab in [("aggregate_throughput_x", "aggregate"),
                        ("aggregate_computed_throughput_x", "computed tokens only"),
                        ("per_user_decode_speed_x", "per user")]:
        g = t2[t2.metric == metric]
        axes[0][1].plot(g.concurrency.astype(int), g.value, label=lab, **PUBLISHED_STYLE)
    _one_line(axes[0][1])
    axes[0][1].set(xlabel="concurrent requests", ylabel="speedup (on / off)", title="seed 002: block drafter, K=7",
                   xticks=[10, 16])
    axes[0][1].legend(loc="upper right", fontsize=7)
    published_note(axes[0][0], "published: seed 000 (ThakiCloud), single runs, B200")
    published_note(axes[0][1], "published: seed 002 (PrimaLabs), B200, MoE, agentic trace")
    return fig, sorted(set(t0.path) | set(t2.path))


def quantization_seed000() -> tuple[plt.Figure, list[str]]:
    """Seed 000's bf16 vs 4-bit checkpoint: absolute throughput and the multiplier."""
    pub = load_published("thakicloud-quantization")
    tput = pub[pub.metric == "throughput_tok_s"].assign(
        arm=lambda d: d.arm.map({"baseline": "no drafter", "speculative": "with drafter"}))
    mult = pub[pub.metric == "speedup_x"]
    fig, axes = new_figure(ncols=2, width=3.6)
    grouped_bars(axes[0][0], tput, group="condition", hue="arm", y="value", ylabel="output tok/s",
                 title="seed 000: absolute", colors={"no drafter": "0.55", "with drafter": "#0072B2"})
    axes[0][1].bar(mult.condition, mult.value, color="#0072B2", alpha=0.8)
    _one_line(axes[0][1])
    axes[0][1].set(title="seed 000: multiplier", ylabel="speedup (on / off)")
    axes[0][0].legend(loc="upper left")
    for ax in axes[0]:
        published_note(ax, "published: seed 000 (ThakiCloud), 27B target, B200")
    return fig, sorted(set(pub.path))


def temperature_seed000() -> tuple[plt.Figure, list[str]]:
    """Seed 000's speedup ranges at temperature 0 and 1 (board-reading drafter, math)."""
    pub = load_published("thakicloud-temperature")
    fig, axes = new_figure(width=4.0)
    ax = axes[0][0]
    for r in pub.itertuples():
        ax.plot([r.temperature, r.temperature], [r.low, r.high], lw=6, alpha=0.6, color="#D55E00",
                solid_capstyle="butt")
    _one_line(ax)
    ax.set(xlabel="temperature", ylabel="speedup range", title="seed 000: n-gram-like drafter, math", xlim=(-0.3, 1.3))
    published_note(ax, "published: seed 000 (ThakiCloud); ranges, B200")
    return fig, sorted(set(pub.path))


def parallelism_seed002() -> tuple[plt.Figure, list[str]]:
    """Seed 002's layout-vs-drafter comparison on two H100s, as the ranges it printed."""
    pub = load_published("primalabs-parallelism")
    fig, axes = new_figure(width=4.6)
    ax = axes[0][0]
    for i, r in enumerate(pub.itertuples()):
        ax.plot([r.low, r.high], [i, i], lw=7, alpha=0.6, color="#009E73", solid_capstyle="butt")
    ax.set_yticks(range(len(pub)), [c.replace(", either", "\n(either") + ")" for c in pub.condition])
    ax.set(xlabel="advantage, %", title="seed 002: layout vs drafter (2x H100, K=3)")
    ax.set_xlim(0, max(pub.high) * 1.3)
    published_note(ax, "published: seed 002 (PrimaLabs); ranges only")
    return fig, sorted(set(pub.path))
