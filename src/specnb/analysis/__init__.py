"""Analysis: from ledger frames to the answers, with intervals. Reads ledgers, never a server.

A sweep answers one operational question: below which concurrency does this drafter pay on
this endpoint and workload? One number per point cannot answer it honestly, because the
same CPU server measures up to 1.5x apart between two starts. The modules, in the order
the data flows through them:

- :mod:`~specnb.analysis.pairing`: the one place a speedup is formed, and the rules every
  analysis shares (usable points, the baseline arm, pair keys);
- :mod:`~specnb.analysis.requests`: per-request terms, and each prompt's influence on a ratio;
- :mod:`~specnb.analysis.estimator`: the one estimator and interval (server starts and the
  panel's prompts within their categories; docs/statistics.md);
- :mod:`~specnb.analysis.design`: how a run spends its error rate (fixed repeats, sequential
  looks, an adaptive search's rounds);
- :mod:`~specnb.analysis.speedups`: the paired table every answer reads, one interval per level;
- :mod:`~specnb.models.crossing` and :mod:`~specnb.analysis.thresholds`: what holds across a
  curve's levels (a fixed sequence, family-wise) and where the crossing lies;
- :mod:`~specnb.analysis.decisions`: attach the drafter or not, with seed 004's rule;
- :mod:`~specnb.analysis.kv`: the KV pool the drafter takes (seed 000);
- :mod:`~specnb.analysis.lossless`: whether the drafter changed the outputs at temperature 0;
- :mod:`~specnb.analysis.mix`: the speedup to expect on a traffic mix;
- :mod:`~specnb.analysis.tables`: the tables notebooks draw from;
- :mod:`~specnb.analysis.text`: the formatters, and :mod:`~specnb.analysis.report`: what
  ``specnb report`` prints, section by section.
"""

from __future__ import annotations

from specnb.analysis.bootstrap import DEFAULT_N_BOOT, DEFAULT_SEED
from specnb.analysis.decisions import Decision, decide
from specnb.analysis.design import Design
from specnb.analysis.estimator import DEFAULT_CONFIDENCE, Estimate, Sample, Scope, estimate
from specnb.analysis.kv import kv_capacity
from specnb.analysis.lossless import lossless, lossless_summary
from specnb.analysis.mix import MixEstimate, category_speedups, expected_speedup
from specnb.analysis.pairing import (
    AnalysisError,
    PairingError,
    baseline_arm,
    paired,
    pairing_notes,
    speedup_table,
    usable,
)
from specnb.analysis.speedups import METRICS, Speedups, group_keys, paired_speedups
from specnb.analysis.tables import (
    absolute,
    by_category,
    failure_reasons,
    label_conditions,
    run_summary,
    summarize,
)
from specnb.analysis.text import (
    format_category_acceptance,
    format_decision,
    format_decisions,
    format_kv_capacity,
    format_speedup_table,
    format_threshold,
    format_thresholds,
)
from specnb.analysis.thresholds import Threshold, thresholds
from specnb.models.crossing import crossing, crossings

__all__ = [
    "DEFAULT_CONFIDENCE",
    "DEFAULT_N_BOOT",
    "DEFAULT_SEED",
    "METRICS",
    "AnalysisError",
    "Decision",
    "Design",
    "Estimate",
    "MixEstimate",
    "PairingError",
    "Sample",
    "Scope",
    "Speedups",
    "Threshold",
    "absolute",
    "baseline_arm",
    "by_category",
    "category_speedups",
    "crossing",
    "crossings",
    "decide",
    "estimate",
    "expected_speedup",
    "failure_reasons",
    "format_category_acceptance",
    "format_decision",
    "format_decisions",
    "format_kv_capacity",
    "format_speedup_table",
    "format_threshold",
    "format_thresholds",
    "group_keys",
    "kv_capacity",
    "label_conditions",
    "lossless",
    "lossless_summary",
    "paired",
    "paired_speedups",
    "pairing_notes",
    "run_summary",
    "speedup_table",
    "summarize",
    "thresholds",
    "usable",
]
