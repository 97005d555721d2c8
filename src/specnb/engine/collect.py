"""Served responses for prompts that have none, collected through the official ``openai`` client.

``specnb mix`` measures how much of a traffic log's output an n-gram drafter could have copied,
which needs the responses a server gave. A user who has prompts but no logged responses can let
their own endpoint answer them: ``specnb mix --serve URL prompts.jsonl``. This goes through the
official ``openai`` client on purpose: it is the client users' applications call, so the
request a model sees (chat template, parameters, the client's own defaults) is the one their
traffic sends. The load generator stays on aiohttp: it is measured faster under concurrency
(README, "Why aiohttp for load").

Greedy by default (temperature 0), one request per prompt, ``concurrency`` at a time; a failed
request is one line naming the prompt, and nothing is half-written.
"""

from __future__ import annotations

import dataclasses
import json
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from specnb.errors import SpecnbError
from specnb.prompts.workload import Prompt, Workload

__all__ = ["CollectError", "collect_responses", "write_jsonl"]


class CollectError(SpecnbError):
    """The endpoint could not answer; one line for the user."""


def _client(url: str, api_key: str | None, timeout_s: float) -> Any:
    try:
        import openai
    except ImportError:  # pragma: no cover - a core dependency
        raise CollectError("the openai package is not installed: pip install openai") from None
    base = url.rstrip("/")
    if not base.endswith("/v1"):
        base += "/v1"
    return openai.OpenAI(base_url=base, api_key=api_key or "EMPTY", timeout=timeout_s, max_retries=1)


def collect_responses(
    workload: Workload,
    url: str,
    *,
    model: str | None = None,
    max_tokens: int = 512,
    temperature: float = 0.0,
    concurrency: int = 4,
    api_key: str | None = None,
    timeout_s: float = 300.0,
) -> Workload:
    """``workload`` with each prompt's ``response`` filled in by the endpoint at ``url``
    (``http://host:port``; ``/v1`` is added). ``model`` defaults to the first it serves."""
    import openai

    client = _client(url, api_key, timeout_s)
    try:
        if model is None:
            served = [m.id for m in client.models.list().data]
            if not served:
                raise CollectError(f"{url} serves no models")
            model = served[0]
    except openai.OpenAIError as exc:
        raise CollectError(f"cannot list the models of {url}: {type(exc).__name__}: {exc}") from None

    def answer(p: Prompt) -> Prompt:
        try:
            out = client.chat.completions.create(model=model, messages=p.messages, max_tokens=max_tokens,
                                                 temperature=temperature, n=1)
        except openai.OpenAIError as exc:
            raise CollectError(f"prompt {p.id}: {url} answered {type(exc).__name__}: "
                               f"{str(exc).splitlines()[0][:200]}") from None
        text = out.choices[0].message.content if out.choices else None
        if text is None:
            raise CollectError(f"prompt {p.id}: {url} returned no text")
        return dataclasses.replace(p, response=text)

    with ThreadPoolExecutor(max_workers=max(1, concurrency)) as pool:
        prompts = list(pool.map(answer, workload.prompts))
    imported = dict(workload.imported or {})
    imported["responses_from"] = {"url": url, "model": model, "max_tokens": max_tokens,
                                  "temperature": temperature, "client": f"openai {openai.__version__}"}
    return dataclasses.replace(workload, prompts=prompts, imported=imported)


def write_jsonl(workload: Workload, path: Path | str) -> Path:
    """The prompts with their collected responses, one ``{"messages", "response"}`` line each:
    a traffic file ``specnb mix`` (and a sweep) reads without asking the server again."""
    path = Path(path)
    with path.open("w", encoding="utf-8") as fh:
        for p in workload.prompts:
            row: dict[str, Any] = {"id": p.id, "messages": p.messages, "response": p.response}
            if p.category:
                row["category"] = p.category
            fh.write(json.dumps(row, ensure_ascii=False) + "\n")
    return path
