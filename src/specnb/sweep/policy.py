"""The policy a notebook or a tune measures, as a file: derived from a run once and written
beside it, then read from there (:func:`policy_file_for`); and the levels that measure its
switches (:func:`boundary_levels`). File work, so it lives on the sweep side: the derivation
itself is :func:`specnb.analysis.schedule.derive_policy`, a function of the run's frame."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

from specnb import paths
from specnb.analysis.schedule import (
    SCHEDULE_KEY,
    Rule,
    ScheduleError,
    derive_policy,
    drafter_methods,
    usable_rows,
)

__all__ = ["boundary_levels", "policy_file_for"]


def policy_file_for(source: str, workload: str, rule: Rule | str = Rule.LOWER_BOUND, root: str | None = None,
                    method: str | None = None) -> Path:
    """The policy to measure: ``source`` is a policy JSON file, a run folder, or ``"<axis>/<study>"``
    (its newest run). A policy derived from a run is written once beside it
    (``policy-<workload>-<rule>[-<method>].json``; the method where the run has several drafter
    methods) and read from there afterwards, so a notebook re-run measures and draws the same
    schedule."""
    from specnb.ledger import load_ledgers, write_once
    from specnb.ledger.runs import find_run

    p = Path(source)
    if p.suffix == ".json":
        if not p.is_file():
            raise ScheduleError(f"no policy file {source}")
        return p
    if p.is_dir() and not (Path(root or paths.LEDGERS) / source).is_dir():
        run = p
    else:
        axis, _, study = source.partition("/")
        if not study:
            raise ScheduleError(f"policy source {source!r}: give a policy .json, a run folder or '<axis>/<study>'")
        run = find_run(axis, study, "", root)
    stem = f"policy-{workload.replace('/', '_').replace(':', '-')}-{rule}"
    plain, by_method = run / f"{stem}.json", run / f"{stem}-{method}.json"
    if method is not None and by_method.is_file():
        return by_method
    if plain.is_file():
        return plain
    df = load_ledgers(run)
    several = len(drafter_methods(usable_rows(df, workload))) > 1
    out = by_method if method is not None and several else plain
    _, _, doc = derive_policy(df, workload=workload, rule=rule, source=str(run), method=method if several else None)
    write_once(out, doc.encode())
    return out


def boundary_levels(policy: Path, levels: Sequence[int]) -> list[int]:
    """The levels plus both sides of every switch of the policy's schedule (b and b + 1), where
    vLLM flips K as the batch size crosses the boundary."""
    cfg = json.loads(Path(policy).read_text())["speculative_config"]
    sched = cfg.get(SCHEDULE_KEY) or []
    extra = {b for (_, hi, k), (_, _, k2) in zip(sched, sched[1:], strict=False) if k != k2 for b in (hi, hi + 1)}
    return sorted(set(levels) | extra)
