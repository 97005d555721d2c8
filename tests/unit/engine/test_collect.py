"""``specnb mix --serve``: prompts without responses answered by an OpenAI-compatible endpoint
through the official openai client (a stub server on loopback here)."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from specnb import cli
from specnb.engine.collect import CollectError, collect_responses
from specnb.prompts.traffic import load_traffic


class _Stub(BaseHTTPRequestHandler):
    fail = False
    seen: list[dict] = []

    def log_message(self, *args):
        pass

    def _send(self, code: int, body: dict) -> None:
        data = json.dumps(body).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self):  # noqa: N802
        self._send(200, {"object": "list", "data": [{"id": "stub-model", "object": "model", "owned_by": "t",
                                                     "created": 0}]})

    def do_POST(self):  # noqa: N802
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        type(self).seen.append(body)
        if type(self).fail:
            self._send(500, {"error": {"message": "engine died", "type": "InternalServerError"}})
            return
        prompt = body["messages"][-1]["content"]
        answer = prompt if "copy" in prompt else "a fresh answer with words of its own, nothing repeated here"
        self._send(200, {"id": "x", "object": "chat.completion", "created": 0, "model": body["model"],
                         "choices": [{"index": 0, "finish_reason": "stop",
                                      "message": {"role": "assistant", "content": answer}}],
                         "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2}})


@pytest.fixture
def stub():
    _Stub.fail, _Stub.seen = False, []
    srv = ThreadingHTTPServer(("127.0.0.1", 0), _Stub)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{srv.server_address[1]}"
    srv.shutdown()


@pytest.fixture
def prompts(tmp_path):
    path = tmp_path / "prompts.jsonl"
    text = "please copy this list: alpha beta gamma delta epsilon zeta eta theta iota kappa lambda mu nu xi"
    rows = [{"prompt": text, "category": "copy"}, {"prompt": "write a poem", "category": "chat"},
            {"messages": [{"role": "user", "content": "copy: " + text}]}]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def test_collects_one_greedy_response_per_prompt_through_the_openai_client(stub, prompts):
    wl = collect_responses(load_traffic(prompts), stub, max_tokens=32, concurrency=2)
    assert all(p.response for p in wl.prompts)
    assert {b["model"] for b in _Stub.seen} == {"stub-model"}  # the first model the endpoint lists
    assert all(b["temperature"] == 0.0 and b["max_tokens"] == 32 for b in _Stub.seen)
    assert wl.imported["responses_from"]["client"].startswith("openai ")


def test_mix_serve_measures_the_mix_and_saves_the_answers(stub, prompts, tmp_path, capsys):
    saved = tmp_path / "answered.jsonl"
    assert cli.main(["mix", "--serve", stub, str(prompts), "--save", str(saved)]) == 0
    out = capsys.readouterr().out
    assert "copy-style" in out and "free-form" in out
    rows = [json.loads(line) for line in saved.read_text().splitlines()]
    assert len(rows) == 3 and all(r["response"] for r in rows)
    assert cli.main(["mix", str(saved)]) == 0  # the saved file is a traffic log on its own


def test_a_failing_endpoint_is_one_line(stub, prompts, capsys):
    _Stub.fail = True
    with pytest.raises(CollectError) as err:
        collect_responses(load_traffic(prompts), stub)
    assert "\n" not in str(err.value) and "InternalServerError" in str(err.value)
    assert cli.main(["mix", "--serve", stub, str(prompts)]) == 2
    assert capsys.readouterr().err.count("\n") == 2  # "collecting ..." and the one error line
