"""From ledger files to tidy frames: one row per point and repeat.

:func:`load_ledgers` walks folders (or takes files) and flattens each ledger into a row;
superseded records and published (transcribed) ledgers never enter a frame by accident.

Every file is validated (:func:`specnb.ledger.store.read_ledger`): a bad one stops the load
with one line naming it, or, with ``skip_bad=True``, is left out and counted in a
:class:`SkippedLedgersWarning` (and in the frame's ``attrs["skipped"]``). A value is never
read as NaN because it could not be read.
"""

from __future__ import annotations

import json
import warnings
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import pandas as pd

from specnb.ledger.names import PLAIN_CONDITION, LoadMode
from specnb.ledger.schema import PointLedger, drafter_method, synthetic_rates
from specnb.ledger.store import LedgerError, read_ledger

__all__ = ["arm_configs", "json_cell", "load_ledgers", "load_requests", "load_spec_by_category", "load_turns", "ledger_files", "machine_label", "NO_GPU",
           "SkippedLedgersWarning"]


class SkippedLedgersWarning(UserWarning):
    """Bad ledger files were left out of a frame (``skip_bad=True``); the message counts them."""


def _read_all(files: list[Path], skip_bad: bool, each: Callable[[PointLedger, Path], list[dict[str, Any]]],
              ) -> tuple[list[dict[str, Any]], list[str]]:
    """Rows from every file; a bad file raises :class:`LedgerError`, or is skipped and counted."""
    rows: list[dict[str, Any]] = []
    skipped: list[str] = []
    for p in files:
        try:
            led = read_ledger(p)
        except LedgerError as exc:
            if not skip_bad:
                raise
            skipped.append(str(exc))
            continue
        rows += each(led, p)
    if skipped:
        warnings.warn(f"skipped {len(skipped)} bad ledger file(s) of {len(files)} (first: {skipped[0]})",
                      SkippedLedgersWarning, stacklevel=3)
    return rows, skipped


# JSON files that live among ledgers but are not measurements: a published table, a policy
# derived from a run (``specnb policy``), a sweep's sizing, search and timing records, a
# step-time probe's cells (``specnb probe``: engine steps timed without a server), the test
# suite's own timings (``specnb.ledger.suite``), a drafter's training curve (``make drafter``).
NOT_MEASURED = ("published", "policy", "sizing", "search", "sequential", "timing", "tune_round", "tune_result", "predicted_acceptance",
                "lossless_margins", "step_anatomy", "anatomy_run", "watch_phases", "figure", "probe",
                "suite_timing", "suite_timing_transcribed", "drafter-training")


def _kind(path: Path) -> str | None:
    try:
        data = json.loads(path.read_text())
    except (OSError, UnicodeDecodeError, ValueError):
        return None  # not ours to judge: read_ledger reports what is wrong with it
    if isinstance(data, dict) and "kind" not in data and {"id", "sources_sha256"} <= data.keys():
        return "figure"  # a figure's sidecar drawn beside the data (specnb.figures.save_figure)
    return data.get("kind") if isinstance(data, dict) else None


def _is_published(path: Path) -> bool:
    """True for a number transcribed from a write-up (``specnb.published``), not measured here."""
    return _kind(path) == "published"


# a sweep folder's own records beside its points (sweep.json, sizing/, search/, sequential/, timings/, predicted/):
# not ledgers
SWEEP_RECORDS = ("sizing", "search", "sequential", "timings", "predicted")


def _sweep_record(root: Path, p: Path) -> bool:
    """True for a file in a sweep folder's ``sizing/``, ``search/`` or ``timings/`` (the folder that
    holds sweep.json)."""
    parts = p.relative_to(root).parts
    return any(part in SWEEP_RECORDS and (root.joinpath(*parts[:i]) / "sweep.json").exists()
               for i, part in enumerate(parts[:-1]))


def ledger_files(sources: Iterable[Path | str] | Path | str, superseded: bool = False) -> list[Path]:
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
                if p.name != "sweep.json" and not p.name.startswith(".") and not _sweep_record(src, p)
                and _kind(p) not in NOT_MEASURED and (superseded or ".superseded-" not in p.name)
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


def _arm_columns(led: PointLedger) -> dict[str, Any]:
    spec = led.arm.speculative_config or {}
    rates = synthetic_rates(led.arm.speculative_config)
    return {
        "arm": led.arm.name,
        "speculative": led.arm.speculative,
        "method": drafter_method(led.arm.speculative_config),
        "num_speculative_tokens": spec.get("num_speculative_tokens"),
        # the drafter loaded with K = 0 at every batch size (an off arm: what "off" inside a schedule costs)
        "drafting_off": bool(spec.get("num_speculative_tokens_per_batch_size"))
        and all(int(r[2]) == 0 for r in spec["num_speculative_tokens_per_batch_size"]),
        # a ceiling arm's acceptance was forced, not earned: keep it apart in every analysis
        "synthetic_acceptance": rates is not None,
        "requested_acceptance_length": None if rates is None else 1.0 + sum(rates),
    }


def _load_columns(led: PointLedger) -> dict[str, Any]:
    return {
        "concurrency": led.in_flight,  # an open loop: its cap on requests in flight
        "load_mode": led.load.mode if led.load else LoadMode.CONCURRENCY.shape,
        "rate_rps": led.load.rate_rps if led.load else None,
        # conversation replay (load_mode "conversation"): users = concurrency; the set's turns
        "users": led.load.users if led.load else None,
        "history": led.load.history if led.load else None,
        "think_time_s": led.load.think_time_s if led.load else None,
        "conversations": led.load.conversations if led.load else None,
        "turns_min": led.workload.conversation.turns_min if led.workload.conversation else None,
        "turns_max": led.workload.conversation.turns_max if led.workload.conversation else None,
    }


def _server_columns(led: PointLedger) -> dict[str, Any]:
    return {
        "server_mode": led.server.mode if led.server else None,
        "served_model": led.server.model if led.server else None,
        "server_ready_s": led.server.ready_s if led.server else None,
        "kv_cache_tokens": (led.server.kv_capacity or {}).get("total_tokens") if led.server else None,
        "startup_decisions": (json.dumps(led.server.startup_decisions, sort_keys=True)
                              if led.server and led.server.startup_decisions is not None else None),
    }


def _measured_columns(led: PointLedger) -> dict[str, Any]:
    """The point's numbers: its results, the engine's speculative counters, the server's samples
    and the prefix cache's (numbers only)."""
    row = {k: v for k, v in (led.results or {}).items() if isinstance(v, (int, float)) or v is None}
    sd = led.spec_decode
    row["acceptance_rate"] = sd.acceptance_rate if sd else None
    row["mean_acceptance_length"] = sd.mean_acceptance_length if sd else None
    row["num_drafts"] = sd.num_drafts if sd else None
    row["accepted_output_share"] = sd.accepted_output_share if sd else None
    row["per_position_acceptance"] = list(sd.per_position_acceptance) if sd else None
    row.update({k: v for k, v in (led.server_samples or {}).items() if isinstance(v, (int, float)) or v is None})
    row.update(led.cache or {})
    return row


def _portable_config(led: PointLedger) -> dict[str, Any] | None:
    """The arm's speculative config with its draft model's folder as the server's recorded argv names
    it (made portable when it was written: ``drafters/...``, not the measuring checkout's absolute
    path), so what a report prints is the same in every checkout."""
    cfg = led.arm.speculative_config
    argv = (led.server.argv if led.server else None) or []
    if not cfg or not isinstance(cfg.get("model"), str) or "--speculative-config" not in argv[:-1]:
        return cfg
    try:
        served = json.loads(argv[argv.index("--speculative-config") + 1])
    except ValueError:
        return cfg
    model = served.get("model") if isinstance(served, dict) else None
    return {**cfg, "model": model} if isinstance(model, str) else cfg


def _row(led: PointLedger, path: Path) -> dict[str, Any]:
    params = led.parameters or {}
    row: dict[str, Any] = {
        "sweep": led.sweep,
        # set by specnb.study; a plain sweep is one condition of its own
        "axis": params.get("axis"),
        "study": params.get("study"),
        "condition": params.get("condition", PLAIN_CONDITION),
        "tune_round": params.get("tune_round"),  # set by specnb tune on the points of its rounds
        "point_id": led.point_id,
        "status": led.status,
        **_arm_columns(led),
        "workload": led.workload.name,
        "workload_hash": led.workload.content_hash,
        "workload_category": led.workload.category,
        **_load_columns(led),
        "repeat": led.repeat,
        "arm_position": led.arm_position,
        "temperature": led.sampling.temperature,
        "max_tokens": led.sampling.max_tokens,
        "sampling_key": led.sampling.model_dump_json(exclude_none=True),
        "structured_output": led.sampling.structured_output,
        "engine_version": led.server.engine_version if led.server else None,
        "machine": machine_label(led.provenance.hardware),
        # the node an executor ran the point on (a fleet's Ray node id; None for a local run)
        "node_id": (led.provenance.executor or {}).get("node_id"),
        "vllm_version": led.provenance.versions.get("vllm"),
        **_server_columns(led),
        "flags": ",".join(led.flags),
        "panel_hash": led.workload.panel_hash,
        "panel_size": led.sizing.panel_size if led.sizing else None,
        "passes": led.sizing.passes if led.sizing else None,
        "work_floor_tokens": led.sizing.work_floor_tokens if led.sizing else None,
        "search_round": led.search.round if led.search else 0,
        "search_reason": led.search.reason if led.search else None,
        "error_type": led.failure.error_type if led.failure else None,
        "error_message": led.failure.message[:500] if led.failure else None,
        "started_at": led.started_at,
        # what an analysis needs of the arm and its server, so none opens a ledger file (JSON text:
        # a frame cell stays hashable for grouping and de-duplication; :func:`json_cell` reads it)
        "speculative_config": _json_or_none(_portable_config(led)),
        "server_env": _json_or_none(led.server.env if led.server else None),
        "server_argv": _json_or_none(led.server.argv if led.server else None),
        # a failure's engine log tail, else its whole message (error_message is cut at 500 characters)
        "error_detail": (led.failure.log_tail or led.failure.message) if led.failure else None,
        "path": str(path),
    }
    row.update(_measured_columns(led))
    return row


def _design(folder: Path, seen: dict[Path, dict[str, Any]]) -> dict[str, Any]:
    """How the run a point belongs to spends its error rate, from the ``sweep.json`` of the nearest
    folder above it that has one: a sequential sweep's alpha and first and last looks (repeats,
    ``sequential.max_repeats``), an adaptive search's rounds after the first; all None for a sweep
    of fixed repeats (or a point outside any sweep folder). Read by
    :func:`specnb.analysis.speedups.design_of`."""
    if folder in seen:
        return seen[folder]
    out: dict[str, Any] = {"design_alpha": None, "design_first": None, "design_last": None,
                           "design_search_rounds": None}
    f = folder / "sweep.json"
    if f.is_file():
        try:
            spec = json.loads(f.read_text()).get("spec") or {}
        except (OSError, ValueError):
            spec = {}
        seq, search = spec.get("sequential"), spec.get("search")
        if isinstance(seq, dict):
            out.update(design_alpha=seq.get("alpha"), design_first=spec.get("repeats"),
                       design_last=seq.get("max_repeats"))
        elif isinstance(search, dict):
            out.update(design_search_rounds=search.get("max_rounds"))
    elif folder.parent != folder and len(folder.parts) > 1:
        out = _design(folder.parent, seen)
    seen[folder] = out
    return out


def _json_or_none(v: Any) -> str | None:
    return None if v is None else json.dumps(v, sort_keys=True)


def json_cell(v: Any) -> Any:
    """A JSON column of the frame (``speculative_config``, ``server_env``, ``server_argv``) read
    back: None for a missing cell."""
    return json.loads(v) if isinstance(v, str) else None


def arm_configs(df: pd.DataFrame) -> dict[str, dict[str, Any] | None]:
    """Arm -> its speculative config (the first row of each arm; None for the baseline)."""
    if df.empty or "speculative_config" not in df.columns:
        return {}
    firsts = df.drop_duplicates("arm")
    return {str(a): json_cell(c) for a, c in zip(firsts["arm"], firsts["speculative_config"], strict=True)}


_ISA_NAMES = {"none": "no AVX2", "avx2": "AVX2", "avx512": "AVX-512", "avx512_bf16": "AVX-512 BF16",
              "amx_bf16": "AMX BF16"}


NO_GPU = "no GPU"  # how machine_label ends for a machine without a GPU


def machine_label(hardware: dict[str, Any]) -> str:
    """Where a point ran, in one phrase: CPU model and cores, and the GPUs with their driver."""
    cpu = hardware.get("cpu_model") or hardware.get("machine") or "unknown CPU"
    count = f"{hardware.get('cpu_count') or '?'} CPUs"
    if hardware.get("usable_cpus"):  # a run confined to some of them (specnb.ledger.provenance.confinement)
        count = f"{hardware['usable_cpus']} of {count}"
    text = f"{cpu}, {count}"
    isa = hardware.get("cpu_isa")  # which kernels a CPU engine build had (ledgers before 2026-12-01: none)
    if isa:
        text += f" ({_ISA_NAMES.get(isa, isa)}{', emulated' if hardware.get('cpu_isa_emulated') else ''})"
    gpus = hardware.get("gpus") or []
    if gpus:
        names: dict[str, int] = {}
        for g in gpus:
            names[g.get("name", "GPU")] = names.get(g.get("name", "GPU"), 0) + 1
        drivers = sorted({g.get("driver") for g in gpus if g.get("driver")})
        text += ", " + ", ".join(f"{n} x {name}" for name, n in names.items())
        text += f" (driver {', '.join(drivers)})" if drivers else ""
    else:
        text += f", {NO_GPU}"
    return text


def load_ledgers(sources: Iterable[Path | str] | Path | str, *, superseded: bool = False,
                 skip_bad: bool = False) -> pd.DataFrame:
    """Every ledger under the given files/folders as a tidy frame, one row per point and repeat.

    A measurement that another process disturbed and that was measured again
    (``*.superseded-<time>.json``) is a record, not a point: it is left out of a folder walk
    unless ``superseded=True``, so it can never enter a pair twice.

    Published ledgers (numbers transcribed from a write-up, ``kind = "published"``) are left
    out of a folder walk and refused when named: read them with ``specnb.published``.

    A file that is not a valid ledger raises :class:`~specnb.ledger.store.LedgerError` naming
    it; with ``skip_bad=True`` it is left out, counted in a :class:`SkippedLedgersWarning`, and
    listed in ``df.attrs["skipped"]``.
    """
    rows, skipped = _read_all(ledger_files(sources, superseded), skip_bad, lambda led, p: [_row(led, p)])
    designs: dict[Path, dict[str, Any]] = {}
    for row in rows:
        row.update(_design(Path(row["path"]).parent, designs))
    df = pd.DataFrame(rows)
    if len(df):
        df = df.sort_values(["sweep", "workload", "concurrency", "repeat", "arm"]).reset_index(drop=True)
    df.attrs["skipped"] = skipped
    return df


def load_spec_by_category(sources: Iterable[Path | str] | Path | str, *, skip_bad: bool = False) -> pd.DataFrame:
    """Per-category acceptance from every ledger: one row per point, repeat and prompt category.

    Empty when no ledger carries ``spec_decode_by_category`` (baseline arms, or an engine
    without ``--per-request-spec-decode-metrics``).
    """
    def each(led: PointLedger, p: Path) -> list[dict[str, Any]]:
        return [{
            "sweep": led.sweep, "arm": led.arm.name, "workload": led.workload.name,
            "concurrency": led.in_flight, "repeat": led.repeat, "status": led.status,
            "flags": ",".join(led.flags), "category": cat, **block.model_dump(), "path": str(p),
        } for cat, block in (led.spec_decode_by_category or {}).items()]

    rows, _ = _read_all(ledger_files(sources), skip_bad, each)
    df = pd.DataFrame(rows)
    if len(df):
        df = df.sort_values(["sweep", "arm", "workload", "concurrency", "repeat", "category"])
        df = df.reset_index(drop=True)
    return df


def load_turns(sources: Iterable[Path | str] | Path | str, *, skip_bad: bool = False) -> pd.DataFrame:
    """Conversation points per turn: one row per point, repeat and turn position (``by_turn``),
    with the point's load mode, users and history. Empty when no ledger is a conversation point."""
    def each(led: PointLedger, p: Path) -> list[dict[str, Any]]:
        load = led.load
        return [{
            "sweep": led.sweep, "arm": led.arm.name, "speculative": led.arm.speculative,
            "workload": led.workload.name, "workload_hash": led.workload.content_hash,
            "concurrency": led.in_flight, "repeat": led.repeat, "status": led.status, "flags": ",".join(led.flags),
            "load_mode": load.mode if load else LoadMode.CONCURRENCY.shape, "users": load.users if load else None,
            "history": load.history if load else None, "think_time_s": load.think_time_s if load else None,
            **t.model_dump(), "path": str(p),
        } for t in (led.by_turn or [])]

    rows, _ = _read_all(ledger_files(sources), skip_bad, each)
    df = pd.DataFrame(rows)
    if len(df):
        df = df.sort_values(["sweep", "arm", "workload", "concurrency", "repeat", "turn"]).reset_index(drop=True)
    return df


def load_requests(ledger_path: Path | str, *, missing_ok: bool = False) -> pd.DataFrame | None:
    """The per-request records of a point (its Parquet sidecar; empty when it has none). With
    ``missing_ok``, None where the ledger file itself is gone."""
    path = Path(ledger_path)
    if missing_ok and not path.is_file():
        return None
    led = read_ledger(path)
    if led.requests_file is None:
        return pd.DataFrame()
    side = path.with_name(led.requests_file)
    try:
        return pd.read_parquet(side)
    except (OSError, ValueError) as exc:  # missing, truncated or not Parquet
        raise LedgerError(f"{side}: cannot read the requests of {path.name} ({' '.join(str(exc).split())[:200]})") from None
