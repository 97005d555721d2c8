"""Published ledgers: the seeds' tables and public GPU write-ups, transcribed cell by cell and kept apart.

The seed write-ups (ThakiCloud's concurrency study, PrimaLabs' step-cost analysis) publish
the numbers a measurement here is read against: where the speedup crosses 1.0, how far
acceptance length differs between copy-style and free-form work, what Amdahl's law allows.
Those numbers were measured by someone else, on other hardware, under serving
configurations that differ even between the rows of one table. So they live in their own
files under ``ledgers/published/``, marked ``kind = "published"``, each naming the write-up
and the place in it, the caveats the write-up itself states (verbatim) and the set-up as
stated. A row is one cell with its unit, the characters as printed and the passage they
were read from, so every number can be checked against the seed text; a cell the write-up
marks "not measured" is a null with a note, never a guess, and a range stays a range.

Public sources beyond the seeds (papers, engine write-ups, issue threads) are transcribed the
same way, naming their address (``url``), where the text was retrieved from (``retrieved_from``)
and, for a file, its SHA-256 instead of a seed file. A number the source does not print (read off
a figure, or computed from data the source publishes) is a row marked ``inferred`` whose note
says how it was obtained; its ``text`` is then the label it was read under, not a number.
A ledger whose curves the step-cost model can be held against lists them under ``curves``
(:class:`Curve`): the ratio type (aggregate throughput, per-user speed, latency at a request rate),
the hardware preset, the target's shape and dtype, the drafter, K and tokens per step, each input
that the source does not state named in ``inferred``. :func:`published_curves` reads them as one
frame, one row per published point.

:func:`load_published` turns them into a tidy frame (one row per cell); it is a separate
reader on purpose: :func:`specnb.ledger.load_ledgers` skips these files, so published and
measured numbers never land in one frame by accident. The JSON Schema of
:class:`PublishedLedger` is committed as ``schemas/published-ledger.v1.json``.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from collections.abc import Iterable
from pathlib import Path
from typing import Any, Literal

import pandas as pd
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from specnb import paths
from specnb.errors import SpecnbError

__all__ = [
    "PUBLISHED_SCHEMA_VERSION",
    "PUBLISHED_DIR",
    "PublishedLedgerError",
    "PublishedLedger",
    "PublishedRow",
    "Source",
    "Curve",
    "RatioType",
    "Setup",
    "normalize_space",
    "numbers_in",
    "read_published",
    "list_published",
    "load_published",
    "published_schema_json",
    "published_curves",
    "seed_sha256",
    "seeds_dir",
]

PUBLISHED_SCHEMA_VERSION = 1
PUBLISHED_DIR = paths.LEDGERS / "published"

# "x" is a ratio speculative / baseline (or a required speedup); "tokens" an acceptance length
# in tokens per verification step; "percent" a share or change; "ms" a time per token; "unspecified" where the
# write-up prints a bare number without saying what it is a share of.
Unit = Literal["x", "tok_s", "tokens", "percent", "sessions", "ms", "unspecified"]
# what a published speedup divides: aggregate tok/s, one user's speed, or latency at a request rate
RatioType = Literal["aggregate_throughput", "per_user_speed", "latency_at_rate", "unspecified"]
DrafterKind = Literal["draft_model", "eagle", "block", "mtp", "ngram"]

_ID = r"^[a-z0-9][a-z0-9-]*$"
_NUMBER = re.compile(r"\d[\d,]*(?:\.\d+)?(?:[eE][-+]?\d+)?")
# Columns load_published adds from the ledger; a row's params may not shadow them.
_LEDGER_COLUMNS = ("ledger_id", "kind", "publisher", "seed_file", "url", "locator", "row", "path")
# The frame's fixed columns, in order; each row's params follow, then the path.
_FRAME_COLUMNS = (
    "ledger_id", "kind", "publisher", "seed_file", "url", "locator", "row", "condition", "arm", "concurrency",
    "metric", "unit", "value", "low", "high", "approx", "inferred", "text", "note", "path",
)


class PublishedLedgerError(SpecnbError):
    """A published ledger that cannot be found or does not validate."""


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid")


def normalize_space(text: str) -> str:
    """Collapse every run of whitespace to one space: the seeds' tables are tab-separated."""
    return " ".join(text.split())


def numbers_in(text: str) -> list[float]:
    """The numbers written in ``text``, thousands separators dropped ("2,306" -> 2306.0)."""
    return [float(m.replace(",", "")) for m in _NUMBER.findall(text)]


class Source(_Model):
    """A seed write-up (``seed_file`` and its hash) or a public source (``url``, ``retrieved_from``)."""

    title: str = Field(description="the write-up's title, as printed")
    publisher: str = Field(description="who published the write-up (as it names itself)")
    seed_file: str | None = Field(None, pattern=r"^[^/\\]+\.txt$", description="file name under shared/seeds")
    seed_sha256: str | None = Field(
        None, pattern=r"^[0-9a-f]{64}$", description="SHA-256 of the seed file transcribed from"
    )
    url: str | None = Field(None, pattern=r"^https://", description="the public address of the source")
    retrieved_from: str | None = Field(
        None, description="where the transcribed text was read: github:owner/repo@commit:path, or the thread"
    )
    retrieved_sha256: str | None = Field(
        None, pattern=r"^[0-9a-f]{64}$", description="SHA-256 of the retrieved file (figure or page source)"
    )
    locator: str = Field(description="which table, figure or paragraph of the write-up")
    transcribed_at: str = Field(pattern=r"^\d{4}-\d{2}-\d{2}$", description="UTC date")
    transcribed_by: Literal["specnb"] = "specnb"
    cited_records: list[str] = Field(
        default_factory=list,
        description="records the write-up names as its own source (not available to specnb)",
    )

    @model_validator(mode="after")
    def _one_origin(self) -> Source:
        seed = self.seed_file is not None and self.seed_sha256 is not None
        web = self.url is not None and self.retrieved_from is not None
        if seed == web:
            raise ValueError("a source is a seed (seed_file and seed_sha256) or a public one (url and "
                             "retrieved_from), exactly one")
        return self


class Setup(_Model):
    """The set-up as the write-up states it; None where it does not say."""

    engine: str | None = None
    hardware: str | None = None
    model: str | None = None
    drafter: str | None = None
    num_speculative_tokens: int | None = Field(None, ge=1, description="K, proposed tokens per step")
    workload: str | None = None
    sampling: str | None = None
    method: str | None = Field(None, description="how the write-up says it measured or derived")
    ratio_type: RatioType | None = Field(
        None, description="what its speedups divide: aggregate tok/s, per-user speed, latency at a request rate")
    weight_dtype: str | None = Field(None, description="the target's weight format, as stated")


class PublishedRow(_Model):
    """One cell: a point value, a range (low, high), or a null the write-up did not measure."""

    metric: str = Field(pattern=r"^[a-z][a-z0-9_]*$", description="what the cell measures")
    unit: Unit
    value: float | None = None
    low: float | None = Field(None, description="lower end of a published range")
    high: float | None = Field(None, description="upper end of a published range")
    approx: bool = Field(False, description="the write-up says about / roughly / around")
    condition: str | None = Field(None, description="row label or condition, as printed where possible")
    arm: Literal["baseline", "speculative"] | None = Field(None, description="None for a ratio")
    concurrency: int | None = Field(None, ge=1, description="concurrent users / requests")
    params: dict[str, float | str] = Field(
        default_factory=dict, description="further coordinates of the cell, unit in the key"
    )
    text: str = Field(min_length=1, description="the cell's characters as printed")
    quote: str = Field(min_length=1, description="the passage of the seed that holds `text`")
    locator: str | None = Field(None, description="where in the write-up, if not the ledger's locator")
    inferred: bool = Field(False, description="not printed by the source: read off a figure or computed; the note says how")
    note: str | None = None

    @model_validator(mode="after")
    def _consistent(self) -> PublishedRow:
        ranged = self.low is not None or self.high is not None
        if ranged and (self.low is None or self.high is None):
            raise ValueError(f"{self.metric}: a range needs both low and high")
        if ranged and self.value is not None:
            raise ValueError(f"{self.metric}: a cell is a value or a range, not both")
        if ranged and self.low > self.high:  # type: ignore[operator]
            raise ValueError(f"{self.metric}: low {self.low} > high {self.high}")
        if self.value is None and not ranged and not self.note:
            raise ValueError(f"{self.metric}: a cell without a value needs a note saying why")
        if self.inferred and not self.note:
            raise ValueError(f"{self.metric}: an inferred cell needs a note saying how it was obtained")
        if normalize_space(self.text) not in normalize_space(self.quote):
            raise ValueError(f"{self.metric}: text {self.text!r} is not in its quote")
        clash = set(self.params) & set(type(self).model_fields) | set(self.params) & set(_LEDGER_COLUMNS)
        if clash:
            raise ValueError(f"{self.metric}: params reuse column names {sorted(clash)}")
        return self


class Curve(_Model):
    """What the step-cost model needs to predict one published curve (the rows of ``condition``).

    Shapes are the model's published architecture; ``inferred`` names every input the source
    does not state (a dtype taken as bf16, a drafter size guessed, a prompt length assumed).
    """

    condition: str = Field(description="the rows' condition this curve is")
    ratio_type: RatioType = Field(description="what the speedup divides: aggregate tok/s, per-user speed, latency at a rate")
    metric: str = Field("speedup_x", pattern=r"^[a-z][a-z0-9_]*$", description="the rows' metric that is the ratio")
    axis: Literal["concurrency", "num_speculative_tokens"] = Field(
        "concurrency", description="what varies along the curve (rows' concurrency, or params' k)")
    hardware_preset: str = Field(description="a preset in specnb.models hardware.toml (spec-sheet peaks)")
    gpus: int = Field(1, ge=1, description="GPUs the target is split over (tensor parallel)")
    compute_dtype: Literal["bf16", "fp8", "fp4"] = "bf16"
    target: str = Field(description="the target model, as named")
    target_params_b: float = Field(gt=0)
    target_layers: int = Field(ge=1)
    target_kv_heads: int = Field(ge=1)
    target_head_dim: int = Field(ge=1)
    weight_bytes_per_param: float = Field(gt=0)
    kv_bytes_per_value: float = Field(2.0, gt=0)
    target_attention_heads: int | None = Field(
        None, ge=1, description="query heads (attention's FLOPs grow with context); None: attention compute left out")
    target_active_params_b: float | None = Field(
        None, gt=0, description="a mixture of experts: parameters each token runs through; None: dense")
    target_experts: int | None = Field(None, ge=2, description="a mixture of experts: routed experts per layer")
    target_experts_per_token: int | None = Field(None, ge=1, description="a mixture of experts: experts per token")
    drafter: str = Field(description="the drafter, as named")
    drafter_kind: DrafterKind
    drafter_params_b: float = Field(0.0, ge=0, description="0: no weights of its own counted (its cost is fitted)")
    k: int | None = Field(None, ge=1, description="K; None when it varies along the curve (rows' params k)")
    tokens_per_step: float | None = Field(
        None, ge=1, description="mean tokens emitted per verification step; None: per row (params)")
    prompt_tokens: float = Field(ge=0)
    output_tokens: float = Field(gt=0)
    prefill_tokens: float | None = Field(
        None, ge=0, description="prompt tokens prefilled inside the timed window per request (None: prompt_tokens, a "
        "closed loop that replaces finished requests; 0: a decode-only ratio)")
    drafter_kv_bytes_per_token: float | None = Field(
        None, ge=0, description="the drafter's KV bytes per token of context it reads (None: one target layer's for an "
        "EAGLE or MTP head, none otherwise)")
    draft_fraction: float | None = Field(
        None, gt=0, le=1, description="share of a request's steps that carry a draft (n-gram drafts only on a match); "
        "None: every step")
    drafter_context_tokens: float | None = Field(
        None, gt=0, description="context the drafter reads KV for, at most (a sparse or windowed draft KV); None: all")
    engine: str | None = Field(
        None, pattern=r"^[a-z0-9][a-z0-9-]*$",
        description="the serving engine's family (vllm, sglang, trtllm, or the authors' own): what speculation costs "
        "beyond the roofline is fitted per engine; None: pooled with every source")
    inferred: list[str] = Field(default_factory=list, description="inputs the source does not state")
    basis: str = Field(min_length=1, description="where each input comes from")

    @model_validator(mode="after")
    def _experts_whole(self) -> Curve:
        moe = (self.target_active_params_b, self.target_experts, self.target_experts_per_token)
        if any(v is not None for v in moe) and any(v is None for v in moe):
            raise ValueError(f"curve {self.condition!r}: a mixture of experts needs target_active_params_b, "
                             "target_experts and target_experts_per_token together")
        if self.target_active_params_b is not None and self.target_active_params_b >= self.target_params_b:
            raise ValueError(f"curve {self.condition!r}: active parameters must be fewer than the target's")
        return self


class PublishedLedger(_Model):
    schema_version: Literal[1]
    kind: Literal["published"] = Field(description="never a measurement made by specnb")
    id: str = Field(pattern=_ID, description="also the file name, <id>.json")
    source: Source
    setup: Setup
    caveats: list[str] = Field(
        default_factory=list, description="the write-up's own caveats, verbatim"
    )
    notes: list[str] = Field(default_factory=list, description="the transcriber's notes")
    rows: list[PublishedRow] = Field(min_length=1)
    curves: list[Curve] = Field(default_factory=list, description="curves the step-cost model is held against")

    @model_validator(mode="after")
    def _curves_have_rows(self) -> PublishedLedger:
        conditions = {r.condition for r in self.rows}
        for c in self.curves:
            if c.condition not in conditions:
                raise ValueError(f"curve {c.condition!r} names no rows' condition")
            unknown = sorted(set(c.inferred) - set(Curve.model_fields))
            if unknown:
                raise ValueError(f"curve {c.condition!r}: inferred names unknown inputs {unknown}")
        return self


def published_schema_json() -> str:
    schema = PublishedLedger.model_json_schema()
    schema["$id"] = f"https://specnb/schemas/published-ledger.v{PUBLISHED_SCHEMA_VERSION}.json"
    return json.dumps(schema, indent=2, sort_keys=True) + "\n"


def seeds_dir() -> Path | None:
    """The seed write-ups: ``SPECNB_SEEDS``, else ``shared/seeds`` beside a folder above the repo."""
    env = os.environ.get("SPECNB_SEEDS")
    if env:
        return Path(env) if Path(env).is_dir() else None
    for parent in paths.ROOT.parents:
        if (parent / "shared" / "seeds").is_dir():
            return parent / "shared" / "seeds"
    return None


def seed_sha256(path: Path) -> str:
    """SHA-256 of a seed file: a transcription names the exact text it was checked against."""
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def _resolve(source: Path | str, folder: Path) -> list[Path]:
    src, path = str(source), Path(source)
    is_id = re.fullmatch(_ID, src) is not None
    if is_id and (folder / f"{src}.json").is_file():  # a bare id names <folder>/<id>.json
        return [folder / f"{src}.json"]
    if path.is_dir():
        return sorted(p for p in path.glob("*.json") if not p.name.startswith("."))
    if path.is_file():
        return [path]
    if is_id:
        known = ", ".join(list_published(folder)) or "none"
        raise PublishedLedgerError(f"no published ledger {src!r} in {folder} (known: {known})")
    raise PublishedLedgerError(f"no published ledger file, folder or id at {source}")


def read_published(source: Path | str, folder: Path | None = None) -> PublishedLedger:
    """One published ledger, by id (a file in ``folder``) or by file path."""
    folder = folder or PUBLISHED_DIR
    if Path(source).is_dir() and not (folder / f"{source}.json").is_file():
        raise PublishedLedgerError(f"{source} is a folder: name one published ledger (id or file)")
    (path,) = _resolve(source, folder)
    try:
        led = PublishedLedger.model_validate_json(path.read_text())
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(x) for x in first["loc"])
        raise PublishedLedgerError(f"{path}: not a valid published ledger ({where}: {first['msg']})") from None
    if path.name != f"{led.id}.json":
        raise PublishedLedgerError(f"{path}: file name must be {led.id}.json, the ledger's id")
    return led


def list_published(folder: Path | None = None) -> list[str]:
    """The ids of the published ledgers in ``folder`` (default ``ledgers/published/``), sorted."""
    folder = folder or PUBLISHED_DIR
    if not folder.is_dir():
        return []
    return sorted(p.name.removesuffix(".json") for p in folder.glob("*.json") if not p.name.startswith("."))


def _rows(led: PublishedLedger, path: Path) -> list[dict[str, Any]]:
    out = []
    for i, r in enumerate(led.rows):
        row: dict[str, Any] = {
            "ledger_id": led.id,
            "kind": led.kind,
            "publisher": led.source.publisher,
            "seed_file": led.source.seed_file,
            "url": led.source.url,
            "row": i,
        }
        row.update(r.model_dump(exclude={"params", "quote", "locator"}))
        row["locator"] = r.locator or led.source.locator
        row.update(r.params)
        row["path"] = str(path)
        out.append(row)
    return out


def _published_files(sources: Iterable[Path | str] | Path | str | None, folder: Path) -> list[Path]:
    """The ledger files that ids, files or folders name (``None``: every ledger in ``folder``)."""
    if sources is None:
        sources = [folder]
    elif isinstance(sources, (str, Path)):
        sources = [sources]
    files: list[Path] = []
    for src in sources:
        files += _resolve(src, folder)
    return files


def load_published(
    sources: Iterable[Path | str] | Path | str | None = None, folder: Path | None = None
) -> pd.DataFrame:
    """Published cells as a tidy frame, one row per cell, in each ledger's own order.

    ``sources`` are ids, files or folders (default: every ledger in ``ledgers/published/``).
    Columns: ``ledger_id``, ``publisher``, ``seed_file``, ``locator``, ``condition``, ``arm``,
    ``concurrency``, ``metric``, ``unit``, ``value`` (or ``low``/``high`` for a range),
    ``approx``, ``text`` (as printed), ``note``, plus each row's params as their own columns.
    """
    files = _published_files(sources, folder or PUBLISHED_DIR)
    seen: dict[str, Path] = {}
    rows: list[dict[str, Any]] = []
    for path in files:
        led = read_published(path)
        if led.id in seen:
            if seen[led.id].resolve() == path.resolve():
                continue  # the same file named twice
            raise PublishedLedgerError(f"published ledger id {led.id!r} in both {seen[led.id]} and {path}")
        seen[led.id] = path
        rows += _rows(led, path)
    df = pd.DataFrame(rows, columns=list(_FRAME_COLUMNS) if not rows else None)
    params = [c for c in df.columns if c not in _FRAME_COLUMNS]
    df = df[[c for c in _FRAME_COLUMNS if c != "path"] + params + ["path"]]
    # nullable integers: a cell without a concurrency must not turn the column into floats
    return df.astype({"concurrency": "Int64", "value": "float64", "low": "float64", "high": "float64"})


def published_curves(sources: Iterable[Path | str] | Path | str | None = None,
                     folder: Path | None = None) -> pd.DataFrame:
    """The published points the step-cost model is held against: one row per point with a value.

    For each ledger's :class:`Curve`, its rows of that condition and metric, with the curve's
    inputs as columns (``curve_inferred`` lists the inputs the source does not state) plus
    ``ledger_id``, ``source_url``, ``concurrency``, ``k``, ``tokens_per_step``, ``value`` (the
    published ratio) and ``inferred`` (the point itself was read off a figure). Per-row inputs
    (``k``, ``tokens_per_step`` for a curve along K) come from the row's params.
    """
    files = _published_files(sources, folder or PUBLISHED_DIR)
    out: list[dict[str, Any]] = []
    for path in files:
        led = read_published(path)
        for curve in led.curves:
            inputs = curve.model_dump(exclude={"inferred", "metric", "condition"})
            for r in led.rows:
                if r.condition != curve.condition or r.metric != curve.metric or r.value is None:
                    continue
                k = r.params.get("k", curve.k)
                tau = r.params.get("tokens_per_step", curve.tokens_per_step)
                if k is None or tau is None:
                    raise PublishedLedgerError(f"{path}: curve {curve.condition!r} has a row without K or tokens per step")
                row = {"ledger_id": led.id, "publisher": led.source.publisher,
                       "source_url": led.source.url or led.source.seed_file, "condition": curve.condition,
                       **inputs, "k": int(k), "tokens_per_step": float(tau),
                       "concurrency": int(r.concurrency or 1), "value": float(r.value), "inferred": r.inferred,
                       "curve_inferred": ", ".join(curve.inferred)}
                out.append(row)
    columns = ["ledger_id", "publisher", "source_url", "condition", *[f for f in Curve.model_fields
               if f not in ("inferred", "metric", "condition", "k", "tokens_per_step")],
               "k", "tokens_per_step", "concurrency", "value", "inferred", "curve_inferred"]
    return pd.DataFrame(out, columns=columns)
