"""Bundled prompt sets (and the generator that writes them), category cuts, the JSONL loader's errors."""

from __future__ import annotations

import importlib.util
import json
from collections import Counter

import pytest

from specnb import paths
from specnb.prompts.sources import resolve
from specnb.prompts.workload import BUNDLED, Prompt, Workload, WorkloadError, bundled, load_jsonl

# max_model_len 2048 minus 256 output tokens leaves 1792 for the prompt; SmolLM2's tokenizer
# spends at least ~2.5 characters per token on this text (the generator's --tokenizer prints
# the real counts: longest copy prompt ~410 tokens), so 3,500 characters is a safe bound.
MAX_PROMPT_CHARS = 3500


@pytest.mark.parametrize("name", BUNDLED)
def test_bundled_sets_load(name):
    wl = bundled(name)
    assert len(wl.categories) == 5
    assert all(n >= 64 for n in wl.categories.values()), wl.categories
    assert len({p.id for p in wl.prompts}) == len(wl.prompts)
    texts = [p.messages[-1]["content"] for p in wl.prompts]
    assert len(set(texts)) == len(texts)  # every prompt distinct: no accidental prefix-cache hits
    assert all(p.messages[-1]["role"] == "user" and p.messages[-1]["content"].strip() for p in wl.prompts)
    assert max(len(t) for t in texts) < MAX_PROMPT_CHARS
    assert wl.content_hash.startswith("sha256:") and wl.content_hash == bundled(name).content_hash


@pytest.mark.parametrize("name", BUNDLED)
def test_every_prefix_mixes_the_categories(name):
    # a point sends the first N prompts: N = 5 already sees every category once
    wl = bundled(name)
    k = len(wl.categories)
    for start in range(0, len(wl.prompts), k):
        assert len({p.category for p in wl.prompts[start:start + k]}) == k


def test_bundled_files_are_what_the_generator_writes():
    path = paths.ROOT / "tools" / "make_workloads.py"
    spec = importlib.util.spec_from_file_location("make_workloads", path)
    gen = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(gen)
    for name in BUNDLED:
        committed = (paths.ROOT / "src" / "specnb" / "prompts" / "sets" / f"{name}.jsonl").read_text(encoding="utf-8")
        assert gen.render(gen.build(name)) == committed, f"run python tools/make_workloads.py ({name} differs)"


def test_variety_inside_a_category():
    # generated from pools, not one template: no two code-edit prompts share their code block
    # more than a few times, and the JSON records differ
    copy = bundled("copy")
    blocks = [p.messages[0]["content"].split("```")[1] for p in copy.prompts if p.category == "edit-code"]
    assert len(set(blocks)) >= 20 and max(blocks.count(b) for b in blocks) <= 5
    records = [p.messages[0]["content"].split("```json")[1] for p in copy.prompts if p.category == "fix-json"]
    assert len(set(records)) == len(records)


def test_bundled_sets_differ_in_kind():
    # copy-style prompts carry the material to copy, so they are much longer than free-form ones
    copy_words = sum(len(p.messages[0]["content"].split()) for p in bundled("copy").prompts)
    free_words = sum(len(p.messages[0]["content"].split()) for p in bundled("freeform").prompts)
    assert copy_words > 2 * free_words


def _write(tmp_path, lines):
    p = tmp_path / "w.jsonl"
    p.write_text("\n".join(lines) + "\n")
    return p


def test_prompt_and_messages_forms(tmp_path):
    p = _write(tmp_path, [
        json.dumps({"prompt": "hello"}),
        "",
        json.dumps({"id": "m", "category": "chat", "messages": [
            {"role": "system", "content": "be brief"}, {"role": "user", "content": "hi"}]}),
    ])
    wl = load_jsonl(p)
    assert [x.id for x in wl.prompts] == ["1", "m"]
    assert wl.prompts[0].messages == [{"role": "user", "content": "hello"}]
    assert wl.prompts[1].category == "chat" and len(wl.prompts[1].messages) == 2
    assert resolve(str(p)).content_hash == wl.content_hash


def test_hash_changes_with_content(tmp_path):
    a = load_jsonl(_write(tmp_path, [json.dumps({"prompt": "a"})]))
    b = load_jsonl(_write(tmp_path, [json.dumps({"prompt": "b"})]))
    assert a.content_hash != b.content_hash


@pytest.mark.parametrize(
    "line, needle",
    [
        ("{not json", "not valid JSON"),
        (json.dumps([1, 2]), "expected a JSON object"),
        (json.dumps({"text": "x"}), "needs a 'prompt'"),
        (json.dumps({"prompt": ""}), "non-empty string"),
        (json.dumps({"messages": []}), "non-empty list"),
        (json.dumps({"messages": [{"role": "robot", "content": "x"}]}), "messages[0]"),
        (json.dumps({"messages": [{"role": "user", "content": "q"}, {"role": "assistant", "content": "a"}]}),
         "assistant"),
        (json.dumps({"prompt": "x", "category": 3}), "'category'"),
    ],
)
def test_bad_line_is_named(tmp_path, line, needle):
    p = _write(tmp_path, [json.dumps({"prompt": "fine"}), line])
    with pytest.raises(WorkloadError) as exc:
        load_jsonl(p)
    msg = str(exc.value)
    assert f"{p}:2:" in msg and needle in msg
    assert "\n" not in msg


def test_duplicate_ids_and_empty_files(tmp_path):
    with pytest.raises(WorkloadError, match="duplicate id"):
        load_jsonl(_write(tmp_path, [json.dumps({"id": "a", "prompt": "x"})] * 2))
    with pytest.raises(WorkloadError, match="no prompts"):
        load_jsonl(_write(tmp_path, [""]))
    with pytest.raises(WorkloadError, match="no such prompt file"):
        load_jsonl(tmp_path / "missing.jsonl")
    with pytest.raises(WorkloadError, match="neither a bundled set"):
        resolve("chatty")


def test_one_category_is_a_workload_of_its_own():
    whole = bundled("copy")
    cat = next(iter(whole.categories))
    wl = resolve(f"copy:{cat}")
    assert wl.name == f"copy:{cat}" and wl.category == cat and wl.parent_hash == whole.content_hash
    assert [p.id for p in wl.prompts] == [p.id for p in whole.prompts if p.category == cat]
    assert wl.categories == {cat: whole.categories[cat]}
    assert wl.content_hash != whole.content_hash
    d = wl.describe()
    assert d["category"] == cat and d["parent_hash"] == whole.content_hash and d["imported"] is None
    with pytest.raises(WorkloadError, match="has no category 'poetry'"):
        resolve("copy:poetry")


def test_category_of_a_prompt_file(tmp_path):
    p = _write(tmp_path, [json.dumps({"prompt": "a", "category": "x"}), json.dumps({"prompt": "b"})])
    assert [q.id for q in resolve(f"{p}:x").prompts] == ["1"]
    assert [q.id for q in resolve(f"{p}:uncategorized").prompts] == ["2"]


def test_tool_call_turns_are_valid_messages(tmp_path):
    msgs = [{"role": "user", "content": "weather?"},
            {"role": "assistant", "content": None, "tool_calls": [{"id": "1", "type": "function"}]},
            {"role": "tool", "tool_call_id": "1", "content": "rain"}]
    assert load_jsonl(_write(tmp_path, [json.dumps({"messages": msgs})])).prompts[0].messages == msgs
    bad = [{"role": "user", "content": None}]
    with pytest.raises(WorkloadError, match=r"messages\[0\]"):
        load_jsonl(_write(tmp_path, [json.dumps({"messages": bad})]))


def test_a_panel_is_balanced_over_categories_and_stable():
    wl = Workload(name="w", source="t", prompts=[
        Prompt(id=f"{cat}{i}", category=cat, messages=[{"role": "user", "content": f"{cat} {i}"}])
        for cat, n in (("a", 5), ("b", 1), ("c", 3)) for i in range(n)])
    panel = wl.panel(6)
    assert [p.id for p in panel] == ["a0", "b0", "c0", "a1", "c1", "a2"]  # turns in order of appearance
    assert wl.panel(6) == panel and wl.panel(None) == wl.prompts and wl.panel(99) == wl.prompts
    copy = bundled("copy").panel(10)
    assert Counter(p.category for p in copy) == {c: 2 for c in bundled("copy").categories}
    with pytest.raises(WorkloadError):
        wl.panel(0)
