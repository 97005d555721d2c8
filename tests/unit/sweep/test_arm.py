"""The draft-model check (seed 004's tokenizer gotcha): vocabulary size, special token ids and
strings, and the vocabulary itself, refused before any server starts."""

from __future__ import annotations

import json

import pytest

from specnb import paths
from specnb.sweep import SweepError, SweepSpec, run_sweep
from specnb.sweep.arm import Arm, ArmError, check_drafter

VOCAB = {"<unk>": 0, "<s>": 1, "</s>": 2, "a": 3, "b": 4, "c": 5}


def model(tmp_path, name, *, vocab=VOCAB, config=None, tok_config=None, sentencepiece=None, tokenizer=True):
    d = tmp_path / name
    d.mkdir()
    cfg = {"vocab_size": len(vocab), "bos_token_id": 1, "eos_token_id": 2, "unk_token_id": 0}
    cfg.update(config or {})
    (d / "config.json").write_text(json.dumps(cfg))
    (d / "tokenizer_config.json").write_text(json.dumps(
        {"bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>", **(tok_config or {})}))
    if sentencepiece is not None:
        (d / "tokenizer.model").write_bytes(sentencepiece)
    elif tokenizer:
        (d / "tokenizer.json").write_text(json.dumps({"model": {"type": "BPE", "vocab": vocab},
                                                      "added_tokens": [{"id": 2, "content": "</s>"}]}))
    return d


def arm(draft) -> Arm:
    return Arm(name="draft", speculative_config={"model": str(draft), "num_speculative_tokens": 3})


def test_identical_tokenizers_pass_without_notes(tmp_path):
    assert check_drafter(arm(model(tmp_path, "d")), str(model(tmp_path, "t"))) == []


def test_same_size_other_tokens_is_refused(tmp_path):
    other = dict(VOCAB)
    other.pop("b")
    other["bee"] = 4
    with pytest.raises(ArmError, match=r"differ in 1 token\(s\), e.g. id 4 is 'bee' in the draft and 'b'"):
        check_drafter(arm(model(tmp_path, "d", vocab=other)), str(model(tmp_path, "t")))


def test_other_vocab_size_is_refused(tmp_path):
    with pytest.raises(ArmError, match=r"vocabulary \(7\) differs from the target's \(6\)"):
        check_drafter(arm(model(tmp_path, "d", vocab={**VOCAB, "d": 6})), str(model(tmp_path, "t")))


@pytest.mark.parametrize("config, tok_config, needle", [
    ({"eos_token_id": 5}, None, "eos_token_id 5 vs 2"),
    ({"unk_token_id": 3}, None, "unk_token_id 3 vs 0"),
    ({"bos_token_id": 4}, None, "bos_token_id 4 vs 1"),
    (None, {"eos_token": "<|im_end|>"}, "eos_token '<|im_end|>' vs '</s>'"),
    (None, {"bos_token": {"content": "<bos>", "lstrip": False}}, "bos_token '<bos>' vs '<s>'"),
])
def test_other_special_tokens_are_refused(tmp_path, config, tok_config, needle):
    with pytest.raises(ArmError, match="special tokens differ") as exc:
        check_drafter(arm(model(tmp_path, "d", config=config, tok_config=tok_config)), str(model(tmp_path, "t")))
    assert needle in str(exc.value) and "\n" not in str(exc.value)


def test_sentencepiece_files_are_compared_by_content(tmp_path):
    target = model(tmp_path, "t", sentencepiece=b"spm-1")
    assert check_drafter(arm(model(tmp_path, "same", sentencepiece=b"spm-1")), str(target)) == []
    with pytest.raises(ArmError, match="tokenizer.model files differ"):
        check_drafter(arm(model(tmp_path, "other", sentencepiece=b"spm-2")), str(target))


def test_without_tokenizer_files_the_note_says_what_was_not_checked(tmp_path):
    notes = check_drafter(arm(model(tmp_path, "d", tokenizer=False)), str(model(tmp_path, "t")))
    assert len(notes) == 1 and "vocabulary contents not checked" in notes[0]


def test_ngram_has_no_draft_to_compare(tmp_path):
    assert check_drafter(Arm(name="n", speculative_config={"method": "ngram", "num_speculative_tokens": 4}),
                         str(model(tmp_path, "t"))) == []


TARGET = {"hidden_size": 576, "num_hidden_layers": 30}


def head(tmp_path, name="head", weights=True, **layer):
    """An EAGLE-3 head in speculators' format (its layer shape nested), trained for ``layer``'s target."""
    d = tmp_path / name
    d.mkdir()
    shape = {"hidden_size": 576, "vocab_size": len(VOCAB), **layer}
    (d / "config.json").write_text(json.dumps({
        "speculators_model_type": "eagle3", "draft_vocab_size": 4, "transformer_layer_config": shape,
        "eagle_aux_hidden_state_layer_ids": layer.pop("aux", [2, 15, 27]),
        "speculators_config": {"verifier": {"name_or_path": "models/SmolLM2-135M-Instruct"}}}))
    if weights:
        (d / "model.safetensors").write_bytes(b"")
    return d


def eagle(d) -> Arm:
    return Arm(name="e", speculative_config={"method": "eagle3", "model": str(d), "num_speculative_tokens": 3})


def test_an_eagle_head_for_this_target_passes_with_its_verifier_noted(tmp_path):
    notes = check_drafter(eagle(head(tmp_path)), str(model(tmp_path, "t", config=TARGET)))
    assert notes == ["EAGLE head trained for 'models/SmolLM2-135M-Instruct'"]


@pytest.mark.parametrize("layer, needle", [
    ({"hidden_size": 4096}, "hidden states of size 4096, the target's are 576"),
    ({"vocab_size": 128256}, "vocabulary has 128256 tokens"),
    ({"aux": [2, 16, 61]}, "reads target layers [2, 16, 61], the target has 30"),
])
def test_an_eagle_head_trained_for_another_target_is_refused(tmp_path, layer, needle):
    with pytest.raises(ArmError, match="trained for another target") as e:
        check_drafter(eagle(head(tmp_path, **layer)), str(model(tmp_path, "t", config=TARGET)))
    assert needle in str(e.value) and "\n" not in str(e.value)


def test_an_eagle_head_without_weights_is_refused(tmp_path):
    with pytest.raises(ArmError, match="holds no weights"):
        check_drafter(eagle(head(tmp_path, weights=False)), str(model(tmp_path, "t", config=TARGET)))


def test_the_real_default_model_against_its_own_tokenizer(tmp_path):
    src = paths.MODELS / "SmolLM2-135M-Instruct"
    from tests.conftest import require

    require((src / "tokenizer.json").exists(), "the CPU default model", "make setup builds it")
    d = tmp_path / "draft"
    d.mkdir()
    for f in ("config.json", "generation_config.json", "tokenizer.json", "tokenizer_config.json"):
        (d / f).symlink_to(src / f)
    assert check_drafter(arm(d), str(src)) == []


def test_a_sweep_refuses_before_any_server_or_folder(tmp_path, monkeypatch):
    import specnb.sweep.servers as servers

    def no_server(*a, **k):
        raise AssertionError("a server was started for a sweep that must be refused")

    monkeypatch.setattr(servers, "VllmServer", no_server)
    target = model(tmp_path, "t")
    bad = model(tmp_path, "d", tok_config={"eos_token": "<|im_end|>"})
    spec = SweepSpec.parse(dict(name="x", model=str(target), concurrency=[1],
                                arms=[{"name": "baseline"}, arm(bad).model_dump()]))
    with pytest.raises(SweepError, match="special tokens differ"):
        run_sweep(spec, tmp_path / "out", progress=False)
    assert not (tmp_path / "out").exists()
