"""Real traffic as a workload: a JSONL log of prompts, optionally with the responses served.

Published speedups are measured on benchmark prompts, and those lean towards copy-style
work; seed 000 found 93.5 % of its own generated tokens free-form ("the benchmark column is
not your column"). The fix is to measure on the prompts a service actually receives, so
this module turns a log of them into a :class:`~specnb.prompts.workload.Workload` a sweep can send.

One JSON object per line, in either form:

- ``{"prompt": "...", "response": "..."}``: one user turn; ``response`` optional;
- ``{"messages": [{"role": ..., "content": ...}, ...]}``: a conversation, sent whole
  (system turns, earlier assistant turns and tool turns included). A final assistant
  message is the response that was served: it is taken off and kept as the response.

Optional ``id`` and ``category`` as in prompt files. A line whose structure is wrong (not
JSON, not an object, a message without a role) raises :class:`TrafficError` naming the
file and line: that is a broken file, not traffic. A line that is well formed but cannot be
replayed is dropped and counted by reason, and the counts go into every ledger's workload
record (:class:`specnb.ledger.TrafficImport`):

- ``blank``: an empty line;
- ``empty``: the last user turn has no text;
- ``no_user_turn``: no user message to answer;
- ``non_text_content``: an image, audio or other non-text part (a text model cannot replay it);
- ``duplicate``: the same messages as an earlier line (the first is kept).

Prompts are never truncated: a prompt longer than the server's context is sent as it is and
fails there, visibly, rather than being measured as a shorter prompt it never was.

``sample=N`` draws N prompts with a seeded RNG and keeps them in drawn order: a sweep sends
the first requests of a workload, so the drawn order makes every prefix a random sample too.

``conversations = true`` imports the same log for a conversation replay (``load =
"conversation"``, :mod:`specnb.prompts.conversation`): each kept line becomes a conversation
whose turns are its user messages and whose recorded answers are the log's assistant messages
(the served response answers the last turn); a line with tool or developer turns, or an
assistant turn that only calls tools, cannot be replayed turn by turn and is dropped
(``tool_turns``), counted like the other drops.
"""

from __future__ import annotations

import json
import random
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from specnb.errors import first_error
from specnb.prompts.workload import Prompt, Workload, WorkloadError, check_messages, text_lines

__all__ = ["TrafficError", "TrafficSource", "DROP_REASONS", "load_traffic", "load_source", "message_text"]

DROP_REASONS = ("blank", "empty", "no_user_turn", "non_text_content", "duplicate")
_KEEP_LINES = 10  # line numbers remembered per drop reason, for the ledger


class TrafficError(WorkloadError):
    """A traffic file that cannot be read; the message names the file and line."""


class TrafficSource(BaseModel):
    """A traffic import as a sweep names it: ``{traffic = "logs/chat.jsonl", sample = 200}``."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    traffic: str = Field(description="path to the JSONL log")
    sample: int | None = Field(None, ge=1, description="draw this many prompts (seeded); None = all")
    seed: int = Field(0, description="seed of the draw")
    name: str | None = Field(None, description="workload name; default: the file's stem")
    category: str | None = Field(None, description="keep only this category's prompts")
    conversations: bool = Field(False, description="replay each multi-turn line turn by turn (load = "
                                "'conversation'): its user turns, the log's assistant turns as recorded answers")

    @classmethod
    def parse(cls, data: Mapping[str, Any] | Any) -> TrafficSource:
        try:
            return cls.model_validate(dict(data) if isinstance(data, Mapping) else data)
        except (ValidationError, TypeError, ValueError) as exc:
            if isinstance(exc, ValidationError):
                raise TrafficError(f"traffic workload {data!r}: {first_error(exc, model=cls)}") from None
            raise TrafficError(f"traffic workload {data!r}: expected a table with a 'traffic' path") from None


def message_text(content: Any) -> str | None:
    """The text of a message's content (a string or a list of parts); None if any part is
    not text (an image, audio, a file)."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    texts = []
    for part in content:
        if isinstance(part, str):
            texts.append(part)
        elif isinstance(part, dict) and part.get("type") in ("text", "input_text") and isinstance(
            part.get("text"), str
        ):
            texts.append(part["text"])
        else:
            return None
    return "\n".join(texts)


def _parse(obj: Any, where: str) -> tuple[list[dict[str, Any]], str | None] | str:
    """(messages, response) for a usable line, or a drop reason; raises on a broken line."""
    if not isinstance(obj, dict):
        raise TrafficError(f"{where}: expected a JSON object, got {type(obj).__name__}")
    response = obj.get("response")
    if response is not None and not isinstance(response, str):
        raise TrafficError(f"{where}: 'response' must be a string")
    if "messages" in obj:
        msgs = obj["messages"]
        if not isinstance(msgs, list) or not msgs:
            raise TrafficError(f"{where}: 'messages' must be a non-empty list")
        try:
            check_messages(msgs, where)
        except WorkloadError as exc:
            raise TrafficError(str(exc)) from None
        if msgs[-1]["role"] == "assistant":
            if response is not None:
                raise TrafficError(f"{where}: both a final assistant message and a 'response'; keep one")
            served = message_text(msgs[-1].get("content"))
            if served is None:
                return "non_text_content"
            response = served if served or not msgs[-1].get("tool_calls") else None
            msgs = msgs[:-1]
        texts = [message_text(m.get("content")) for m in msgs]
        if any(t is None for t in texts):
            return "non_text_content"
        users = [t for m, t in zip(msgs, texts, strict=True) if m["role"] == "user"]
        if not users:
            return "no_user_turn"
        if not users[-1].strip():
            return "empty"
        return msgs, response
    if "prompt" in obj:
        if not isinstance(obj["prompt"], str):
            raise TrafficError(f"{where}: 'prompt' must be a string")
        if not obj["prompt"].strip():
            return "empty"
        return [{"role": "user", "content": obj["prompt"]}], response
    raise TrafficError(f"{where}: needs a 'prompt' string or a 'messages' list")


def _imported(path: Path, prompts: list[Prompt], *, lines: int, usable: int, dropped: dict[str, int],
              dropped_lines: dict[str, list[int]], sample: int | None, seed: int) -> dict[str, Any]:
    """A workload's ``imported`` record: what was read, dropped (by reason, the first lines) and drawn."""
    return {
        "file": str(path),
        "lines": lines,
        "usable": usable,
        "kept": len(prompts),
        "dropped": dict(sorted(dropped.items())),
        "dropped_lines": dict(sorted(dropped_lines.items())),
        "sample": sample,
        "seed": seed if sample is not None else None,
        "with_response": sum(p.response is not None for p in prompts),
        "multi_turn": sum(sum(m["role"] == "user" for m in p.messages) > 1 for p in prompts),
        "max_prompt_chars": max(sum(len(message_text(m.get("content")) or "") for m in p.messages)
                                for p in prompts),
    }


def load_traffic(
    path: str | Path,
    *,
    sample: int | None = None,
    seed: int = 0,
    name: str | None = None,
    category: str | None = None,
) -> Workload:
    """Read a traffic log into a workload whose prompts keep the responses served.

    ``sample``: draw that many prompts (all if fewer are usable) with ``random.Random(seed)``,
    in drawn order. ``category``: keep only that category (before sampling). The workload's
    ``imported`` record says what was read, dropped (by reason, with the first line numbers)
    and drawn.
    """
    path = Path(path)
    if not path.is_file():
        raise TrafficError(f"{path}: no such traffic file")
    if sample is not None and sample < 1:
        raise TrafficError(f"{path}: sample must be >= 1, got {sample}")
    prompts: list[Prompt] = []
    first_line: dict[str, int] = {}  # prompt id -> line, to name both lines of a clash
    seen: set[str] = set()  # canonical messages already kept
    dropped: dict[str, int] = {}
    dropped_lines: dict[str, list[int]] = {}
    lines = 0

    def drop(reason: str, n: int) -> None:
        dropped[reason] = dropped.get(reason, 0) + 1
        if len(dropped_lines.setdefault(reason, [])) < _KEEP_LINES:
            dropped_lines[reason].append(n)

    for n, raw in text_lines(path, TrafficError):
        lines += 1
        where = f"{path}:{n}"
        if not raw.strip():
            drop("blank", n)
            continue
        try:
            obj = json.loads(raw)
        except json.JSONDecodeError as exc:
            raise TrafficError(f"{where}: not valid JSON ({exc.msg})") from None
        parsed = _parse(obj, where)
        if isinstance(parsed, str):
            drop(parsed, n)
            continue
        msgs, response = parsed
        cat = obj.get("category")
        if cat is not None and not isinstance(cat, str):
            raise TrafficError(f"{where}: 'category' must be a string")
        if category is not None and cat != category:
            continue  # another category: not a drop, a selection
        canon = json.dumps(msgs, sort_keys=True, ensure_ascii=False)
        if canon in seen:
            drop("duplicate", n)
            continue
        pid = str(obj.get("id", n))
        if pid in first_line:
            raise TrafficError(f"{where}: id {pid!r} already used on line {first_line[pid]}")
        seen.add(canon)
        first_line[pid] = n
        prompts.append(Prompt(id=pid, category=cat, messages=msgs, response=response))
    if not prompts:
        why = ", ".join(f"{k} x{v}" for k, v in sorted(dropped.items())) or "no lines"
        sel = f" of category {category!r}" if category is not None else ""
        raise TrafficError(f"{path}: no usable prompts{sel} ({why})")
    usable = len(prompts)
    if sample is not None:
        rng = random.Random(seed)
        prompts = rng.sample(prompts, min(sample, usable))
    record = _imported(path, prompts, lines=lines, usable=usable, dropped=dropped, dropped_lines=dropped_lines,
                       sample=sample, seed=seed)
    wl_name = name or path.stem + (f":{category}" if category is not None else "")
    return Workload(name=wl_name, prompts=prompts, source=str(path), category=category, imported=record)


def load_source(src: TrafficSource) -> Workload:
    return load_traffic(src.traffic, sample=src.sample, seed=src.seed, name=src.name, category=src.category)
