"""A workload from its name in a sweep: a bundled set, a prompt file, one category of either,
imported real traffic, a context length or a conversation set. The one place that knows every kind of source, so that
:mod:`specnb.prompts.workload` and :mod:`specnb.prompts.traffic` need not know each other
(traffic builds on workload; nothing builds on both but this)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from specnb.prompts.context import ContextSource, is_context, load_context
from specnb.prompts.conversation import (
    ConversationSource,
    from_traffic,
    is_conversations,
    load_conversation_source,
)
from specnb.prompts.traffic import TrafficSource, load_source
from specnb.prompts.workload import SETS, Workload, WorkloadError, bundled, load_jsonl

__all__ = ["resolve"]


def resolve(spec: str | Mapping[str, Any] | Any) -> Workload:
    """A workload from its name in a sweep.

    - ``"copy"``, ``"freeform"``, ``"json"``: a bundled set;
    - ``"path/to/prompts.jsonl"``: a prompt file (:func:`load_jsonl`);
    - ``"<either of those>:<category>"``: only that category's prompts (``"copy:fix-json"``);
    - a mapping (or :class:`specnb.prompts.traffic.TrafficSource`) with a ``traffic`` path and optional
      ``sample``, ``seed``, ``name``, ``category``: imported real traffic (:mod:`specnb.prompts.traffic`),
      with ``conversations = true`` as a conversation set to replay turn by turn;
    - a mapping (or :class:`specnb.prompts.context.ContextSource`) with a ``context`` base, ``tokens`` and
      ``tokenizer``: the base's prompts grown to that length with real text (:mod:`specnb.prompts.context`);
    - a mapping (or :class:`specnb.prompts.conversation.ConversationSource`) with a ``conversations`` set
      (``"edit-chat"`` or a JSONL path): whole conversations, replayed turn by turn
      (:mod:`specnb.prompts.conversation`).
    """
    if is_conversations(spec) and not (isinstance(spec, dict) and "traffic" in spec):
        src = spec if isinstance(spec, ConversationSource) else ConversationSource.parse(spec)
        return load_conversation_source(src)
    if is_context(spec):
        return load_context(spec if isinstance(spec, ContextSource) else ContextSource.parse(spec), resolve)
    if not isinstance(spec, str):
        src = spec if isinstance(spec, TrafficSource) else TrafficSource.parse(spec)
        return from_traffic(load_source(src)) if src.conversations else load_source(src)
    if spec in SETS:
        return bundled(spec)
    base, sep, category = spec.rpartition(":")
    if sep and base and category and "/" not in category:
        return resolve(base).select(category)
    if spec.endswith(".jsonl") or "/" in spec:
        return load_jsonl(spec)
    raise WorkloadError(
        f"workload {spec!r} is neither a bundled set {list(SETS)}, '<set>:<category>', nor a .jsonl path"
    )
