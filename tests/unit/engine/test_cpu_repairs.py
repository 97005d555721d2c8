"""The repair of vLLM-CPU's expand kernel: the probe tells a broken function from a sound one,
the replacement does what vLLM's Triton expand_kernel does, and a start's log records it."""

from __future__ import annotations

import types

import pytest
import torch

from specnb.engine.decisions import startup_decisions
from specnb.engine.plugins import cpu_repairs
from specnb.engine.plugins.cpu_repairs import REPAIRED_LOG_LINE, expand_tokens, expand_writes, repair


def _shipped(output, input_val, cu_num_tokens, replace_from, replace_to, MAX_NUM_TOKENS=None):  # noqa: N803
    """vllm-cpu 0.32.0's _expand_kernel_impl, with the C++ op in PyTorch: the work is done on int64
    copies of the output and the input, and nothing is copied back."""
    out64 = output if output.dtype == torch.int64 else output.to(torch.int64)
    inp64 = input_val if input_val.dtype == torch.int64 else input_val.to(torch.int64)
    start = 0
    for i, end in enumerate(cu_num_tokens.tolist()):
        v = replace_to if int(inp64[i]) == replace_from else int(inp64[i])
        out64[start:end] = v
        start = end


def _sound(output, input_val, cu_num_tokens, replace_from, replace_to, MAX_NUM_TOKENS=None):  # noqa: N803
    expand_tokens(output, input_val, cu_num_tokens, replace_from, replace_to)


def test_expand_follows_vllms_kernel_for_floats_and_ints():
    out = torch.full((6,), -7.0)
    expand_tokens(out, torch.tensor([0.5, -1.0, 0.7]), torch.tensor([2, 5, 6], dtype=torch.int32), -1, 1)
    assert out.tolist() == pytest.approx([0.5, 0.5, 1.0, 1.0, 1.0, 0.7])  # -1 (greedy) -> 1, as vLLM does
    k = torch.zeros(4, dtype=torch.int32)
    expand_tokens(k, torch.tensor([5, 0], dtype=torch.int32), torch.tensor([1, 4], dtype=torch.int32), 0, 0)
    assert k.tolist() == [5, 0, 0, 0]
    empty = torch.full((3,), 9.0)  # a request with no draft tokens takes no slot
    expand_tokens(empty, torch.tensor([0.2, 0.4]), torch.tensor([0, 3]), -1, 1)
    assert empty.tolist() == pytest.approx([0.4, 0.4, 0.4])


def test_the_probe_finds_the_shipped_bug_and_the_repair_replaces_only_a_broken_function():
    assert not expand_writes(_shipped) and expand_writes(_sound)
    broken = types.SimpleNamespace(__name__="cpu_tl", _expand_kernel_impl=_shipped)
    status, detail = repair(broken)
    assert status == "repaired" and "uninitialized" in detail and broken._expand_kernel_impl is expand_tokens
    assert repair(broken)[0] == "already"
    sound = types.SimpleNamespace(__name__="cpu_tl", _expand_kernel_impl=_sound)
    assert repair(sound)[0] == "sound" and sound._expand_kernel_impl is _sound
    assert repair(types.SimpleNamespace(__name__="cpu_tl"))[0] == "incompatible"
    other = types.SimpleNamespace(__name__="cpu_tl", _expand_kernel_impl=lambda out, inp: None)
    assert repair(other)[0] == "incompatible"


def test_a_start_that_was_repaired_says_so_in_its_decisions():
    line = f"(EngineCore pid=1) INFO 12-01 13:13:15 [cpu_repairs.py:125] {REPAIRED_LOG_LINE}: ..."
    assert startup_decisions(line)["specnb_repairs"] == ["expand_kernel (temperature of speculative sampling)"]
    assert "specnb_repairs" not in startup_decisions("INFO nothing repaired here")
    assert cpu_repairs.REPAIRED_LOG_LINE in line
