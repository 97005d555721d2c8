"""A sweep's definition: arms x workloads x load levels x repeats, validated.

Loaded from TOML (``specnb sweep``) or built by a study (a notebook axis). Everything about
it is checked here, in one line per mistake, before any file is written or server started;
:mod:`specnb.sweep.preflight` then resolves models, workloads and drafters.

**Levels.** A closed loop at fixed concurrency (``load = "concurrency"``, the default: exactly
N requests in flight), open-loop arrivals at a request rate (``load = "rate"``: gamma-
distributed gaps, Poisson at ``burstiness = 1``, a recorded cap on requests in flight), or a
conversation replay (``load = "conversation"``: ``concurrency`` levels are users, each sending a
conversation's turns one after another with the whole history; the workloads must be
conversation sets, ``{conversations = "edit-chat"}``; ``history`` and ``think_time_s`` say what
goes into the history and how long a user pauses between turns; no adaptive search, one
client process).

**Points are sized in work, over one prompt panel.** Every point of a workload sends the same
*panel* of prompts (``panel_size`` of them, balanced over categories), in whole passes, until
its steady window holds at least ``work_floor_tokens`` output tokens: with L output tokens per
request (measured on the panel at the run's first server start) and N in flight, a point sends
``panel x passes`` requests, ``passes = max(min_passes, ceil((floor / L + N) / panel))``. Low
concurrency points are then not the noisiest, and every level sees the same prompts, so a
curve's shape is concurrency, not prompt mix. A conversation point's panel is of conversations,
and a pass sends every turn of every one of them (``panel`` counts their turns in the formula).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Annotated, Any, ClassVar

from pydantic import (
    BaseModel,
    ConfigDict,
    Discriminator,
    Field,
    SerializationInfo,
    SerializerFunctionWrapHandler,
    Tag,
    ValidationError,
    field_validator,
    model_serializer,
    model_validator,
)

from specnb.errors import SpecnbError, first_error, plain_name, read_toml
from specnb.ledger import Sampling
from specnb.ledger.schema import check_response_format
from specnb.prompts.context import ContextSource
from specnb.prompts.conversation import ConversationSource
from specnb.prompts.traffic import TrafficSource
from specnb.sweep.arm import Arm, check_server_args
from specnb.sweep.load import LOAD_KEYS, ConcurrencyLoad, LoadProfile, SweepLoad, flat, fold, profile_of

__all__ = ["SweepError", "SweepSpec", "SearchSpec", "point_path", "level_tag", "blocks"]


def _workload_kind(v: Any) -> str:
    """Which kind of workload a sweep's entry is, by its key: only that member is validated, so a
    bad traffic table is told about its own fields, not that 'traffic' is unknown to another kind."""
    if isinstance(v, str):
        return "str"
    if isinstance(v, ContextSource) or (isinstance(v, dict) and "context" in v):
        return "ContextSource"
    if isinstance(v, dict) and "traffic" in v:  # a log, also when imported as conversations
        return "TrafficSource"
    if isinstance(v, ConversationSource) or (isinstance(v, dict) and "conversations" in v):
        return "ConversationSource"
    return "TrafficSource"


def _replays_conversations(w: Any) -> bool:
    return isinstance(w, ConversationSource) or (isinstance(w, TrafficSource) and w.conversations)


# the tags are the members' names, as pydantic's own union errors name them (specnb.errors reads them)
WorkloadEntry = Annotated[Annotated[str, Tag("str")] | Annotated[TrafficSource, Tag("TrafficSource")]
                          | Annotated[ContextSource, Tag("ContextSource")]
                          | Annotated[ConversationSource, Tag("ConversationSource")], Discriminator(_workload_kind)]


class SweepError(SpecnbError):
    """A sweep that cannot start; the message is one line meant for the user."""


class SearchSpec(BaseModel):
    """Adaptive concurrency search: look for the crossing of 1.0 instead of a fixed grid
    (:mod:`specnb.sweep.search`)."""

    model_config = ConfigDict(extra="forbid")

    target_log2_width: float = Field(
        1.0, gt=0, description="refine until the crossing's interval spans fewer doublings than this "
        "(1.0: its upper end is less than twice its lower end)")
    max_concurrency: int | None = Field(
        None, ge=2, description="never go above this; None: derived from the KV pool at the workload's "
        "context length and --max-num-seqs")
    budget_s: float | None = Field(None, gt=0, description="stop adding rounds once the sweep has run this long")
    max_rounds: int = Field(4, ge=1, description="rounds of added levels at most")


class SequentialSpec(BaseModel):
    """Stop a level once its decision cannot change (:mod:`specnb.sweep.sequential`): after the
    sweep's ``repeats``, each round adds one repeat (a fresh start of every arm) for the levels
    still open, looking at every balanced count of repeats (A B | B A: the even counts) from
    ``repeats`` to ``max_repeats`` (the last look), or until the time budget."""

    model_config = ConfigDict(extra="forbid")

    max_repeats: int = Field(6, ge=2, description="the last look: no level gets more repeats than this")
    alpha: float = Field(0.05, gt=0, lt=0.5, description="the chance that a stopped level's interval misses, over "
                         "every look (each look at a level calibrated to spend exactly this over the looks)")
    grow_panel: bool = Field(True, description="a round where the panel's prompts dominate an open level's interval "
                             "sends that workload a panel twice as large (up to max_panel) before another start on "
                             "the same prompts")
    max_panel: int = Field(40, ge=1, description="the largest panel a round grows to")


class SweepSpec(BaseModel):
    """Everything that defines a sweep. Loaded from TOML or built in a notebook.

    ``load`` is the mode's profile (:mod:`specnb.sweep.load`): what each mode does with its levels
    and settings is the profile's. A sweep file writes the load's keys flat (``load``,
    ``concurrency``, ``rates``, ``burstiness``, ``max_in_flight``, ``arrival_seed``, ``history``,
    ``think_time_s``): a validator folds them into the profile, and a dump writes them flat again."""

    model_config = ConfigDict(extra="forbid")
    input_keys: ClassVar[frozenset[str]] = LOAD_KEYS  # a sweep file's keys besides the fields: the load's, flat

    name: str = Field(description="sweep name, recorded in every ledger")
    model: str | None = Field(None, description="target checkpoint (folder or id) for launched arms")
    served_model_name: str | None = Field(None, description="name the server answers to")
    server_args: list[str] = Field(default_factory=list, description="args for every launched arm")
    env: dict[str, str] = Field(default_factory=dict, description="environment for every launched arm")
    arms: list[Arm] = Field(min_length=1)
    workloads: list[WorkloadEntry] = Field(
        default_factory=lambda: ["copy", "freeform"],
        description="bundled sets ('copy'), '<set>:<category>', .jsonl paths, traffic imports "
        "({traffic = 'log.jsonl', sample = 200, seed = 0}), a context length "
        "({context = 'copy', tokens = 1024, tokenizer = 'models/SmolLM2-135M-Instruct'}), or a conversation "
        "set for load = 'conversation' ({conversations = 'edit-chat'} or a .jsonl path)",
    )
    load: SweepLoad = Field(
        default_factory=ConcurrencyLoad, description="how a point's requests arrive: a closed loop at fixed "
        "concurrency (load = 'concurrency', levels concurrency = [...]), open-loop arrivals at a rate "
        "(load = 'rate', rates = [...], burstiness, max_in_flight, arrival_seed), or users replaying "
        "conversations turn by turn (load = 'conversation', concurrency = [...] users, history, think_time_s); "
        "a sweep file writes these keys flat, beside the others")
    search: SearchSpec | None = Field(None, description="adaptive search for the crossing (closed loop)")
    repeats: int = Field(2, ge=1, description="server restarts per arm; arm order alternates (with "
                         "sequential: the repeats before the first look)")
    sequential: SequentialSpec | None = Field(
        None, description="stop a level once its decision cannot change; each later round adds a repeat for "
        "the levels still open (None: fixed work, every level gets every repeat)")
    budget_s: float | None = Field(
        None, gt=0, description="decide as many levels as this allows: no round (sequential or search) starts "
        "that would end past it, by the costs measured so far (the sweep's time over all its invocations: a "
        "resume counts what the earlier ones took)")
    start_together: bool = Field(
        False, description="launch a repeat's servers side by side before its first point, then measure "
        "them one at a time, each stopped after its block: a repeat's starts cost about one start instead of "
        "one per arm (a start is mostly one core importing torch). Every arm's server of the repeat is up at "
        "once, so memory for all of them: on a GPU give each arm its own devices (the arm's env) or a "
        "--gpu-memory-utilization share, or a server that does not fit is recorded as a failed start")
    panel_size: int | None = Field(
        10, ge=1, description="prompts every point sends, balanced over categories; None: the whole workload")
    work_floor_tokens: int | None = Field(
        1000, ge=0, description="steady-window output tokens a point reaches (whole panel passes); "
        "None or 0: one pass, or enough for every request in flight to be sent twice")
    min_passes: int = Field(1, ge=1, description="passes over the panel at the least")
    warmup_requests: int = Field(2, ge=0, description="per server start, excluded from results")
    return_token_ids: bool = Field(
        True, description="ask the server for each response's token ids (vLLM's return_token_ids): the "
        "lossless check compares the arms' outputs token by token")
    sampling: Sampling = Field(default_factory=Sampling)

    @field_validator("sampling", mode="after")
    @classmethod
    def _check_response_format(cls, v: Sampling) -> Sampling:
        check_response_format(v.response_format)  # one line before anything starts
        return v
    ready_timeout_s: float = Field(600.0, gt=0)
    request_timeout_s: float = Field(600.0, gt=0)
    client_workers: int = Field(
        1, ge=1, le=64, description="closed loop: load-generator processes the in-flight requests are split "
        "over (one clock, one request counter); raise it on a many-core GPU host whose points are flagged "
        "client_busy")
    metrics_interval_s: float = Field(1.0, gt=0)
    reset_prefix_cache: bool = True
    max_error_share: float = Field(
        0.1, ge=0.0, le=1.0, description="a point whose share of failed requests (errors, timeouts) passes "
        "this is recorded as failed, flagged 'invalid', kept out of every table and figure, and measured "
        "again on resume",
    )
    busy_retries: int = Field(2, ge=0, description="re-measure a point disturbed by another process "
                              "(host_busy) up to this many times; each attempt is kept")
    per_request_spec_metrics: bool = Field(
        True, description="add --per-request-spec-decode-metrics summary to launched speculative arms "
        "when the engine has it (per-category acceptance in the ledgers)",
    )
    parameters: dict[str, Any] = Field(default_factory=dict, description="caller parameters, recorded")

    @field_validator("name")
    @classmethod
    def _name(cls, v: str) -> str:
        return plain_name(v, "sweep name")

    @field_validator("server_args")
    @classmethod
    def _args(cls, v: list[str]) -> list[str]:
        return check_server_args(v)

    @model_validator(mode="before")
    @classmethod
    def _fold_load(cls, data: Any) -> Any:
        """A sweep file's flat load keys (``load``, ``concurrency``, ``rates``, ...) folded into the
        profile of its mode (old files and every run's ``sweep.json`` still read)."""
        if not isinstance(data, dict) or isinstance(data.get("load"), (LoadProfile, dict)):
            return data
        data = dict(data)
        data["load"] = fold({k: data.pop(k) for k in sorted(LOAD_KEYS) if k in data})
        return data

    def model_copy(self, *, update: dict[str, Any] | None = None, deep: bool = False) -> SweepSpec:
        """As pydantic's; a flat load key in ``update`` is refused (it would set nothing: give
        ``load`` a profile, or parse the changed dump)."""
        flat_keys = sorted(set(update or {}) & (LOAD_KEYS - {"load"}))
        if flat_keys:
            raise TypeError(f"model_copy(update=...) with {', '.join(flat_keys)}: the load is one field "
                            "(update={'load': ConcurrencyLoad(concurrency=[...])})")
        return super().model_copy(update=update, deep=deep)

    @model_serializer(mode="wrap")
    def _flat_load(self, handler: SerializerFunctionWrapHandler, info: SerializationInfo) -> dict[str, Any]:
        """Dumped as a sweep file writes it: the load's keys flat, where ``load`` stood."""
        dumped = handler(self)
        keys = flat(self.load)
        if info.include is not None:
            keys = {k: v for k, v in keys.items() if k in info.include}
        if info.exclude is not None:
            keys = {k: v for k, v in keys.items() if k not in info.exclude}
        out: dict[str, Any] = {}
        for name in type(self).model_fields:
            if name == "load":
                out.update(keys)
            elif name in dumped:
                out[name] = dumped[name]
        return out

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
        self._check_load()
        if self.sequential is not None:
            if self.search is not None:
                raise ValueError("sequential adds repeats to the levels asked for, the search adds levels: use "
                                 "one of them (search = null, or sequential = null)")
            if self.repeats < 2:
                raise ValueError("sequential needs repeats >= 2 before its first look (a t interval over starts "
                                 "needs two of them; three is usual)")
            if self.sequential.max_repeats < self.repeats:
                raise ValueError(f"sequential.max_repeats ({self.sequential.max_repeats}) is below repeats "
                                 f"({self.repeats}): the last look cannot come before the first")
            if not any(n % 2 == 0 for n in range(max(2, self.repeats), self.sequential.max_repeats + 1)):
                raise ValueError(f"sequential: no look between {self.repeats} and {self.sequential.max_repeats} repeats: "
                                 "a look needs the arm orders balanced (an even count, A B then B A); give max_repeats "
                                 "an even number")
            bases = [a.name for a in self.arms if not a.speculative]
            if len(bases) != 1 or len(self.arms) < 2:
                raise ValueError("sequential decides each drafter against the one arm without a drafter: it needs "
                                 f"exactly one such arm and a drafter arm (arms without a drafter: {bases})")
            attached = [a.name for a in self.arms if a.endpoint is not None]
            if attached:
                raise ValueError(f"sequential needs a fresh start of every arm in each repeat (its interval is over "
                                 f"starts); arm(s) {', '.join(map(repr, attached))} attach to an endpoint: use fixed "
                                 "repeats (sequential = null)")
        return self

    def _check_load(self) -> None:
        """What the load's mode asks of the rest of the sweep (its profile says)."""
        load = self.load
        if not load.levels():
            raise ValueError(load.no_levels)
        conv = [w for w in self.workloads if _replays_conversations(w)]
        if conv and not load.replays_conversations:
            what = (f"{{conversations = {conv[0].conversations!r}}}" if isinstance(conv[0], ConversationSource)
                    else f"{{traffic = {conv[0].traffic!r}, conversations = true}}")
            raise ValueError(f"workload {what} is a conversation set: set load = 'conversation' to replay it")
        if load.replays_conversations and len(conv) < len(self.workloads):
            other = next(w for w in self.workloads if not _replays_conversations(w))
            raise ValueError(f"load = {load.mode.value!r} replays conversation sets only: workload {other!r} is not "
                             "one (name it as {conversations = 'edit-chat'} or {conversations = 'chats.jsonl'})")
        if self.search is not None and not load.concurrency_levels:
            raise ValueError("the adaptive search looks for a closed-loop concurrency crossing: it needs "
                             f"load = 'concurrency', not {load.mode.value!r}")
        if self.client_workers > 1 and load.one_client_process:
            raise ValueError(f"client_workers splits a closed loop over processes; load = {load.mode.value!r} runs "
                             "in one client process (client_workers = 1)")

    def levels(self) -> list[float]:
        """The levels asked for: concurrency levels (users of a conversation replay), or request rates."""
        return self.load.levels()

    def passes(self, panel: int, in_flight: int, tokens_per_request: float | None) -> int:
        """Whole passes over a panel of ``panel`` prompts a point sends so that its steady window
        holds ``work_floor_tokens`` output tokens at ``tokens_per_request`` (the window covers
        about the requests sent minus those in flight at its ends)."""
        profile = self.load
        closed = profile.closed  # a conversation replay keeps its users busy as a closed loop its slots
        if not self.work_floor_tokens or not tokens_per_request:
            need = 2 * in_flight if closed else panel
        else:
            need = self.work_floor_tokens / tokens_per_request + (in_flight if closed else 0)
        need = max(need, profile.min_requests)  # open loop: percentiles of latency need arrivals, not only tokens
        return max(self.min_passes, math.ceil(need / panel))

    def identity(self) -> dict[str, Any]:
        """What must not change between a sweep and its resumption (levels and repeats may)."""
        ident = self.model_dump(
            include={"model", "served_model_name", "server_args", "env", "arms", "workloads", "load",
                     "burstiness", "max_in_flight", "arrival_seed", "panel_size", "work_floor_tokens",
                     "min_passes", "warmup_requests", "sampling", "reset_prefix_cache", "return_token_ids"},
            # where a key comes from changes no measurement (and runs made before the field resume)
            exclude={"arms": {"__all__": {"api_key_env"}}},
        )
        if ident["sampling"].get("response_format") is None:  # free text, as before the field: old runs resume
            ident["sampling"].pop("response_format", None)
        ident.update(self.load.identity())  # a mode's own keys, where sweeps from before them resume
        return ident

    def history_for(self, conversation: dict[str, Any] | None) -> str:
        """The history a conversation set is replayed with (its workload's ``conversation`` record):
        as asked, else 'recorded' when every conversation has its answers, else 'model'."""
        history = getattr(self.load, "history", None)
        if history is not None:
            return history
        return "recorded" if conversation and conversation.get("recorded_answers") else "model"

    @classmethod
    def from_toml(cls, path: str | Path, overrides: dict[str, Any] | None = None) -> SweepSpec:
        data = read_toml(path, SweepError)
        data.update(overrides or {})
        return cls.parse(data, where=str(path))

    @classmethod
    def parse(cls, data: dict[str, Any], where: str = "sweep") -> SweepSpec:
        try:
            return cls.model_validate(data)
        except ValidationError as exc:
            raise SweepError(f"{where}: {first_error(exc, count_more=True, model=cls)}") from None


def level_tag(level: float, load: str = "concurrency") -> str:
    """A level in a file name: ``c008`` (8 in flight), ``rate0.50`` (0.5 requests per second) or
    ``u004`` (4 users replaying conversations)."""
    return profile_of(load).tag(level)


def point_path(out_dir: Path, arm: str, workload: str, level: float, repeat: int, load: str = "concurrency") -> Path:
    return Path(out_dir) / arm / workload / f"{level_tag(level, load)}-r{repeat:02d}.json"


def blocks(spec: SweepSpec, repeats: Iterable[int] | None = None) -> Iterator[tuple[int, int, Arm]]:
    """(repeat, position, arm) in run order: A B | B A | A B ... (``repeats``: only those, each in
    its own order; None: the sweep's)."""
    for r in (range(spec.repeats) if repeats is None else repeats):
        order = spec.arms if r % 2 == 0 else list(reversed(spec.arms))
        for pos, arm in enumerate(order):
            yield r, pos, arm
