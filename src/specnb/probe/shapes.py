"""The decoder shapes the step-time probe builds: a subset of each model's own ``config.json``,
kept in ``shapes/<name>.json`` with where it came from. No weights, no tokenizer: the probe fills
a shape with random weights in the serving dtype.

Standard library only (the probe runs with a GPU machine's own python and torch).
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, fields
from pathlib import Path

__all__ = ["ProbeError", "Shape", "SHAPES_DIR", "shape_names", "load_shape"]

SHAPES_DIR = Path(__file__).resolve().parent / "shapes"


class ProbeError(Exception):
    """Bad input to the probe (an unknown shape, an impossible grid); one line for the user."""


@dataclass(frozen=True)
class Shape:
    name: str
    source: str
    hidden_size: int
    num_hidden_layers: int
    num_attention_heads: int
    num_key_value_heads: int
    head_dim: int
    intermediate_size: int
    vocab_size: int
    tie_word_embeddings: bool = False
    sliding_window: int | None = None  # local layers attend to the last sliding_window tokens
    sliding_window_pattern: int | None = None  # every pattern-th layer is global, the others local
    num_experts: int | None = None
    num_experts_per_tok: int | None = None
    moe_intermediate_size: int | None = None

    def __post_init__(self) -> None:
        for f in ("hidden_size", "num_hidden_layers", "num_attention_heads", "num_key_value_heads", "head_dim",
                  "intermediate_size", "vocab_size"):
            v = getattr(self, f)
            if not isinstance(v, int) or isinstance(v, bool) or v < 1:
                raise ProbeError(f"shape {self.name}: {f} must be a positive integer, got {v!r}")
        if self.num_attention_heads % self.num_key_value_heads:
            raise ProbeError(f"shape {self.name}: {self.num_attention_heads} attention heads are not a multiple "
                             f"of {self.num_key_value_heads} key/value heads")
        moe = (self.num_experts, self.num_experts_per_tok, self.moe_intermediate_size)
        if any(v is not None for v in moe) and not all(isinstance(v, int) and v >= 1 for v in moe):
            raise ProbeError(f"shape {self.name}: a mixture of experts needs num_experts, num_experts_per_tok and "
                             "moe_intermediate_size, each a positive integer")
        if self.num_experts and self.num_experts_per_tok > self.num_experts:
            raise ProbeError(f"shape {self.name}: {self.num_experts_per_tok} experts per token of {self.num_experts}")

    @property
    def moe(self) -> bool:
        return bool(self.num_experts)

    def is_local(self, layer: int) -> bool:
        """Whether this layer attends to a sliding window (every pattern-th layer is global)."""
        p = self.sliding_window_pattern
        return bool(self.sliding_window and p and (layer + 1) % p != 0)

    def layer_params(self) -> int:
        """Parameters of one decoder layer (attention and MLP or experts with its router; norms)."""
        h, d = self.hidden_size, self.head_dim
        attn = h * (self.num_attention_heads + 2 * self.num_key_value_heads) * d + self.num_attention_heads * d * h
        if self.moe:
            mlp = self.num_experts * 3 * h * self.moe_intermediate_size + h * self.num_experts
        else:
            mlp = 3 * h * self.intermediate_size
        return attn + mlp + 2 * h

    def params(self) -> int:
        emb = self.vocab_size * self.hidden_size
        final_norm = self.hidden_size
        return self.num_hidden_layers * self.layer_params() + emb * (1 if self.tie_word_embeddings else 2) + final_norm

    def kv_bytes_per_token(self, dtype_bytes: int) -> int:
        """Keys and values of one token over every layer."""
        return 2 * self.num_hidden_layers * self.num_key_value_heads * self.head_dim * dtype_bytes

    def to_dict(self) -> dict:
        return {k: v for k, v in asdict(self).items() if v is not None}


def shape_names() -> list[str]:
    return sorted(p.stem for p in SHAPES_DIR.glob("*.json"))


def load_shape(name_or_path: str) -> Shape:
    """A shape by name (``shapes/<name>.json``) or from a config file's path."""
    path = Path(name_or_path)
    if not path.is_file():
        path = SHAPES_DIR / f"{name_or_path}.json"
    if not path.is_file():
        raise ProbeError(f"unknown shape {name_or_path!r}: one of {', '.join(shape_names())}, or a config file's path")
    try:
        raw = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise ProbeError(f"{path}: not a JSON shape ({exc})") from None
    raw = raw.get("text_config", raw) if isinstance(raw, dict) else raw
    if not isinstance(raw, dict):
        raise ProbeError(f"{path}: a shape is a JSON object")
    known = {f.name for f in fields(Shape)}
    kw = {k: v for k, v in raw.items() if k in known}
    kw.setdefault("name", path.stem)
    kw.setdefault("source", str(path))
    if "head_dim" not in kw and isinstance(raw.get("hidden_size"), int) and raw.get("num_attention_heads"):
        kw["head_dim"] = raw["hidden_size"] // raw["num_attention_heads"]
    missing = sorted({"hidden_size", "num_hidden_layers", "num_attention_heads", "num_key_value_heads",
                      "intermediate_size", "vocab_size"} - set(kw))
    if missing:
        raise ProbeError(f"{path}: missing {', '.join(missing)}")
    return Shape(**kw)
