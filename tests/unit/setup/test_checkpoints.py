"""Derived checkpoints without a server: quantization error bounds, int4 packing order,
the config block vLLM parses, noise determinism, and the build's folder handling on a
tiny Llama-shaped model."""

from __future__ import annotations

import json
import math

import pytest
import torch
from safetensors.torch import load_file, save_file

from specnb.setup import checkpoints as ck
from specnb.setup import machine as bootstrap
from specnb.setup.checkpoints import CheckpointError
from specnb.sweep.arm import Arm, check_drafter

# ----------------------------------------------------------------------------- quantization


def _rand(shape, seed=0, dtype=torch.float32):
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(shape, generator=g) * 0.05).to(dtype)


def test_w8a8_stores_int8_weights_and_one_float32_scale_per_output_channel():
    w = _rand((48, 160), dtype=torch.bfloat16)
    q = ck.quantize_weight(w, "w8a8")
    assert set(q) == {"weight", "weight_scale"}
    assert q["weight"].dtype == torch.int8 and q["weight"].shape == (48, 160)
    assert q["weight_scale"].dtype == torch.float32 and q["weight_scale"].shape == (48, 1)
    # min-max: each row's largest magnitude lands on the edge of the int8 range (-128 or 127)
    assert (q["weight"].to(torch.int16).abs().amax(dim=1) >= 127).all()


def test_w8a8_round_trip_error_is_at_most_half_a_step():
    w = _rand((64, 128), seed=1)
    q = ck.quantize_weight(w, "w8a8")
    back = ck.dequantize_weight(q, "w8a8")
    err = (back - w).abs()
    step = q["weight_scale"].float()  # [64, 1], broadcasts over the row
    assert (err <= step / 2 + 1e-7).all()


def test_w4a16_packs_eight_values_per_int32_with_one_scale_per_group():
    w = _rand((96, 192), dtype=torch.bfloat16)
    q = ck.quantize_weight(w, "w4a16", group_size=64)
    assert set(q) == {"weight_packed", "weight_scale", "weight_shape"}
    assert q["weight_packed"].dtype == torch.int32 and q["weight_packed"].shape == (96, 192 // 8)
    assert q["weight_scale"].dtype == torch.bfloat16 and q["weight_scale"].shape == (96, 192 // 64)
    assert q["weight_shape"].tolist() == [96, 192]


def test_w4a16_round_trip_error_is_at_most_half_a_step_per_group():
    w = _rand((32, 256), seed=2, dtype=torch.bfloat16)
    q = ck.quantize_weight(w, "w4a16", group_size=64)
    back = ck.dequantize_weight(q, "w4a16", group_size=64)
    err = (back - w.float()).abs().reshape(32, 4, 64)
    step = q["weight_scale"].float().unsqueeze(-1)
    assert (err <= step / 2 + 1e-7).all()
    assert (err.amax(dim=-1) > step.squeeze(-1) / 4).all()  # a real 4-bit grid, not a finer one


def test_w4a16_packing_order_is_lowest_nibble_first_with_offset_eight():
    # Independent of compressed-tensors: column 8*j + i sits in bits 4i..4i+3 of word j,
    # stored as q + 8 (the GPTQ/uint4b8 layout vLLM's WNA16 kernels read).
    w = _rand((4, 64), seed=3)
    q = ck.quantize_weight(w, "w4a16", group_size=64)
    scale = q["weight_scale"].float()
    expected = torch.clamp(torch.round(w / scale), -8, 7).to(torch.int64) + 8
    words = q["weight_packed"].to(torch.int64) & 0xFFFFFFFF
    unpacked = torch.stack([(words >> (4 * i)) & 0xF for i in range(8)], dim=-1).reshape(4, 64)
    assert torch.equal(unpacked, expected)


def test_w4a16_group_must_divide_the_input_width():
    with pytest.raises(CheckpointError, match="576 is not a multiple of the group size 128"):
        ck.quantize_weight(_rand((8, 576)), "w4a16", group_size=128)


@pytest.mark.parametrize("bad", [0, 12, -64, "64"])
def test_bad_group_sizes_are_refused(bad):
    with pytest.raises(CheckpointError, match="group size"):
        ck.weight_scheme("w4a16", bad)


def test_unknown_kind_and_non_matrix_are_refused():
    with pytest.raises(CheckpointError, match="unknown quantization kind"):
        ck.weight_scheme("fp8")
    with pytest.raises(CheckpointError, match="2-D"):
        ck.quantize_weight(torch.ones(8), "w8a8")


def test_only_decoder_linear_weights_are_quantized():
    m = torch.ones(4, 4)
    assert ck.is_quantized_weight("model.layers.0.self_attn.q_proj.weight", m)
    assert ck.is_quantized_weight("model.layers.3.mlp.down_proj.weight", m)
    assert not ck.is_quantized_weight("model.embed_tokens.weight", m)
    assert not ck.is_quantized_weight("lm_head.weight", m)
    assert not ck.is_quantized_weight("model.norm.weight", torch.ones(4))


# ----------------------------------------------------------------------------- config block


def test_w8a8_config_block_is_dynamic_per_token_int8_with_channel_weights():
    c = ck.quantization_config("w8a8")
    assert c["quant_method"] == "compressed-tensors"
    assert c["format"] == "int-quantized"
    assert c["quantization_status"] == "compressed"
    assert c["ignore"] == ["lm_head"]
    (group,) = c["config_groups"].values()
    assert group["targets"] == ["Linear"]
    w, a = group["weights"], group["input_activations"]
    assert (w["num_bits"], w["type"], w["strategy"], w["symmetric"], w["dynamic"]) == (
        8, "int", "channel", True, False)
    assert (a["num_bits"], a["type"], a["strategy"], a["symmetric"], a["dynamic"]) == (
        8, "int", "token", True, True)


def test_w4a16_config_block_is_weight_only_group_64_pack_quantized():
    c = ck.quantization_config("w4a16", 64)
    assert c["format"] == "pack-quantized"
    assert c["ignore"] == ["lm_head"]
    (group,) = c["config_groups"].values()
    w = group["weights"]
    assert (w["num_bits"], w["type"], w["strategy"], w["group_size"], w["symmetric"]) == (
        4, "int", "group", 64, True)
    assert group["input_activations"] is None


@pytest.mark.parametrize("kind", ["w8a8", "w4a16"])
def test_config_block_validates_as_compressed_tensors_config(kind):
    from compressed_tensors.quantization import QuantizationConfig

    block = ck.quantization_config(kind)
    parsed = QuantizationConfig.model_validate(
        {k: v for k, v in block.items() if k not in ("version", "sparsity_config", "transform_config")}
    )
    assert parsed.format == block["format"]
    assert json.loads(json.dumps(block)) == block  # plain JSON, fit for config.json


# ----------------------------------------------------------------------------- noise


def test_noise_is_deterministic_in_seed_and_name():
    t = _rand((3, 5), dtype=torch.bfloat16)
    a = ck.add_noise(t, 0.1, seed=7, name="w")
    assert torch.equal(a, ck.add_noise(t, 0.1, seed=7, name="w"))
    assert not torch.equal(a, ck.add_noise(t, 0.1, seed=8, name="w"))
    assert not torch.equal(a, ck.add_noise(t, 0.1, seed=7, name="v"))
    assert a.dtype == torch.bfloat16 and a.shape == t.shape
    assert torch.equal(ck.add_noise(t, 0.0, seed=7, name="w"), t)


def test_noise_scale_is_sigma_times_the_weights_std():
    t = _rand((256, 256), seed=4)
    d = ck.add_noise(t, 0.2, seed=0, name="w") - t
    assert math.isclose(d.std().item(), 0.2 * t.std().item(), rel_tol=0.05)


@pytest.mark.parametrize("bad", [-0.1, float("nan"), float("inf")])
def test_bad_sigma_is_refused(bad):
    with pytest.raises(CheckpointError, match="sigma"):
        ck.add_noise(torch.ones(2, 2), bad, seed=0, name="w")


def test_noise_folder_names():
    assert ck.noise_name("M", 0.05) == "M-noise0.05"
    assert ck.noise_name("M", 0.1) == "M-noise0.1"


# ----------------------------------------------------------------------------- builds on a tiny model

HIDDEN, INTER, VOCAB, LAYERS = 64, 128, 32, 2


@pytest.fixture()
def tiny(tmp_path):
    src = tmp_path / "models" / "Tiny"
    src.mkdir(parents=True)
    g = torch.Generator().manual_seed(0)

    def r(*shape):
        return (torch.randn(shape, generator=g) * 0.02).to(torch.bfloat16)

    sd = {"model.embed_tokens.weight": r(VOCAB, HIDDEN), "model.norm.weight": torch.ones(HIDDEN, dtype=torch.bfloat16)}
    for i in range(LAYERS):
        p = f"model.layers.{i}."
        sd.update({
            p + "input_layernorm.weight": torch.ones(HIDDEN, dtype=torch.bfloat16),
            p + "post_attention_layernorm.weight": torch.ones(HIDDEN, dtype=torch.bfloat16),
            p + "self_attn.q_proj.weight": r(HIDDEN, HIDDEN), p + "self_attn.k_proj.weight": r(HIDDEN // 2, HIDDEN),
            p + "self_attn.v_proj.weight": r(HIDDEN // 2, HIDDEN), p + "self_attn.o_proj.weight": r(HIDDEN, HIDDEN),
            p + "mlp.gate_proj.weight": r(INTER, HIDDEN), p + "mlp.up_proj.weight": r(INTER, HIDDEN),
            p + "mlp.down_proj.weight": r(HIDDEN, INTER),
        })
    save_file(sd, str(src / "model.safetensors"), metadata={"format": "pt"})
    (src / "config.json").write_text(json.dumps({
        "architectures": ["LlamaForCausalLM"], "hidden_size": HIDDEN, "vocab_size": VOCAB,
        "bos_token_id": 1, "eos_token_id": 2, "tie_word_embeddings": True,
    }))
    (src / "tokenizer.json").write_text("{}")
    return src


def _snapshot(folder):
    return {p.name: (p.stat().st_mtime_ns, p.read_bytes()) for p in sorted(folder.iterdir())}


def test_build_w8a8_writes_a_complete_folder_and_leaves_the_source_alone(tiny):
    before = _snapshot(tiny)
    r = ck.build_w8a8(tiny)
    assert r.built and r.path == tiny.parent / "Tiny-W8A8" and r.build_s >= 0
    assert _snapshot(tiny) == before
    sd = load_file(str(r.path / "model.safetensors"))
    assert sd["model.layers.1.mlp.down_proj.weight"].dtype == torch.int8
    assert sd["model.layers.1.mlp.down_proj.weight_scale"].shape == (HIDDEN, 1)
    assert sd["model.embed_tokens.weight"].dtype == torch.bfloat16  # kept as it was
    assert "lm_head.weight" not in sd  # still tied
    cfg = json.loads((r.path / "config.json").read_text())
    assert cfg["quantization_config"] == ck.quantization_config("w8a8")
    assert cfg["vocab_size"] == VOCAB
    assert (r.path / "tokenizer.json").read_text() == "{}"
    prov = json.loads((r.path / ck.PROVENANCE_FILE).read_text())
    assert prov["recipe"]["kind"] == "w8a8" and prov["recipe"]["format"] == "int-quantized"
    assert prov["source"] == {"name": "Tiny", "sha256": ck.fingerprint(tiny)}
    assert prov["tensors"] == {"quantized": 7 * LAYERS, "kept": 2 + 2 * LAYERS}
    assert prov["versions"]["compressed-tensors"] and prov["versions"]["torch"]
    assert not list(tiny.parent.glob(".*partial*"))


def test_build_w4a16_group_64(tiny):
    r = ck.build_w4a16(tiny)
    assert r.path.name == "Tiny-W4A16-G64"
    sd = load_file(str(r.path / "model.safetensors"))
    assert sd["model.layers.0.mlp.down_proj.weight_packed"].shape == (HIDDEN, INTER // 8)
    assert sd["model.layers.0.mlp.down_proj.weight_scale"].shape == (HIDDEN, INTER // 64)
    assert "model.layers.0.mlp.down_proj.weight" not in sd
    assert json.loads((r.path / "config.json").read_text())["quantization_config"]["format"] == "pack-quantized"


def test_a_failed_build_leaves_no_folder_behind(tiny):
    with pytest.raises(CheckpointError, match="not a multiple of the group size 128"):
        ck.build_w4a16(tiny, group_size=128)
    assert sorted(p.name for p in tiny.parent.iterdir()) == ["Tiny"]


def test_builds_are_idempotent_and_rebuild_when_recipe_or_source_changes(tiny):
    first = ck.build_noise_draft(tiny, 0.1, seed=3)
    snap = _snapshot(first.path)
    again = ck.build_noise_draft(tiny, 0.1, seed=3)
    assert not again.built and again.build_s is None
    assert _snapshot(first.path) == snap
    # same folder name, different seed: the recipe differs, so it is rebuilt
    reseeded = ck.build_noise_draft(tiny, 0.1, seed=4)
    assert reseeded.built and reseeded.path == first.path
    assert _snapshot(first.path)["model.safetensors"][1] != snap["model.safetensors"][1]
    # a changed source makes every derived folder stale
    cfg = json.loads((tiny / "config.json").read_text())
    (tiny / "config.json").write_text(json.dumps({**cfg, "note": 1}))
    assert ck.build_noise_draft(tiny, 0.1, seed=4).built


def test_noise_draft_is_deterministic_and_keeps_the_vocabulary(tiny, tmp_path):
    a = ck.build_noise_draft(tiny, 0.05, seed=0)
    b = ck.build_noise_draft(tiny, 0.05, tmp_path / "other", seed=0)
    sa, sb = load_file(str(a.path / "model.safetensors")), load_file(str(b.path / "model.safetensors"))
    src = load_file(str(tiny / "model.safetensors"))
    assert sa.keys() == sb.keys() == src.keys()
    assert all(torch.equal(sa[k], sb[k]) for k in sa)
    assert not torch.equal(sa["model.embed_tokens.weight"], src["model.embed_tokens.weight"])
    assert torch.equal(sa["model.norm.weight"], src["model.norm.weight"])  # 1-D: untouched
    assert (a.path / "config.json").read_text() == (tiny / "config.json").read_text()
    arm = Arm(name="noise", speculative_config={"model": str(a.path), "num_speculative_tokens": 3})
    assert check_drafter(arm, str(tiny)) == []


def test_a_killed_build_leftover_is_cleaned_and_foreign_folders_are_refused(tiny):
    leftover = tiny.parent / ".Tiny-noise0.1.partial-abc"
    leftover.mkdir()
    (leftover / "model.safetensors").write_bytes(b"half")
    ck.build_noise_draft(tiny, 0.1)
    assert not leftover.exists()
    foreign = tiny.parent / "Tiny-W8A8"
    foreign.mkdir()
    (foreign / "config.json").write_text("{}")
    with pytest.raises(CheckpointError, match="not built by specnb"):
        ck.build_w8a8(tiny)
    assert (foreign / "config.json").read_text() == "{}"


def test_the_source_is_never_a_destination_and_must_exist(tiny, tmp_path):
    with pytest.raises(CheckpointError, match="is the source model"):
        ck.build_noise_draft(tiny, 0.1, tiny)
    with pytest.raises(CheckpointError, match="missing or incomplete"):
        ck.build_w8a8(tmp_path / "nope")


# ----------------------------------------------------------------------------- CLI


def test_cli_builds_then_skips(tiny, capsys):
    assert bootstrap.main(["noise", "--source", str(tiny), "--sigma", "0.2", "--sigma", "0.3"]) == 0
    out = capsys.readouterr().out
    assert "Tiny-noise0.2 (built in" in out and "Tiny-noise0.3 (built in" in out
    bootstrap.main(["checkpoints", "--source", str(tiny), "--sigma", "0.2"])
    out = capsys.readouterr().out
    assert "Tiny-noise0.2 (already complete)" in out
    assert "Tiny-W8A8 (built in" in out and "Tiny-W4A16-G64 (built in" in out


def test_cli_reports_bad_input_in_one_line(tiny, capsys):
    with pytest.raises(SystemExit) as exc:
        bootstrap.main(["w4a16", "--source", str(tiny), "--group-size", "128"])
    assert exc.value.code == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "not a multiple of the group size 128" in err
