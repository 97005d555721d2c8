"""The target's own probabilities, asked of a running vLLM server.

Two vLLM routes of the OpenAI-compatible server: ``/tokenize`` with chat ``messages`` (the
token ids a chat request's prompt becomes, chat template and generation prompt included) and
``/v1/completions`` with a token-id prompt, ``max_tokens: 1`` and ``prompt_logprobs: k`` (for every
prompt position, the log-probability of the token there and of the ``k`` most likely ones).
vLLM returns raw log-probabilities (``logprobs_mode = "raw_logprobs"``, its default): before
temperature, top-k or top-p, so a caller rescales them to the temperature it models.
"""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from specnb.errors import SpecnbError

__all__ = ["LogprobError", "PositionLogprobs", "prompt_logprobs", "tokenize_chat"]

# token id -> raw logprob at one prompt position (the token there and the top k)
PositionLogprobs = dict[int, float]


class LogprobError(SpecnbError):
    """The server did not answer a tokenize or prompt-logprobs request as vLLM does."""


def _post_json(url: str, body: dict[str, Any], headers: dict[str, str] | None, timeout: float) -> Any:
    req = urllib.request.Request(url, method="POST", data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json", **(headers or {})})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return json.loads(r.read().decode())
    except urllib.error.HTTPError as e:
        detail = e.read().decode("utf-8", "replace")[:300]
        raise LogprobError(f"{url} answered HTTP {e.code}: {detail}") from None
    except (urllib.error.URLError, TimeoutError, OSError) as e:
        raise LogprobError(f"{url}: {getattr(e, 'reason', e)}") from None


def tokenize_chat(base_url: str, model: str, messages: list[dict[str, Any]], *, headers: dict[str, str] | None = None,
                  timeout: float = 60.0) -> list[int]:
    """The prompt token ids of a chat request with these ``messages`` (vLLM's ``/tokenize``)."""
    out = _post_json(f"{base_url}/tokenize", {"model": model, "messages": messages, "add_generation_prompt": True},
                     headers, timeout)
    ids = out.get("tokens") if isinstance(out, dict) else None
    if not isinstance(ids, list) or not all(isinstance(t, int) for t in ids):
        raise LogprobError(f"{base_url}/tokenize sent no token ids: {str(out)[:200]}")
    return ids


def _one(base_url: str, model: str, ids: Sequence[int], top: int, headers: dict[str, str] | None,
         timeout: float) -> list[PositionLogprobs | None]:
    body = {"model": model, "prompt": list(ids), "max_tokens": 1, "temperature": 0.0, "prompt_logprobs": top}
    out = _post_json(f"{base_url}/v1/completions", body, headers, timeout)
    try:
        raw = out["choices"][0]["prompt_logprobs"]
    except (KeyError, IndexError, TypeError):
        raise LogprobError(f"{base_url}/v1/completions sent no prompt_logprobs: {str(out)[:200]}") from None
    if not isinstance(raw, list) or len(raw) != len(ids):
        raise LogprobError(f"{base_url}/v1/completions sent {len(raw) if isinstance(raw, list) else raw!r} prompt "
                           f"positions for a prompt of {len(ids)} tokens")
    return [None if pos is None else {int(t): float(v["logprob"]) for t, v in pos.items()} for pos in raw]


def prompt_logprobs(base_url: str, model: str, prompts: Sequence[Sequence[int]], *, top: int = 20,
                    headers: dict[str, str] | None = None, parallel: int = 4, timeout: float = 600.0,
                    on_done: Any = None) -> list[list[PositionLogprobs | None]]:
    """For each token-id prompt, per position: token id -> raw logprob of the token there and of
    the ``top`` most likely (position 0: None). ``parallel`` requests in flight let the engine
    batch them; ``on_done`` is called once per finished prompt (a progress bar's update)."""
    def run(ids: Sequence[int]) -> list[PositionLogprobs | None]:
        res = _one(base_url, model, ids, top, headers, timeout)
        if on_done is not None:
            on_done()
        return res

    with ThreadPoolExecutor(max_workers=max(1, parallel)) as pool:
        return list(pool.map(run, prompts))
