"""The step-time probe on CPU with small shapes: the shapes are the published models', one step
of q tokens is q steps of one token (the cache and the causal mask are right), the experts' two
kernels agree, the grid runs in priority order within its budget and writes its ledger as it
goes, bad input is one line before anything is measured, and nothing but torch and the standard
library is imported (the GPU machine has no pandas, pydantic or vLLM)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
import torch

from specnb import paths
from specnb.probe.model import KvCache, ProbeModel
from specnb.probe.run import PRIORITY_Q, Cell, main, plan, weights_plan
from specnb.probe.shapes import ProbeError, Shape, load_shape, shape_names
from tests.hang import guard

# parameter counts as published (model cards; SmolLM2's from its safetensors: the calculator's
# target_params_b); the probe's shapes must rebuild them
PUBLISHED_PARAMS = {"llama-3.1-8b": 8.03e9, "qwen3-8b": 8.19e9, "qwen3-30b-a3b": 30.5e9, "gemma-3-27b": 27.0e9,
                    "smollm2-135m": 134_515_008}


def tiny(**kw) -> Shape:
    base = dict(name="tiny", source="test", hidden_size=64, num_hidden_layers=3, num_attention_heads=4,
                num_key_value_heads=2, head_dim=16, intermediate_size=96, vocab_size=101)
    base.update(kw)
    return Shape(**base)


def test_the_shapes_rebuild_the_published_parameter_counts():
    assert set(shape_names()) == set(PUBLISHED_PARAMS)
    for name, published in PUBLISHED_PARAMS.items():
        assert load_shape(name).params() == pytest.approx(published, rel=0.01), name
    assert load_shape("smollm2-135m").params() == 134_515_008  # to the parameter: the checkpoint's own count
    assert load_shape("smollm2-135m").kv_bytes_per_token(2) == 23040  # the calculator's bf16 figure


def test_a_shape_from_a_config_file_and_bad_shapes_are_one_line(tmp_path):
    cfg = tmp_path / "config.json"
    cfg.write_text(json.dumps({"text_config": {"hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4,
                                               "num_key_value_heads": 2, "intermediate_size": 96,
                                               "vocab_size": 50, "rope_theta": 1e4}}))
    s = load_shape(str(cfg))
    assert s.head_dim == 16 and s.name == "config" and not s.moe
    for bad, match in (("no-such-model", "unknown shape"), ):
        with pytest.raises(ProbeError, match=match):
            load_shape(bad)
    with pytest.raises(ProbeError, match="not a multiple"):
        tiny(num_key_value_heads=3)
    with pytest.raises(ProbeError, match="mixture of experts needs"):
        tiny(num_experts=4)
    cfg.write_text(json.dumps({"hidden_size": 64}))
    with pytest.raises(ProbeError, match="missing .*num_attention_heads"):
        load_shape(str(cfg))


def test_the_plan_runs_decode_and_the_verify_widths_first_and_every_cell_once():
    cells = plan((1, 8), (1, 2, 3, 4, 5), (256, 1024))
    assert len(cells) == len(set(cells)) == 2 * 5 * 2
    first = [c for c in cells if c.q in PRIORITY_Q]
    assert cells[:len(first)] == first and {c.q for c in first} == {1, 4, 5}
    assert Cell(4, 5, 10).tokens == 20


@pytest.mark.parametrize("shape", [tiny(), tiny(sliding_window=5, sliding_window_pattern=2),
                                   tiny(num_experts=4, num_experts_per_tok=2, moe_intermediate_size=24)],
                         ids=["dense", "sliding", "experts"])
def test_one_step_of_q_tokens_is_q_steps_of_one(shape):
    """Verification (q new tokens at once, causal to the lower right) gives every position the
    logits that decoding them one by one gives, and leaves the same cache: the mask, the rotary
    positions, the cache writes and a local layer's window are right."""
    torch.manual_seed(0)
    model = ProbeModel(shape, torch.device("cpu"), torch.float32)
    b, length, q = 2, 9, 4
    prefix = torch.randint(0, shape.vocab_size, (b, length))
    new = torch.randint(0, shape.vocab_size, (b, q))
    wide, narrow = (KvCache(shape, b, length + q, torch.device("cpu"), torch.float32) for _ in range(2))
    for c in (wide, narrow):
        for t in c.k + c.v:
            t.zero_()
        for j in range(length):  # the same prefix in both caches
            model.step(prefix[:, j:j + 1], c, j)
    at_once = model.step(new, wide, length).view(b, q, -1)
    one_by_one = torch.stack([model.step(new[:, j:j + 1], narrow, length + j).view(b, -1) for j in range(q)], 1)
    torch.testing.assert_close(at_once, one_by_one, rtol=1e-4, atol=1e-4)
    for x, y in zip(wide.k + wide.v, narrow.k + narrow.v, strict=True):
        torch.testing.assert_close(x, y, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("shape", [tiny(tie_word_embeddings=True), tiny(),
                                   tiny(num_experts=4, num_experts_per_tok=2, moe_intermediate_size=24)],
                         ids=["tied", "untied", "experts"])
def test_the_model_holds_the_weights_its_plan_counts(shape):
    """The memory plan sizes a model by ``ProbeModel.nbytes``: the tensors built are that many bytes,
    and the shape's parameter count (norms aside) is theirs."""
    model = ProbeModel(shape, torch.device("cpu"), torch.float32)
    tensors = {id(t): t for lay in model.layers for t in vars(lay).values() if t is not None}
    tensors |= {id(model.embed): model.embed, id(model.lm_head): model.lm_head, id(model.final_norm): model.final_norm}
    held = sum(t.numel() for t in tensors.values())
    assert held == shape.params()
    norms = shape.num_hidden_layers * 2 * shape.hidden_size + shape.hidden_size
    assert ProbeModel.nbytes(shape, 4) == pytest.approx(4 * held, abs=4 * norms)


def test_the_experts_grouped_kernel_and_the_loop_agree():
    """Each kernel torch offers here (the grouped matmul where it runs on CPU, the per-expert loop
    always) gives every token the weighted sum of its top-k experts, computed token by token."""
    import torch.nn.functional as F

    shape = tiny(num_experts=5, num_experts_per_tok=2, moe_intermediate_size=24)
    model = ProbeModel(shape, torch.device("cpu"), torch.float32)
    lay = model.layers[0]
    x = torch.randn(7, shape.hidden_size)
    probs = torch.softmax(F.linear(x, lay.router), dim=-1)
    want = torch.zeros_like(x)
    for t in range(x.shape[0]):
        w, e = torch.topk(probs[t], shape.num_experts_per_tok)
        for wi, ei in zip(w / w.sum(), e.tolist(), strict=True):
            gate, up = (x[t] @ lay.e_gate_up[ei]).chunk(2)
            want[t] += wi * ((F.silu(gate) * up) @ lay.e_down[ei])
    kernels = [model.moe_kernel, "loop"] if model.moe_kernel != "loop" else ["loop"]
    for kernel in kernels:
        model.moe_kernel = kernel
        torch.testing.assert_close(model._moe(lay, x), want, rtol=1e-4, atol=1e-4, msg=kernel)


def test_a_model_too_large_shares_big_layers_and_refuses_small_ones():
    gemma = load_shape("gemma-3-27b")
    assert weights_plan(gemma, 2, free=200 * 2**30) is False
    assert weights_plan(gemma, 2, free=40 * 2**30) is True  # 54 GB of weights: one 0.87 GB layer for all
    with pytest.raises(ProbeError, match="do not fit"):
        weights_plan(gemma, 2, free=2 * 2**30)
    with pytest.raises(ProbeError, match="too small to share"):
        weights_plan(load_shape("smollm2-135m"), 2, free=200 * 2**20)


def _run(tmp_path, *args: str) -> dict:
    cfg = tmp_path / "tiny.json"
    cfg.write_text(json.dumps({k: v for k, v in tiny().to_dict().items() if k != "source"}))
    out = tmp_path / "run"
    rc = main(["--shape", str(cfg), "--device", "cpu", "--dtype", "fp32", "--out", str(out), "--repeats", "2,3",
               *args])
    assert rc == 0
    return json.loads((out / "tiny.json").read_text())


def test_a_cpu_run_writes_its_ledger_with_every_cell(tmp_path, capsys):
    doc = _run(tmp_path, "--batches", "1,2", "--queries", "1,2,5", "--lengths", "8,32")
    assert doc["kind"] == "probe" and doc["ended"] == "complete" and doc["device"]["kind"] == "cpu"
    assert doc["dtype"] == "float32" and doc["graphs"] is False and doc["skipped"] == []
    assert doc["shape"]["hidden_size"] == 64 and doc["params"] == tiny().params()
    got = [(c["b"], c["q"], c["L"]) for c in doc["cells"]]
    assert got == [(c.b, c.q, c.L) for c in plan((1, 2), (1, 2, 5), (8, 32))]
    for c in doc["cells"]:
        assert 2 <= c["repeats"] <= 3 and 0 < c["p10_ms"] <= c["median_ms"] <= c["p90_ms"], c
        assert c["tokens"] == c["b"] * c["q"] and c["graph"] is False
    assert doc["attention"].startswith("sdpa:") and doc["elapsed_s"] > 0
    assert "cells measured, 0 skipped" in capsys.readouterr().out


def test_a_failing_cell_is_recorded_and_the_grid_goes_on(tmp_path, monkeypatch, capsys):
    """One cell's error (an out-of-memory, a kernel that refuses a shape) is that cell's skip,
    with its reason; the cells after it are measured (on a lent GPU, one bad cell must not cost
    the run)."""
    real = ProbeModel.step

    def step(self, tokens, cache, cached):
        if tokens.shape[1] == 2:
            raise RuntimeError("No available kernel.  Aborting execution.")
        return real(self, tokens, cache, cached)

    monkeypatch.setattr(ProbeModel, "step", step)
    doc = _run(tmp_path, "--batches", "1,2", "--queries", "1,2,5", "--lengths", "8")
    assert doc["ended"] == "complete"
    assert sorted((c["b"], c["q"]) for c in doc["cells"]) == [(1, 1), (1, 5), (2, 1), (2, 5)]
    assert [(x["b"], x["q"]) for x in doc["skipped"]] == [(1, 2), (2, 2)]
    assert all(x["why"] == "failed: RuntimeError: No available kernel. Aborting execution." for x in doc["skipped"])
    assert "q=2 L=8      failed: RuntimeError" in capsys.readouterr().out


def test_a_failing_shape_leaves_the_others_to_run(tmp_path, monkeypatch, capsys):
    import specnb.probe.run as run_mod

    first, second = tmp_path / "first.json", tmp_path / "second.json"
    for path in (first, second):
        path.write_text(json.dumps({k: v for k, v in tiny().to_dict().items() if k not in ("source", "name")}))
    real = run_mod.weights_plan
    calls = []

    def plan_once_refused(shape, nbytes, free):
        calls.append(shape.name)
        if shape.name == "first" and calls.count("first") == 2:  # refused in the shape's own run only
            raise RuntimeError("CUDA error: an illegal memory access was encountered")
        return real(shape, nbytes, free)

    monkeypatch.setattr(run_mod, "weights_plan", plan_once_refused)
    out = tmp_path / "run"
    rc = main(["--shape", str(first), "--shape", str(second), "--device", "cpu", "--dtype", "fp32", "--out", str(out),
               "--repeats", "2,2", "--batches", "1", "--queries", "1", "--lengths", "8"])
    assert rc == 1
    assert json.loads((out / "second.json").read_text())["ended"] == "complete"
    text = capsys.readouterr().out
    assert "first: failed: RuntimeError: CUDA error: an illegal memory access" in text and "failed: first" in text


def test_on_a_gpu_a_local_layer_gets_no_dense_mask(monkeypatch):
    """CUDA's flash attention refuses a dense mask: where the window is not exact (the GPU's
    choice), every attention call of a sliding-window step gets no mask or the lower-right causal
    bias; and the backend test tries the dense mask only where the model uses one."""
    import torch.nn.functional as F
    from torch.nn.attention.bias import CausalBias

    from specnb.probe.run import sdpa_backend

    shape = tiny(sliding_window=5, sliding_window_pattern=2)
    masks = []
    real = F.scaled_dot_product_attention

    def sdpa(q, k, v, attn_mask=None, **kw):  # records the mask; the output's shape is all the step needs
        masks.append(attn_mask)
        return torch.zeros_like(q)

    monkeypatch.setattr(F, "scaled_dot_product_attention", sdpa)
    model = ProbeModel(shape, torch.device("cpu"), torch.float32, exact_window=False)
    cache = KvCache(shape, 2, 16, torch.device("cpu"), torch.float32)
    model.step(torch.zeros(2, 4, dtype=torch.long), cache, 9)
    assert len(masks) == shape.num_hidden_layers and all(isinstance(m, CausalBias) for m in masks)
    assert ProbeModel(shape, torch.device("cpu"), torch.float32).exact_window  # the CPU's: exact
    monkeypatch.setattr(F, "scaled_dot_product_attention", real)
    assert sdpa_backend(torch, torch.device("cpu"), torch.float32, shape, band=True)[1] != "default"


def test_the_budget_skips_what_is_left_and_says_so(tmp_path):
    doc = _run(tmp_path, "--batches", "1,2,4", "--queries", "1,5", "--lengths", "8", "--budget-s", "1e-9")
    assert doc["ended"] == "complete" and doc["cells"] == []
    assert len(doc["skipped"]) == 6 and all(s["why"].startswith("over the time budget") for s in doc["skipped"])


def test_the_figure_draws_the_steps_and_the_verify_cost(tmp_path):
    from specnb.figures.probe import cost_ratios, draw_run
    from specnb.probe.run import probe_ledgers

    _run(tmp_path, "--batches", "1,2", "--queries", "1,4,5", "--lengths", "8")
    ((_, doc),) = probe_ledgers(tmp_path / "run")
    ratios = cost_ratios(doc)
    assert {(r["k"], r["b"]) for r in ratios} == {(3, 1), (3, 2), (4, 1), (4, 2)}
    (png,) = draw_run(tmp_path / "run")
    assert png.stat().st_size > 0 and (tmp_path / "run" / "probe-tiny.svg").exists()
    side = json.loads((tmp_path / "run" / "probe-tiny.json").read_text())
    assert side["source_files"] == 1 and "Step time of tiny" in side["caption"]


@pytest.mark.parametrize("args,match", [
    (["--shape", "gpt-7"], "unknown shape"),
    (["--batches", "0,2"], "--batches takes"),
    (["--queries", "x"], "--queries takes"),
    (["--budget-s", "0"], "--budget-s must be > 0"),
    (["--device", "tpu"], "--device"),
])
def test_bad_input_is_one_line_before_anything_is_measured(tmp_path, capsys, args, match):
    out = tmp_path / "never"
    assert main(["--device", "cpu", "--out", str(out), *args]) == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert line.startswith("specnb probe: ") and match in line
    assert not out.exists()


def test_cuda_asked_where_torch_sees_none_is_one_line(capsys):
    if torch.cuda.is_available():
        pytest.skip("this machine has a CUDA device")
    assert main(["--device", "cuda", "--shape", "smollm2-135m"]) == 2
    assert "torch sees no CUDA device here" in capsys.readouterr().err


def test_the_probe_runs_with_torch_and_the_standard_library_only(tmp_path):
    """As on a GPU machine (PYTHONPATH=src, that machine's python): pandas, pydantic, numpy's
    analysis stack and vLLM are made unimportable, and a probe still runs to its ledger."""
    cfg = tmp_path / "tiny.json"
    cfg.write_text(json.dumps(tiny().to_dict()))
    code = ("import sys\n"
            "for m in ('pandas', 'pydantic', 'vllm', 'matplotlib', 'scipy', 'pyarrow'):\n"
            "    sys.modules[m] = None\n"
            "import runpy\n"  # python -m specnb.probe, as the GPU command runs it
            f"sys.argv[1:] = ['--shape', {str(cfg)!r}, '--device', 'cpu', '--batches', '1', '--queries', '1,2',"
            f" '--lengths', '8', '--repeats', '2,2', '--out', {str(tmp_path / 'run')!r}]\n"
            "runpy.run_module('specnb.probe', run_name='__main__', alter_sys=True)\n")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=guard("child_start"),
                       env={"PYTHONPATH": str(paths.ROOT / "src"), "PATH": "/usr/bin:/bin"})
    assert r.returncode == 0, r.stderr[-2000:]
    doc = json.loads((tmp_path / "run" / "tiny.json").read_text())
    assert doc["ended"] == "complete" and doc["command"].startswith("python -m specnb.probe --shape ")


def _step(b: int, scheduled: int, drafted: int = 0, ms: float = 10.0, prefill: int = 0) -> dict:
    return {"generation_requests": b, "scheduled_tokens": scheduled, "drafted_tokens": drafted,
            "context_requests": prefill, "forward_ms": ms - 1.0, "logits_ms": 1.0}


def test_the_engine_steps_set_beside_the_probe_are_those_of_one_width():
    """A step counts for (b, q) only where every sequence had q new tokens: no prefill in it, and no
    drafts (q = 1) or all K drafts for every sequence (q = K + 1); the engine's ratio is within the
    arm, or over the baseline's decode where the arm never decodes without drafts."""
    from specnb.analysis.probe import beside_engine, engine_cells, format_beside

    base = {"arm": "baseline", "status": "ok", "speculative_config": None,
            "steps": [_step(2, 2, ms=10)] * 3 + [_step(2, 2, ms=99, prefill=1)]}
    ngram = {"arm": "ngram-k4", "status": "ok", "speculative_config": {"num_speculative_tokens": 4},
             "steps": [_step(2, 2, ms=12)] * 3 + [_step(2, 10, 8, ms=18)] * 3 + [_step(2, 6, 4, ms=50)] * 3}
    draft = {"arm": "draft", "status": "ok", "speculative_config": {"num_speculative_tokens": 3},
             "steps": [_step(2, 8, 6, ms=15)] * 4}
    failed = {**draft, "arm": "dead", "status": "failed"}
    cells = engine_cells([base, ngram, draft, failed])
    assert set(cells) == {("baseline", 2, 1), ("ngram-k4", 2, 1), ("ngram-k4", 2, 5), ("draft", 2, 4)}
    assert cells[("ngram-k4", 2, 5)] == [18.0] * 3  # the steps with 1 + 3 drafts each are mixed: left out
    probe = {"cells": [{"b": 2, "q": q, "L": 256, "median_ms": 20.0 * (1 + q / 10)} for q in (1, 4, 5)]}
    rows = {(r["arm"], r["q"]): r for r in beside_engine(probe, [base, ngram, draft, failed])}
    assert rows[("baseline", 1)]["probe_over_engine"] == pytest.approx(22.0 / 10.0)
    assert rows[("ngram-k4", 5)]["engine_ratio"] == pytest.approx(18 / 12)
    assert rows[("draft", 4)]["engine_ratio"] == pytest.approx(15 / 10) and rows[("draft", 4)]["engine_decode_arm"] == "baseline"
    assert rows[("draft", 4)]["probe_ratio"] == pytest.approx(28.0 / 22.0)
    assert "over baseline's decode" in format_beside(list(rows.values()))


def test_the_committed_cpu_probe_beside_the_committed_anatomy(capsys):
    """docs/gpu.md's table: the committed CPU probe run beside the committed AVX-512 anatomy run,
    through the command that prints it."""
    from specnb.figures.probe import main as figures_main

    probes = sorted((paths.ROOT / "ledgers" / "probe").glob("*/*/smollm2-135m.json"))
    anatomy = paths.ROOT / "ledgers" / "anatomy" / "cpu-anatomy" / "20261202T153020Z"
    assert probes and anatomy.is_dir()
    run = probes[0].parent
    assert figures_main([str(run), "--beside", str(anatomy), "--no-draw"]) == 0
    table = capsys.readouterr().out
    assert "| baseline | 1 | 1 |" in table and "| ngram-k4 | 1 | 5 |" in table
