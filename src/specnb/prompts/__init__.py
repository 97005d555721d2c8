"""Prompts: what a sweep sends, and what your own traffic looks like.

- :mod:`~specnb.prompts.workload`: bundled prompt sets (``sets/``), the user's JSONL files,
  ``"<set>:<category>"`` cuts, and :func:`resolve` from a sweep's workload name;
- :mod:`~specnb.prompts.traffic`: real traffic logs imported as workloads, drops counted;
- :mod:`~specnb.prompts.conversation`: multi-turn conversation sets a sweep replays turn by turn;
- :mod:`~specnb.prompts.copyshare`: how much of a logged response an n-gram drafter could
  have copied, and the copy-style / free-form mix of a log.

Pure data handling: nothing here talks to a server.
"""

from __future__ import annotations

from specnb.prompts.conversation import Conversation, ConversationSource, load_conversations
from specnb.prompts.copyshare import MixError, measure_mix
from specnb.prompts.sources import resolve
from specnb.prompts.traffic import TrafficError, TrafficSource, load_traffic
from specnb.prompts.workload import Prompt, Workload, WorkloadError, bundled, load_jsonl

__all__ = ["Conversation", "ConversationSource", "load_conversations", "MixError", "Prompt", "TrafficError", "TrafficSource", "Workload", "WorkloadError", "bundled",
           "load_jsonl", "load_traffic", "measure_mix", "resolve"]
