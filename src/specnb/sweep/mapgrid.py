"""A break-even map's grid as a study's arms (:mod:`specnb.analysis.breakeven` reads them back).

The map notebook names drafter *kinds* (a proposer config without K), the K values and the
acceptance lengths to set; :class:`AcceptanceMap` turns them into one synthetic arm per
(kind, K, length) whose proposer runs for real and whose acceptance is set through vLLM's
``synthetic_acceptance_length``, plus, with ``real``, the kind's own drafter at each K (its
measured acceptance is then read against the cells). The arms are ordinary study drafters: the
same pairing, interval and stopping as every other pair, the same ledgers, nothing the map owns::

    acceptance_map = {"kinds": {"ngram": {"method": "ngram", "prompt_lookup_max": 4}},
                      "k": [4], "lengths": [1.5, 2.5, 3.5, 4.5]}
    # arms ngram-k4-L1.5 ... ngram-k4-L4.5 and ngram-k4

A kind's own ``num_speculative_tokens`` (a number or a list) replaces ``k`` for that kind. A
length above K + 1 cannot be set for that K and is left out of it; every K keeps two lengths at
least, or the grid is refused.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from specnb.analysis.ceiling import SYNTHETIC_KEYS
from specnb.errors import plain_name

__all__ = ["AcceptanceMap"]

K_KEY = "num_speculative_tokens"


class AcceptanceMap(BaseModel):
    """Drafter kinds x K x synthetic acceptance lengths, as arms."""

    model_config = ConfigDict(extra="forbid")

    kinds: dict[str, dict[str, Any]] = Field(description="kind name -> proposer config without K (vLLM's "
                                             "--speculative-config keys: method, model, prompt_lookup_max ...)")
    k: list[int] = Field(default_factory=list, description="speculative tokens per step, for every kind that "
                         "does not name its own")
    lengths: list[float] = Field(description="mean acceptance lengths to set (1 <= length <= K + 1)")
    real: bool = Field(True, description="add each kind's own drafter at each K: its measured acceptance is "
                       "read against the cells")

    @field_validator("kinds")
    @classmethod
    def _kinds(cls, v: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
        if not v:
            raise ValueError("name at least one drafter kind (kind name -> proposer config)")
        for name, cfg in v.items():
            plain_name(name, "kind name")
            if not isinstance(cfg, dict) or ("method" not in cfg and "model" not in cfg):
                raise ValueError(f"kind {name!r} needs a proposer config with a 'method' or a draft 'model'")
            forced = [k for k in SYNTHETIC_KEYS if k in cfg]
            if forced:
                raise ValueError(f"kind {name!r} sets {', '.join(forced)}: the map sets acceptance itself; "
                                 "give the proposer only")
        return v

    @field_validator("k")
    @classmethod
    def _k(cls, v: list[int]) -> list[int]:
        if any(isinstance(x, bool) or not isinstance(x, int) or x < 1 for x in v) or len(set(v)) != len(v):
            raise ValueError(f"k must be distinct whole numbers >= 1, got {v}")
        return v

    @field_validator("lengths")
    @classmethod
    def _lengths(cls, v: list[float]) -> list[float]:
        if len(v) < 2 or len(set(v)) != len(v) or any(x < 1.0 for x in v):
            raise ValueError(f"lengths must be two or more distinct mean acceptance lengths >= 1, got {v}")
        return sorted(float(x) for x in v)

    @model_validator(mode="after")
    def _grid(self) -> AcceptanceMap:
        for kind in self.kinds:
            ks = self.ks(kind)
            if not ks:
                raise ValueError(f"kind {kind!r} has no K: give k, or num_speculative_tokens in the kind")
            for k in ks:
                if len(self.lengths_for(k)) < 2:
                    raise ValueError(f"kind {kind!r} at K={k}: fewer than two of the lengths {self.lengths} "
                                     f"fit 1..{k + 1}")
        return self

    def ks(self, kind: str) -> list[int]:
        own = self.kinds[kind].get(K_KEY)
        ks = self.k if own is None else ([own] if isinstance(own, int) else list(own))
        if any(isinstance(x, bool) or not isinstance(x, int) or x < 1 for x in ks):
            raise ValueError(f"kind {kind!r}: num_speculative_tokens must be whole numbers >= 1, got {own}")
        return ks

    def lengths_for(self, k: int) -> list[float]:
        return [x for x in self.lengths if x <= k + 1]

    def drafters(self) -> dict[str, dict[str, Any]]:
        """Arm name -> speculative config: ``<kind>-k<K>-L<length>`` for every cell, ``<kind>-k<K>``
        for the kind's own drafter (with ``real``)."""
        out: dict[str, dict[str, Any]] = {}
        for kind, cfg in self.kinds.items():
            base = {k: v for k, v in cfg.items() if k != K_KEY}
            for k in self.ks(kind):
                if self.real:
                    out[f"{kind}-k{k}"] = {**base, K_KEY: k}
                for length in self.lengths_for(k):
                    out[f"{kind}-k{k}-L{length:g}"] = {**base, K_KEY: k, "rejection_sample_method": "synthetic",
                                                       "synthetic_acceptance_length": length}
        return out
