"""Figures: one way to save them, the panels notebooks share, the seeds' published panels,
and the calculator's figures. Reads tables and ledgers, never a server.

- :mod:`~specnb.figures.save`: one id, SVG + PNG, a fixed style and a sidecar naming the data;
- :mod:`~specnb.figures.panels`: speedup curves with intervals, throughput, acceptance, heatmaps, bars;
- :mod:`~specnb.figures.published`: the seeds' transcribed numbers, in panels of their own;
- :mod:`~specnb.figures.calculator`: the seeds' formulas and the step-cost model, with sliders.
"""

from __future__ import annotations

from specnb.figures.save import FIGURES, PUBLISHED_STYLE, apply_style, arm_colors, save_figure, sources_digest

__all__ = ["FIGURES", "PUBLISHED_STYLE", "apply_style", "arm_colors", "save_figure", "sources_digest"]
