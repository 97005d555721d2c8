"""Conversation sets (specnb.prompts.conversation): the file format's two forms, every refusal in
one line naming the file and line, the bundled set (and its generator), and the content hash
covering every turn."""

from __future__ import annotations

import importlib.util
import json

import pytest

from specnb import paths
from specnb.prompts.conversation import (
    ConversationSource,
    bundled_conversations,
    load_conversations,
    panel_conversations,
)
from specnb.prompts.sources import resolve
from specnb.prompts.workload import WorkloadError


def _write(tmp_path, lines, name="c.jsonl"):
    p = tmp_path / name
    p.write_text("".join((x if isinstance(x, str) else json.dumps(x)) + "\n" for x in lines), encoding="utf-8")
    return p


def u(text):
    return {"role": "user", "content": text}


def a(text):
    return {"role": "assistant", "content": text}


def test_both_forms_load_with_turns_answers_and_the_first_turn_as_prompt(tmp_path):
    p = _write(tmp_path, [
        {"id": "x", "category": "code", "messages": [{"role": "system", "content": "be brief"}, u("one"), a("1"),
                                                     u("two"), a("2"), u("three")]},
        {"id": "y", "turns": ["hi", "and again"]},
        {"messages": [u("first"), u("second"), a("b"), u("third")]},  # two user turns in a row: no answer to the first
    ])
    wl = load_conversations(p)
    x, y, z = wl.conversations
    assert x.turns == ("one", "two", "three") and x.answers == ("1", "2", None) and x.system == "be brief"
    assert x.recorded and not y.recorded and not z.recorded
    assert z.id == "3" and z.answers == (None, "b", None)
    assert [pr.id for pr in wl.prompts] == ["x", "y", "3"]
    assert wl.prompts[0].messages == [{"role": "system", "content": "be brief"}, u("one")]
    assert x.messages(2) == [{"role": "system", "content": "be brief"}, u("one"), a("1"), u("two"), a("2"),
                             u("three")]
    assert y.messages(1, ["model said"]) == [u("hi"), a("model said"), u("and again")]
    with pytest.raises(ValueError, match="turn 1 has no answer"):
        y.messages(1)
    assert wl.conversation == {"conversations": 3, "turns_min": 2, "turns_max": 3, "turns_total": 8,
                               "recorded_answers": False, "with_recorded_answers": 1}
    assert wl.describe()["conversation"] == wl.conversation


@pytest.mark.parametrize("line, why", [
    ("{not json", "not valid JSON"),
    ("[1, 2]", "expected a JSON object"),
    ({"turns": []}, "'turns' must be a non-empty list"),
    ({"turns": ["ok", " "]}, "turns[1] must be a non-empty string"),
    ({"messages": [a("hello"), u("hi")]}, "messages[0] is the assistant's before any user turn"),
    ({"messages": [{"role": "system", "content": "s"}]}, "no user turn"),
    ({"messages": [u("a"), a("b"), a("c")]}, "messages[2] is a second assistant message in a row"),
    ({"messages": [u("a"), {"role": "system", "content": "s"}]}, "only the first message may be one"),
    ({"messages": [u("a"), {"role": "tool", "content": "t"}]}, "messages[1] needs a 'role' in"),
    ({"messages": [u("")]}, "messages[0] content must be a non-empty string"),
    ({"messages": [{"role": "user", "content": [{"type": "text", "text": "x"}]}]}, "content must be a non-empty"),
    ({"messages": [u("a")], "turns": ["b"]}, "either a 'messages' list or a 'turns' list"),
    ({"id": "q"}, "either a 'messages' list or a 'turns' list"),
    ({"turn": ["typo"]}, "unknown key(s) ['turn']"),
    ({"turns": ["a"], "category": 3}, "'category' must be a string"),
])
def test_a_bad_line_is_refused_in_one_line_naming_file_and_line(tmp_path, line, why):
    p = _write(tmp_path, [{"id": "fine", "turns": ["ok"]}, "", line])
    with pytest.raises(WorkloadError) as exc:
        load_conversations(p)
    msg = str(exc.value)
    assert msg.startswith(f"{p}:3: ") and why in msg and "\n" not in msg


def test_duplicate_ids_empty_and_missing_files(tmp_path):
    p = _write(tmp_path, [{"id": "a", "turns": ["x"]}, {"id": "a", "turns": ["y"]}])
    with pytest.raises(WorkloadError, match=r":2: duplicate id 'a' \(first on line 1\)"):
        load_conversations(p)
    with pytest.raises(WorkloadError, match="no conversations"):
        load_conversations(_write(tmp_path, ["", "  "], "empty.jsonl"))
    with pytest.raises(WorkloadError, match="no such conversation file"):
        load_conversations(tmp_path / "missing.jsonl")


def test_the_hash_covers_every_turn_and_answer(tmp_path):
    base = {"id": "a", "messages": [u("one"), a("1"), u("two")]}
    h = load_conversations(_write(tmp_path, [base], "a.jsonl")).content_hash
    later = {"id": "a", "messages": [u("one"), a("1"), u("two!")]}
    answer = {"id": "a", "messages": [u("one"), a("2"), u("two")]}
    assert load_conversations(_write(tmp_path, [later], "b.jsonl")).content_hash != h
    assert load_conversations(_write(tmp_path, [answer], "c.jsonl")).content_hash != h
    # the first turns alone (the workload's prompts) are the same: the hash is not theirs
    assert load_conversations(_write(tmp_path, [later], "b.jsonl")).prompts == \
        load_conversations(_write(tmp_path, [base], "a.jsonl")).prompts


def test_a_sweep_names_a_set_as_a_table(tmp_path):
    wl = resolve({"conversations": "edit-chat"})
    assert wl.name == "edit-chat" and wl.conversations is not None
    p = _write(tmp_path, [{"id": "a", "turns": ["x", "y"]}], "mine.jsonl")
    assert resolve(ConversationSource(conversations=str(p), name="m")).name == "m"
    assert resolve({"conversations": str(p)}).name == "mine"
    with pytest.raises(WorkloadError, match="unknown key 'turns'"):
        resolve({"conversations": "edit-chat", "turns": 3})
    with pytest.raises(WorkloadError, match="neither a bundled set"):
        resolve({"conversations": "edit-chats"})
    with pytest.raises(WorkloadError, match="is a conversation set"):
        wl.select("fix-json")


def test_the_bundled_set_is_short_multi_turn_and_what_its_generator_writes():
    wl = bundled_conversations("edit-chat")
    convs = wl.conversations
    assert 12 <= len(convs) <= 24 and wl.source == "specnb:prompts/sets/edit-chat.jsonl"
    assert {len(c.turns) for c in convs} == {3, 4}
    assert len(wl.categories) == 5 and len({c.id for c in convs}) == len(convs)
    # later turns refer back to the answer before them; the whole conversation stays short (the CPU
    # model's context is 2,048 tokens: 64-token answers and these turns stay far below it)
    assert all(any(w in c.turns[1] for w in ("above", "your answer", "same fields")) for c in convs)
    assert all(c.turns[-1].startswith("Repeat the final") for c in convs)
    assert max(sum(len(t) for t in c.turns) for c in convs) < 2500
    path = paths.ROOT / "tools" / "make_conversations.py"
    spec = importlib.util.spec_from_file_location("make_conversations", path)
    gen = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(gen)
    committed = (paths.ROOT / "src" / "specnb" / "prompts" / "sets" / "edit-chat.jsonl").read_text(encoding="utf-8")
    assert gen.render(gen.build()) == committed, "run python tools/make_conversations.py"


def test_a_panel_of_first_turns_maps_back_to_its_conversations():
    wl = bundled_conversations("edit-chat")
    panel = wl.panel(5)
    convs = panel_conversations(wl, panel)
    assert [c.id for c in convs] == [p.id for p in panel] and len({c.category for c in convs}) == 5
    with pytest.raises(WorkloadError, match="holds prompts, not conversations"):
        panel_conversations(resolve("copy"), panel)


def test_a_real_multi_turn_log_is_imported_through_the_traffic_importer(tmp_path):
    """{traffic = ..., conversations = true}: the traffic importer's drops and sampling, then each
    line a conversation (user turns; the log's assistant turns and served response as recorded
    answers); lines with tool turns cannot be replayed turn by turn and are counted."""
    import json as _json

    from specnb.prompts import resolve
    from specnb.sweep.spec import SweepSpec

    log = tmp_path / "chats.jsonl"
    lines = [
        {"id": "a", "messages": [{"role": "system", "content": "be brief"}, {"role": "user", "content": "hi"},
                                 {"role": "assistant", "content": "hello"}, {"role": "user", "content": "again"},
                                 {"role": "assistant", "content": "served"}]},
        {"id": "b", "prompt": "one shot", "response": "ok"},
        {"id": "c", "messages": [{"role": "user", "content": "weather?"},
                                 {"role": "assistant", "content": None, "tool_calls": [{"id": "t"}]},
                                 {"role": "tool", "content": "sunny"}, {"role": "user", "content": "thanks"}]},
    ]
    log.write_text("\n".join(_json.dumps(x) for x in lines) + "\n\n")
    wl = resolve({"traffic": str(log), "conversations": True})
    assert [c.id for c in wl.conversations] == ["a", "b"]
    a = wl.conversations[0]
    assert a.system == "be brief" and a.turns == ("hi", "again") and a.answers == ("hello", "served")
    assert a.messages(1)[-3:] == [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"},
                                  {"role": "user", "content": "again"}]
    assert wl.conversation["recorded_answers"] and wl.imported["dropped"] == {"blank": 1, "tool_turns": 1}
    assert wl.imported["kept"] == 2
    spec = SweepSpec.parse({"name": "s", "model": "m", "arms": [{"name": "baseline"}], "concurrency": [1],
                            "load": "conversation", "workloads": [{"traffic": str(log), "conversations": True}]})
    assert spec.workloads[0].conversations is True
    with pytest.raises(Exception, match="conversation set: set load = 'conversation'"):
        SweepSpec.parse({"name": "s", "model": "m", "arms": [{"name": "baseline"}], "concurrency": [1],
                         "workloads": [{"traffic": str(log), "conversations": True}]})
    # the same log as single prompts: unchanged
    assert len(resolve({"traffic": str(log)}).prompts) == 3
