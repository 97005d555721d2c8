"""The report of one run, as ``specnb report`` prints it and every notebook shows it.

A report is a list of sections; each is a function of the run's records
(:class:`specnb.ledger.records.RunRecords`, loaded once by :func:`specnb.ledger.records.load_run`)
and the report's options, returning its lines (none when it has nothing to say). No section
opens a file. :func:`report_blocks` yields the blocks in order (the CLI prints each as it comes,
so a section that fails leaves the ones before it printed); :func:`format_run_report` is the
whole text::

    from specnb.analysis.report import format_run_report
    from specnb.ledger.records import load_run
    print(format_run_report(load_run("ledgers/concurrency/cpu-demo/<run>")))

A tune run (``specnb tune``) reports its rounds and the config to deploy, then the report of
its last round.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import pandas as pd

from specnb import paths
from specnb.analysis.bootstrap import DEFAULT_N_BOOT, DEFAULT_SEED
from specnb.analysis.decisions import decide
from specnb.analysis.estimator import DEFAULT_CONFIDENCE, Scope
from specnb.analysis.kv import kv_capacity
from specnb.analysis.latency import (
    best_goodput,
    format_goodput,
    format_latency_threshold,
    goodput,
    latency_by_rate,
    latency_threshold,
)
from specnb.analysis.lossless import lossless, lossless_summary
from specnb.analysis.pairing import pairing_notes
from specnb.analysis.speedups import Speedups, paired_speedups
from specnb.analysis.text import (
    format_category_acceptance,
    format_decision_differences,
    format_decisions,
    format_kv_capacity,
    format_latency_table,
    format_machine,
    format_refused,
    format_schedules,
    format_speedup_table,
    format_thresholds,
)
from specnb.analysis.thresholds import thresholds
from specnb.ledger import Flag, json_cell
from specnb.ledger.names import TWO_PROCESSES, LoadMode, Status
from specnb.ledger.records import RunRecords

__all__ = ["ReportOptions", "SECTIONS", "format_run_report", "report_blocks"]


@dataclass(frozen=True)
class ReportOptions:
    """What a reader may change about a report: goodput's bootstrap replicates and seed, a context
    length for the KV sessions, and SLOs for goodput (``{"ttft_ms": 500, ...}``)."""

    n_boot: int = DEFAULT_N_BOOT
    seed: int = DEFAULT_SEED
    context_tokens: int | None = None
    slos: dict[str, float] | None = None
    scope: Scope = Scope.PROMPTS  # what the intervals cover (prompts like the panel's, or this panel)


Section = Callable[[RunRecords, ReportOptions], list[str]]


def _split(df: pd.DataFrame) -> tuple[pd.DataFrame, pd.DataFrame]:
    """The closed-loop points and the open-loop (arrivals at a rate) ones."""
    is_rate = (df["load_mode"] == LoadMode.RATE.shape) if "load_mode" in df.columns else pd.Series(False, index=df.index)
    return df[~is_rate], df[is_rate]


def _closed_speedups(run: RunRecords, opts: ReportOptions) -> Speedups | None:
    """The closed-loop points' paired table, made once per run and scope (every section that reads
    it shares it); None without closed-loop points."""
    key = ("closed", opts.scope)
    if key not in run.cache:
        closed, _ = _split(run.df)
        run.cache[key] = paired_speedups(closed, confidence=DEFAULT_CONFIDENCE, scope=opts.scope) if len(closed) else None
    return run.cache[key]


def machine(run: RunRecords, opts: ReportOptions) -> list[str]:
    """Where the run was measured, and what the pairing had to say about its points."""
    return [format_machine(run.df), *pairing_notes(run.df, None)]


def paired(run: RunRecords, opts: ReportOptions) -> list[str]:
    """The closed-loop table (one interval per row), the answer across levels and the decisions."""
    sp = _closed_speedups(run, opts)
    if sp is None:
        return []
    out = ["", format_speedup_table(sp.table, DEFAULT_CONFIDENCE)]
    if len(sp.table):
        out += ["", f"across levels (a fixed sequence: pays tested from the lowest level up, loses from the "
                    f"highest down; family-wise {DEFAULT_CONFIDENCE:.0%}):", format_thresholds(thresholds(sp)),
                "", "decision:", format_decisions(decide(sp))]
    return out


def drafters(run: RunRecords, opts: ReportOptions) -> list[str]:
    """Which drafter to attach per workload and level, where drafters of several kinds were
    measured on the same prompts (:mod:`specnb.analysis.choice`)."""
    from specnb.analysis.choice import choice_lines, drafter_choice
    from specnb.ledger import arm_configs

    if "method" not in run.df.columns or run.df["method"].dropna().nunique() < 2:
        return []
    sp = _closed_speedups(run, opts)
    return choice_lines(drafter_choice(sp, arm_configs(run.df)), sp.confidence) if sp is not None else []


def break_even_map(run: RunRecords, opts: ReportOptions) -> list[str]:
    """Where a run holds synthetic-acceptance cells of one drafter kind at two acceptance lengths or
    more (a map, :mod:`specnb.analysis.breakeven`): the break-even acceptance length per kind, K and
    level with its band, and the run's real drafters read against their kind's cells."""
    from specnb.analysis.breakeven import (
        break_even,
        break_even_lines,
        drafted_share,
        is_map_run,
        map_cells,
        predict,
        prediction_lines,
    )
    from specnb.analysis.pairing import usable
    from specnb.ledger import arm_configs

    sp = _closed_speedups(run, opts)
    configs = arm_configs(run.df)
    if sp is None or not is_map_run(sp.table, configs):
        return []
    cells = map_cells(sp.table, configs)
    out = ["", "break-even map (synthetic acceptance set, the proposer real; the least acceptance length that pays, "
               "linear between the cells, [band: where the cells' intervals include 1.0]):",
           *break_even_lines(break_even(cells))]
    pred = prediction_lines(predict(cells, drafted_share(usable(run.df))))
    if pred:
        out += ["", "real drafters read against their kind's cells at their measured acceptance length:", *pred]
    return out


def kv(run: RunRecords, opts: ReportOptions) -> list[str]:
    """The KV pool each drafter arm's server had against the baseline's (seed 000)."""
    closed, _ = _split(run.df)
    if not len(closed):
        return []
    cap = kv_capacity(closed, context_tokens=opts.context_tokens)
    return ["", "KV capacity:", format_kv_capacity(cap)] if not cap.empty and cap["speculative"].any() else []


def open_loop(run: RunRecords, opts: ReportOptions) -> list[str]:
    """Open-loop points: the table over offered rate, latency against rate and its threshold."""
    _, rated = _split(run.df)
    if not len(rated):
        return []
    rsp = paired_speedups(rated, confidence=DEFAULT_CONFIDENCE, scope=opts.scope)
    out = ["", "open loop (arrivals at a rate):", format_speedup_table(rsp.table, DEFAULT_CONFIDENCE)]
    rates = latency_by_rate(rated)
    if not rates.empty:
        out += ["", "latency against offered rate (means over repeats):", format_latency_table(rates)]
    ths = latency_threshold(rated, confidence=DEFAULT_CONFIDENCE)
    if ths:
        out += ["", "per-token latency across offered rates (the per-user speedup's interval, a fixed sequence "
                    "over the rates):", *[format_latency_threshold(t) for t in ths]]
    return out


def goodput_under_slos(run: RunRecords, opts: ReportOptions) -> list[str]:
    """Goodput under the reader's SLOs (``--slo``), bootstrap over starts and prompts."""
    if not opts.slos:
        return []
    _, rated = _split(run.df)
    best = best_goodput(goodput(run.df, opts.slos, n_boot=opts.n_boot, seed=opts.seed, confidence=DEFAULT_CONFIDENCE))
    return ["", "goodput under SLOs (output tok/s of requests that met every SLO; bootstrap over starts and "
                "prompts):", format_goodput(best, "rate" if len(rated) else "c")]


def schedule(run: RunRecords, opts: ReportOptions) -> list[str]:
    """The K schedule to deploy per workload and drafter (``specnb policy`` writes it)."""
    closed, _ = _split(run.df)
    sched = format_schedules(closed) if len(closed) else ""
    return ["", "the schedule to deploy (vLLM dynamic speculation; `specnb policy` writes it):", sched] if sched else []


def startup(run: RunRecords, opts: ReportOptions) -> list[str]:
    """Start-up decisions of vLLM's that differ between the two servers of a pair."""
    closed, _ = _split(run.df)
    decided = format_decision_differences(closed if len(closed) else run.df)
    return ["", "start-up decisions that differ within a pair (vLLM's log; the speedup includes them):",
            decided] if decided else []


def refused(run: RunRecords, opts: ReportOptions) -> list[str]:
    """Points refused before any server started (the build cannot serve them on this machine)."""
    text = format_refused(run.df)
    return ["", "refused before any server started (this engine build cannot serve it on that machine):",
            text] if text else []


def lossless_check(run: RunRecords, opts: ReportOptions) -> list[str]:
    """Greedy outputs compared request by request, with the baseline's margins where they part."""
    same = lossless(run.df)
    return ["", "lossless check (temperature 0; outputs compared request by request):",
            lossless_summary(same, margins=run.margins)] if not same.empty else []


def categories(run: RunRecords, opts: ReportOptions) -> list[str]:
    """Acceptance per prompt category (vLLM --per-request-spec-decode-metrics)."""
    return ["", format_category_acceptance(run.categories)] if not run.categories.empty else []


def failures(run: RunRecords, opts: ReportOptions) -> list[str]:
    failed = int((run.df["status"] != Status.OK).sum())
    where = paths.portable(str(run.folder))  # as a ledger writes a path: never the reader's home or checkout
    return [f"{failed} failed point record(s) under {where} (status=failed in the ledgers)"] if failed else []


def flags(run: RunRecords, opts: ReportOptions) -> list[str]:
    seen = Counter(f for cell in run.df["flags"].fillna("") for f in cell.split(",") if f and f != Flag.FAILED)
    if not seen:
        return []
    return ["flags: " + ", ".join(f"{k} x{v}" for k, v in sorted(seen.items()))
            + f"  (see the ledgers; {Flag.SPEC_NO_DRAFTS} and {Flag.INVALID} points are left out of the pairs)"]


def structured(run: RunRecords, opts: ReportOptions) -> list[str]:
    """Which points ran under a grammar (a response_format), and the cause named where a
    speculative arm did not draft under one (seed 004: some stacks fall back to plain decoding
    when a grammar is active, silently)."""
    from specnb.ledger.names import has_flag

    df = run.df
    if "structured_output" not in df.columns or df["structured_output"].isna().all():
        return []
    under = df[df["structured_output"].notna() & (df["status"] == Status.OK)]
    if under.empty:
        return []
    modes = ", ".join(sorted(set(under["structured_output"])))
    out = [f"structured output: {len(under)} point(s) ran under a grammar ({modes}: every request carried that "
           "response_format); their acceptance is the drafter's under the grammar"]
    spec = under[under["speculative"].astype(bool)]
    if len(spec):
        dead = spec[has_flag(spec, Flag.SPEC_NO_DRAFTS)]
        if len(dead):
            out.append(f"{Flag.SPEC_NO_DRAFTS} under structured output: {len(dead)} of {len(spec)} speculative point(s) "
                       f"made no drafts with the grammar on ({', '.join(sorted(set(dead['arm'])))}): the engine fell "
                       "back to plain decoding under the grammar, so those points measure no drafter")
        else:
            drafts = int(pd.to_numeric(spec["num_drafts"], errors="coerce").fillna(0).sum())
            out.append(f"the drafter drafted under the grammar: {drafts:,} drafts over {len(spec)} speculative point(s)")
    return out


def conversation(run: RunRecords, opts: ReportOptions) -> list[str]:
    """Conversation points: what the prefix cache served turn by turn, and the speedup on total
    and on computed tokens beside the output one (:mod:`specnb.analysis.conversation`)."""
    if "load_mode" not in run.df.columns or not (run.df["load_mode"] == LoadMode.CONVERSATION.shape).any():
        return []
    from specnb.analysis.conversation import conversation_lines

    return conversation_lines(run.df, run.turns)


def layout(run: RunRecords, opts: ReportOptions) -> list[str]:
    """A note when the run's launched servers did not use vLLM's own process layout (the
    two-process option changes the drafter arm's speed on vLLM-CPU: docs/timing.md)."""
    (key, value), = TWO_PROCESSES.items()
    ok = run.df[run.df["status"] == Status.OK]
    layouts = {(json_cell(env) or {}).get(key) == value
               for env in ok.drop_duplicates("path")["server_env"]} if "server_env" in ok.columns else set()
    if True not in layouts:
        return []
    which = "every" if layouts == {True} else "some"
    return [f"serving layout: {which} launched server ran vLLM-CPU's worker inside its engine core ({key}={value}: two "
            "processes, not vLLM's three); on this engine that makes the drafter arm faster and leaves the baseline "
            "as it is (docs/timing.md), so compare with runs of the same layout"]


def search(run: RunRecords, opts: ReportOptions) -> list[str]:
    return list(run.search)


def timing(run: RunRecords, opts: ReportOptions) -> list[str]:
    return list(run.timing)


def predicted(run: RunRecords, opts: ReportOptions) -> list[str]:
    """The prediction records of the run (``specnb predict``) beside the measured acceptance."""
    from specnb.analysis.predicted import predicted_lines, predicted_table

    return predicted_lines(predicted_table(run.df, run.predicted)) if not run.predicted.empty else []


def anatomy(run: RunRecords, opts: ReportOptions) -> list[str]:
    """A step-anatomy run (``specnb anatomy``): its windows' table (it holds no paired points)."""
    from specnb.analysis.anatomy import format_anatomy

    return [format_anatomy(run.anatomy)] if run.anatomy else []


def conditions(run: RunRecords, opts: ReportOptions) -> list[str]:
    """A study's conditions against the first one it ran (a serving lever paired like an arm);
    none where there is one condition or the conditions change the sampling (not a serving lever)."""
    from specnb.analysis.conditions import (
        condition_effects,
        condition_lines,
        serving_gains,
        serving_verdicts,
        verdict_lines,
    )
    from specnb.analysis.pairing import AnalysisError, usable

    df = run.df
    if "condition" not in df.columns or df["condition"].nunique() < 2:
        return []
    ok = usable(df)
    if ok.empty or ok["condition"].nunique() < 2 or ok["sampling_key"].nunique() > 1:
        return []
    ref = ok.sort_values("started_at")["condition"].iloc[0]
    try:
        eff = condition_effects(df, ref)
    except AnalysisError as exc:  # PairingError among them
        return [f"conditions not compared with each other: {exc}"]
    if eff.empty:
        return []
    out = ["", f"conditions against {ref} (the first one run): each arm's tok/s under the condition over "
               "its tok/s under the reference, paired per repeat, with the one interval (starts and prompts):",
           *condition_lines(eff)]
    try:
        verdicts = serving_verdicts(serving_gains(df, ref), ref)
    except AnalysisError:  # no single baseline arm, or none under the reference: nothing to weigh
        return out
    if len(verdicts):
        out += ["", f"the serving config against the drafter (seed 000: fix the serving config first; every "
                    f"condition and arm over {ref}'s baseline, paired per repeat):", *verdict_lines(verdicts, ref)]
    return out


# the report's sections, in the order it prints them
SECTIONS: tuple[Section, ...] = (machine, paired, drafters, break_even_map, kv, open_loop, goodput_under_slos, schedule, startup,
                                 refused, lossless_check, categories, failures, flags, structured, conversation, layout,
                                 search, timing, predicted, conditions)
ANATOMY_SECTIONS: tuple[Section, ...] = (anatomy,)  # a run of profiled windows, no paired points


def report_blocks(run: RunRecords, opts: ReportOptions | None = None) -> Iterator[str]:
    """The report's lines (a line may hold several, a table), section by section. A run without
    ledgers yields nothing (the caller says so); an error in a section propagates."""
    opts = opts or ReportOptions()
    if run.tune is not None:
        from specnb.analysis.tune import reread_lines, tune_lines

        yield from tune_lines(run.tune)
        if run.last_round is None:
            return
        yield from reread_lines(run.tune, run.last_round.df)
        yield f"\n{run.last_round.folder.name} (baseline, static K and the candidate, paired on one run):"
        run = run.last_round
    for section in SECTIONS if not run.df.empty else ANATOMY_SECTIONS:  # chosen by what the run holds
        yield from section(run, opts)


def format_run_report(run: RunRecords, opts: ReportOptions | None = None) -> str:
    """The whole report as one text, as ``specnb report`` prints it."""
    return "\n".join(report_blocks(run, opts))
