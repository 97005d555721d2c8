"""A sweep's definition: arms x workloads x concurrency levels x repeats, validated.

Loaded from TOML (``specnb sweep``) or built by a study (a notebook axis). Everything about
it is checked here, in one line per mistake, before any file is written or server started;
:mod:`specnb.sweep.preflight` then resolves models, workloads and drafters.
"""

from __future__ import annotations

import tomllib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from specnb.errors import SpecnbError, first_error, plain_name
from specnb.ledger import Sampling
from specnb.prompts.traffic import TrafficSource
from specnb.sweep.arm import Arm

__all__ = ["SweepError", "SweepSpec", "point_path", "blocks"]


class SweepError(SpecnbError):
    """A sweep that cannot start; the message is one line meant for the user."""


class SweepSpec(BaseModel):
    """Everything that defines a sweep. Loaded from TOML or built in a notebook."""

    model_config = ConfigDict(extra="forbid")

    name: str = Field(description="sweep name, recorded in every ledger")
    model: str | None = Field(None, description="target checkpoint (folder or id) for launched arms")
    served_model_name: str | None = Field(None, description="name the server answers to")
    server_args: list[str] = Field(default_factory=list, description="args for every launched arm")
    env: dict[str, str] = Field(default_factory=dict, description="environment for every launched arm")
    arms: list[Arm] = Field(min_length=1)
    workloads: list[str | TrafficSource] = Field(
        default_factory=lambda: ["copy", "freeform"],
        description="bundled sets ('copy'), '<set>:<category>', .jsonl paths, or traffic imports "
        "({traffic = 'log.jsonl', sample = 200, seed = 0})",
    )
    concurrency: list[int] = Field(min_length=1)
    repeats: int = Field(2, ge=1, description="server restarts per arm; arm order alternates")
    requests_per_user: int = Field(4, ge=1, description="requests per point = concurrency x this")
    min_requests: int = Field(8, ge=1, description="... but at least this many")
    warmup_requests: int = Field(2, ge=0, description="per server start, excluded from results")
    sampling: Sampling = Field(default_factory=Sampling)
    ready_timeout_s: float = Field(600.0, gt=0)
    request_timeout_s: float = Field(600.0, gt=0)
    metrics_interval_s: float = Field(1.0, gt=0)
    reset_prefix_cache: bool = True
    busy_retries: int = Field(2, ge=0, description="re-measure a point disturbed by another process "
                              "(host_busy) up to this many times; each attempt is kept")
    per_request_spec_metrics: bool = Field(
        True, description="add --per-request-spec-decode-metrics summary to launched speculative arms "
        "when the engine has it (per-category acceptance in the ledgers)",
    )
    parameters: dict[str, Any] = Field(default_factory=dict, description="caller parameters, recorded")

    @field_validator("concurrency")
    @classmethod
    def _conc(cls, v: list[int]) -> list[int]:
        if any(c < 1 for c in v):
            raise ValueError("concurrency levels must be >= 1")
        if len(set(v)) != len(v):
            raise ValueError("concurrency levels must be distinct")
        return sorted(v)

    @field_validator("name")
    @classmethod
    def _name(cls, v: str) -> str:
        return plain_name(v, "sweep name")

    @model_validator(mode="after")
    def _check(self) -> SweepSpec:
        names = [a.name for a in self.arms]
        if len(set(names)) != len(names):
            raise ValueError(f"arm names must be distinct: {names}")
        if any(a.endpoint is None for a in self.arms) and not self.model:
            raise ValueError("'model' is required unless every arm attaches to an endpoint")
        keys = [w if isinstance(w, str) else w.model_dump_json() for w in self.workloads]
        if len(set(keys)) != len(keys) or not keys:
            raise ValueError("workloads must be a non-empty list of distinct names")
        return self

    def num_requests(self, concurrency: int) -> int:
        return max(self.min_requests, concurrency * self.requests_per_user)

    def identity(self) -> dict[str, Any]:
        """What must not change between a sweep and its resumption (levels and repeats may)."""
        return self.model_dump(
            include={"model", "served_model_name", "server_args", "env", "arms", "workloads",
                     "requests_per_user", "min_requests", "warmup_requests", "sampling",
                     "reset_prefix_cache"}
        )

    @classmethod
    def from_toml(cls, path: str | Path, overrides: dict[str, Any] | None = None) -> SweepSpec:
        path = Path(path)
        try:
            data = tomllib.loads(path.read_text())
        except OSError as exc:
            raise SweepError(f"{path}: {exc.strerror}") from None
        except tomllib.TOMLDecodeError as exc:
            raise SweepError(f"{path}: not valid TOML ({exc})") from None
        data.update(overrides or {})
        return cls.parse(data, where=str(path))

    @classmethod
    def parse(cls, data: dict[str, Any], where: str = "sweep") -> SweepSpec:
        try:
            return cls.model_validate(data)
        except ValidationError as exc:
            raise SweepError(f"{where}: {first_error(exc, count_more=True)}") from None


def point_path(out_dir: Path, arm: str, workload: str, concurrency: int, repeat: int) -> Path:
    return Path(out_dir) / arm / workload / f"c{concurrency:03d}-r{repeat:02d}.json"


def blocks(spec: SweepSpec) -> Iterator[tuple[int, int, Arm]]:
    """(repeat, position, arm) in run order: A B | B A | A B ..."""
    for r in range(spec.repeats):
        order = spec.arms if r % 2 == 0 else list(reversed(spec.arms))
        for pos, arm in enumerate(order):
            yield r, pos, arm
