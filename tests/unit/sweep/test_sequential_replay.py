"""The stopping rule replayed over committed runs (issue 45): real ledgers, no server.

- The demo's shape measured with fixed work (five repeats of every level,
  ``notebooks/params/demo-fixed/concurrency.yaml``): replaying the rule look by look over the
  recorded repeats, each level stops at a decision the whole run's interval (the report's bootstrap
  over all five repeats and the prompts) agrees with.
- The committed ``make demo`` run (sequential): every round's record is what the rule says of the
  ledgers measured before that round (the looks, the levels kept open, why the rounds stopped), so
  the run's early stops can be checked by anyone from its ledgers alone.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from specnb import paths
from specnb.analysis.bootstrap import bootstrap_speedups
from specnb.analysis.sequential import LOSES, PAYS, SequentialRule, first_decision
from specnb.ledger import load_ledgers
from specnb.sweep.sequential import across_prompts, level_ratios, next_round, prompt_spread
from specnb.sweep.spec import SweepSpec

FIXED = paths.LEDGERS / "concurrency" / "cpu-demo-fixed" / "20261204T174738Z" / "default"
# the committed make demo runs: before the across-prompts reading, and with it
DEMOS = [paths.LEDGERS / "concurrency" / "cpu-demo" / run / "default" for run in ("20261204T180838Z", "20261204T204612Z")]


def _whole_run_decisions(df) -> dict[tuple[str, float], str | None]:
    """Per (arm, level): the report's reading of the whole run (its 95 % bootstrap interval)."""
    table = bootstrap_speedups(df).table
    out = {}
    for r in table.itertuples():
        out[(r.arm, float(r.concurrency))] = PAYS if r.speedup_lo > 1 else LOSES if r.speedup_hi < 1 else None
    return out


def test_replayed_over_five_fixed_repeats_the_rule_stops_at_the_whole_runs_decisions():
    df = load_ledgers(FIXED)
    rule = SequentialRule(alpha=0.05, first=3, last=5)
    whole = _whole_run_decisions(df)
    stops = {}
    for r in level_ratios(df):
        assert r["repeats"] == [0, 1, 2, 3, 4], r
        stop = first_decision(rule, r["ratios"])
        assert stop is not None
        stops[(r["arm"], r["level"])] = (stop.n, stop.decision)
        if stop.decision is not None:  # a level the rule would have stopped: the whole run says the same
            assert stop.decision == whole[(r["arm"], r["level"])], (r, stop, whole)
    assert stops == STOPS  # where each level would have stopped (measured: see STOPS)


def test_more_repeats_narrow_the_starts_not_the_prompts_and_the_report_says_which_settles_a_level():
    """The panel sends the same prompts in every repeat: over the fixed run's first 3 and all 5
    repeats the start half-width narrows while the prompt spread holds, so a level this panel
    decides but its prompts do not is settled by a larger panel, not by more repeats."""
    df = load_ledgers(FIXED)
    rule = SequentialRule(alpha=0.05, first=3, last=5)
    at = {n: (prompt_spread(df[df["repeat"] < n]), {(r["level"]): r for r in level_ratios(df[df["repeat"] < n])})
          for n in (3, 5)}
    for level in (1.0, 2.0, 4.0):
        key = ("copy", level, "ngram-k4")
        p3, p5 = at[3][0][key], at[5][0][key]
        assert 0 < p3 and abs(p5 / p3 - 1) < 0.2, (level, p3, p5)  # the prompts' spread stays
        a3 = across_prompts(rule, rule.look(at[3][1][level]["ratios"]), p3)
        a5 = across_prompts(rule, rule.look(at[5][1][level]["ratios"]), p5)
        assert a5["starts_half"] < a3["starts_half"]  # the starts' narrows with repeats
        assert a3["lo"] < rule.look(at[3][1][level]["ratios"]).lo  # the prompts only ever widen it
    # c=4: 1.33x, decided on this panel at the first look ([1.12, 1.57]); across prompts like these
    # it is open, and the prompts (not the starts) are what keep it so
    a = across_prompts(rule, rule.look(at[3][1][4.0]["ratios"]), at[3][0][("copy", 4.0, "ngram-k4")])
    assert a["decision"] is None and a["prompts_half"] > a["starts_half"]
    from specnb.ledger.runs import across_prompts_text
    assert "a larger panel_size would narrow that part" in across_prompts_text(a, decided=True)
    assert "this panel only" in across_prompts_text(a, decided=True)


def _replay_folder(src: Path, dst: Path, repeats: int) -> Path:
    """The run as it stood before a round: its sweep record and the points of the first
    ``repeats`` repeats (no sequential records: the round is decided afresh)."""
    for f in [*src.rglob("*.json"), *src.rglob("*.parquet")]:
        rel = f.relative_to(src)
        if rel.parts[0] in ("sequential", "timings"):
            continue
        stem = f.name.split(".")[0]
        if "-r" in stem and stem.rsplit("-r", 1)[1].isdigit() and int(stem.rsplit("-r", 1)[1]) >= repeats:
            continue
        (dst / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(f, dst / rel)
    return dst


@pytest.mark.parametrize("DEMO", DEMOS, ids=lambda p: p.parent.name)
def test_the_demo_runs_rounds_are_what_the_rule_says_of_its_ledgers(tmp_path, DEMO):  # noqa: N803
    spec = SweepSpec.parse(json.loads((DEMO / "sweep.json").read_text())["spec"])
    assert spec.sequential is not None
    records = sorted((DEMO / "sequential").glob("round-*.json"))
    assert records, "the demo run wrote no sequential record"
    for f in records:
        doc = json.loads(f.read_text())
        k = doc["round"]
        folder = _replay_folder(DEMO, tmp_path / f"round-{k}", spec.repeats + k - 1)
        levels = next_round(spec, folder, k, elapsed_s=doc["elapsed_s"], echo=lambda _: None)
        again = json.loads((folder / "sequential" / f.name).read_text())
        assert levels == {wl: [(float(c), why) for c, why in lv] for wl, lv in doc["levels"].items()}
        # a record keeps what the rule wrote then (one made before the across-prompts reading has none)
        shown = [{k: v for k, v in lk.items() if k in old} for lk, old in zip(again["looks"], doc["looks"], strict=True)]
        if DEMO == DEMOS[-1]:
            assert all("across_prompts" in lk for lk in doc["looks"]) and shown == again["looks"]
        assert shown == doc["looks"] and again["stopped"] == doc["stopped"], f.name
    # every level a round decided is decided the same way by the whole run's interval
    whole = _whole_run_decisions(load_ledgers(DEMO))
    decided = {(lk["arm"], lk["level"]): lk["state"].split(": ")[1] for f in records
               for lk in json.loads(f.read_text())["looks"] if lk["state"].startswith("decided")}
    assert decided, "no level was decided"
    for key, decision in decided.items():
        assert whole[key] == decision, (key, decision, whole)


# 20261204T174738Z (2026-12-04, 2-vCPU AMD EPYC with AVX-512 BF16, five repeats in 9 min 38 s): the
# per-repeat ratios 1.75 1.68 1.67 1.96 1.84 (c=1), 2.09 1.61 1.76 1.77 1.68 (c=2) and 1.35 1.37 1.27
# 1.21 1.19 (c=4) decide every level at the first look (3 repeats: [1.51, 1.92], [1.01, 3.23],
# [1.12, 1.57]); the whole run's bootstrap says pays at each ([1.45, 2.24], [1.44, 2.29], [1.04, 1.60])
STOPS = {("ngram-k4", 1.0): (3, PAYS), ("ngram-k4", 2.0): (3, PAYS), ("ngram-k4", 4.0): (3, PAYS)}


def test_the_prompt_spread_of_an_open_loop_run_is_per_offered_rate():
    """A rate sweep's level is its offered rate (its ledgers' concurrency is the in-flight cap)."""
    run = paths.LEDGERS / "concurrency" / "cpu-rate" / "20261130T195637Z"
    df = load_ledgers(run)
    spread = prompt_spread(df)
    rates = sorted({float(r) for r in df["rate_rps"].dropna()})
    assert spread and {k[1] for k in spread} == set(rates), (spread, rates)
    assert all(v > 0 for v in spread.values())
