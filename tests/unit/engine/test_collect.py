"""``specnb mix --serve``: prompts without responses answered by an OpenAI-compatible endpoint
through the official openai client (a stub server on loopback here)."""

from __future__ import annotations

import json

import pytest

from specnb import cli
from specnb.engine.collect import CollectError, collect_responses
from specnb.prompts.traffic import load_traffic
from tests.unit.fakevllm import FakeVllm


@pytest.fixture
def stub():
    """The fake vLLM (tests/unit/fakevllm.py) serving ``stub-model``: non-streamed answers that copy
    a prompt asking to copy and are words of their own otherwise; ``fail`` answers HTTP 500 with
    an OpenAI error object."""
    srv = FakeVllm(model="stub-model", fail_body={"error": {"message": "engine died", "type": "InternalServerError"}})
    srv.start()
    yield srv
    srv.stop()


@pytest.fixture
def prompts(tmp_path):
    path = tmp_path / "prompts.jsonl"
    text = "please copy this list: alpha beta gamma delta epsilon zeta eta theta iota kappa lambda mu nu xi"
    rows = [{"prompt": text, "category": "copy"}, {"prompt": "write a poem", "category": "chat"},
            {"messages": [{"role": "user", "content": "copy: " + text}]}]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def test_collects_one_greedy_response_per_prompt_through_the_openai_client(stub, prompts):
    wl = collect_responses(load_traffic(prompts), stub.url, max_tokens=32, concurrency=2)
    assert all(p.response for p in wl.prompts)
    assert {b["model"] for b in stub.bodies} == {"stub-model"}  # the first model the endpoint lists
    assert all(b["temperature"] == 0.0 and b["max_tokens"] == 32 for b in stub.bodies)
    assert wl.imported["responses_from"]["client"].startswith("openai ")


def test_mix_serve_measures_the_mix_and_saves_the_answers(stub, prompts, tmp_path, capsys):
    saved = tmp_path / "answered.jsonl"
    assert cli.main(["mix", "--serve", stub.url, str(prompts), "--save", str(saved)]) == 0
    out = capsys.readouterr().out
    assert "copy-style" in out and "free-form" in out
    rows = [json.loads(line) for line in saved.read_text().splitlines()]
    assert len(rows) == 3 and all(r["response"] for r in rows)
    assert cli.main(["mix", str(saved)]) == 0  # the saved file is a traffic log on its own


def test_a_failing_endpoint_is_one_line(stub, prompts, capsys):
    stub.fail = True
    with pytest.raises(CollectError) as err:
        collect_responses(load_traffic(prompts), stub.url)
    assert "\n" not in str(err.value) and "InternalServerError" in str(err.value)
    assert cli.main(["mix", "--serve", stub.url, str(prompts)]) == 2
    assert capsys.readouterr().err.count("\n") == 2  # "collecting ..." and the one error line
