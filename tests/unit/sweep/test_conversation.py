"""Conversation sweeps (load = "conversation"): every bad combination refused in one line before
anything starts, and a whole sweep against the fake vLLM: the users' point files, the load shape,
the per-turn ledger fields, the prefix-cache hit rate and the frames a notebook reads."""

from __future__ import annotations

import json

import pytest

from specnb.ledger import load_ledgers, load_turns, read_ledger
from specnb.sweep import SweepError, SweepSpec, run_sweep
from specnb.sweep.runner import PROMPT_DETAILS_FLAG, server_args_for
from specnb.sweep.spec import level_tag, point_path

CONV = {"conversations": "edit-chat"}
QUIET = lambda s: None  # noqa: E731


def spec(**kw) -> SweepSpec:
    base = dict(name="t", model="some/hub-id", load="conversation", workloads=[CONV], concurrency=[1, 4],
                arms=[{"name": "baseline"}])
    base.update(kw)
    return SweepSpec.parse(base)


def test_a_conversation_sweep_parses_with_users_history_and_think_time():
    s = spec(history="model", think_time_s=0.5)
    assert s.levels() == [1, 4] and s.load.history == "model" and s.load.think_time_s == 0.5
    assert level_tag(4, "conversation") == "u004"
    assert point_path("o", "b", "edit-chat", 4, 1, "conversation").name == "u004-r01.json"
    assert s.identity()["history"] == "model" and "history" not in spec(load="concurrency", workloads=["copy"]).identity()
    assert s.history_for({"recorded_answers": False}) == "model"
    assert spec().history_for({"recorded_answers": True}) == "recorded"
    assert spec().history_for({"recorded_answers": False}) == "model"


@pytest.mark.parametrize("kw, why", [
    ({"concurrency": []}, "needs users: concurrency = [1, 4]"),
    ({"rates": [1.0]}, "give concurrency levels (users), not rates"),
    ({"workloads": [CONV, "copy"]}, "replays conversation sets only: workload 'copy' is not one"),
    ({"search": {}}, "it needs load = 'concurrency', not 'conversation'"),
    ({"client_workers": 2}, "runs in one client process"),
    ({"load": "concurrency"}, "is a conversation set: set load = 'conversation'"),
    ({"load": "concurrency", "workloads": ["copy"], "history": "model"}, "history and think_time_s are conversation"),
    ({"load": "concurrency", "workloads": ["copy"], "think_time_s": 1.0}, "history and think_time_s are conversation"),
    ({"history": "mine"}, "history"),
    ({"think_time_s": -1}, "think_time_s"),
    ({"workloads": [{"conversations": "edit-chat", "turns": 2}]}, "workloads"),
])
def test_bad_combinations_are_refused_in_one_line(kw, why):
    with pytest.raises(SweepError) as exc:
        spec(**kw)
    assert why in str(exc.value) and "\n" not in str(exc.value)


def test_recorded_history_on_a_set_without_answers_is_refused_before_any_server(tmp_path):
    from specnb.sweep import prepare

    with pytest.raises(SweepError, match=r"history = 'recorded': conversation set 'edit-chat' .* 0 of 20"):
        prepare(spec(history="recorded"))


def test_every_launched_arm_of_a_conversation_sweep_reports_cached_tokens(monkeypatch):
    import specnb.sweep.servers as servers

    monkeypatch.setattr(servers, "engine_supports_flag", lambda flag: True)
    s = spec(arms=[{"name": "baseline"}, {"name": "ngram", "speculative_config": {"method": "ngram",
                                                                               "num_speculative_tokens": 4}}])
    assert all(PROMPT_DETAILS_FLAG in server_args_for(s, arm) for arm in s.arms)
    closed = SweepSpec.parse({**s.model_dump(exclude={"load", "workloads"}), "workloads": ["copy"]})
    assert not any(PROMPT_DETAILS_FLAG in server_args_for(closed, arm) for arm in closed.arms)
    monkeypatch.setattr(servers, "engine_supports_flag", lambda flag: False)  # an engine without it: left out
    assert PROMPT_DETAILS_FLAG not in server_args_for(s, s.arms[0])


def test_a_conversation_sweep_against_the_fake_engine(fake_vllm, tmp_path):
    convs = tmp_path / "chats.jsonl"
    convs.write_text("".join(json.dumps(c) + "\n" for c in [
        {"id": "a", "category": "code", "messages": [{"role": "user", "content": "one"},
                                                     {"role": "assistant", "content": "1"},
                                                     {"role": "user", "content": "two"},
                                                     {"role": "assistant", "content": "2"},
                                                     {"role": "user", "content": "three"}]},
        {"id": "b", "category": "json", "messages": [{"role": "user", "content": "uno"},
                                                     {"role": "assistant", "content": "1"},
                                                     {"role": "user", "content": "dos"}]},
    ]))
    s = SweepSpec.parse(dict(
        name="conv", model=str(fake_vllm.model), served_model_name="fake", load="conversation",
        workloads=[{"conversations": str(convs), "name": "chats"}], concurrency=[1, 2], repeats=1, panel_size=None,
        work_floor_tokens=0, warmup_requests=0, request_timeout_s=5, metrics_interval_s=0.05, ready_timeout_s=30,
        sampling={"max_tokens": 4}, env={"FAKE_VLLM_STATE": str(fake_vllm.state)}, arms=[{"name": "baseline"}]))
    out = run_sweep(s, tmp_path / "out", progress=False, echo=QUIET)
    assert out.ok and [p.name for p in out.written] == ["u001-r00.json", "u002-r00.json"]
    led = read_ledger(out.written[1])
    assert led.load.mode == "conversation" and led.load.users == 2 and led.concurrency == 2
    assert led.load.history == "recorded" and led.load.think_time_s == 0.0
    # u=2: 2 x 2 = 4 requests in flight over a pass would be sent twice; whole passes of 2 conversations
    assert led.load.conversations == 2 * led.sizing.passes and led.num_requests == 5 * led.sizing.passes
    assert led.load.conversations >= 2 * led.load.users  # every user busy: two conversations each at least
    assert led.results["num_requests"] == led.num_requests and led.results["num_errors"] == 0
    assert led.workload.conversation.turns_max == 3 and led.workload.conversation.recorded_answers
    assert [t.turn for t in led.by_turn] == [1, 2, 3]
    assert [t.requests for t in led.by_turn] == [2 * led.sizing.passes, 2 * led.sizing.passes, led.sizing.passes]
    assert led.by_turn[0].cached_prompt_tokens == 0 and led.by_turn[1].cached_prompt_tokens > 0  # the flag was added
    assert PROMPT_DETAILS_FLAG in led.server.argv
    assert 0 < led.results["prefix_cache_hit_rate"] < 1
    df = load_ledgers(tmp_path / "out")
    assert set(df["load_mode"]) == {"conversation"} and list(df["users"]) == [1, 2]
    assert set(df["history"]) == {"recorded"} and set(df["turns_max"]) == {3}
    turns = load_turns(tmp_path / "out")
    assert len(turns) == 6 and set(turns["turn"]) == {1, 2, 3} and set(turns["load_mode"]) == {"conversation"}
    assert (turns["computed_prompt_tokens"] == turns["prompt_tokens"] - turns["cached_prompt_tokens"]).all()


def test_the_report_reads_a_conversation_run_turn_by_turn_with_three_speedups(fake_vllm, tmp_path, capsys):
    from specnb import cli

    s = SweepSpec.parse(dict(
        name="conv", model=str(fake_vllm.model), served_model_name="fake", load="conversation",
        workloads=[{"conversations": "edit-chat"}], concurrency=[2], repeats=1, panel_size=2,
        work_floor_tokens=0, warmup_requests=0, request_timeout_s=5, metrics_interval_s=0.05, ready_timeout_s=30,
        sampling={"max_tokens": 4}, env={"FAKE_VLLM_STATE": str(fake_vllm.state)},
        arms=[{"name": "baseline"}, {"name": "ngram-k4", "speculative_config": {"method": "ngram",
                                                                                "num_speculative_tokens": 4}}]))
    out = run_sweep(s, tmp_path / "out", progress=False, echo=QUIET)
    assert out.ok and len(out.written) == 2, out.summary()
    assert cli.main(["report", str(tmp_path / "out")]) == 0
    text = capsys.readouterr().out
    assert "conversation replay: 2 point(s)" in text and "(model answers)" in text
    for arm in ("baseline", "ngram-k4"):  # later turns served partly from the cache
        line = next(ln for ln in text.splitlines() if ln.startswith(f"  {arm} / edit-chat, 2 user(s): turn 1"))
        assert "turn 1" in line and "turn 2" in line and "0% cached" in line.split(";")[0]
        assert not line.split(";")[1].strip().endswith(" 0% cached")
    # the fake engine drafts nothing (spec_no_drafts): the speedups are tested on ledgers below
    assert "spec_no_drafts" in text


def test_three_speedups_and_the_hit_rates_from_paired_conversation_points(tmp_path):
    from specnb.analysis.conversation import conversation_gains
    from specnb.ledger import LoadShape, write_ledger
    from tests.unit.factories import ledger

    for r in (0, 1):
        for arm, out_tok, total, computed, hit in (("baseline", 100.0, 400.0, 150.0, 0.6),
                                                    ("ngram-k4", 130.0 + 10 * r, 460.0, 190.0, 0.55)):
            led = ledger(arm=arm, workload="edit-chat", c=2, r=r, tok_s=out_tok, mal=3.0, computed_tok_s=computed)
            led = led.model_copy(update={
                "load": LoadShape(mode="conversation", concurrency=2, users=2, history="model", think_time_s=0.0,
                                  conversations=4),
                "results": {**led.results, "total_tok_s_wall": total, "prefix_cache_hit_rate": hit}})
            write_ledger(tmp_path / f"{arm}-{r}.json", led)
    g = conversation_gains(load_ledgers(tmp_path))
    (row,) = g.itertuples()
    assert row.arm == "ngram-k4" and row.users == 2 and row.repeats == 2
    assert row.output_mean == pytest.approx((1.3 + 1.4) / 2) and (row.output_min, row.output_max) == (1.3, 1.4)
    assert row.total_mean == pytest.approx(460 / 400) and row.computed_mean == pytest.approx(190 / 150)
    assert row.hit_rate == pytest.approx(0.55) and row.hit_rate_base == pytest.approx(0.6)


def test_two_arms_whose_users_interleaved_differently_still_pair_request_by_request(tmp_path, monkeypatch):
    """Users send their turns in an order set by timing: the bootstrap's request terms and the
    lossless check match a request by its (conversation, turn), not by the order it was sent in."""
    import pandas as pd

    from specnb.analysis.lossless import request_outputs
    from specnb.analysis.requests import request_terms

    def frame(order):
        rows = []
        for i, (k, turn) in enumerate(order):
            rows.append({"index": i, "slot": k % 2, "prompt_id": f"c{k}", "conversation": k, "turn": turn,
                         "start_s": float(i), "end_s": float(i) + 1.0, "chunk_times_s": [float(i) + 0.5],
                         "chunk_tokens": [4], "output_tokens": 4, "tpot_s": 0.1, "error": None,
                         "output_sha": f"{k}-{turn}", "prompt_tokens": 10 * turn})
        return pd.DataFrame(rows)

    a = frame([(0, 1), (1, 1), (0, 2), (1, 2), (0, 3)])
    b = frame([(0, 1), (1, 1), (1, 2), (0, 2), (0, 3)])  # the other arm's users took turns differently
    ta, tb = request_terms(a, 2), request_terms(b, 2)
    assert list(ta.index) == list(tb.index) and list(ta.prompt_id) == list(tb.prompt_id)
    for name, f in (("a", a), ("b", b)):
        f.to_parquet(tmp_path / f"{name}.parquet")
    import sys

    monkeypatch.setattr(sys.modules["specnb.analysis.lossless"], "load_requests", pd.read_parquet)
    oa, ob = request_outputs(str(tmp_path / "a.parquet")), request_outputs(str(tmp_path / "b.parquet"))
    assert list(oa["output_sha"]) == list(ob["output_sha"])  # the same request on every row


def test_a_conversation_cut_short_in_one_arm_pairs_on_the_turns_both_sent():
    """history = "model": a failed turn ends its conversation, so one arm may lack later turns;
    the pair is the requests both arms sent, matched by (conversation, turn)."""
    import pandas as pd

    from specnb.analysis.requests import TURN_KEY, pair_terms, request_terms

    def frame(order):
        return pd.DataFrame([{"index": i, "slot": k % 2, "prompt_id": f"c{k}", "conversation": k, "turn": turn,
                              "start_s": float(i), "end_s": float(i) + 1.0, "chunk_times_s": [float(i) + 0.5],
                              "chunk_tokens": [4], "output_tokens": 4, "tpot_s": 0.1, "error": None}
                             for i, (k, turn) in enumerate(order)])

    full = request_terms(frame([(0, 1), (1, 1), (0, 2), (1, 2), (0, 3)]), 2)
    short = request_terms(frame([(0, 1), (1, 1), (1, 2), (0, 2)]), 2)  # conversation 0's turn 3 never sent

    class Side:
        def terms(self, path, concurrency):  # noqa: ARG002
            return {"a": full, "b": short}[path]

    row = pd.Series({"path": "a", "path_base": "b", "concurrency": 2, "arm": "ngram", "baseline_arm": "baseline",
                     "workload": "chats", "repeat": 0})
    spec, base = pair_terms(row, Side())
    assert list(spec.index) == list(base.index)
    assert sorted(spec.index) == sorted(base.index) == sorted([1, 2, TURN_KEY + 1, TURN_KEY + 2])
    assert list(spec.prompt_id) == list(base.prompt_id)
