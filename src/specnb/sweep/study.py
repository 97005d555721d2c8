"""A study: one axis of the notebooks, as a set of paired sweeps (one per condition).

Every axis notebook varies one thing that needs its own server (the checkpoint, the KV
pool, the parallel layout, the sampling temperature) and keeps the drafter-on/off pairing
inside each value of it. A :class:`Study` holds the notebook's parameters, expands them into
one :class:`~specnb.sweep.spec.SweepSpec` per *condition*, and runs them into one folder:

    ledgers/<axis>/<study>/<run>/<condition>/<arm>/<workload>/cNNN-rNN.json

A speedup is always a ratio within one condition (same prompts, engine build, sampling);
conditions are compared on their absolute numbers only with their spread shown.

Runs interleave conditions by repeat (repeat 0 of every condition, then repeat 1, ...) so
that a slow drift of the machine lands on every condition alike; each repeat is a fresh
server start, which is where most of the variance on these CPUs comes from (a study of one
condition runs as one sweep, so an adaptive search decides on every repeat). Run folders
follow :mod:`specnb.ledger.runs`.

A study's parameters come from its notebook's ``parameters`` cell, the one place their
defaults are written; the study itself has no defaults of its own for them.

Bad parameters fail in one line (:class:`~specnb.sweep.spec.SweepError`) before any server starts.
"""

from __future__ import annotations

import difflib
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from specnb import paths
from specnb.errors import first_error, plain_name, unknown_key
from specnb.ledger import BASELINE, PLAIN_CONDITION
from specnb.ledger.runs import AXES, new_run_name, report_failed_points, report_refused_all, run_folder
from specnb.sweep.executor import ExecutorSpec, SweepJob, run_jobs
from specnb.sweep.load import profile_of
from specnb.sweep.mapgrid import AcceptanceMap
from specnb.sweep.spec import SweepError, SweepSpec

__all__ = ["Condition", "Study"]


class Condition(BaseModel):
    """What one condition changes relative to the study's common settings."""

    model_config = ConfigDict(extra="forbid")

    label: str | None = Field(None, description="how figures name this condition")
    model: str | None = Field(None, description="another checkpoint (quantization axis)")
    server_args: list[str] = Field(default_factory=list, description="appended to the study's")
    env: dict[str, str] = Field(default_factory=dict, description="merged over the study's")
    temperature: float | None = Field(None, ge=0.0)
    max_tokens: int | None = Field(None, ge=1)
    drafters: list[str] | None = Field(None, description="subset of the study's drafters")
    concurrency: list[int] | None = None
    workloads: list[str | dict[str, Any]] | None = None
    endpoint: str | dict[str, str] | None = Field(
        None, description="attach this condition's arms to running servers: one URL for every arm, or "
                          "arm -> URL (the arms not named are launched); the other conditions launch theirs")


CONTEXT_KEYS = {"context_tokens", "context_base", "context_corpus", "tokenizer"}


def context_workloads(params: dict[str, Any]) -> list[dict[str, Any]]:
    """The context-length notebook's workloads (:mod:`specnb.prompts.context`): ``context_base``
    grown to each of ``context_tokens``, counted by ``tokenizer`` (empty: the target's, ``model``),
    with ``context_corpus`` files as more reference material."""
    tokens = params.get("context_tokens")
    if not isinstance(tokens, (list, tuple)) or not tokens or not all(
            isinstance(n, int) and not isinstance(n, bool) for n in tokens):
        raise SweepError(f"context_tokens must be a non-empty list of token counts, got {tokens!r}")
    if len(set(tokens)) != len(tokens):
        raise SweepError(f"context_tokens has a length twice: {list(tokens)}")
    tok = params.get("tokenizer") or params.get("model")
    if not tok:
        raise SweepError("context_tokens needs a tokenizer to count them: give tokenizer or model")
    corpus = list(params.get("context_corpus") or [])
    return [{"context": params.get("context_base") or "copy", "tokens": n, "tokenizer": tok,
             **({"corpus": corpus} if corpus else {})} for n in tokens]


class Study(BaseModel):
    """The parameters of one axis notebook, validated."""

    model_config = ConfigDict(extra="forbid")

    axis: Literal[AXES]
    study: str = Field(description="study name: ledgers/<axis>/<study>/<run>/")
    model: str | None = None
    served_model_name: str | None = None
    endpoint: str | dict[str, str] | None = Field(
        None, description="attach every arm to this server, or each named arm to its own (arm -> URL; the "
                          "arms not named are launched); one condition either way")
    server_args: list[str]
    env: dict[str, str]
    drafters: dict[str, dict[str, Any]] = Field(description="arm name -> vLLM speculative config")
    acceptance_map: AcceptanceMap | None = Field(None, description="drafter kinds x K x synthetic acceptance "
                                                 "lengths, added to drafters as arms (the break-even map)")
    conditions: dict[str, Condition]
    workloads: list[str | dict[str, Any]] = Field(description="names, or tables (traffic imports, context lengths)")
    concurrency: list[int] = Field(default_factory=list, description="closed-loop levels")
    repeats: int = Field(ge=1)
    start_together: bool = Field(False, description="launch each repeat's servers side by side, then measure them "
                                 "one at a time (SweepSpec.start_together)")
    panel_size: int | None = Field(ge=1, description="prompts every point sends (None: the whole workload)")
    work_floor_tokens: int | None = Field(ge=0, description="steady-window output tokens per point (0 or None: none)")
    warmup_requests: int = Field(ge=0)
    search: dict[str, Any] | None = Field(None, description="adaptive concurrency search settings (SearchSpec)")
    sequential: dict[str, Any] | None = Field(None, description="stop a level once its decision cannot change "
                                              "(SequentialSpec)")
    budget_s: float | None = Field(None, gt=0, description="per sweep: no later round starts that would end past "
                                   "it (SweepSpec.budget_s)")
    # open-loop arrivals: only notebooks that offer a `load` parameter use these
    load: Literal["concurrency", "rate"] = "concurrency"
    rates: list[float] = Field(default_factory=list, description="open-loop levels, requests per second")
    burstiness: float = Field(1.0, gt=0)
    max_in_flight: int = Field(64, ge=1)
    max_tokens: int = Field(ge=1)
    temperature: float = Field(ge=0.0)
    seed: int
    # where the pairing blocks run: "local" (here, one after another), "ray" or a Ray address
    executor: ExecutorSpec = Field(default_factory=ExecutorSpec,
                                   description="local, ray, a Ray address, or a table of Ray options (docs/fleet.md)")

    @field_validator("study")
    @classmethod
    def _study(cls, v: str) -> str:
        return plain_name(v, "study name")

    @model_validator(mode="before")
    @classmethod
    def _map_arms(cls, data: Any) -> Any:
        """The map's arms join the drafters (a name given twice is refused)."""
        if not isinstance(data, dict) or not data.get("acceptance_map"):
            return data
        try:
            grid = AcceptanceMap.model_validate(data["acceptance_map"])
        except ValidationError as exc:
            raise ValueError(f"acceptance_map: {first_error(exc, model=AcceptanceMap)}") from None
        drafters = dict(data.get("drafters") or {})
        twice = sorted(set(drafters) & set(grid.drafters()))
        if twice:
            raise ValueError(f"drafters and acceptance_map both name arm(s) {', '.join(twice)}")
        return {**data, "acceptance_map": grid, "drafters": {**drafters, **grid.drafters()}}

    @field_validator("drafters")
    @classmethod
    def _drafters(cls, v: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
        if not v:
            raise ValueError("name at least one drafter (arm name -> speculative config)")
        if BASELINE in v:
            raise ValueError(f"'{BASELINE}' is the arm without a drafter; name drafters otherwise")
        return v

    @model_validator(mode="after")
    def _check(self) -> Study:
        for name, cond in self.conditions.items():
            unknown = set(cond.drafters or []) - set(self.drafters)
            if unknown:
                raise ValueError(f"condition {name!r} names unknown drafters {sorted(unknown)}")
            plain_name(name, "condition name")
        if self.endpoint and len(self.conditions) > 1:
            raise ValueError("an attached endpoint is one server: it cannot vary conditions (give each condition "
                             "its own endpoint in the conditions table)")
        if self.endpoint and any(c.endpoint for c in self.conditions.values()):
            raise ValueError("give the endpoint once: for the study or in its condition, not both")
        # a study-wide endpoint serves the one condition there is (its drafters, where it names them)
        only = next(iter(self.conditions.values())).drafters if len(self.conditions) == 1 else None
        for name, endpoint, drafters in [(None, self.endpoint, only),
                                         *((n, c.endpoint, c.drafters) for n, c in self.conditions.items())]:
            if not isinstance(endpoint, dict):
                continue
            arms = [BASELINE, *(d for d in self.drafters if drafters is None or d in drafters)]
            unknown = [k for k in endpoint if k not in arms]
            if unknown:
                where = "the study does not have" if name is None else f"condition {name!r} does not have"
                raise ValueError(f"endpoint names arm(s) {', '.join(map(repr, unknown))} {where} "
                                 f"(its arms: {', '.join(arms)})")
        return self

    # -- construction -------------------------------------------------------------------
    @classmethod
    def from_namespace(cls, axis: str, namespace: dict[str, Any]) -> Study:
        """From a notebook's globals: picks the names that are study parameters."""
        keep = set(cls.model_fields) | (CONTEXT_KEYS if axis == "context" else set())
        return cls.from_parameters(axis, **{k: v for k, v in namespace.items() if k in keep})

    @classmethod
    def from_parameters(cls, axis: str, **params: Any) -> Study:
        """Build from a notebook's parameters; notebook-only keys are ignored."""
        fields = set(cls.model_fields)
        data = {k: v for k, v in params.items() if k in fields}
        data["axis"] = axis
        if axis == "context":  # the context-length notebook: one workload per length
            data["workloads"] = context_workloads(params)
        if data.get("endpoint") in ("", None, {}):
            data.pop("endpoint", None)
        def misspelt() -> str | None:
            """An ignored name close to a parameter that was not given: the mistake behind the error."""
            for key in (k for k in params if k not in fields):
                close = difflib.get_close_matches(key, [f for f in fields if f not in data], n=1, cutoff=0.8)
                if close:
                    return f"{axis} parameters: {unknown_key(key, close)}"
            return None

        try:
            study = cls.model_validate(data)
            study.specs()  # every sweep must validate too
        except ValidationError as exc:
            raise SweepError(misspelt() or f"{axis} parameters: {first_error(exc, model=cls)}") from None
        except SweepError as exc:
            raise SweepError(misspelt() or str(exc)) from None
        return study

    def condition_names(self) -> list[str]:
        return list(self.conditions) or [PLAIN_CONDITION]

    def label(self, condition: str) -> str:
        cond = self.conditions.get(condition)
        return (cond.label if cond and cond.label else condition)

    def specs(self) -> dict[str, SweepSpec]:
        """One validated sweep per condition (no file is touched, no server started)."""
        out = {}
        profile = profile_of(self.load)
        closed = profile.concurrency_levels  # concurrency levels and the search are a closed loop's
        for name in self.condition_names():
            cond = self.conditions.get(name, Condition())
            drafters = {k: v for k, v in self.drafters.items()
                        if cond.drafters is None or k in cond.drafters}
            arms: list[dict[str, Any]] = [{"name": BASELINE}]
            for arm, cfg in drafters.items():
                arms.append({"name": arm, "speculative_config": _local_paths(cfg)})
            endpoint = self.endpoint if cond.endpoint in (None, "", {}) else cond.endpoint
            for a in arms:
                url = endpoint.get(a["name"]) if isinstance(endpoint, dict) else endpoint
                if url:
                    a["endpoint"] = url
            data = {
                "name": f"{self.axis}-{self.study}-{name}",
                "model": cond.model or self.model,
                "served_model_name": self.served_model_name,
                "server_args": [*self.server_args, *cond.server_args],
                "env": {**self.env, **cond.env},
                "arms": arms,
                "workloads": cond.workloads or self.workloads,
                "load": self.load,
                "concurrency": (cond.concurrency or self.concurrency) if "concurrency" in profile.model_fields else [],
                "rates": self.rates if "rates" in profile.model_fields else [],
                "burstiness": self.burstiness,
                "max_in_flight": self.max_in_flight,
                "search": self.search if closed else None,
                "sequential": self.sequential,
                "budget_s": self.budget_s,
                "repeats": self.repeats,
                "start_together": self.start_together,
                "panel_size": self.panel_size,
                "work_floor_tokens": self.work_floor_tokens,
                "warmup_requests": self.warmup_requests,
                "sampling": {
                    "temperature": self.temperature if cond.temperature is None else cond.temperature,
                    "max_tokens": cond.max_tokens or self.max_tokens,
                    "seed": self.seed,
                },
                "parameters": {"axis": self.axis, "study": self.study, "condition": name,
                               "condition_label": self.label(name)},
            }
            out[name] = SweepSpec.parse(data, where=f"{self.axis} condition {name!r}")
        return out

    # -- running ------------------------------------------------------------------------
    def labels(self) -> dict[str, str]:
        """Condition name -> how figures name it, in the study's order."""
        return {c: self.label(c) for c in self.condition_names()}

    def check(self) -> None:
        """Every check that can fail before a server starts, for every condition."""
        from specnb.sweep.preflight import prepare

        for spec in self.specs().values():
            prepare(spec)

    def run(self, root: Path | str | None = None, run: str | None = None, *,
            progress: bool = True) -> tuple[Path, list[Any]]:
        """Measure (or resume) every condition into a run folder; returns it and the outcomes."""
        specs = self.specs()
        folder = run_folder(self.axis, self.study, run or new_run_name(), root)
        # every condition's checks first; on Ray every (condition, repeat) is a block of its own,
        # here the conditions run repeat by repeat (one condition: one sweep, so an adaptive
        # search decides on every repeat)
        done = run_jobs([SweepJob(spec, folder / name) for name, spec in specs.items()], self.executor,
                        progress=progress)
        outcomes = dict(zip(specs, done, strict=True))
        # the notebook runner (make measure-<axis>) exits non-zero when points failed, and 2 when
        # every condition was refused (nothing here could be measured: the refusals say why)
        report_failed_points([f"{name}: {p}" for name, o in outcomes.items() for p in o.failed_points])
        if outcomes and all(o.refused_all for o in outcomes.values()):
            from specnb.sweep.runner import refusal_lines

            report_refused_all([line for name, o in outcomes.items() for line in refusal_lines(o.refused, name)])
        return folder, list(outcomes.values())


def _local_paths(cfg: dict[str, Any]) -> dict[str, Any]:
    """A draft model given relative to the repository means that folder, from any cwd."""
    model = cfg.get("model")
    if isinstance(model, str) and not Path(model).is_absolute() and (paths.ROOT / model).exists():
        return {**cfg, "model": str((paths.ROOT / model).resolve())}
    return dict(cfg)
