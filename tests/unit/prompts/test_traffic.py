"""Importing real traffic: both line forms, responses, drops by reason, sampling, errors."""

from __future__ import annotations

import json

import pytest

from specnb.ledger import WorkloadRecord
from specnb.prompts.sources import resolve
from specnb.prompts.traffic import TrafficError, TrafficSource, load_traffic, message_text


def _write(tmp_path, lines, name="t.jsonl"):
    p = tmp_path / name
    p.write_text("\n".join(x if isinstance(x, str) else json.dumps(x) for x in lines) + "\n")
    return p


CONVO = [
    {"role": "system", "content": "You are terse."},
    {"role": "user", "content": "Name a fruit."},
    {"role": "assistant", "content": "Apple."},
    {"role": "user", "content": "Another one, please."},
]


def test_both_forms_and_responses(tmp_path):
    p = _write(tmp_path, [
        {"prompt": "Fix this JSON: {a:1}", "response": '{"a": 1}', "category": "fix"},
        {"id": "c7", "messages": CONVO + [{"role": "assistant", "content": "Banana."}]},
        {"messages": CONVO[1:]},
    ])
    wl = load_traffic(p)
    assert [x.id for x in wl.prompts] == ["1", "c7", "3"]
    a, b, c = wl.prompts
    assert a.messages == [{"role": "user", "content": "Fix this JSON: {a:1}"}]
    assert a.response == '{"a": 1}' and a.category == "fix"
    # the served answer comes off the end; the earlier turns stay, whole and in order
    assert b.messages == CONVO and b.response == "Banana."
    assert c.messages == CONVO[1:] and c.response is None
    rec = wl.imported
    assert rec["lines"] == 3 and rec["usable"] == 3 and rec["kept"] == 3 and rec["dropped"] == {}
    assert rec["with_response"] == 2 and rec["multi_turn"] == 2
    assert wl.name == "t" and wl.source == str(p)
    # the record fits the ledger's schema
    WorkloadRecord(**wl.describe())


def test_drops_are_counted_by_reason_with_line_numbers(tmp_path):
    p = _write(tmp_path, [
        {"prompt": "keep me"},                                              # 1
        "",                                                                 # 2 blank
        {"prompt": "   "},                                                  # 3 empty
        {"messages": [{"role": "system", "content": "only a system turn"}]},  # 4 no user turn
        {"messages": [{"role": "user", "content": [                          # 5 image part
            {"type": "text", "text": "what is this?"},
            {"type": "image_url", "image_url": {"url": "http://x/y.png"}}]}]},
        {"prompt": "keep me"},                                              # 6 duplicate of 1
        {"messages": [{"role": "user", "content": "keep me"}]},             # 7 same messages as 1
        {"messages": [{"role": "user", "content": [{"type": "text", "text": "parts are fine"}]}]},  # 8
        {"messages": [{"role": "user", "content": ""}, {"role": "assistant", "content": "?"}]},  # 9 empty
    ])
    wl = load_traffic(p)
    assert [x.id for x in wl.prompts] == ["1", "8"]
    rec = wl.imported
    assert rec["lines"] == 9 and rec["usable"] == 2 and rec["kept"] == 2
    assert rec["dropped"] == {"blank": 1, "duplicate": 2, "empty": 2, "no_user_turn": 1, "non_text_content": 1}
    assert rec["dropped_lines"] == {"blank": [2], "duplicate": [6, 7], "empty": [3, 9],
                                    "no_user_turn": [4], "non_text_content": [5]}
    assert sum(rec["dropped"].values()) + rec["usable"] == rec["lines"]


def test_long_prompts_are_never_truncated(tmp_path):
    long = "word " * 40_000
    wl = load_traffic(_write(tmp_path, [{"prompt": long}]))
    assert wl.prompts[0].messages[0]["content"] == long
    assert wl.imported["max_prompt_chars"] == len(long)


def test_sampling_is_seeded_and_in_drawn_order(tmp_path):
    p = _write(tmp_path, [{"prompt": f"question {i}"} for i in range(50)])
    a = load_traffic(p, sample=10, seed=3)
    b = load_traffic(p, sample=10, seed=3)
    c = load_traffic(p, sample=10, seed=4)
    ids = [x.id for x in a.prompts]
    assert ids == [x.id for x in b.prompts] and a.content_hash == b.content_hash
    assert ids != [x.id for x in c.prompts]
    assert len(set(ids)) == 10 and ids != sorted(ids, key=int)  # drawn order, not file order
    assert a.imported["sample"] == 10 and a.imported["seed"] == 3 and a.imported["usable"] == 50
    assert a.imported["kept"] == 10
    every = load_traffic(p, sample=500, seed=0)  # more than there are: all of them, shuffled
    assert sorted(x.id for x in every.prompts) == sorted(str(i) for i in range(1, 51))
    whole = load_traffic(p)
    assert [x.id for x in whole.prompts] == [str(i) for i in range(1, 51)]
    assert whole.imported["seed"] is None


def test_category_selection(tmp_path):
    p = _write(tmp_path, [{"prompt": f"q{i}", "category": "a" if i % 2 else "b"} for i in range(6)])
    wl = load_traffic(p, category="a")
    assert {x.category for x in wl.prompts} == {"a"} and len(wl.prompts) == 3
    assert wl.name == "t:a" and wl.category == "a"
    with pytest.raises(TrafficError, match="no usable prompts of category 'zzz'"):
        load_traffic(p, category="zzz")


@pytest.mark.parametrize("line, needle", [
    ("{oops", "not valid JSON"),
    (json.dumps("just a string"), "expected a JSON object"),
    (json.dumps({"text": "x"}), "needs a 'prompt'"),
    (json.dumps({"prompt": 3}), "'prompt' must be a string"),
    (json.dumps({"prompt": "x", "response": 5}), "'response' must be a string"),
    (json.dumps({"messages": "hi"}), "non-empty list"),
    (json.dumps({"messages": [{"role": "wizard", "content": "x"}]}), "messages[0]"),
    (json.dumps({"messages": [{"role": "user", "content": "q"}, {"role": "assistant", "content": "a"}],
                 "response": "b"}), "both a final assistant message and a 'response'"),
    (json.dumps({"prompt": "x", "category": 1}), "'category' must be a string"),
    (json.dumps({"id": 1, "prompt": "another"}), "id '1' already used on line 1"),
])
def test_broken_lines_name_file_and_line(tmp_path, line, needle):
    p = _write(tmp_path, [json.dumps({"id": 1, "prompt": "fine"}), line])
    with pytest.raises(TrafficError) as exc:
        load_traffic(p)
    msg = str(exc.value)
    assert f"{p}:2:" in msg and needle in msg and "\n" not in msg


def test_missing_file_and_nothing_usable(tmp_path):
    with pytest.raises(TrafficError, match="no such traffic file"):
        load_traffic(tmp_path / "nope.jsonl")
    with pytest.raises(TrafficError, match=r"no usable prompts \(blank x1, empty x1\)"):
        load_traffic(_write(tmp_path, ["", {"prompt": ""}]))
    with pytest.raises(TrafficError, match="sample must be >= 1"):
        load_traffic(_write(tmp_path, [{"prompt": "x"}]), sample=0)


def test_tool_call_turns_are_sent_as_given(tmp_path):
    msgs = [
        {"role": "user", "content": "Weather in Oslo?"},
        {"role": "assistant", "content": None,
         "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "wx", "arguments": "{}"}}]},
        {"role": "tool", "tool_call_id": "c1", "content": "4 C, rain"},
    ]
    wl = load_traffic(_write(tmp_path, [{"messages": msgs + [{"role": "assistant", "content": "4 C and rain."}]}]))
    assert wl.prompts[0].messages == msgs and wl.prompts[0].response == "4 C and rain."


def test_message_text():
    assert message_text("hi") == "hi"
    assert message_text(None) == ""
    assert message_text([{"type": "text", "text": "a"}, "b"]) == "a\nb"
    assert message_text([{"type": "image_url", "image_url": {}}]) is None


def test_resolve_takes_a_traffic_table(tmp_path):
    p = _write(tmp_path, [{"prompt": f"q{i}"} for i in range(5)])
    wl = resolve({"traffic": str(p), "sample": 2, "seed": 1, "name": "mine"})
    assert wl.name == "mine" and len(wl.prompts) == 2 and wl.imported["sample"] == 2
    assert resolve(TrafficSource(traffic=str(p))).content_hash == load_traffic(p).content_hash
    with pytest.raises(TrafficError, match="traffic workload"):
        resolve({"traffic": str(p), "colour": "red"})
    with pytest.raises(TrafficError, match="sample"):
        resolve({"traffic": str(p), "sample": 0})
