"""A launched arm's K schedule goes to the server under the name the installed vLLM takes, and
the run says which (vLLM PR #48944 renames num_speculative_tokens_per_batch_size)."""

from __future__ import annotations

import json

import pytest

from specnb.analysis.schedule import SCHEDULE_KEY, SCHEDULE_KEY_NEW
from specnb.ledger import read_ledger
from specnb.sweep import SweepSpec, run_sweep, runner, servers


@pytest.mark.parametrize("engine_key", [SCHEDULE_KEY, SCHEDULE_KEY_NEW])
def test_the_schedule_is_sent_under_the_engines_name_and_said(fake_vllm, tmp_path, monkeypatch, engine_key):
    monkeypatch.setattr(runner, "engine_schedule_key", lambda: engine_key)  # the note
    monkeypatch.setattr(servers, "engine_schedule_key", lambda: engine_key)  # what is sent
    sched = [[1, 1, 2], [2, 256, 0]]
    spec = SweepSpec.parse(dict(
        name="s", model=str(fake_vllm.model), served_model_name="fake", workloads=["freeform"], concurrency=[1],
        repeats=1, panel_size=2, work_floor_tokens=0, warmup_requests=0, ready_timeout_s=30,
        sampling={"max_tokens": 8}, env={"FAKE_VLLM_STATE": str(fake_vllm.state)},
        arms=[{"name": "baseline"}, {"name": "policy", "speculative_config": {
            "method": "ngram", "num_speculative_tokens": 2, "prompt_lookup_max": 2, SCHEDULE_KEY_NEW: sched}}]))
    said: list[str] = []
    out = run_sweep(spec, tmp_path / "out", progress=False, echo=said.append)
    assert len(out.written) == 2
    (note,) = [s for s in said if "K schedule" in s]
    assert note.startswith(f"note: arm 'policy': the installed vLLM takes the K schedule as {engine_key!r}")
    led = read_ledger(next(p for p in out.written if "policy" in str(p)))
    argv = led.server.argv
    sent = json.loads(argv[argv.index("--speculative-config") + 1])
    assert sent[engine_key] == sched and len({SCHEDULE_KEY, SCHEDULE_KEY_NEW} & set(sent)) == 1
    assert led.arm.speculative_config[SCHEDULE_KEY] == sched  # the ledger keeps specnb's one name
