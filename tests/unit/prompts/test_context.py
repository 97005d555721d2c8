"""Context-length workloads (issue 25 item 2): prompts grown to a length in the target's own
tokens with real text in front of each request, the lengths recorded, and bad tables refused in
one line before anything starts."""

from __future__ import annotations

import pytest

from specnb import paths
from specnb.prompts import resolve
from specnb.prompts.context import HEADER, REQUEST, ContextSource, build_context
from specnb.prompts.workload import Prompt, Workload, WorkloadError, bundled
from specnb.sweep.spec import SweepError, SweepSpec

FOLDER = paths.MODELS / "SmolLM2-135M-Instruct"


class Chars:
    """A tokenizer of one token per character, with a two-token chat frame."""

    def encode(self, text, add_special_tokens=False):  # noqa: ARG002
        return [ord(c) for c in text]

    def decode(self, ids):
        return "".join(chr(i) for i in ids)

    def apply_chat_template(self, messages, add_generation_prompt=True, tokenize=True):  # noqa: ARG002
        return [0] + [t for m in messages for t in self.encode(m["content"])] + [0]


def _base(*texts: str) -> Workload:
    return Workload("base", [Prompt(f"p{i}", "c", [{"role": "user", "content": t}]) for i, t in enumerate(texts)],
                    source="test")


NOTES = [(f"n{i}", f"note {i}: " + "word " * 30) for i in range(40)]


def test_every_prompt_is_grown_to_the_length_with_its_request_last():
    base = _base("Fix this JSON: {a: 1}", "Quote the second line.")
    wl, rec = build_context(base, 600, Chars(), notes=NOTES)
    assert [p.id for p in wl.prompts] == ["p0@600", "p1@600"] and wl.name == "base@600"
    for p, b in zip(wl.prompts, base.prompts, strict=True):
        text = p.messages[-1]["content"]
        assert text.startswith(HEADER) and text.endswith(REQUEST + b.messages[-1]["content"])
        assert "### Note 1\n" in text
        assert len(Chars().apply_chat_template(p.messages)) == 600  # one token per character: exact
    assert rec["prompt_tokens_min"] == rec["prompt_tokens_max"] == 600 and rec["corpus"] == ["given"]
    # a different rotation of notes for each prompt
    assert wl.prompts[0].messages[-1]["content"][:200] != wl.prompts[1].messages[-1]["content"][:200]
    assert wl.parent_hash == base.content_hash


def test_too_short_a_length_and_too_little_material_are_refused_in_words():
    with pytest.raises(WorkloadError, match="longer than tokens = 40"):
        build_context(_base("x" * 30), 40, Chars(), notes=NOTES)
    with pytest.raises(WorkloadError, match="more than the reference material holds"):
        build_context(_base("short"), 100_000, Chars(), notes=NOTES)
    bad = Workload("b", [Prompt("a", None, [{"role": "user", "content": "q"}, {"role": "assistant", "content": "a"}])],
                   source="t")
    with pytest.raises(WorkloadError, match="does not end in a user message"):
        build_context(bad, 600, Chars(), notes=NOTES)


@pytest.mark.parametrize("table, match", [
    ({"context": "copy", "tokens": 8, "tokenizer": "m"}, "tokens"),
    ({"context": "copy", "tokens": 1024}, "tokenizer"),
    ({"context": "copy", "tokens": 1024, "tokenizer": "m", "pad": True}, "pad"),
])
def test_bad_context_tables_are_refused_in_one_line(table, match):
    with pytest.raises(WorkloadError, match=match) as info:
        ContextSource.parse(table)
    assert "\n" not in str(info.value)


def test_a_sweep_names_a_context_workload_as_a_table():
    spec = SweepSpec.parse({"name": "s", "model": "m", "arms": [{"name": "baseline"}], "concurrency": [1],
                            "workloads": [{"context": "copy", "tokens": 1024, "tokenizer": "m"}]})
    (w,) = spec.workloads
    assert isinstance(w, ContextSource) and w.workload_name == "copy@1024"
    with pytest.raises(SweepError):
        SweepSpec.parse({"name": "s", "model": "m", "arms": [{"name": "baseline"}], "concurrency": [1],
                         "workloads": [{"context": "copy", "tokens": 2}]})


def test_a_missing_tokenizer_is_one_line():
    with pytest.raises(WorkloadError, match="no tokenizer") as info:
        resolve({"context": "copy", "tokens": 1024, "tokenizer": "nobody/no-such-model-here"})
    assert "\n" not in str(info.value)


def test_the_bundled_set_at_a_length_in_the_targets_tokens():
    from tests.conftest import require

    require((FOLDER / "tokenizer.json").exists(), "the CPU default model", "make setup builds it")
    wl = resolve({"context": "copy:fix-json", "tokens": 768, "tokenizer": str(FOLDER)})
    assert wl.name == "copy:fix-json@768" and len(wl.prompts) == len(bundled("copy").select("fix-json").prompts)
    ctx = wl.describe()["context"]
    assert 768 - 16 <= ctx["prompt_tokens_min"] <= ctx["prompt_tokens_max"] <= 768
    assert ctx["tokenizer"] == str(FOLDER) and ctx["base"] == "copy:fix-json"


def test_documents_of_ones_own_extend_the_material(tmp_path):
    docs = tmp_path / "docs.jsonl"
    docs.write_text("".join(f'{{"id": "d{i}", "prompt": "document {i}: {"text " * 50}"}}\n' for i in range(30)))
    from specnb.prompts import context

    notes = context.load_notes([str(docs)])
    assert len(notes) == len(context.load_notes()) + 30 and notes[-1][0] == "docs/d29"
    with pytest.raises(WorkloadError, match="no such prompt file"):
        context.load_notes([str(tmp_path / "missing.jsonl")])


def test_the_context_notebook_makes_a_workload_per_length_and_refuses_bad_lengths():
    from specnb.notebooks.runner import notebook_parameters, notebook_source
    from specnb.sweep.study import Study

    params = notebook_parameters(notebook_source("context"))
    study = Study.from_namespace("context", params)
    assert [w["tokens"] for w in study.workloads] == params["context_tokens"]
    assert {w["tokenizer"] for w in study.workloads} == {params["model"]}
    for bad, match in (([], "non-empty list"), ([512, 512], "twice"), (["512"], "non-empty list of token counts")):
        with pytest.raises(SweepError, match=match) as info:
            Study.from_namespace("context", {**params, "context_tokens": bad})
        assert "\n" not in str(info.value)
    # another notebook's `context_tokens` (the KV notebook's sessions length) is its own business
    kv = notebook_parameters(notebook_source("kv"))
    assert isinstance(kv["context_tokens"], int)
    assert Study.from_namespace("kv", kv).workloads == kv["workloads"]
