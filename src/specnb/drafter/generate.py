"""Self-distillation data: the target's own greedy responses to the training prompts, from a real
vLLM server, with the token ids the engine used (``return_token_ids``).

Every finished conversation is appended to a JSONL file at once, so a run that dies loses
nothing: the next run skips the prompts already answered (same model, same settings).
"""

from __future__ import annotations

import hashlib
import json
import urllib.request
from concurrent.futures import ThreadPoolExecutor, as_completed
from pathlib import Path
from typing import Any

from specnb.errors import SpecnbError

__all__ = ["read_prompts", "generate", "read_conversations", "data_hash"]


def read_prompts(path: Path | str) -> list[dict[str, str]]:
    """``{"id", "prompt", "category"?}`` per line; a one-line error for a file that is not that."""
    path = Path(path)
    if not path.is_file():
        raise SpecnbError(f"training prompts {path}: no such file")
    rows = []
    for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip():
            continue
        try:
            r = json.loads(line)
        except ValueError as e:
            raise SpecnbError(f"{path}:{n}: not JSON ({e})") from None
        if not isinstance(r, dict) or not isinstance(r.get("prompt"), str) or not r["prompt"].strip():
            raise SpecnbError(f"{path}:{n}: each line needs a non-empty \"prompt\" string")
        rows.append({"id": str(r.get("id", f"line-{n}")), "category": str(r.get("category", "")),
                     "prompt": r["prompt"]})
    if not rows:
        raise SpecnbError(f"training prompts {path}: no prompts")
    ids = [r["id"] for r in rows]
    if len(set(ids)) != len(ids):
        raise SpecnbError(f"training prompts {path}: ids repeat")
    return rows


def _ask(base_url: str, model: str, row: dict[str, str], max_tokens: int, seed: int) -> dict[str, Any]:
    body = {"model": model, "messages": [{"role": "user", "content": row["prompt"]}], "max_tokens": max_tokens,
            "temperature": 0.0, "seed": seed, "return_token_ids": True}
    req = urllib.request.Request(f"{base_url}/v1/chat/completions", data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=600) as r:
        out = json.loads(r.read())
    choice = out["choices"][0]
    prompt_ids, output_ids = out.get("prompt_token_ids"), choice.get("token_ids")
    if not prompt_ids or output_ids is None:
        raise SpecnbError("the server returned no token ids (return_token_ids needs vLLM >= 0.10)")
    return {"id": row["id"], "category": row["category"], "prompt_ids": prompt_ids, "output_ids": output_ids,
            "finish_reason": choice.get("finish_reason")}


def generate(base_url: str, model: str, prompts: list[dict[str, str]], out: Path, *, max_tokens: int,
             seed: int = 0, concurrency: int = 16, progress: Any = None) -> Path:
    """Answer every prompt not yet in ``out`` (JSONL, one conversation per line, appended as each
    finishes) at ``concurrency`` requests in flight."""
    out.parent.mkdir(parents=True, exist_ok=True)
    done = {c["id"] for c in read_conversations(out)} if out.exists() else set()
    todo = [r for r in prompts if r["id"] not in done]
    if progress is not None:
        progress.update(len(prompts) - len(todo))
    with out.open("a", encoding="utf-8") as f, ThreadPoolExecutor(concurrency) as pool:
        futures = [pool.submit(_ask, base_url, model, r, max_tokens, seed) for r in todo]
        for fut in as_completed(futures):
            f.write(json.dumps(fut.result()) + "\n")
            f.flush()
            if progress is not None:
                progress.update(1)
    return out


def read_conversations(path: Path) -> list[dict[str, Any]]:
    """The conversations a generation wrote (a torn last line, from a run that died, is dropped)."""
    rows = []
    for line in path.read_text(encoding="utf-8").splitlines():
        try:
            rows.append(json.loads(line))
        except ValueError:
            continue
    return rows


def data_hash(rows: list[dict[str, Any]], keys: tuple[str, ...]) -> str:
    """sha256 of the rows' ``keys``, in id order: the same data gives the same hash whatever order
    the requests finished in."""
    h = hashlib.sha256()
    for r in sorted(rows, key=lambda r: r["id"]):
        h.update(json.dumps([r[k] for k in keys], sort_keys=True).encode())
    return h.hexdigest()
