"""The ledgers of a sweep, assembled: the fields every record of a point carries, a measured
point's ledger from what the load driver and ``/metrics`` saw, a failure's record, the flags,
``sweep.json`` and the timing record. The runner (:mod:`specnb.sweep.runner`) decides what to
measure and when; this module decides what gets written about it.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from specnb import paths
from specnb.analysis.breakeven import ACCEPTANCE_NOT_AS_SET, acceptance_check
from specnb.analysis.point import by_turn, spec_decode_by_category, summarize_point
from specnb.analysis.schedule import k_at
from specnb.engine import kernels, loadgen, metrics
from specnb.engine.hostload import host_busy_cores
from specnb.engine.server import engine_cause
from specnb.ledger import (
    Failure,
    Flag,
    LoadShape,
    PointLedger,
    Provenance,
    SearchInfo,
    ServerRecord,
    Sizing,
    SpecDecode,
    Status,
    WorkloadRecord,
    utcnow,
    write_once,
)
from specnb.ledger.store import read_json
from specnb.ledger.timing import MEASURING, TIMING_KIND, overhead_line
from specnb.prompts.conversation import Conversation, conversations_hash
from specnb.prompts.workload import Prompt, Workload, prompts_hash
from specnb.sweep.arm import Arm
from specnb.sweep.spec import SweepError, SweepSpec

__all__ = ["PointPlace", "PointSize", "RunFacts", "point_fields", "load_shape", "failure_ledger", "measured_ledger", "point_flags", "request_failure",
           "acceptance_failure",
           "workload_record", "sweep_record", "timing_record", "CLIENT_BUSY"]

CLIENT_BUSY = loadgen.CLIENT_BUSY  # share of one core above which the client itself may be the bottleneck


class PointPlace(Protocol):
    """Where a point sits in the plan (the runner's points are such): its arm, workload, load
    level and mode, repeat, place in its block, and the search round that added it and why."""

    arm: Arm
    workload: Workload
    level: float
    load: str
    repeat: int
    position: int
    round: int
    reason: str

    @property
    def point_id(self) -> str: ...


@dataclass(frozen=True)
class PointSize:
    """What a point sends: its panel, the requests in flight, the requests (whole ``passes``
    over the panel) and the output tokens per request the sizing assumed; a conversation point
    also names its panel's ``conversations`` and how many it sends."""

    panel: list[Prompt]
    in_flight: int
    num_requests: int
    tokens_per_request: float | None
    passes: int | None = None  # None: num_requests // len(panel)
    conversations: list[Conversation] | None = None
    num_conversations: int | None = None


@dataclass(frozen=True)
class RunFacts:
    """What the run records on every point: its provenance, and the notes on the point's arm."""

    provenance: Provenance
    notes: list[str] | None = None


def point_fields(spec: SweepSpec, place: PointPlace, size: PointSize, run: RunFacts) -> dict[str, Any]:
    """Ledger fields every record of a point carries, measured or failed. A conversation point
    names its panel's ``conversations`` (their hash covers every turn) and how many it sends."""
    params = dict(spec.parameters)
    if run.notes:
        params["notes"] = run.notes
    panel = size.panel
    profile = spec.load
    panel_hash = conversations_hash(size.conversations) if size.conversations is not None else prompts_hash(panel)
    return dict(
        sweep=spec.name, point_id=place.point_id, arm=place.arm.record(),
        workload=workload_record(place.workload, panel_ids=[p.id for p in panel], panel_hash=panel_hash),
        concurrency=size.in_flight if profile.records_concurrency else None, repeat=place.repeat, arm_position=place.position, num_requests=size.num_requests,
        warmup_requests=spec.warmup_requests, sampling=spec.sampling, load=load_shape(spec, place, size),
        sizing=Sizing(panel_size=len(panel),
                      passes=size.passes if size.passes is not None else size.num_requests // len(panel),
                      work_floor_tokens=spec.work_floor_tokens, tokens_per_request=size.tokens_per_request),
        search=SearchInfo(round=place.round, reason=place.reason) if spec.search is not None else None,
        provenance=run.provenance, parameters=params, max_error_share=spec.max_error_share,
    )


def load_shape(spec: SweepSpec, place: PointPlace, size: PointSize) -> LoadShape:
    """How a point's requests arrived, as its ledger records it (its mode's profile says)."""
    return spec.load.shape(
        place.level,
        client_workers=spec.client_workers if spec.client_workers > 1 else None,  # one process: as before
        history=spec.history_for(place.workload.conversation), conversations=size.num_conversations)


def failure_ledger(fields: dict[str, Any], exc: BaseException, server_rec: ServerRecord | None, started: str,
                   log_tail: str | None = None, ceiling: bool = False) -> PointLedger:
    """The record of a point that has no measurement, and why (paths in it made portable)."""
    msg = paths.portable(getattr(exc, "short", None) or str(exc) or type(exc).__name__)
    tail = getattr(exc, "log_tail", None) or log_tail
    return PointLedger(
        status=Status.FAILED, server=server_rec, started_at=started, finished_at=utcnow(),
        flags=[Flag.FAILED, *([Flag.SYNTHETIC_ACCEPTANCE] if ceiling else [])],
        failure=Failure(error_type=type(exc).__name__, message=msg[:2000],
                        log_tail=paths.portable(tail) if tail else None),
        **fields,
    )


def measured_ledger(spec: SweepSpec, arm: Arm, in_flight: int, fields: dict[str, Any], server_rec: ServerRecord,
                    reset: bool | None, pl: loadgen.PointLoad, before: metrics.Snapshot, after: metrics.Snapshot,
                    sampler: metrics.GaugeSampler, started: str, fallback: bool = False,
                    engine_log: str = "") -> PointLedger:
    """A measured point's ledger: the load's summary, the ``/metrics`` deltas, the server's
    state, the flags; ``failed`` (and why) when too many of its requests failed."""
    results = summarize_point(pl)
    # a conversation replay's turns never sent (an earlier turn of their conversation failed,
    # history = "model") are failed requests too
    skipped = pl.turns_skipped or 0
    results["error_share"] = (results["num_errors"] + skipped) / max(results["num_requests"] + skipped, 1)
    results["client_cpu_util"] = pl.client_cpu_util
    results["client_parse_s"] = pl.parse_s  # the streams parsed after the point (not in duration_s)
    results["host_other_cpu_cores"] = pl.host_other_cpu_cores
    # the threshold: HOST_BUSY_SHARE of the CPUs the point was read on (every core of an unconfined host)
    results["host_busy_cores"] = pl.host_busy_threshold if pl.host_busy_threshold is not None else host_busy_cores()
    sd = metrics.spec_decode_delta(before, after)
    if sd is not None and results["output_tokens"]:
        sd["accepted_output_share"] = sd["num_accepted_tokens"] / results["output_tokens"]
    cache = metrics.cache_delta(before, after)
    if cache["prefix_cache_queries"] > 0:  # the engine's own counters: share of prompt tokens found cached
        results["prefix_cache_hit_rate"] = cache["prefix_cache_hits"] / cache["prefix_cache_queries"]
    if results["duration_s"] > 0:
        # seed 002: count computed tokens only (uncached prompt + output)
        computed = results["prompt_tokens"] - cache["prompt_tokens_cached"] + results["output_tokens"]
        results["computed_tok_s_wall"] = computed / results["duration_s"]
    info = after.info_labels()
    kv = dict(server_rec.kv_capacity)
    if kv.get("total_tokens") is None and info:
        # attached: no start-up log to read, but the engine publishes its pool as labels
        per_engine = [int(d["kv_cache_size_tokens"]) for d in info
                      if d.get("kv_cache_size_tokens", "None").isdigit()]
        if per_engine:
            kv.update(source="cache_config_info", tokens_per_engine=per_engine, total_tokens=sum(per_engine))
    ok = results["num_ok"] > 0 and results["error_share"] <= spec.max_error_share
    failure = None if ok else request_failure(results, spec.max_error_share, engine_cause(engine_log))
    if ok and (failure := acceptance_failure(arm, sd)) is not None:
        ok = False  # a synthetic arm that did not accept as set: no cell of a map (retried on resume)
    flags = point_flags(arm, results, sd, cache, reset, in_flight, spec.max_error_share)
    if fallback:
        flags.append(Flag.ENGINE_FALLBACK)
    return PointLedger(
        status=Status.OK if ok else Status.FAILED, started_at=started, finished_at=utcnow(),
        server=server_rec.model_copy(update={"cache_config_info": info, "prefix_cache_reset": reset, "kv_capacity": kv}),
        results=results, server_samples=sampler.summary(), cache=cache,
        spec_decode=SpecDecode(**sd) if sd and (arm.speculative or sd["num_drafts"]) else None,
        spec_decode_by_category=spec_decode_by_category(pl.records),
        by_turn=by_turn(pl.records),
        flags=flags, failure=failure, **fields,
    )


def timing_record(sweep: str, ended: str, started_at: str, phases: dict[str, float], points: int,
                  server_starts: list[dict[str, Any]], executor: dict[str, Any] | None = None) -> dict[str, Any]:
    """``timings/<UTC time>.json``: one invocation's wall time by phase (``executor``: where a fleet
    ran it, :mod:`specnb.sweep.fleet`; a local run has none)."""
    wall = sum(phases.values())
    extra = {"executor": executor} if executor is not None else {}
    return {**extra,
        "kind": TIMING_KIND, "schema_version": 1, "sweep": sweep, "ended": ended,
        "started_at": started_at, "finished_at": utcnow(), "wall_s": round(wall, 2),
        "phases_s": {k: round(v, 2) for k, v in phases.items()},
        "overhead_share": round(1 - phases[MEASURING] / wall, 4) if wall > 0 else None,
        "summary": overhead_line(phases), "points": points, "server_starts": server_starts,
    }


def identity_digest(spec: SweepSpec, workload_hashes: dict[str, str], legacy: dict[str, Any] | None = None) -> str:
    """What must not change between a sweep and its resumption (:meth:`SweepSpec.identity`, its
    workloads' content), as a short hash. ``--dtype machine`` counts as the dtype it resolves to
    here, so a run begun on one CPU family is not resumed on the other (which would serve another
    dtype), and runs from before the value resume where it names their dtype. ``legacy``: keys of
    the identity as an older sweep recorded them (:func:`_same_sweep`)."""
    ident = {**spec.identity(), **(legacy or {})}
    ident["server_args"] = kernels.resolve_dtype(ident["server_args"])
    for arm in ident["arms"]:
        arm["server_args"] = kernels.resolve_dtype(arm.get("server_args") or [])
    ident["workload_hashes"] = dict(workload_hashes)
    return hashlib.sha256(json.dumps(ident, sort_keys=True).encode()).hexdigest()[:16]


def _same_sweep(old: dict[str, Any], spec: SweepSpec, hashes: dict[str, str], digest: str) -> bool:
    """A folder's sweep is this one: the hash it recorded, or that hash once the open-loop settings
    a sweep of another mode recorded (studies once passed them to every sweep; its profile now
    drops them) are put back as it recorded them. Resolved here as the folder's was there: a run
    begun on another CPU family still refuses."""
    recorded = old.get("identity_hash")
    if recorded == digest:
        return True
    was = old.get("spec") if isinstance(old.get("spec"), dict) else {}
    own = type(spec.load).model_fields
    legacy = {k: was[k] for k in ("burstiness", "max_in_flight", "arrival_seed") if k in was and k not in own}
    return bool(legacy) and identity_digest(spec, hashes, legacy) == recorded


def sweep_record(out_dir: Path, spec: SweepSpec, wls: dict[str, Workload]) -> str:
    """``sweep.json``: the sweep as asked, written once; a folder holding another sweep is refused.
    Returns the sweep's identity digest (what a Ray node's own record of it must match)."""
    hashes = {k: w.content_hash for k, w in wls.items()}
    digest = identity_digest(spec, hashes)
    path = out_dir / "sweep.json"
    if path.exists():
        old = read_json(path)
        if not _same_sweep(old, spec, hashes, digest):
            raise SweepError(
                f"{out_dir} holds a sweep with different settings (identity {old.get('identity_hash')} "
                f"vs {digest}); choose another output folder"
            )
        return digest
    doc = {"identity_hash": digest, "created_at": utcnow(), "spec": spec.model_dump(),
           "workloads": {k: w.describe() for k, w in wls.items()}}
    write_once(path, (json.dumps(doc, indent=2) + "\n").encode())
    return digest




def point_flags(arm: Arm, results: dict[str, Any], sd: dict[str, Any] | None, cache: dict[str, float],
           reset: bool | None, concurrency: int | None = None, max_error_share: float = 1.0) -> list[str]:
    flags = []
    drafts = (sd or {}).get("num_drafts") or 0
    if arm.ceiling:
        flags.append(Flag.SYNTHETIC_ACCEPTANCE)  # forced acceptance: never mix with a real drafter's
    if arm.speculative and drafts == 0:
        if arm.schedule and concurrency is not None and k_at(arm.schedule, concurrency) == 0:
            flags.append(Flag.SCHEDULE_OFF)  # the schedule switched drafting off here, as asked: a real point
        else:
            flags.append(Flag.SPEC_NO_DRAFTS)  # speculation silently off: never average this in
    if not arm.speculative and drafts > 0:
        flags.append(Flag.BASELINE_HAS_DRAFTS)
    if results["num_errors"]:
        flags.append(Flag.REQUEST_ERRORS)
    if results.get("error_share", 0.0) > max_error_share:
        flags.append(Flag.INVALID)  # too many requests failed for the throughput to mean anything
    if reset is False:
        flags.append(Flag.PREFIX_CACHE_NOT_RESET)
    if "chunks" in (results.get("token_count_source") or []):
        flags.append(Flag.TOKEN_COUNT_FROM_CHUNKS)
    if results.get("steady_window_s") is None:
        flags.append(Flag.NO_STEADY_WINDOW)
    if cache.get("preemptions"):
        flags.append(Flag.PREEMPTIONS)
    if max(results.get("client_cpu_util") or 0, results.get("client_loop_busy") or 0) > CLIENT_BUSY:
        flags.append(Flag.CLIENT_BUSY)  # the load generator may have limited the measurement
    if (results.get("host_other_cpu_cores") or 0) > (results.get("host_busy_cores") or host_busy_cores()):
        flags.append(Flag.HOST_BUSY)  # another process competed for the CPU during this point
    return flags




def acceptance_failure(arm: Arm, sd: dict[str, Any] | None) -> Failure | None:
    """A synthetic-acceptance arm's point whose measured acceptance length is not the one set
    (:func:`specnb.analysis.breakeven.acceptance_check`) is a failure, said; None otherwise."""
    check = acceptance_check(arm.speculative_config, sd)
    if check is None or check.ok:
        return None
    return Failure(error_type=ACCEPTANCE_NOT_AS_SET, message=check.message())


def request_failure(results: dict[str, Any], max_error_share: float, cause: str | None = None) -> Failure:
    """Why a point whose requests failed is not a measurement: all of them, or more than allowed;
    with the engine's own error where its log has one (not a bare HTTP 500)."""
    examples = "; ".join(results["error_examples"])
    if cause:
        examples = f"the engine failed: {cause}; requests: {examples}"
    if not results["num_ok"]:
        return Failure(error_type="EngineDied" if cause else "AllRequestsFailed", message=examples[:2000])
    return Failure(error_type="ErrorShare", message=(
        f"{results['num_errors']} of {results['num_requests']} requests failed ({results['error_share']:.0%} > "
        f"max_error_share {max_error_share:.0%}): {examples}")[:2000])




def workload_record(wl: Workload, **extra: Any) -> WorkloadRecord:
    """What a ledger records of a workload; a user's file paths relative to the project or under ~."""
    d = {**wl.describe(), **extra}
    d["source"] = paths.portable(d["source"])
    if d.get("imported"):
        d["imported"] = {**d["imported"], "file": paths.portable(d["imported"]["file"])}
    return WorkloadRecord(**d)
