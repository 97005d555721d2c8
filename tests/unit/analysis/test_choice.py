"""Which drafter to attach: the choice reads each arm's own decision, ranks payers only by their
paired contrast, leaves ceilings out, and says nothing where one kind of drafter was measured."""

from __future__ import annotations

import pandas as pd

from specnb.analysis.choice import choice_lines, drafter_choice
from specnb.analysis.estimator import Estimate, Scope
from specnb.analysis.speedups import Speedups


class _Sp(Speedups):
    """A table as paired_speedups makes it, and contrasts given per (arm, other)."""

    def __init__(self, rows, contrasts=None):
        super().__init__(pd.DataFrame(rows), {}, ["sweep", "arm", "workload"], 0.95, Scope.PROMPTS)
        self.contrasts = contrasts or {}
        self.asked = []

    def contrast(self, group, arm, other, level, **kw):
        self.asked.append((group["workload"], arm, other, level))
        got = self.contrasts.get((arm, other))
        if got is None:
            return None
        r, lo, hi = got
        return Estimate(r, lo, hi, 0.95, 4, 2, 0.1, 3.0, 0.01, 0.0, Scope.PROMPTS, "balanced")


def _row(arm, method, wl, c, x, lo, hi):
    decision = "pays" if lo > 1 else "loses" if hi < 1 else None
    return {"sweep": "s", "arm": arm, "method": method, "workload": wl, "level": float(c), "concurrency": c,
            "rate_rps": None, "speedup": x, "speedup_lo": lo, "speedup_hi": hi, "decision": decision}


def test_attach_the_payer_rank_two_payers_only_by_their_contrast_and_say_when_nothing_pays():
    sp = _Sp([
        _row("ngram", "ngram", "copy", 1, 1.5, 1.2, 1.9), _row("eagle", "eagle3", "copy", 1, 1.3, 1.1, 1.6),
        _row("ngram", "ngram", "free", 1, 0.9, 0.7, 1.1), _row("eagle", "eagle3", "free", 1, 1.2, 1.05, 1.4),
        _row("ngram", "ngram", "free", 4, 0.8, 0.7, 0.9), _row("eagle", "eagle3", "free", 4, 0.9, 0.8, 0.95),
        _row("ngram", "ngram", "copy", 4, 1.0, 0.9, 1.1), _row("eagle", "eagle3", "copy", 4, 0.9, 0.8, 0.95),
    ], contrasts={("ngram", "eagle"): (1.15, 0.97, 1.36)})
    ch = drafter_choice(sp, {"ngram": {"method": "ngram"}, "eagle": {"method": "eagle3"}}).set_index(["workload", "level"])
    assert ch.loc[("copy", 1.0), "choice"] == "ngram" and ch.loc[("free", 1.0), "choice"] == "eagle"
    assert ch.loc[("free", 4.0), "verdict"] == "off" and ch.loc[("copy", 4.0), "verdict"] == "open"
    assert sp.asked == [("copy", "ngram", "eagle", 1.0)]  # only two payers are set against each other
    text = "\n".join(choice_lines(drafter_choice(sp, {}), 0.95))
    assert "copy, c=1: attach ngram (1.50x [1.20, 1.90]); eagle also pays and is not told apart" in text
    assert "free, c=4: leave drafting off, every drafter loses" in text
    assert "copy, c=4: no drafter is known to pay: ngram undecided (1.00x [0.90, 1.10]); eagle loses" in text


def test_a_leader_whose_contrast_excludes_one_is_ahead():
    sp = _Sp([_row("a", "ngram", "copy", 1, 2.0, 1.6, 2.4), _row("b", "eagle3", "copy", 1, 1.2, 1.05, 1.4)],
             contrasts={("a", "b"): (1.6, 1.3, 2.0)})
    text = "\n".join(choice_lines(drafter_choice(sp, {}), 0.95))
    assert "attach a (2.00x [1.60, 2.40]); ahead of b, which also pays, by 1.60x [1.30, 2.00]" in text


def test_ceilings_and_one_kind_of_drafter_give_no_choice():
    rows = [_row("k2", "ngram", "copy", 1, 1.2, 1.1, 1.3), _row("k4", "ngram", "copy", 1, 1.3, 1.1, 1.5),
            _row("ceil", "draft_model", "copy", 1, 1.9, 1.5, 2.2)]
    ch = drafter_choice(_Sp(rows), {"ceil": {"rejection_sample_method": "synthetic"}})
    assert ch.empty and choice_lines(ch, 0.95) == []


def test_the_committed_drafter_run_says_which_drafter_per_workload_and_level():
    from specnb import paths
    from specnb.analysis.report import ReportOptions, drafters
    from specnb.ledger.records import load_run

    lines = drafters(load_run(paths.LEDGERS / "drafter" / "cpu" / "20261206T024704Z"), ReportOptions())
    body = [ln for ln in lines if ln.startswith(("copy, c=", "freeform, c="))]
    assert len(body) == 4  # two workloads x two levels, each answered
    assert any(ln.startswith("freeform, c=1: attach eagle3-k3") for ln in body)
