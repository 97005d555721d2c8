"""Ledgers: one write-once JSON file per measured point, with full provenance.

A ledger records one (arm, workload, concurrency, repeat) point of a sweep: what was
asked (arm, sampling, workload hash, caller parameters), where it ran (server argv and
environment, engine version, KV capacity, hardware, git state), and what came out (load
summary, speculative-decoding counters, sampled gauges, flags). A failed point is a
ledger too, with ``status = "failed"`` and the reason; it is never overwritten.

Per-request records (every chunk's time and token count, and the request's own acceptance
counts when the server reports them) go in a Parquet sidecar next to the JSON; those
acceptance counts, pooled per prompt category, are also in the ledger
(``spec_decode_by_category``), so copy-style and free-form acceptance are seen apart within
one point. A workload imported from real traffic records what was dropped and sampled
(``workload.imported``). Files are written to a temporary name and hard-linked into place, so a reader
never sees half a file and an existing ledger is never replaced.

:func:`load_ledgers` turns a folder of ledgers into a tidy DataFrame, one row per point
and repeat. The JSON Schema of :class:`PointLedger` is exported under ``schemas/``.
"""

from __future__ import annotations

import json
import os
import secrets
import tempfile
from collections.abc import Iterable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal

import pandas as pd
from pydantic import BaseModel, ConfigDict, Field

__all__ = [
    "SCHEMA_VERSION",
    "PointLedger",
    "ArmRecord",
    "Sampling",
    "WorkloadRecord",
    "TrafficImport",
    "CategorySpecDecode",
    "write_once",
    "write_ledger",
    "read_ledger",
    "load_ledgers",
    "load_requests",
    "load_spec_by_category",
    "schema_json",
]

SCHEMA_VERSION = 1


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid")


class Sampling(_Model):
    temperature: float = Field(0.0, ge=0.0, description="0 = greedy")
    top_p: float | None = Field(None, gt=0.0, le=1.0)
    max_tokens: int = Field(64, ge=1)
    seed: int | None = Field(0, description="per-request seed = seed + prompt index")
    ignore_eos: bool = Field(False, description="vLLM extension; biases acceptance, off by default")


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


class Provenance(_Model):
    git_sha: str | None
    git_dirty: bool | None
    versions: dict[str, str | None]
    hardware: dict[str, Any]
    argv: list[str] = Field(default_factory=list)


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


class Failure(_Model):
    error_type: str
    message: str
    log_tail: str | None = None


class PointLedger(_Model):
    schema_version: Literal[1] = SCHEMA_VERSION
    kind: Literal["measured"] = "measured"
    status: Literal["ok", "failed"]
    sweep: str = Field(description="sweep name")
    point_id: str = Field(description="<arm>/<workload>/c<concurrency>-r<repeat>")
    arm: ArmRecord
    workload: WorkloadRecord
    concurrency: int = Field(ge=1)
    repeat: int = Field(ge=0)
    arm_position: int = Field(ge=0, description="order of this arm within its repeat (ABBA)")
    num_requests: int = Field(ge=1)
    warmup_requests: int = Field(ge=0)
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
    server_samples: dict[str, Any] | None = None
    cache: dict[str, float] | None = Field(None, description="preemptions, prefix-cache deltas")
    flags: list[str] = Field(default_factory=list)
    failure: Failure | None = None
    requests_file: str | None = Field(None, description="Parquet sidecar, relative to this file")


def utcnow() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")


def write_once(path: Path, data: bytes) -> Path:
    """Write ``data`` to ``path`` atomically; raise FileExistsError if it exists."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.chmod(tmp, 0o644)  # mkstemp makes 0600; ledgers are meant to be read by anyone
        os.link(tmp, path)  # fails if path exists: ledgers are never replaced
    finally:
        os.unlink(tmp)
    return path


def write_ledger(path: Path, ledger: PointLedger, requests: pd.DataFrame | None = None) -> Path:
    """Write the Parquet sidecar (if any) first, then the JSON that names it."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    if requests is not None and len(requests):
        stem = path.name.removesuffix(".json")
        tmp = path.with_name(f".{stem}.requests.parquet.tmp")
        requests.to_parquet(tmp, index=False)
        try:
            side = path.with_name(f"{stem}.requests.parquet")
            try:
                os.link(tmp, side)
            except FileExistsError:
                # An earlier attempt died between its sidecar and its JSON: that orphan is
                # left as it is, and this ledger names a sidecar of its own.
                side = path.with_name(f"{stem}.requests-{secrets.token_hex(4)}.parquet")
                os.link(tmp, side)
        finally:
            os.unlink(tmp)
        ledger = ledger.model_copy(update={"requests_file": side.name})
    return write_once(path, (ledger.model_dump_json(indent=2) + "\n").encode())


def read_ledger(path: Path | str) -> PointLedger:
    return PointLedger.model_validate_json(Path(path).read_text())


def schema_json() -> str:
    schema = PointLedger.model_json_schema()
    schema["$id"] = f"https://specnb/schemas/point-ledger.v{SCHEMA_VERSION}.json"
    return json.dumps(schema, indent=2, sort_keys=True) + "\n"


def _is_published(path: Path) -> bool:
    """True for a number transcribed from a write-up (``specnb.published``), not measured here."""
    try:
        data = json.loads(path.read_text())
    except (OSError, UnicodeDecodeError, ValueError):
        return False  # not ours to judge: read_ledger reports what is wrong with it
    return isinstance(data, dict) and data.get("kind") == "published"


def _ledger_files(sources: Iterable[Path | str] | Path | str, superseded: bool = False) -> list[Path]:
    if isinstance(sources, (str, Path)):
        sources = [sources]
    files: list[Path] = []
    for src in sources:
        src = Path(src)
        if src.is_dir():
            # Published ledgers may sit in the same tree (ledgers/published/): measured and
            # published numbers must never share a frame, so a folder walk leaves them out.
            files += [
                p for p in sorted(src.rglob("*.json"))
                if p.name != "sweep.json" and not p.name.startswith(".") and not _is_published(p)
                and (superseded or ".superseded-" not in p.name)
            ]
        elif src.is_file():
            if _is_published(src):
                raise ValueError(
                    f"{src} is a published ledger (transcribed from a write-up), not a measurement: "
                    "read it with specnb.published.load_published"
                )
            files.append(src)
        else:
            raise FileNotFoundError(f"no ledger file or folder at {src}")
    return files


def _requested_length(spec: dict[str, Any]) -> float | None:
    """Mean acceptance length a synthetic arm asked for (1 + sum of per-position rates)."""
    if spec.get("rejection_sample_method") != "synthetic":
        return None
    if spec.get("synthetic_acceptance_length") is not None:
        return float(spec["synthetic_acceptance_length"])
    return 1.0 + sum(float(r) for r in spec.get("synthetic_acceptance_rates") or [])


def _row(led: PointLedger, path: Path) -> dict[str, Any]:
    spec = led.arm.speculative_config or {}
    params = led.parameters or {}
    row: dict[str, Any] = {
        "sweep": led.sweep,
        # set by specnb.study; a plain sweep is one condition of its own
        "axis": params.get("axis"),
        "study": params.get("study"),
        "condition": params.get("condition", "default"),
        "point_id": led.point_id,
        "status": led.status,
        "arm": led.arm.name,
        "speculative": led.arm.speculative,
        "method": spec.get("method", "draft_model" if "model" in spec else None) if spec else None,
        "num_speculative_tokens": spec.get("num_speculative_tokens"),
        # a ceiling arm's acceptance was forced, not earned: keep it apart in every analysis
        "synthetic_acceptance": spec.get("rejection_sample_method") == "synthetic",
        "requested_acceptance_length": _requested_length(spec),
        "workload": led.workload.name,
        "workload_hash": led.workload.content_hash,
        "workload_category": led.workload.category,
        "concurrency": led.concurrency,
        "repeat": led.repeat,
        "arm_position": led.arm_position,
        "temperature": led.sampling.temperature,
        "max_tokens": led.sampling.max_tokens,
        "sampling_key": led.sampling.model_dump_json(),
        "engine_version": led.server.engine_version if led.server else None,
        "vllm_version": led.provenance.versions.get("vllm"),
        "server_mode": led.server.mode if led.server else None,
        "kv_cache_tokens": (led.server.kv_capacity or {}).get("total_tokens") if led.server else None,
        "flags": ",".join(led.flags),
        "error_type": led.failure.error_type if led.failure else None,
        "started_at": led.started_at,
        "path": str(path),
    }
    res = led.results or {}
    for k, v in res.items():
        if isinstance(v, (int, float)) or v is None:
            row[k] = v
    sd = led.spec_decode
    row["acceptance_rate"] = sd.acceptance_rate if sd else None
    row["mean_acceptance_length"] = sd.mean_acceptance_length if sd else None
    row["num_drafts"] = sd.num_drafts if sd else None
    row["accepted_output_share"] = sd.accepted_output_share if sd else None
    for k, v in (led.server_samples or {}).items():
        if isinstance(v, (int, float)) or v is None:
            row[k] = v
    for k, v in (led.cache or {}).items():
        row[k] = v
    return row


def load_ledgers(sources: Iterable[Path | str] | Path | str, *, superseded: bool = False) -> pd.DataFrame:
    """Every ledger under the given files/folders as a tidy frame, one row per point and repeat.

    A measurement that another process disturbed and that was measured again
    (``*.superseded-<time>.json``) is a record, not a point: it is left out of a folder walk
    unless ``superseded=True``, so it can never enter a pair twice.

    Published ledgers (numbers transcribed from a write-up, ``kind = "published"``) are left
    out of a folder walk and refused when named: read them with ``specnb.published``.
    """
    rows = [_row(read_ledger(p), p) for p in _ledger_files(sources, superseded)]
    df = pd.DataFrame(rows)
    if len(df):
        df = df.sort_values(["sweep", "workload", "concurrency", "repeat", "arm"]).reset_index(drop=True)
    return df


def load_spec_by_category(sources: Iterable[Path | str] | Path | str) -> pd.DataFrame:
    """Per-category acceptance from every ledger: one row per point, repeat and prompt category.

    Empty when no ledger carries ``spec_decode_by_category`` (baseline arms, or an engine
    without ``--per-request-spec-decode-metrics``).
    """
    rows = []
    for p in _ledger_files(sources):
        led = read_ledger(p)
        for cat, block in (led.spec_decode_by_category or {}).items():
            rows.append({
                "sweep": led.sweep, "arm": led.arm.name, "workload": led.workload.name,
                "concurrency": led.concurrency, "repeat": led.repeat, "status": led.status,
                "category": cat, **block.model_dump(), "path": str(p),
            })
    df = pd.DataFrame(rows)
    if len(df):
        df = df.sort_values(["sweep", "arm", "workload", "concurrency", "repeat", "category"])
        df = df.reset_index(drop=True)
    return df


def load_requests(ledger_path: Path | str) -> pd.DataFrame:
    path = Path(ledger_path)
    led = read_ledger(path)
    if led.requests_file is None:
        return pd.DataFrame()
    return pd.read_parquet(path.with_name(led.requests_file))
