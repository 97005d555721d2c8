"""Prompts of a chosen length in the target's own tokens, built from real text.

A context-length sweep names a workload as a table::

    workloads = [{context = "copy", tokens = 1024, tokenizer = "models/SmolLM2-135M-Instruct"}]

Every prompt of the base workload (a bundled set, ``<set>:<category>`` or a JSONL file) keeps its
own request at the end and gets, before it, reference material until the whole chat-templated
prompt is ``tokens`` long in the tokenizer's count: earlier requests of the bundled ``copy`` and
``freeform`` sets (text written for specnb, not padding), a different rotation for each prompt, the
last note cut at a token boundary. So a length's prompts ask for the same answers as the base's,
and only the context in front of them grows. The lengths are measured with the target's chat
template (what the engine counts as prompt tokens) and recorded in the ledgers
(``workload.context``); a prompt already longer than ``tokens`` is refused in one line.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from specnb import paths
from specnb.prompts.copyshare import MixError, load_tokenizer
from specnb.prompts.workload import Prompt, Workload, WorkloadError, bundled, load_jsonl, parse_table

__all__ = ["ContextSource", "build_context", "CORPUS", "HEADER", "REQUEST", "load_notes"]

CORPUS = ("copy", "freeform")  # the bundled sets the reference material is drawn from
HEADER = "Reference material from earlier requests in this queue (for context only):\n\n"
REQUEST = "\n\n---\n\nThe current request:\n\n"
MIN_TOKENS = 64
MAX_TOKENS = 1 << 20


class ContextSource(BaseModel):
    """A context-length workload as a sweep names it."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    context: str = Field(description="the base workload: a bundled set, '<set>:<category>' or a JSONL path")
    tokens: int = Field(ge=MIN_TOKENS, le=MAX_TOKENS, description="prompt length in the tokenizer's tokens, "
                        "chat template included")
    tokenizer: str = Field(description="the target's tokenizer: a local model folder (or a hub id in the cache)")
    name: str | None = Field(None, description="workload name; default '<base>@<tokens>'")
    corpus: list[str] = Field(default_factory=list, description="more reference material: JSONL prompt files "
                              "(each prompt's last message is a note), after the bundled sets' (about 58k tokens)")

    @classmethod
    def parse(cls, data: Any) -> ContextSource:
        return parse_table(cls, data, "context")

    @property
    def workload_name(self) -> str:
        return self.name or f"{self.context}@{self.tokens}"


@functools.lru_cache(maxsize=4)
def _tokenizer(name: str) -> Any:
    """A local model folder's tokenizer (:func:`specnb.prompts.copyshare.load_tokenizer`), or a hub
    id's from the local cache (servers run offline, so the prompts are counted offline too)."""
    local = paths.resolve(name)
    try:
        if local.is_dir():
            return load_tokenizer(local).tok
        from transformers import AutoTokenizer

        return AutoTokenizer.from_pretrained(name, local_files_only=True)
    except MixError as exc:
        raise WorkloadError(f"context workload: {exc}") from None
    except Exception as exc:  # noqa: BLE001 - any loader failure is one line for the user
        first = str(exc).splitlines()[0][:200] if str(exc) else type(exc).__name__
        raise WorkloadError(f"context workload: no tokenizer {name!r} here (a local model folder, or a hub id in "
                            f"the local cache): {first}") from None


def _counter(tok: Any) -> Callable[[list[dict[str, Any]]], int]:
    def count(messages: list[dict[str, Any]]) -> int:
        ids = tok.apply_chat_template(messages, add_generation_prompt=True, tokenize=True)
        if isinstance(ids, dict) or hasattr(ids, "keys"):
            ids = ids["input_ids"]
        return len(ids)

    return count


def load_notes(files: Sequence[str] = ()) -> list[tuple[str, str]]:
    out = []
    sets = [bundled(name) for name in CORPUS] + [load_jsonl(paths.resolve(f)) for f in files]
    for wl in sets:
        for p in wl.prompts:
            text = p.messages[-1].get("content")
            if isinstance(text, str) and text.strip():
                out.append((f"{wl.name}/{p.id}", text))
    return out


def _with_context(messages: list[dict[str, Any]], context: str) -> list[dict[str, Any]]:
    last = messages[-1]
    return [*messages[:-1], {**last, "content": HEADER + context + REQUEST + last["content"]}]


def build_context(base: Workload, tokens: int, tokenizer: Any, *, name: str | None = None,
                  notes: Sequence[tuple[str, str]] | None = None,
                  corpus: Sequence[str] = ()) -> tuple[Workload, dict[str, Any]]:
    """``base``'s prompts, each grown to ``tokens`` (chat template included) with reference notes
    (default: the bundled sets' requests, then the prompts of the ``corpus`` files) in front of
    its request; returns the workload and its record (lengths measured, min/mean/max)."""
    count = _counter(tokenizer)
    if notes is None:
        names = [f"specnb:prompts/sets/{c}.jsonl" for c in CORPUS] + [str(f) for f in corpus]
        notes = load_notes(corpus)
    else:
        names, notes = ["given"], list(notes)
    encoded = [tokenizer.encode(text, add_special_tokens=False) for _, text in notes]
    out: list[Prompt] = []
    lengths: list[int] = []
    for i, p in enumerate(base.prompts):
        last = p.messages[-1]
        if last.get("role") != "user" or not isinstance(last.get("content"), str):
            raise WorkloadError(f"context workload: prompt {p.id!r} of {base.name!r} does not end in a user "
                                "message of text; its context has nowhere to go")
        bare = count(_with_context(p.messages, ""))
        if bare > tokens:
            raise WorkloadError(f"context workload: prompt {p.id!r} of {base.name!r} is {bare} tokens with the "
                                f"context's frame alone, longer than tokens = {tokens}")
        own = last["content"]
        order = [j for j in range(len(notes)) if notes[j][1] != own]
        start = (7 * i) % len(order)
        order = order[start:] + order[:start]
        parts: list[str] = []
        have = bare
        for j in order:  # whole notes while they fit by their own count (the template's joins add a few)
            piece = f"### Note {len(parts) + 1}\n{notes[j][1]}\n\n"
            if have + len(encoded[j]) + 8 > tokens:
                break
            parts.append(piece)
            have += len(encoded[j]) + 8
        else:
            raise WorkloadError(f"context workload: tokens = {tokens} is more than the reference material holds "
                                f"({len(notes)} notes, about {sum(map(len, encoded))} tokens): add documents of "
                                "your own with corpus = [\"docs.jsonl\"]")
        text = "".join(parts)
        msgs = _with_context(p.messages, text)
        n = count(msgs)
        # then cut the next note at the token that brings the prompt to `tokens` (a binary search on
        # the measured length: a cut's decode and re-encode may merge a token or two)
        nxt = encoded[order[len(parts)]]
        lo, hi = 0, len(nxt)
        best, best_n = msgs, n
        while lo <= hi and n <= tokens:
            mid = (lo + hi) // 2
            cut = tokenizer.decode(nxt[:mid])
            cand = _with_context(p.messages, text + f"### Note {len(parts) + 1}\n{cut}")
            m = count(cand)
            if m <= tokens:
                best, best_n, lo = cand, m, mid + 1
            else:
                hi = mid - 1
        if best_n > tokens:  # whole notes overshot the estimate: drop notes until it fits
            while parts and best_n > tokens:
                parts.pop()
                best = _with_context(p.messages, "".join(parts))
                best_n = count(best)
        out.append(replace(p, id=f"{p.id}@{tokens}", messages=best))
        lengths.append(best_n)
    wl = Workload(name=name or f"{base.name}@{tokens}", prompts=out, source=f"context:{base.source}",
                  category=base.category, parent_hash=base.content_hash)
    record = {"base": base.name, "base_hash": base.content_hash, "tokens": tokens,
              "corpus": names,
              "prompt_tokens_min": min(lengths), "prompt_tokens_mean": sum(lengths) / len(lengths),
              "prompt_tokens_max": max(lengths)}
    return wl, record


def load_context(src: ContextSource, resolve_base: Callable[[str], Workload]) -> Workload:
    """The workload a :class:`ContextSource` names (its base resolved by ``resolve_base``)."""
    base = resolve_base(src.context)
    tok = _tokenizer(src.tokenizer)
    wl, record = _cached(src, base, tok)
    return replace(wl, context={**record, "tokenizer": src.tokenizer})


_CACHE: dict[tuple[Any, ...], tuple[Workload, dict[str, Any]]] = {}


def _cached(src: ContextSource, base: Workload, tok: Any) -> tuple[Workload, dict[str, Any]]:
    key = (base.content_hash, src.tokens, src.tokenizer, src.workload_name, tuple(src.corpus))
    if key not in _CACHE:
        try:
            _CACHE[key] = build_context(base, src.tokens, tok, name=src.workload_name, corpus=src.corpus)
        except WorkloadError as exc:
            raise WorkloadError(f"{src.workload_name}: {exc}") from None
    return _CACHE[key]


def is_context(data: Any) -> bool:
    return isinstance(data, ContextSource) or (isinstance(data, dict) and "context" in data)

