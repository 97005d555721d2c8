"""Which vLLM release first has each engine feature specnb's sweeps use, and the floor a sweep needs.

Checked in the official ``vllm`` wheels (the symbol present in the release, absent from the one
before) and in vLLM's pull requests:

- ``draft_model``: speculative decoding with a draft model in the V1 engine, 0.15.0 (PR #24322;
  0.14.0 refuses a draft model at start-up);
- ``eagle3_positions``: an EAGLE/EAGLE-3 head's ``max_position_embeddings`` raised to the
  target's ``max_model_len``, 0.27.0 (PR #49343; before it the head
  ``yuhuili/EAGLE3-LLaMA3.1-Instruct-8B``, trained on 2,048 positions, misreads or asserts past
  them at ``--max-model-len 8192``);
- ``per_request_spec_metrics``: ``--per-request-spec-decode-metrics``, acceptance per request
  (so per prompt category), 0.29.0 (PR #48915);
- ``dynamic_speculation``: ``num_speculative_tokens_per_batch_size`` honoured by the default
  model runner, 0.32.0 (the schedule exists from 0.24.0, but from 0.29.0 the default V2 runner
  ignores the per-step K for EAGLE-style drafters until 0.32.0).

:data:`ENGINE_FLOOR` is the least any launched engine must be (every sweep asks for per-request
acceptance); :func:`required_release` adds what one sweep's arms ask for. ``pyproject.toml``'s
``gpu`` extra names the first release with everything the GPU parameter files use
(``notebooks/params/gpu/``: the policy notebook's dynamic speculation makes that 0.32.0); a unit
test keeps the two in step.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import Any

__all__ = ["FEATURES", "ENGINE_FLOOR", "parse_version", "features_of", "required_release"]

FEATURES: dict[str, tuple[tuple[int, int, int], str]] = {
    "draft_model": ((0, 15, 0), "speculative decoding with a draft model in the V1 engine (vLLM PR #24322)"),
    "eagle3_positions": ((0, 27, 0), "EAGLE-3 heads use the target's positions past their own 2,048 "
                                     "(vLLM PR #49343)"),
    "per_request_spec_metrics": ((0, 29, 0), "per-request acceptance, --per-request-spec-decode-metrics "
                                             "(vLLM PR #48915)"),
    "dynamic_speculation": ((0, 32, 0), "num_speculative_tokens_per_batch_size honoured by the default "
                                        "model runner"),
}

# every sweep asks for per-request acceptance (per-category tables): the least any launched engine must be
ENGINE_FLOOR = FEATURES["per_request_spec_metrics"][0]


def parse_version(version: str | None) -> tuple[int, int, int] | None:
    """``"0.32.0+cpu"`` -> ``(0, 32, 0)``; None when there is no leading ``X.Y[.Z]``."""
    m = re.match(r"^\s*v?(\d+)\.(\d+)(?:\.(\d+))?", version or "")
    return (int(m.group(1)), int(m.group(2)), int(m.group(3) or 0)) if m else None


def features_of(speculative_config: Mapping[str, Any] | None) -> set[str]:
    """The features of :data:`FEATURES` one arm's ``--speculative-config`` needs."""
    cfg = dict(speculative_config or {})
    if not cfg:
        return set()
    need = {"per_request_spec_metrics"}
    method = str(cfg.get("method") or ("draft_model" if cfg.get("model") else ""))
    if method == "draft_model":
        need.add("draft_model")
    if method in ("eagle", "eagle3"):
        need.add("eagle3_positions")
    if any(cfg.get(k) is not None for k in ("num_speculative_tokens_per_batch_size", "speculative_token_schedule")):
        need.add("dynamic_speculation")
    return need


def required_release(configs: Iterable[Mapping[str, Any] | None]) -> tuple[tuple[int, int, int], list[str]]:
    """The first release with :data:`ENGINE_FLOOR` and every feature the arms need, and why."""
    need: set[str] = set().union(*(features_of(c) for c in configs))
    floor, why = ENGINE_FLOOR, []
    for name in sorted(need, key=lambda n: FEATURES[n][0]):
        version, what = FEATURES[name]
        floor = max(floor, version)
        why.append(f"{'.'.join(map(str, version))}: {what}")
    return floor, why
