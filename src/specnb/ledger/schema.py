"""The ledger's schema: one point of a sweep, as a typed, versioned record.

A ledger records one (arm, workload, concurrency, repeat) point of a sweep: what was
asked (arm, sampling, workload hash, caller parameters), where it ran (server argv and
environment, engine version, KV capacity, hardware, git state), and what came out (load
summary, speculative-decoding counters, sampled gauges, flags). A failed point is a
ledger too, with ``status = "failed"`` and the reason. Per-request acceptance pooled per
prompt category (``spec_decode_by_category``) lets copy-style and free-form acceptance be
seen apart within one point; a workload imported from real traffic records what was
dropped and sampled (``workload.imported``).

The JSON Schema of :class:`PointLedger` is exported under ``schemas/`` (:func:`schema_json`).
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from specnb.ledger.names import LoadMode

__all__ = [
    "SCHEMA_VERSION",
    "PointLedger",
    "ArmRecord",
    "Sampling",
    "ServerRecord",
    "Provenance",
    "SpecDecode",
    "Failure",
    "WorkloadRecord",
    "TrafficImport",
    "ConversationSet",
    "TurnStats",
    "LoadShape",
    "Sizing",
    "SearchInfo",
    "READABLE_VERSIONS",
    "CategorySpecDecode",
    "drafter_method",
    "synthetic_rates",
    "utcnow",
    "schema_json",
]

SCHEMA_VERSION = 2
# Versions a reader accepts: 1 (before load shapes, panels and sizing) and 2.
READABLE_VERSIONS = (1, 2)


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid")


RESPONSE_FORMATS = ("text", "json_object", "json_schema")


def check_response_format(rf: Any) -> dict[str, Any] | None:
    """An OpenAI ``response_format`` as vLLM takes it (``{"type": "json_object"}``, or
    ``{"type": "json_schema", "json_schema": {"name": ..., "schema": {...}, "strict": ...}}``,
    or ``{"type": "text"}``), returned as given; a bad one raises ValueError in one line."""
    if rf is None:
        return None
    if not isinstance(rf, dict) or rf.get("type") not in RESPONSE_FORMATS:
        raise ValueError(f"response_format must be an object whose type is one of {', '.join(RESPONSE_FORMATS)}, "
                         f"got {json.dumps(rf, default=str)[:120]}")
    extra = set(rf) - {"type", "json_schema"}
    if extra:
        raise ValueError(f"response_format has unknown key(s) {sorted(extra)} (OpenAI's form: type, json_schema)")
    if rf["type"] == "json_schema":
        js = rf.get("json_schema")
        if not isinstance(js, dict) or not isinstance(js.get("schema"), dict):
            raise ValueError('response_format type json_schema needs json_schema: {"name": ..., "schema": {a JSON '
                             'Schema object}}')
        if not isinstance(js.get("name"), str) or not js["name"]:
            raise ValueError("response_format json_schema needs a name (a string)")
        bad = set(js) - {"name", "schema", "strict", "description"}
        if bad:
            raise ValueError(f"response_format json_schema has unknown key(s) {sorted(bad)}")
        from jsonschema.validators import validator_for  # a dependency (papermill's nbformat, vLLM need it)

        try:  # a schema the grammar compiler would refuse at the first request: refuse it here
            validator_for(js["schema"]).check_schema(js["schema"])
        except Exception as exc:  # jsonschema's SchemaError, whatever its message
            raise ValueError(f"response_format json_schema.schema is not a valid JSON Schema: "
                             f"{str(exc).splitlines()[0][:160]}") from None
    elif "json_schema" in rf:
        raise ValueError(f"response_format type {rf['type']} takes no json_schema")
    return rf


class Sampling(_Model):
    temperature: float = Field(0.0, ge=0.0, description="0 = greedy")
    top_p: float | None = Field(None, gt=0.0, le=1.0)
    max_tokens: int = Field(64, ge=1)
    seed: int | None = Field(0, description="per-request seed = seed + prompt index")
    ignore_eos: bool = Field(False, description="vLLM extension; biases acceptance, off by default")
    response_format: dict[str, Any] | None = Field(
        None, description="structured output, as the OpenAI API takes it: {type: json_object} or {type: "
        "json_schema, json_schema: {name, schema}}; None: free text (checked where a sweep is parsed, "
        "check_response_format; a ledger is read as written)")

    @property
    def structured_output(self) -> str | None:
        """The grammar mode a request ran under (``json_object``, ``json_schema``), or None."""
        rf = self.response_format
        return None if not rf or rf.get("type") == "text" else rf["type"]


class ArmRecord(_Model):
    name: str
    speculative_config: dict[str, Any] | None = Field(
        None, description="None for the baseline (no drafter)"
    )
    server_args: list[str] = Field(default_factory=list)
    endpoint: str | None = Field(None, description="set when the arm attached to a running server")

    @property
    def speculative(self) -> bool:
        return self.speculative_config is not None



def drafter_method(speculative_config: dict[str, Any] | None) -> str | None:
    """vLLM's drafting method of a speculative config: its ``method``, or ``draft_model`` when
    only a draft ``model`` is given (vLLM's default); None for no drafter."""
    if not speculative_config:
        return None
    return speculative_config.get("method", "draft_model" if "model" in speculative_config else None)


def synthetic_rates(speculative_config: dict[str, Any] | None) -> list[float] | None:
    """The per-position unconditional acceptance a ceiling arm asks for; None for any other arm.

    A mean acceptance length L becomes vLLM's minimum-variance schedule: floor(L-1) positions
    at 1, then the fraction, then zeros (``SpeculativeConfig._acceptance_length_to_rates``), so
    1 + the sum of the rates is always the length asked for. Measured per-position acceptance
    (accepted at position i / drafts) should match these.
    """
    v = speculative_config or {}
    if v.get("rejection_sample_method") != "synthetic":
        return None
    if v.get("synthetic_acceptance_rates") is not None:
        return [float(r) for r in v["synthetic_acceptance_rates"]]
    k, extra = v["num_speculative_tokens"], float(v["synthetic_acceptance_length"]) - 1.0
    full = int(extra)
    return ([1.0] * full + [extra - full] + [0.0] * (k - full - 1))[:k]

class TrafficImport(_Model):
    """How a file of real traffic became a workload: what was read, dropped and sampled."""

    file: str
    lines: int = Field(ge=0, description="lines read, blank ones included")
    usable: int = Field(ge=0, description="lines left after the drops, before sampling")
    kept: int = Field(ge=0, description="prompts in the workload (after sampling)")
    dropped: dict[str, int] = Field(
        default_factory=dict, description="reason -> lines dropped (blank, empty, no_user_turn, "
        "non_text_content, duplicate)",
    )
    dropped_lines: dict[str, list[int]] = Field(
        default_factory=dict, description="reason -> the first few line numbers dropped for it",
    )
    sample: int | None = Field(None, description="N asked for; None = every usable line, file order")
    seed: int | None = Field(None, description="seed of the sample (the sample is in drawn order)")
    with_response: int = Field(0, ge=0, description="kept prompts that carry the response served")
    multi_turn: int = Field(0, ge=0, description="kept prompts with more than one user turn")
    max_prompt_chars: int = Field(0, ge=0, description="longest kept prompt; prompts are never truncated")


class ContextBuild(_Model):
    """How a context-length workload was built (:mod:`specnb.prompts.context`)."""

    base: str = Field(description="the base workload whose requests end every prompt")
    base_hash: str = Field(description="content hash of the base workload")
    tokens: int = Field(description="the length asked for: prompt tokens with the chat template")
    tokenizer: str = Field(description="the tokenizer that counted them (the target's)")
    corpus: list[str] = Field(description="where the reference material in front of each request came from")
    prompt_tokens_min: int
    prompt_tokens_mean: float
    prompt_tokens_max: int


class ConversationSet(_Model):
    """A conversation set's shape (:mod:`specnb.prompts.conversation`), known before any request."""

    conversations: int = Field(ge=1, description="conversations in the set")
    turns_min: int = Field(ge=1, description="user turns of the shortest conversation")
    turns_max: int = Field(ge=1, description="user turns of the longest conversation")
    turns_total: int = Field(ge=1, description="user turns of all conversations (one request each)")
    recorded_answers: bool = Field(description="every conversation carries the answer of every turn but its "
                                   "last, so it can be replayed with history = 'recorded'")
    with_recorded_answers: int = Field(ge=0, description="conversations that carry them")


class WorkloadRecord(_Model):
    name: str
    source: str
    content_hash: str
    num_prompts: int
    categories: dict[str, int]
    category: str | None = Field(
        None, description="the one category this workload was cut to ('<set>:<category>'); None = all"
    )
    parent_hash: str | None = Field(None, description="content hash of the set a category was cut from")
    imported: TrafficImport | None = Field(None, description="set when the prompts are imported traffic")
    context: ContextBuild | None = Field(None, description="set when the prompts were grown to a context length")
    conversation: ConversationSet | None = Field(
        None, description="set when the workload is a conversation set, replayed turn by turn (load mode "
        "'conversation'); its prompts are then the conversations' first turns, its content hash covers every turn")
    panel_ids: list[str] | None = Field(
        None, description="the prompts every point of the sweep sends, in order (a panel balanced over "
        "categories, cycled as often as a point needs); None = the whole workload (v1 ledgers)",
    )
    panel_hash: str | None = Field(None, description="content hash of the panel's prompts")


class LoadShape(_Model):
    """How requests arrived: a closed loop at fixed concurrency, open-loop arrivals at a rate, or
    users replaying conversations (each sends a conversation's turns one after another, with the
    history, waiting for each answer)."""

    mode: Literal[tuple(m.shape for m in LoadMode)] = LoadMode.CONCURRENCY.shape  # type: ignore[valid-type]
    concurrency: int | None = Field(None, ge=1, description="closed loop: requests in flight")
    rate_rps: float | None = Field(None, gt=0, description="open loop: offered requests per second")
    burstiness: float | None = Field(
        None, gt=0, description="open loop: shape of the gamma-distributed gaps (1 = Poisson), as vLLM bench")
    max_in_flight: int | None = Field(None, ge=1, description="open loop: cap on requests in flight (recorded; "
                                      "an arrival that finds the cap full waits, and its lateness is recorded)")
    arrival_seed: int | None = Field(None, description="open loop: seed of the arrival times (same for every arm)")
    client_workers: int | None = Field(
        None, ge=2, description="closed loop: load-generator processes the requests were split over (None: one)")
    users: int | None = Field(None, ge=1, description="conversation: users, each with one request in flight "
                              "at most (the point's concurrency)")
    history: Literal["recorded", "model"] | None = Field(
        None, description="conversation: the assistant turns in each request's history: the set's recorded "
        "answers (identical prompts in every arm) or the model's own answers to the earlier turns")
    think_time_s: float | None = Field(None, ge=0, description="conversation: a user's pause between an answer "
                                       "and its next turn")
    conversations: int | None = Field(None, ge=1, description="conversation: conversations the point sent "
                                      "(whole passes over the panel)")


class Sizing(_Model):
    """How many requests a point sent, and why: whole passes over the panel until the steady
    window holds at least the work floor."""

    panel_size: int = Field(ge=1)
    passes: int = Field(ge=1, description="times the panel was sent")
    work_floor_tokens: int | None = Field(None, ge=0, description="steady-window output tokens asked for (0 or None: none)")
    tokens_per_request: float | None = Field(
        None, description="output tokens per request the sizing assumed (measured on the panel at the run's "
        "first server start)")


class SearchInfo(_Model):
    """A level the adaptive concurrency search added, and why."""

    round: int = Field(ge=0, description="0 = the levels asked for; k = added in search round k")
    reason: str = Field(description="why this level was measured")


class ServerRecord(_Model):
    mode: Literal["launched", "attached"]
    base_url: str
    model: str
    engine_version: str | None
    argv: list[str] | None
    env: dict[str, str]
    kv_capacity: dict[str, Any]
    ready_s: float | None
    cache_config_info: list[dict[str, str]] = Field(default_factory=list)
    prefix_cache_reset: bool | None = Field(
        None, description="True if /reset_prefix_cache succeeded before the point"
    )
    startup_decisions: dict[str, Any] | None = Field(
        None, description="what vLLM decided at start-up, read from its log (model runner, async scheduling, "
        "compilation and CUDA-graph mode, dtype, quantization, linear kernels, dynamic speculation); None: "
        "attached, or recorded before 2026-12-01")
    launcher: Literal["exec", "fork-server", "fork-server+engine-core"] | None = Field(
        None, description="how a launched server's processes started: 'exec' (a fresh API server, which spawns "
        "its engine core as vLLM does), 'fork-server+engine-core' (the API server forked from a process that had "
        "imported vLLM, SPECNB_FORK_API_SERVER=1, specnb.engine.forkserver, and its engine core forked from the "
        "API server; a three-process layout's worker still spawned), 'fork-server' (the API server so forked, "
        "its engine core spawned: this vLLM's engine launcher could not be asked to fork, vLLM insisted on "
        "spawn, or recorded on 2026-12-06); None: attached, or recorded before 2026-12-06")


class Provenance(_Model):
    git_sha: str | None
    git_dirty: bool | None
    versions: dict[str, str | None]
    hardware: dict[str, Any]
    argv: list[str] = Field(default_factory=list)
    executor: dict[str, Any] | None = Field(
        None, description="where an executor other than the local one ran the point: Ray's node id and "
        "address, the host, the GPUs it was given, the job and task, the pairing block and its attempt "
        "(specnb.sweep.fleet); absent for a local run",
    )


class SpecDecode(_Model):
    num_drafts: float
    num_draft_tokens: float
    num_accepted_tokens: float
    accepted_per_position: list[float]
    acceptance_rate: float | None
    mean_acceptance_length: float | None
    per_position_acceptance: list[float]
    accepted_output_share: float | None = Field(
        None, description="accepted draft tokens / output tokens: how much of the output the "
        "drafter supplied (n-gram drafts only when it finds a match, so acceptance length alone "
        "can look high on work it rarely helps)",
    )


class CategorySpecDecode(_Model):
    """Per-request acceptance (vLLM's ``metrics.speculative_decoding``) summed over a category.

    Counts are pooled over the category's requests and the ratios use vLLM's formulas on the
    pooled counts, so a long request weighs more than a short one, as in ``/metrics``.
    """

    requests: int = Field(ge=0, description="requests of this category that reported the metrics")
    output_tokens: int = Field(ge=0, description="their output tokens")
    num_spec_steps: int = Field(ge=0, description="verify steps that carried at least one draft token")
    num_draft_tokens: int = Field(ge=0)
    num_accepted_draft_tokens: int = Field(ge=0)
    acceptance_histogram: list[int] = Field(
        description="index j = verify steps that accepted exactly j draft tokens (bonus token excluded)"
    )
    mean_acceptance_length: float | None = Field(description="1 + accepted / spec steps")
    draft_acceptance_rate: float | None = Field(description="accepted / draft tokens")
    accepted_output_share: float | None = Field(
        description="accepted draft tokens / output tokens: the share of the output the drafter supplied"
    )
    request_mean_acceptance_length_p50: float | None = Field(
        description="median over requests of each request's own mean acceptance length "
        "(requests with no spec step left out)"
    )


class TurnStats(_Model):
    """One turn position of a conversation point: its requests pooled (turn 1 is every
    conversation's first user turn). Cached tokens are the server's own count per request
    (``usage.prompt_tokens_details.cached_tokens``; vLLM sends it with
    ``--enable-prompt-tokens-details``): None when no request of the turn reported it."""

    turn: int = Field(ge=1, description="1 = the first user turn")
    requests: int = Field(ge=0)
    num_ok: int = Field(ge=0)
    prompt_tokens: int = Field(ge=0, description="over the ok requests")
    cached_prompt_tokens: int | None = Field(None, ge=0, description="prompt tokens served from the prefix cache")
    computed_prompt_tokens: int | None = Field(None, ge=0, description="prompt tokens the engine computed")
    output_tokens: int = Field(ge=0)
    mean_ttft_ms: float | None = None
    per_user_decode_tok_s_mean: float | None = None


class Failure(_Model):
    error_type: str
    message: str
    log_tail: str | None = None


class PointLedger(_Model):
    schema_version: Literal[1, 2] = SCHEMA_VERSION
    kind: Literal["measured"] = "measured"
    status: Literal["ok", "failed"]
    sweep: str = Field(description="sweep name")
    point_id: str = Field(description="<arm>/<workload>/c<concurrency>-r<repeat> (rate<r> for open-loop points, "
                          "u<users> for conversation points)")
    arm: ArmRecord
    workload: WorkloadRecord
    concurrency: int | None = Field(
        None, ge=1, description="requests in flight (closed loop) or users (conversation replay); None for an "
        "open-loop point, whose cap on requests in flight is load.max_in_flight (ledgers written before kept "
        "that cap here)")
    repeat: int = Field(ge=0)
    arm_position: int = Field(ge=0, description="order of this arm within its repeat (ABBA)")
    num_requests: int = Field(ge=1)
    warmup_requests: int = Field(ge=0)
    load: LoadShape | None = Field(None, description="closed loop, open-loop arrivals or a conversation replay "
                                   "(None in v1: closed)")
    sizing: Sizing | None = Field(None, description="panel passes and work floor (None in v1: requests_per_user)")
    search: SearchInfo | None = Field(None, description="set when the adaptive search measured this level")
    sampling: Sampling
    server: ServerRecord | None
    provenance: Provenance
    parameters: dict[str, Any] = Field(default_factory=dict, description="caller parameters")
    started_at: str
    finished_at: str
    results: dict[str, Any] | None = Field(None, description="load summary; units in the keys")
    spec_decode: SpecDecode | None = None
    spec_decode_by_category: dict[str, CategorySpecDecode] | None = Field(
        None, description="per prompt category, from each response's metrics.speculative_decoding "
        "(vLLM --per-request-spec-decode-metrics); None when no request reported it",
    )
    by_turn: list[TurnStats] | None = Field(
        None, description="conversation points: requests, prompt tokens (cached and computed) and output tokens "
        "per turn position")
    server_samples: dict[str, Any] | None = None
    cache: dict[str, float] | None = Field(None, description="preemptions, prefix-cache deltas")
    flags: list[str] = Field(default_factory=list)
    max_error_share: float | None = Field(
        None, ge=0.0, le=1.0, description="the sweep's threshold: a point whose share of failed requests "
        "(errors, timeouts) passes it is recorded as failed and flagged 'invalid'; None in older ledgers",
    )
    failure: Failure | None = None
    requests_file: str | None = Field(None, description="Parquet sidecar, relative to this file")

    @model_validator(mode="after")
    def _in_flight_named(self) -> PointLedger:
        if self.in_flight is None:
            raise ValueError("concurrency is required, except for an open-loop point with load.max_in_flight")
        return self

    @property
    def in_flight(self) -> int | None:
        """The point's requests in flight: its concurrency (users), or an open loop's cap."""
        if self.concurrency is not None:
            return self.concurrency
        return self.load.max_in_flight if self.load is not None and self.load.mode == LoadMode.RATE.shape else None


def utcnow() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")



def schema_json() -> str:
    schema = PointLedger.model_json_schema()
    schema["$id"] = f"https://specnb/schemas/point-ledger.v{SCHEMA_VERSION}.json"
    return json.dumps(schema, indent=2, sort_keys=True) + "\n"


