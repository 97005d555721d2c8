"""The stopping rule replayed over committed runs: real ledgers, no server.

- The demo's shape measured with fixed work (five repeats of every level,
  ``notebooks/params/demo-fixed/concurrency.yaml``): replaying the demo's looks (after 4 and 6
  repeats) over the recorded repeats, each level stops where the whole run's interval (every
  repeat, orders in the model) says the same.
- The committed ``make demo`` runs: every round's record of a run made under the current rule is
  what the rule says of the ledgers measured before that round (the looks, the levels kept open,
  why the rounds stopped), so the run's early stops can be checked by anyone from its ledgers
  alone; a run made under the earlier rule is reported as such.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from specnb import paths
from specnb.analysis.design import Design
from specnb.analysis.speedups import paired_speedups
from specnb.ledger import load_ledgers
from specnb.ledger.runs import sequential_lines
from specnb.sweep.sequential import next_sequential_round, rule_of
from specnb.sweep.spec import SweepSpec

FIXED = paths.LEDGERS / "concurrency" / "cpu-demo-fixed" / "20261204T174738Z" / "default"
DEMO_ROOT = paths.LEDGERS / "concurrency" / "cpu-demo"


def _runs(current: bool) -> list[Path]:
    """The committed make demo runs with sequential records, made under the current rule (their
    rule names its looks) or under the earlier one."""
    out = []
    for rec in sorted(DEMO_ROOT.glob("*/default/sequential/round-01.json")):
        rule = json.loads(rec.read_text()).get("rule") or {}
        if ("looks" in rule) == current:
            out.append(rec.parent.parent)
    return out


def _decisions(table) -> dict[tuple[str, float], str | None]:
    return {(r.arm, float(r.level)): (r.decision if isinstance(r.decision, str) else None)
            for r in table.itertuples()}


def test_replayed_over_five_fixed_repeats_the_looks_stop_where_the_whole_run_agrees():
    df = load_ledgers(FIXED)
    replay = paired_speedups(df, design=Design(alpha=0.05, looks=(4, 6))).table
    whole = paired_speedups(df).table  # a fixed run: one look at every repeat (5: orders in the model)
    assert set(whole["look"]) == {"every repeat"} and set(whole["n_repeats"]) == {5}
    assert list(replay["n_repeats"]) == [4, 4, 4] and set(replay["look"]) == {"decided at the look after 4 repeats"}
    assert _decisions(replay) == _decisions(whole) == {("ngram-k4", 1.0): "pays", ("ngram-k4", 2.0): "pays",
                                                      ("ngram-k4", 4.0): "pays"}


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


@pytest.mark.parametrize("run", _runs(current=True), ids=lambda p: p.parent.name)
def test_the_demo_runs_rounds_are_what_the_rule_says_of_its_ledgers(tmp_path, run):
    spec = SweepSpec.parse(json.loads((run / "sweep.json").read_text())["spec"])
    assert spec.sequential is not None
    records = sorted((run / "sequential").glob("round-*.json"))
    for f in records:
        doc = json.loads(f.read_text())
        k = doc["round"]
        folder = _replay_folder(run, tmp_path / f"round-{k}", spec.repeats + k - 1)
        for earlier in records[: k - 1]:  # the rounds before it (their panels are the record's)
            (folder / "sequential").mkdir(exist_ok=True)
            shutil.copy2(earlier, folder / "sequential" / earlier.name)
        levels = next_sequential_round(spec, folder, k, elapsed_s=doc["elapsed_s"], echo=lambda _: None)
        again = json.loads((folder / "sequential" / f.name).read_text())
        assert levels == {wl: [(float(c), why) for c, why in lv] for wl, lv in doc["levels"].items()}
        # the looks as recorded (what a projection of the noise would leave may be said differently later)
        def shown(looks, keep=("start_var", "prompt_var", "dominant")):
            return [{**lk, "noise": {k: v for k, v in (lk.get("noise") or {}).items() if k in keep}} for lk in looks]
        assert shown(again["looks"]) == shown(doc["looks"]) and again["stopped"] == doc["stopped"], f.name
        assert again.get("panel") == doc.get("panel") and again.get("spend") == doc.get("spend")
    # every level a round decided is decided the same way, at the same look, by the report's table
    table = paired_speedups(load_ledgers(run)).table
    final = json.loads(records[-1].read_text())
    for lk in final["looks"]:
        row = table[(table["arm"] == lk["arm"]) & (table["level"] == lk["level"])].iloc[0]
        if lk["state"].startswith("decided"):
            assert row["decision"] == lk["state"].split(": ")[1] and row["n_repeats"] == lk["look"]["n"]
            assert (row["speedup_lo"], row["speedup_hi"]) == (pytest.approx(lk["look"]["lo"], abs=1e-4),
                                                              pytest.approx(lk["look"]["hi"], abs=1e-4))
    assert rule_of(spec).looks == tuple(final["rule"]["looks"])


@pytest.mark.parametrize("run", _runs(current=False), ids=lambda p: p.parent.name)
def test_a_run_whose_rounds_an_earlier_rule_chose_says_so(run):
    (line,) = [ln for ln in sequential_lines(run) if ln.startswith("sequential")]
    assert "chosen by an earlier rule" in line and "the table reads its repeats with the current rule" in line.replace("The table", "the table")


def test_an_open_loop_runs_prompt_part_is_per_offered_rate():
    """A rate sweep's level is its offered rate (its ledgers' concurrency is the in-flight cap)."""
    run = paths.LEDGERS / "concurrency" / "cpu-rate" / "20261130T195637Z"
    df = load_ledgers(run)
    t = paired_speedups(df).table
    rates = sorted({float(r) for r in df["rate_rps"].dropna()})
    assert sorted(t["level"]) == rates and set(t["scope"]) == {"prompts"} and (t["prompt_var"] > 0).all()
