"""The conversation replay (engine.loadgen.drive_conversations) against a fake OpenAI server:
turns in order with the whole history, one request per user at a time, think time kept, the
recorded or the model's own answers in the history, and the per-turn numbers of the point
(analysis.point.by_turn)."""

from __future__ import annotations

import asyncio
from itertools import pairwise

import pytest

from specnb.analysis.point import by_turn, summarize_point
from specnb.engine.loadgen import ChatTarget, ConversationReplay, drive
from specnb.prompts.conversation import Conversation
from tests.unit.fakevllm import FakeVllm, echo_stream


def conv(cid, turns, answers=None, system=None, category="edit"):
    return Conversation(cid, category, system, tuple(turns), tuple(answers or [None] * len(turns)))


def conv_server(delay_s=0.01, fail_contents=()) -> FakeVllm:
    """Answers ``echo <last user message>`` in two chunks; prompt tokens are the words of all
    messages, and the words before the last message count as cached (a prefix cache's view)."""
    return FakeVllm(echo_stream, delay_s=delay_s, fail_contents=fail_contents, fail_body="fake failure")


RECORDED = [conv("a", ["a one", "a two", "a three"], ["A1", "A2", None], system="sys"),
            conv("b", ["b one", "b two"], ["B1", None]),
            conv("c", ["c one", "c two", "c three", "c four"], ["C1", "C2", "C3", None])]


def run_conversation_load(url, model, convs, users, n, sampling, history="recorded", think_time_s=0.0):
    """One replay point through the one way in: its shape, driven against the target."""
    return drive(ChatTarget.of(url, model), ConversationReplay(users, n, history, think_time_s), convs, sampling)


def replay(server, convs, users, n, **kw):
    return asyncio.run(server.run(lambda url: run_conversation_load(
        url, "smol", convs, users, n, {"temperature": 0.0, "seed": 10, "max_tokens": 8}, **kw)))


def _by_conversation(pl):
    out: dict[int, list] = {}
    for r in pl.records:
        out.setdefault(r.conversation, []).append(r)
    return out


def test_recorded_history_sends_every_turn_in_order_with_the_whole_history():
    srv = conv_server()
    pl = replay(srv, RECORDED, users=2, n=5, history="recorded")
    assert pl.conversations == 5 and pl.turns_skipped == 0 and len(pl.records) == 3 + 2 + 4 + 3 + 2
    assert all(r.ok for r in pl.records)
    sent = {tuple(m["content"] for m in b["messages"]) for b in srv.bodies}
    for k, recs in _by_conversation(pl).items():
        c = RECORDED[k % 3]
        assert [r.turn for r in recs] == list(range(1, len(c.turns) + 1))  # in order, each once
        assert all(r.prompt_id == c.id and r.category == "edit" for r in recs)
        assert len({r.slot for r in recs}) == 1  # one user sends a whole conversation
        for a, b in pairwise(recs):
            assert b.start_s >= a.end_s  # the next turn waits for the answer
        for t in range(len(c.turns)):
            assert tuple(m["content"] for m in c.messages(t)) in sent
    # a later turn carries every earlier turn and its recorded answer, system first
    last = next(b for b in srv.bodies if b["messages"][-1]["content"] == "a three")
    assert last["messages"] == [{"role": "system", "content": "sys"}, {"role": "user", "content": "a one"},
                                {"role": "assistant", "content": "A1"}, {"role": "user", "content": "a two"},
                                {"role": "assistant", "content": "A2"}, {"role": "user", "content": "a three"}]
    # the seed follows the request's place in a pass over the conversations: the same in every arm
    seeds = {b["messages"][-1]["content"]: b["seed"] for b in srv.bodies}
    assert seeds["a one"] == 10 and seeds["a three"] == 12 and seeds["b one"] == 13 and seeds["c four"] == 18
    assert srv.peak <= 2


def test_users_never_have_two_requests_in_flight_and_think_time_is_kept():
    srv = conv_server(delay_s=0.005)
    pl = replay(srv, RECORDED, users=3, n=3, history="recorded", think_time_s=0.1)
    assert srv.peak <= 3 and sorted({r.slot for r in pl.records}) == [0, 1, 2]
    for slot in range(3):
        recs = sorted((r for r in pl.records if r.slot == slot), key=lambda r: r.start_s)
        for a, b in pairwise(recs):
            assert b.start_s >= a.end_s + 0.1 - 1e-3  # never overlapping; the pause after each answer
    assert pl.steady_start_s is not None and pl.steady_start_s < pl.steady_end_s


def test_model_history_carries_the_models_own_answers():
    srv = conv_server()
    short = [conv("x", ["x one", "x two", "x three"]), conv("y", ["y one", "y two"])]
    pl = replay(srv, short, users=2, n=2, history="model")
    assert all(r.ok for r in pl.records) and len(pl.records) == 5
    last = next(b for b in srv.bodies if b["messages"][-1]["content"] == "x three")
    assert [m["role"] for m in last["messages"]] == ["user", "assistant", "user", "assistant", "user"]
    # the fake echoes each turn: the model's answers, not recorded ones, are in the history
    assert last["messages"][1]["content"] == "echo x one" and last["messages"][3]["content"] == "echo x two"
    with pytest.raises(ValueError, match="needs a recorded answer"):
        replay(conv_server(), short, users=1, n=1, history="recorded")


def test_a_failed_turn_ends_its_conversation_with_model_history_but_not_with_recorded():
    pl = replay(conv_server(fail_contents={"c two"}), RECORDED, users=1, n=3, history="model")
    c = [r for r in pl.records if r.prompt_id == "c"]
    assert [r.turn for r in c] == [1, 2] and c[1].error.startswith("HTTP 500") and pl.turns_skipped == 2
    s = summarize_point(pl)
    assert s["turns_skipped"] == 2 and s["conversations"] == 3 and s["conversations_all_ok"] == 2
    pl = replay(conv_server(fail_contents={"c two"}), RECORDED, users=1, n=3, history="recorded")
    assert [r.turn for r in pl.records if r.prompt_id == "c"] == [1, 2, 3, 4] and pl.turns_skipped == 0


def test_per_turn_numbers_show_the_history_served_from_cache():
    pl = replay(conv_server(), RECORDED, users=2, n=3, history="recorded")
    turns = by_turn(pl.records)
    assert [t["turn"] for t in turns] == [1, 2, 3, 4]
    assert [t["requests"] for t in turns] == [3, 3, 2, 1]
    first, second = turns[0], turns[1]
    assert first["cached_prompt_tokens"] == 1  # only the system message comes before a first turn
    assert second["prompt_tokens"] > first["prompt_tokens"]  # the history grows the prompt...
    assert second["computed_prompt_tokens"] == 3 * 2  # ...but only the new turn is computed
    for t in turns:
        assert t["computed_prompt_tokens"] == t["prompt_tokens"] - t["cached_prompt_tokens"]
        assert t["output_tokens"] == 2 * t["num_ok"] and t["mean_ttft_ms"] > 0
    s = summarize_point(pl)
    assert s["cached_prompt_tokens_reported"] == sum(t["cached_prompt_tokens"] for t in turns)
    assert s["requests_reporting_cached_tokens"] == 9
    assert by_turn([]) is None


def test_bad_arguments_are_refused():
    for kw in ({"users": 0}, {"n": 0}):
        args = {"users": 1, "n": 1, **kw}
        with pytest.raises(ValueError):
            asyncio.run(run_conversation_load("http://127.0.0.1:1/", "m", RECORDED, args["users"], args["n"], {}))
    with pytest.raises(ValueError, match="history"):
        asyncio.run(run_conversation_load("http://127.0.0.1:1/", "m", RECORDED, 1, 1, {}, history="mine"))
    with pytest.raises(ValueError, match="no conversations"):
        asyncio.run(run_conversation_load("http://127.0.0.1:1/", "m", [], 1, 1, {}))
