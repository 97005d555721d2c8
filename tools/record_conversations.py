"""Record a conversation set's answers with the target itself, for replay with history = "recorded".

With the model's own answers in the history (history = "model") each arm builds its later turns
from what it generated, so two arms send the same prompts only where their outputs agree. A set
with recorded answers makes every request's bytes the same in both arms. This tool plays each
conversation once against a server (greedy, one request at a time), writes the answers into a copy
of the set in the ``messages`` form (every turn but the last followed by its answer; the last
one's is never sent) and prints the server it used; an empty answer stops it with nothing
written. It starts its own baseline server unless ``--endpoint`` names one.

    .venv/bin/python tools/record_conversations.py edit-chat \\
        src/specnb/prompts/sets/edit-chat-recorded.jsonl --max-tokens 64
"""

from __future__ import annotations

import argparse
import json
import sys
import urllib.request
from pathlib import Path

from specnb import paths
from specnb.prompts.conversation import ConversationSource, load_conversation_source

SERVER_ARGS = ["--enforce-eager", "--dtype", "machine", "--max-model-len", "2048"]


def _chat(base_url: str, model: str, messages: list[dict[str, str]], max_tokens: int, seed: int) -> str:
    body = {"model": model, "messages": messages, "max_tokens": max_tokens, "temperature": 0.0, "seed": seed,
            "stream": False}
    req = urllib.request.Request(base_url + "/v1/chat/completions", data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=600) as r:
        return json.loads(r.read())["choices"][0]["message"]["content"] or ""


def record(src: str, out: Path, base_url: str, model: str, max_tokens: int) -> int:
    wl = load_conversation_source(ConversationSource(conversations=src))
    lines = []
    for conv in wl.conversations or []:
        answers: list[str] = []
        for turn in range(len(conv.turns) - 1):
            text = _chat(base_url, model, conv.messages(turn, answers), max_tokens, seed=turn)
            if not text.strip():  # the loader refuses an empty answer: say so now, not at sweep time
                raise SystemExit(f"{conv.id}: turn {turn + 1} got an empty answer; nothing written "
                                 "(raise --max-tokens or record with another model)")
            answers.append(text)
        msgs = conv.messages(len(conv.turns) - 1, answers)
        lines.append(json.dumps({"id": conv.id, "category": conv.category, "messages": msgs}, ensure_ascii=False))
    out.write_text("\n".join(lines) + "\n")
    return len(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("set", help="a bundled conversation set or a .jsonl path")
    ap.add_argument("out", type=Path)
    ap.add_argument("--model", default="models/SmolLM2-135M-Instruct")
    ap.add_argument("--endpoint", help="a running server's base URL (default: start one)")
    ap.add_argument("--served-model-name", default="smollm2-135m")
    ap.add_argument("--max-tokens", type=int, default=64)
    a = ap.parse_args(argv)
    if a.endpoint:
        n = record(a.set, a.out, a.endpoint.rstrip("/"), a.served_model_name, a.max_tokens)
        print("server:", a.endpoint, "as", a.served_model_name)
    else:
        from specnb.engine.kernels import resolve_dtype
        from specnb.engine.server import VllmServer

        srv = VllmServer(str(paths.resolve(a.model)), args=resolve_dtype(SERVER_ARGS),
                         served_model_name=a.served_model_name, env={"VLLM_CPU_KVCACHE_SPACE": "1"},
                         log_path=Path("/tmp/record-conversations.log"), ready_timeout_s=600)
        with srv as ep:
            n = record(a.set, a.out, ep.base_url, ep.model, a.max_tokens)
            argv_used = ep.argv
        print("server:", " ".join(argv_used))
    print(f"{n} conversations recorded -> {a.out} (greedy, max_tokens {a.max_tokens}, model {a.model})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
