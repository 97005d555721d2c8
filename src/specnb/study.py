"""A study: one axis of the notebooks, as a set of paired sweeps (one per condition).

Every axis notebook varies one thing that needs its own server (the checkpoint, the KV
pool, the parallel layout, the sampling temperature) and keeps the drafter-on/off pairing
inside each value of it. A :class:`Study` holds the notebook's parameters, expands them into
one :class:`~specnb.sweep.SweepSpec` per *condition*, and runs them into one folder:

    ledgers/<axis>/<study>/<run>/<condition>/<arm>/<workload>/cNNN-rNN.json

A speedup is always a ratio within one condition (same prompts, engine build, sampling);
conditions are compared on their absolute numbers only with their spread shown.

Runs interleave conditions by repeat (repeat 0 of every condition, then repeat 1, ...) so
that a slow drift of the machine lands on every condition alike; each repeat is a fresh
server start, which is where most of the variance on these CPUs comes from. A run folder is
write-once like every ledger: a new measurement goes into a new run (a UTC time stamp),
an interrupted one resumes when given the same ``run``. Analysis reads the newest run.

Bad parameters fail in one line (:class:`~specnb.sweep.SweepError`) before any server starts.
"""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal

import pandas as pd
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from specnb import paths
from specnb.ledger import load_ledgers
from specnb.sweep import SweepError, SweepOutcome, SweepSpec, prepare, run_sweep
from specnb.validation import first_error

__all__ = ["AXES", "Condition", "Study", "latest_run", "run_folder", "summarize", "absolute", "by_category"]

AXES = ("concurrency", "quantization", "drafter", "temperature", "kv", "parallelism")
BASELINE = "baseline"


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
    workloads: list[str] | None = None


class Study(BaseModel):
    """The parameters of one axis notebook, validated."""

    model_config = ConfigDict(extra="forbid")

    axis: Literal["concurrency", "quantization", "drafter", "temperature", "kv", "parallelism"]
    study: str = Field(description="study name: ledgers/<axis>/<study>/<run>/")
    model: str | None = None
    served_model_name: str | None = None
    endpoint: str | None = Field(None, description="attach every arm to this server (one condition)")
    server_args: list[str] = Field(default_factory=list)
    env: dict[str, str] = Field(default_factory=dict)
    drafters: dict[str, dict[str, Any]] = Field(description="arm name -> vLLM speculative config")
    conditions: dict[str, Condition] = Field(default_factory=dict)
    workloads: list[str] = Field(default_factory=lambda: ["copy", "freeform"])
    concurrency: list[int] = Field(min_length=1)
    repeats: int = Field(2, ge=1)
    requests_per_user: int = Field(3, ge=1)
    min_requests: int = Field(6, ge=1)
    warmup_requests: int = Field(2, ge=0)
    max_tokens: int = Field(64, ge=1)
    temperature: float = Field(0.0, ge=0.0)
    seed: int = 0

    @field_validator("study")
    @classmethod
    def _study(cls, v: str) -> str:
        if not v or "/" in v or v.startswith("."):
            raise ValueError("study name must be non-empty, without '/', not starting with '.'")
        return v

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
            if "/" in name or not name or name.startswith("."):
                raise ValueError(f"condition name {name!r} must be a plain folder name")
        if self.endpoint and len(self.conditions) > 1:
            raise ValueError("an attached endpoint is one server: it cannot vary conditions")
        return self

    # -- construction -------------------------------------------------------------------
    @classmethod
    def from_namespace(cls, axis: str, namespace: dict[str, Any]) -> Study:
        """From a notebook's globals: picks the names that are study parameters."""
        return cls.from_parameters(axis, **{k: v for k, v in namespace.items() if k in cls.model_fields})

    @classmethod
    def from_parameters(cls, axis: str, **params: Any) -> Study:
        """Build from a notebook's parameters; notebook-only keys are ignored."""
        fields = set(cls.model_fields)
        data = {k: v for k, v in params.items() if k in fields}
        data["axis"] = axis
        if data.get("endpoint") in ("", None):
            data.pop("endpoint", None)
        try:
            study = cls.model_validate(data)
        except ValidationError as exc:
            raise SweepError(f"{axis} parameters: {first_error(exc)}") from None
        study.specs()  # every sweep must validate too
        return study

    def condition_names(self) -> list[str]:
        return list(self.conditions) or ["default"]

    def label(self, condition: str) -> str:
        cond = self.conditions.get(condition)
        return (cond.label if cond and cond.label else condition)

    def specs(self) -> dict[str, SweepSpec]:
        """One validated sweep per condition (no file is touched, no server started)."""
        out = {}
        for name in self.condition_names():
            cond = self.conditions.get(name, Condition())
            drafters = {k: v for k, v in self.drafters.items()
                        if cond.drafters is None or k in cond.drafters}
            arms: list[dict[str, Any]] = [{"name": BASELINE}]
            for arm, cfg in drafters.items():
                arms.append({"name": arm, "speculative_config": _local_paths(cfg)})
            if self.endpoint:
                for a in arms:
                    a["endpoint"] = self.endpoint
            data = {
                "name": f"{self.axis}-{self.study}-{name}",
                "model": cond.model or self.model,
                "served_model_name": self.served_model_name,
                "server_args": [*self.server_args, *cond.server_args],
                "env": {**self.env, **cond.env},
                "arms": arms,
                "workloads": cond.workloads or self.workloads,
                "concurrency": cond.concurrency or self.concurrency,
                "repeats": self.repeats,
                "requests_per_user": self.requests_per_user,
                "min_requests": self.min_requests,
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
    def check(self) -> None:
        """Every check that can fail before a server starts, for every condition."""
        for spec in self.specs().values():
            prepare(spec)

    def run(self, root: Path | str | None = None, run: str | None = None, *,
            progress: bool = True) -> tuple[Path, list[SweepOutcome]]:
        """Measure (or resume) every condition into a run folder; returns it and the outcomes."""
        specs = self.specs()
        self.check()
        folder = run_folder(self.axis, self.study, run or _stamp(), root)
        outcomes: dict[str, SweepOutcome] = {}
        for r in range(self.repeats):  # repeat-major: drift lands on every condition alike
            for name, spec in specs.items():
                part = spec.model_copy(update={"repeats": r + 1})
                o = run_sweep(part, folder / name, progress=progress)
                prev = outcomes.get(name)
                if prev is None:
                    outcomes[name] = o
                else:
                    prev.written += o.written
                    prev.failed += o.failed
                    prev.superseded += o.superseded
        return folder, list(outcomes.values())

    def open_run(self, measure: bool, run: str = "", root: Path | str | None = None, *,
                 progress: bool = True) -> Path:
        """The run a notebook analyses: measured now (``measure``), named, or the newest."""
        if measure:
            folder, outcomes = self.run(root, run or None, progress=progress)
            for o in outcomes:
                print(o.summary())
            return folder
        if run:
            folder = run_folder(self.axis, self.study, run, root)
            if not folder.is_dir():
                raise SweepError(f"no run {run!r} under {folder.parent}")
            return folder
        folder = latest_run(self.axis, self.study, root)
        if folder is None:
            raise SweepError(f"no runs under {Path(root or paths.LEDGERS) / self.axis / self.study}: "
                             "measure first (measure = True, or `make measure-<axis>`)")
        return folder

    def load(self, folder: Path | str) -> pd.DataFrame:
        """The run's ledgers as a tidy frame with ``condition`` and its label."""
        df = load_ledgers(folder)
        if not df.empty:
            df["condition_label"] = [self.label(c) for c in df["condition"]]
        return df

    def describe_run(self, folder: Path | str, df: pd.DataFrame) -> str:
        """One markdown line: which run, on which engine, what it holds and what to distrust."""
        failed = int((df["status"] != "ok").sum()) if len(df) else 0
        flags = df["flags"].fillna("") if len(df) else pd.Series(dtype=str)
        busy = int(flags.str.contains("host_busy").sum())
        engines = sorted({str(v) for v in df.get("engine_version", pd.Series(dtype=str)).dropna()})
        parts = [f"Run **{Path(folder).name}**" + (f" (vLLM {', '.join(engines)})" if engines else "")
                 + f": {len(df) - failed} measured points, {failed} failure records"]
        if busy:
            parts.append(f"{busy} measured while another process used the CPU (flag `host_busy`; "
                         "read those points with care)")
        if len(self.condition_names()) > 1 or self.conditions:
            parts.append("conditions: " + ", ".join(self.label(c) for c in self.condition_names()))
        return "; ".join(parts) + "."

    def summarize(self, df: pd.DataFrame, **bootstrap: Any) -> pd.DataFrame:
        """Paired speedups per condition, arm, workload and concurrency (see :func:`summarize`);
        the bootstrap behind the intervals is kept in ``table.attrs["bootstrap"]``."""
        return summarize(df, labels={c: self.label(c) for c in self.condition_names()}, **bootstrap)


def absolute(df: pd.DataFrame, value: str = "output_tok_s") -> pd.DataFrame:
    """Absolute numbers per condition, arm, workload and concurrency: mean, min, max over repeats.

    Absolute values compare across conditions only as far as their spread allows: each
    repeat is a separate server start, and starts differ (up to 1.5x on the CPU machines).
    """
    ok = df[(df["status"] == "ok") & ~df["flags"].fillna("").str.contains("spec_no_drafts")]
    if ok.empty:
        return pd.DataFrame()
    keys = [k for k in ("condition", "condition_label", "arm", "workload", "concurrency") if k in ok]
    g = ok.groupby(keys, sort=False)[value]
    out = g.agg(["size", "mean", "min", "max"]).reset_index()
    return out.rename(columns={"size": "n", "mean": value, "min": f"{value}_min", "max": f"{value}_max"})


def by_category(df: pd.DataFrame) -> pd.DataFrame:
    """Per-request results per prompt category, paired per repeat: the per-user decode speedup
    of each category (mean of 1 / TPOT over its requests, drafter on / off).

    Aggregate throughput belongs to the whole point (categories share every batch), so a
    per-category *aggregate* speedup needs one workload per category; per-user decode speed
    is per request and splits cleanly. Points without a request sidecar are skipped.
    """
    from specnb.ledger import load_requests

    rows = []
    ok = df[(df["status"] == "ok") & ~df["flags"].fillna("").str.contains("spec_no_drafts")]
    for r in ok.itertuples():
        req = load_requests(r.path)
        if req.empty or "category" not in req:
            continue
        req = req[req["error"].isna() & (req["tpot_s"] > 0)]
        for cat, g in req.groupby(req["category"].fillna("(none)")):
            rows.append({"condition": r.condition, "arm": r.arm, "speculative": r.speculative,
                         "workload": r.workload, "concurrency": r.concurrency, "repeat": r.repeat,
                         "category": cat, "requests": len(g), "decode_tok_s": float((1 / g["tpot_s"]).mean())})
    per = pd.DataFrame(rows)
    if per.empty:
        return per
    keys = ["condition", "workload", "concurrency", "repeat", "category"]
    base = per[~per["speculative"].astype(bool)][keys + ["decode_tok_s"]]
    spec = per[per["speculative"].astype(bool)]
    pairs = spec.merge(base, on=keys, suffixes=("", "_base"))
    pairs["per_user_speedup"] = pairs["decode_tok_s"] / pairs["decode_tok_s_base"]
    out = (pairs.groupby(["condition", "arm", "workload", "concurrency", "category"])
           .agg(n=("per_user_speedup", "size"), requests=("requests", "sum"),
                per_user_speedup=("per_user_speedup", "mean"), lo=("per_user_speedup", "min"),
                hi=("per_user_speedup", "max")).reset_index())
    return out


def summarize(df: pd.DataFrame, labels: dict[str, str] | None = None, **bootstrap: Any) -> pd.DataFrame:
    """Paired speedup table per condition, arm, workload and concurrency, with the bootstrap
    intervals of :func:`specnb.analysis.bootstrap_speedups` (over server starts and prompts);
    never forms a ratio across conditions. ``speedup_min``/``speedup_max`` keep the plain
    spread over repeats."""
    from specnb.analysis import bootstrap_speedups

    boot = bootstrap_speedups(df, **bootstrap)
    t = boot.table.copy()
    if t.empty:
        return t
    if "condition" not in t:
        t.insert(0, "condition", "default")
    t.insert(list(t.columns).index("condition") + 1, "condition_label",
             [(labels or {}).get(c, c) for c in t["condition"]])
    t.attrs["bootstrap"] = boot
    return t


def _local_paths(cfg: dict[str, Any]) -> dict[str, Any]:
    """A draft model given relative to the repository means that folder, from any cwd."""
    model = cfg.get("model")
    if isinstance(model, str) and not Path(model).is_absolute() and (paths.ROOT / model).exists():
        return {**cfg, "model": str((paths.ROOT / model).resolve())}
    return dict(cfg)


def _stamp() -> str:
    return datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")


def run_folder(axis: str, study: str, run: str, root: Path | str | None = None) -> Path:
    if not run or "/" in run or run.startswith("."):
        raise SweepError(f"run name {run!r} must be a plain folder name")
    return Path(root or paths.LEDGERS) / axis / study / run


def latest_run(axis: str, study: str, root: Path | str | None = None) -> Path | None:
    """The newest run folder of a study (run names sort by time), or None."""
    base = Path(root or paths.LEDGERS) / axis / study
    if not base.is_dir():
        return None
    runs = sorted(p for p in base.iterdir() if p.is_dir() and not p.name.startswith("."))
    return runs[-1] if runs else None
