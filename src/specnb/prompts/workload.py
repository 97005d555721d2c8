"""Prompt sets: the bundled ones and the user's own JSONL.

A workload is an ordered list of prompts, each with an id, a category and chat
``messages``. Its ``content_hash`` (sha256 over the canonical JSON of the prompts) goes into
every ledger, so two points are only paired when they saw the same prompts.

Bundled sets (written for specnb, no downloaded data):

- ``copy``: the answer quotes or edits the prompt (edit code, fix JSON, quote a summary,
  extract fields, transform a list): the kind of work n-gram drafting lives on.
- ``freeform``: open chat, creative writing, explanation, reasoning, math.

A JSONL file holds one object per line, either ``{"prompt": "..."}`` or
``{"messages": [{"role": ..., "content": ...}, ...]}``, with optional ``id`` and
``category``. Bad lines raise :class:`WorkloadError` naming the file and line. Messages are
sent as given, multi-turn conversations whole (replayed turn by turn instead:
:mod:`specnb.prompts.conversation`). Real traffic logs, with the responses served
and lines to drop, go through :mod:`specnb.prompts.traffic` instead.

A sweep that should measure one kind of work at a time names a category:
``resolve("copy:fix-json")`` is the ``fix-json`` prompts of the bundled ``copy`` set, as a
workload of its own named ``copy:fix-json`` (its ledgers record the category and the hash
of the whole set it was cut from).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from specnb.errors import SpecnbError, first_error

__all__ = ["Prompt", "Workload", "WorkloadError", "load_jsonl", "json_lines", "parse_table", "bundled", "check_messages",
           "prompts_hash", "canonical_hash", "text_lines", "BUNDLED", "UNCATEGORIZED"]

BUNDLED = ("copy", "freeform")  # written by tools/make_workloads.py, five categories of 64 each
# written by hand, small: the JSON set for structured output (field extraction, JSON repair)
HAND_WRITTEN = ("json",)
SETS = BUNDLED + HAND_WRITTEN
UNCATEGORIZED = "uncategorized"  # the category key of prompts that carry none
_ROLES = {"system", "user", "assistant", "developer", "tool"}


class WorkloadError(SpecnbError):
    """A prompt file or workload name is unusable; the message names the line."""


@dataclass(frozen=True)
class Prompt:
    """One request's chat messages, sent as given. ``response`` is what a real server answered
    (imported traffic only): it is never sent, only read by :mod:`specnb.prompts.copyshare`."""

    id: str
    category: str | None
    messages: list[dict[str, Any]]
    response: str | None = None


@dataclass(frozen=True)
class Workload:
    name: str
    prompts: list[Prompt]
    source: str
    category: str | None = None  # set when cut to one category by :meth:`select`
    parent_hash: str | None = None  # content hash of the set it was cut from
    imported: dict[str, Any] | None = None  # traffic import record (ledger.TrafficImport fields)
    context: dict[str, Any] | None = None  # context-length build record (specnb.prompts.context)
    # a conversation set (specnb.prompts.conversation): the whole conversations (``prompts`` are
    # their first turns) and the set's record (turns per conversation, recorded answers or not)
    conversations: list[Any] | None = None
    conversation: dict[str, Any] | None = None

    @property
    def content_hash(self) -> str:
        """The prompts' hash; a conversation set's covers every turn and recorded answer."""
        if self.conversations is not None:
            return canonical_hash([c.canonical() for c in self.conversations])
        return prompts_hash(self.prompts)

    @property
    def categories(self) -> dict[str, int]:
        """Prompts per category, in order of first appearance."""
        out: dict[str, int] = {}
        for p in self.prompts:
            key = p.category or UNCATEGORIZED
            out[key] = out.get(key, 0) + 1
        return out

    def select(self, category: str) -> Workload:
        """The prompts of one category, in their order, as a workload named ``<name>:<category>``."""
        if self.conversations is not None:
            raise WorkloadError(f"workload {self.name!r} is a conversation set: give the conversations of one "
                                "category a file of their own")
        prompts = [p for p in self.prompts if (p.category or UNCATEGORIZED) == category]
        if not prompts:
            raise WorkloadError(
                f"workload {self.name!r} has no category {category!r}; it has {list(self.categories)}"
            )
        return Workload(
            name=f"{self.name}:{category}", prompts=prompts, source=self.source, category=category,
            parent_hash=self.content_hash, imported=self.imported,
        )

    def panel(self, size: int | None) -> list[Prompt]:
        """The prompts every point of a sweep sends: ``size`` of them, balanced over categories.

        Categories take turns in order of first appearance, each giving its prompts in file order,
        until ``size`` are chosen (all prompts when ``size`` is None or not smaller). Every
        concurrency level covers the same panel in full, cycled as often as it needs, so a curve's
        shape is concurrency, not prompt mix.
        """
        if size is None or size >= len(self.prompts):
            return list(self.prompts)
        if size < 1:
            raise WorkloadError(f"a prompt panel needs at least one prompt, got {size}")
        queues: dict[str, list[Prompt]] = {}
        for p in self.prompts:
            queues.setdefault(p.category or UNCATEGORIZED, []).append(p)
        out: list[Prompt] = []
        turn = 0
        while len(out) < size:
            for q in queues.values():
                if turn < len(q) and len(out) < size:
                    out.append(q[turn])
            turn += 1
        return out

    def describe(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "source": self.source,
            "content_hash": self.content_hash,
            "num_prompts": len(self.prompts),
            "categories": self.categories,
            "category": self.category,
            "parent_hash": self.parent_hash,
            "imported": self.imported,
            "context": self.context,
            "conversation": self.conversation,
        }


def prompts_hash(prompts: list[Prompt]) -> str:
    """sha256 over the canonical JSON of the prompts (ids, categories, messages), in order."""
    return canonical_hash([{"id": p.id, "category": p.category, "messages": p.messages} for p in prompts])


def canonical_hash(items: list[Any]) -> str:
    """``sha256:<hex>`` of the canonical JSON of ``items`` (sorted keys, no spaces)."""
    canon = json.dumps(items, sort_keys=True, ensure_ascii=False, separators=(",", ":"))
    return "sha256:" + hashlib.sha256(canon.encode()).hexdigest()


def _parse_line(obj: Any, where: str, n: int, default_category: str | None) -> Prompt:
    if not isinstance(obj, dict):
        raise WorkloadError(f"{where}: expected a JSON object, got {type(obj).__name__}")
    if "messages" in obj:
        msgs = obj["messages"]
        if not isinstance(msgs, list) or not msgs:
            raise WorkloadError(f"{where}: 'messages' must be a non-empty list")
        check_messages(msgs, where)
        if msgs[-1]["role"] == "assistant":
            raise WorkloadError(f"{where}: the last message is the assistant's; nothing to answer")
    elif "prompt" in obj:
        if not isinstance(obj["prompt"], str) or not obj["prompt"].strip():
            raise WorkloadError(f"{where}: 'prompt' must be a non-empty string")
        msgs = [{"role": "user", "content": obj["prompt"]}]
    else:
        raise WorkloadError(f"{where}: needs a 'prompt' string or a 'messages' list")
    category = obj.get("category", default_category)
    if category is not None and not isinstance(category, str):
        raise WorkloadError(f"{where}: 'category' must be a string")
    return Prompt(id=str(obj.get("id", n)), category=category, messages=msgs)


def check_messages(msgs: list[Any], where: str) -> None:
    """Every message needs a known role and a content (text or parts); an assistant turn that
    only calls tools may have ``content: null``. Raises :class:`WorkloadError` naming ``where``."""
    for j, m in enumerate(msgs):
        ok = isinstance(m, dict) and m.get("role") in _ROLES and (
            isinstance(m.get("content"), (str, list))
            or (m.get("content") is None and m.get("role") == "assistant" and m.get("tool_calls"))
        )
        if not ok:
            raise WorkloadError(f"{where}: messages[{j}] needs a 'role' in {sorted(_ROLES)} and a 'content'")


def text_lines(path: Path, error: type[WorkloadError] = WorkloadError) -> Iterator[tuple[int, str]]:
    """(line number, text) of a UTF-8 file (a byte-order mark is allowed); a line that is not
    UTF-8 or a file that cannot be read raises ``error`` naming the file and line."""
    try:
        with path.open("rb") as fh:
            for n, raw in enumerate(fh, start=1):
                try:
                    yield n, raw.decode("utf-8-sig" if n == 1 else "utf-8")
                except UnicodeDecodeError as exc:
                    raise error(f"{path}:{n}: not UTF-8 (byte {raw[exc.start]:#04x} at column {exc.start + 1}); "
                                "save the file as UTF-8") from None
    except OSError as exc:
        raise error(f"{path}: cannot read ({exc.strerror or exc})") from None


def json_lines(path: Path) -> Iterator[tuple[int, str, Any]]:
    """(line number, ``path:line``, parsed object) of each non-blank line of a JSONL file; a line
    that is not JSON raises :class:`WorkloadError` naming the file and line."""
    for n, raw in text_lines(path):
        if not raw.strip():
            continue
        where = f"{path}:{n}"
        try:
            yield n, where, json.loads(raw)
        except json.JSONDecodeError as exc:
            raise WorkloadError(f"{where}: not valid JSON ({exc.msg})") from None


def parse_table(model: type[Any], data: Any, what: str) -> Any:
    """A sweep's workload table validated as ``model`` (a pydantic model), or one line saying why."""
    try:
        return model.model_validate(dict(data) if isinstance(data, dict) else data)
    except (ValidationError, TypeError, ValueError) as exc:
        why = first_error(exc, model=model) if isinstance(exc, ValidationError) else str(exc)
        raise WorkloadError(f"{what} workload {data!r}: {why}") from None


def load_jsonl(path: str | Path, name: str | None = None, default_category: str | None = None) -> Workload:
    path = Path(path)
    if not path.is_file():
        raise WorkloadError(f"{path}: no such prompt file")
    prompts: list[Prompt] = []
    seen: set[str] = set()
    for n, where, obj in json_lines(path):
        p = _parse_line(obj, where, n, default_category)
        if p.id in seen:
            raise WorkloadError(f"{where}: duplicate id {p.id!r}")
        seen.add(p.id)
        prompts.append(p)
    if not prompts:
        raise WorkloadError(f"{path}: no prompts")
    return Workload(name=name or path.stem, prompts=prompts, source=str(path))


def bundled(name: str) -> Workload:
    if name not in SETS:
        raise WorkloadError(f"unknown bundled workload {name!r}; choose from {list(SETS)}")
    ref = resources.files("specnb.prompts") / "sets" / f"{name}.jsonl"
    with resources.as_file(ref) as path:
        wl = load_jsonl(path, name=name)
    return Workload(name=name, prompts=wl.prompts, source=f"specnb:prompts/sets/{name}.jsonl")
