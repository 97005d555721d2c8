"""Plain text for the terminal: the tables and lines ``specnb report`` prints.

Curves are labelled by the keys that tell them apart (a report usually holds one sweep, and
a plain sweep is the condition ``default``: naming either on every line would be noise).
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from typing import Any

import pandas as pd

from specnb.analysis.decisions import Decision
from specnb.analysis.estimator import DEFAULT_CONFIDENCE, LOSES, PAYS
from specnb.analysis.pairing import (
    AnalysisError,
    condition_column,
    curve_label,
    isna,
    paired,
    redundant_keys,
    usable,
)
from specnb.analysis.thresholds import UNDECIDED, Threshold
from specnb.ledger import PLAIN_CONDITION, REFUSED_ERROR, arm_configs
from specnb.ledger.names import LoadMode, Status

__all__ = [
    "format_refused",
    "format_decision_differences",
    "format_speedup_table",
    "format_threshold",
    "format_thresholds",
    "format_decision",
    "format_decisions",
    "format_kv_capacity",
    "format_category_acceptance",
    "format_schedules",
    "format_machine",
]


def _same_everywhere(items: Sequence[Threshold] | Sequence[Decision]) -> list[str]:
    return redundant_keys(pd.DataFrame([x.group for x in items]))


def _f(v: Any, spec: str = ".2f") -> str:
    return "-" if v is None or pd.isna(v) else format(v, spec)


def _levels(levels: Sequence[float]) -> str:
    return ", ".join(f"{c:g}" for c in levels)


def _bound(v: float) -> str:
    """An interval's end, two decimals; past 0.01 or 99 (a few starts with one degree of freedom)
    as ``<0.01`` / ``>99``: the digits would only suggest a precision the interval does not have."""
    if v < 0.01:
        return "<0.01"
    if v > 99:
        return ">99"
    return f"{v:.2f}"


def _pct(confidence: float) -> str:
    return f"{100 * confidence:.4g}%"


def format_speedup_table(table: pd.DataFrame, confidence: float = DEFAULT_CONFIDENCE) -> str:
    """Plain-text table: paired speedups with the one interval (docs/statistics.md), per-user and
    computed-token speedups, acceptance, the share of output the drafter supplied, and each
    level's own decision."""
    if table.empty:
        return "(no paired points)"
    pct = _pct(confidence)
    # sweep / condition columns only when they tell rows apart
    shown = [k for k in ("sweep", "condition") if k in table.columns and k not in redundant_keys(table)]
    lead = "".join(f"{k:<12} " for k in shown)
    by_rate = "rate_rps" in table.columns and table["rate_rps"].notna().all()
    head = (f"{lead}{'arm':<12} {'workload':<10} {'rate' if by_rate else 'c':>4} {'n':>2}    {'base tok/s':>8} {'spec tok/s':>10} "
            f"{'speedup [' + pct + ' CI]':>20} {'per-user [' + pct + ' CI]':>21} {'computed':>8} "
            f"{'acc len':>7} {'acc %':>5} {'drafted %':>9}  decision")
    lines = [head, "-" * len(head)]

    def ci(row: Any, m: str) -> str:
        lo, hi = getattr(row, m + "_lo"), getattr(row, m + "_hi")
        if pd.isna(lo) or pd.isna(hi):
            return f"{_f(getattr(row, m))}x (no CI)"
        return f"{_f(getattr(row, m))}x [{_bound(lo)}, {_bound(hi)}]"

    marks: dict[str, str] = {}
    for row in table.itertuples(index=False):
        rate = None if pd.isna(row.acceptance_rate) else 100 * row.acceptance_rate
        share = None if pd.isna(row.accepted_output_share) else 100 * row.accepted_output_share
        first = "".join(f"{'-' if isna(getattr(row, k)) else str(getattr(row, k)):<12} " for k in shown)
        mark = ""
        conf = float(getattr(row, "confidence", confidence))
        kind = getattr(row, "design", "fixed")
        if kind == "sequential":
            mark += "s"
            marks["s"] = (f"s a sequential level: its interval is the look it stopped at (n repeats), {_pct(conf)} at "
                          f"each look, {pct} over all of a level's looks however early it stopped")
        elif kind == "search":
            mark += "r"
            search_confs = sorted({float(c) for c, k in zip(table["confidence"], table["design"], strict=True)
                                   if k == "search"}, reverse=True)
            marks["r"] = ("r an adaptive search: each round's levels a family of their own (the first round's at "
                          "half of alpha, each later round's at its share of the other half): "
                          + " and ".join(_pct(c) for c in search_confs))
        if str(getattr(row, "order", "")).startswith("unbalanced"):
            mark += "o"
            marks["o"] = ("o arm orders unbalanced (odd repeats: more A B than B A): the two orders weighted equally, "
                          "n - 2 degrees of freedom for the starts")
        if getattr(row, "scope", "prompts") == "panel" and isinstance(row.note, str) and row.note:
            mark += "+"
            marks["+"] = f"+ this panel only ({row.note})"
        if pd.isna(row.speedup_lo):
            marks["no CI"] = f"no CI: {row.note}"
        decision = row.decision if isinstance(getattr(row, "decision", None), str) else (
            "open" if getattr(row, "open", False) else UNDECIDED)
        lines.append(
            f"{first}{row.arm:<12} {row.workload:<10} {(row.rate_rps if by_rate else row.concurrency):>4g} "
            f"{row.n_repeats:>2}{mark:<3}"
            f"{_f(row.base_tok_s, '.1f'):>8} {_f(row.spec_tok_s, '.1f'):>10} {ci(row, 'speedup'):>20} "
            f"{ci(row, 'per_user_speedup'):>21} {_f(row.computed_speedup):>7}x "
            f"{_f(row.acceptance_length):>7} {_f(rate, '.0f'):>5} {_f(share, '.0f'):>9}  {decision}"
        )
    asked_panel = "scope" in table.columns and (table["scope"] == "panel").all() and not any(
        isinstance(n, str) and n for n in table.get("note", pd.Series(dtype=object)))
    over = ("server starts (this panel's prompts only, as asked)" if asked_panel else
            "server starts and the panel's prompts within their categories (prompts like these)")
    lines.append(f"speedup = speculative / baseline output tok/s (steady window), paired per repeat (server start); "
                 f"estimate: the mean log ratio over repeats; [{pct} CI]: t interval over {over}; docs/statistics.md.")
    lines.append("per-user = mean decode tok/s per request; computed = (uncached prompt + output) "
                 "tok/s; drafted % = accepted draft tokens / output tokens; decision: the level's own interval "
                 "(across levels: the decision section).")
    lines += [marks[k] for k in ("s", "r", "o", "+", "no CI") if k in marks]
    return "\n".join(lines)


def _range(th: Threshold) -> str:
    return f"c={th.c_min:g}" if th.c_min == th.c_max else f"c={th.c_min:g}..{th.c_max:g}"


def _outside_text(th: Threshold) -> str:
    out = th.outside()
    if not out:
        return ""
    parts = [f"c={c:g} {d} on its own interval" for c, d in out.items()]
    return ("; " + "; ".join(parts) + " (outside the family-wise answer: the sequence from the "
            + ("lowest" if any(d == PAYS for d in out.values()) else "highest") + " level stopped before it)")


def _bracket(th: Threshold) -> str:
    """Where the crossing from paying to losing lies, in measured levels."""
    near = (f"; the estimates cross 1.0 near c~{th.concurrency:.1f} (interpolated)"
            if th.concurrency is not None and th.kind == "crosses" else "")
    if th.bracketed:
        return f"the crossing lies between c={th.lo:g} and c={th.hi:g}{near}"
    if math.isfinite(th.lo):
        return f"the crossing lies above c={th.lo:g} (no level is known to lose){near}"
    if math.isfinite(th.hi):
        return f"the crossing lies below c={th.hi:g} (no level is known to pay){near}"
    return ""


def format_threshold(th: Threshold, omit: Sequence[str] = ("sweep",)) -> str:
    """One line: what holds across the curve's levels at a family-wise rate (pays up to c_L, loses
    from c_H), where the crossing lies, and what is undecided."""
    pays, loses, undecided = th.at(PAYS), th.at(LOSES), th.at(UNDECIDED)
    if pays and not undecided and not loses:
        text = f"pays at every measured level ({_range(th)})"
    elif loses and not undecided and not pays:
        text = f"loses at every measured level ({_range(th)})"
    else:
        parts = ([f"pays at every c <= {th.pays_through:g}"] if pays else []) + (
            [f"loses at every c >= {th.loses_from:g}"] if loses else [])
        head = "; ".join(parts) if parts else "no level decided across the curve"
        bracket = _bracket(th) if parts else (
            f"the estimates cross 1.0 near c~{th.concurrency:.1f} (interpolated)" if th.concurrency is not None else "")
        text = head + (f"; {bracket}" if bracket else "") + (f"; undecided at c={_levels(undecided)}" if undecided else "")
    text += _outside_text(th)
    what = "" if th.metric == "speedup" else f" [{th.metric}]"
    return f"{curve_label(th.group, omit)}{what}: {text}"


def format_thresholds(ths: Sequence[Threshold]) -> str:
    """One line per curve, labelled by the curve keys that differ between the curves."""
    omit = _same_everywhere(ths)
    return "\n".join(format_threshold(t, omit) for t in ths) if ths else "(no curves)"


def format_decision(d: Decision, omit: Sequence[str] = ("sweep",)) -> str:
    """Two lines: attach the drafter up to c_L and leave it off from c_H (family-wise), what is
    undecided; then, indented, the acceptance evidence and seed 004's verdict on it."""
    th = d.threshold
    pays, undecided, loses = th.at(PAYS), th.at(UNDECIDED), th.at(LOSES)
    if pays and not undecided and not loses:
        head = f"attach the drafter: it pays at every measured concurrency ({_range(th)})"
    elif loses and not undecided and not pays:
        head = f"leave the drafter off: it loses at every measured concurrency ({_range(th)})"
    elif not pays and not loses:
        head = f"no answer across the levels: undecided at c={_levels(undecided)} (an interval spans 1.0, or the " \
               "sequence stopped before the level)"
    else:
        parts = ([f"attach the drafter at c <= {th.pays_through:g} (it pays at c={_levels(pays)})"] if pays else []) + (
            [f"undecided at c={_levels(undecided)}"] if undecided else []) + (
            [f"leave it off at c >= {th.loses_from:g} (it loses at c={_levels(loses)})"] if loses else [])
        head = "; ".join(parts)
        bracket = _bracket(th)
        if bracket:
            head += f" [{bracket}]"
    head += _outside_text(th)
    line = f"{curve_label(d.group, omit)}: {head}"
    if d.acceptance_rate is None:
        return line
    ev = f"at c~{d.at_concurrency:.1f}: acceptance {d.acceptance_rate:.0%} -> seed 004 rule: {d.verdict}"
    if (d.verdict == "worth it" and loses and not pays) or (d.verdict == "switch it off" and pays and not loses):
        ev += " (the measured speedup overrules it)"
    ev += f"; acceptance length {_f(d.acceptance_length)}"
    if d.accepted_output_share is not None:
        ev += f", drafter supplied {d.accepted_output_share:.0%} of output"
    if d.per_user_speedup is not None:
        ev += f", per-user {d.per_user_speedup:.2f}x"
    if d.method == "ngram":
        ev += " (n-gram: rate and length count only steps where it drafted)"
    return f"{line}\n    {ev}"


def format_decisions(ds: Sequence[Decision]) -> str:
    """One entry per curve, labelled by the curve keys that differ between the curves."""
    omit = _same_everywhere(ds)
    return "\n".join(format_decision(d, omit) for d in ds) if ds else "(no curves)"


def format_kv_capacity(kv: pd.DataFrame) -> str:
    """One line per speculative arm: its KV pool against the baseline's, and sessions if asked."""
    if kv.empty:
        return "(no KV capacity in the ledgers)"
    lines = []
    for row in kv.itertuples(index=False):
        if not row.speculative or row.baseline_kv_cache_tokens is None or pd.isna(row.baseline_kv_cache_tokens):
            continue
        cond = getattr(row, "condition", None)
        label = row.arm if isna(cond) or cond == PLAIN_CONDITION else f"{cond} / {row.arm}"
        text = (f"{label}: KV pool {row.kv_cache_tokens:,.0f} tokens vs {row.baseline_kv_cache_tokens:,.0f} "
                f"without the drafter (the drafter takes {row.drafter_kv_share:.0%})")
        if row.kv_cache_tokens_min != row.kv_cache_tokens_max:
            text += f" [varies {row.kv_cache_tokens_min:,.0f}-{row.kv_cache_tokens_max:,.0f} across starts]"
        if row.sessions is not None and not pd.isna(row.sessions):
            text += (f"; at {row.context_tokens:,.0f}-token context: {row.baseline_sessions:.1f} -> "
                     f"{row.sessions:.1f} concurrent sessions")
        lines.append(text)
    return "\n".join(lines) if lines else "(no speculative arm with a baseline KV pool)"


def format_category_acceptance(cats: pd.DataFrame) -> str:
    """Per prompt category: mean acceptance length and acceptance rate pooled over repeats, from
    :func:`specnb.ledger.load_spec_by_category` (vLLM's per-request metrics). A folder holding
    several sweeps (a study's conditions: temperatures, checkpoints) gets a sweep column: their
    acceptance is never pooled."""
    ok = usable(cats) if "status" in cats.columns else cats
    if ok.empty:
        return "(no per-request acceptance in these ledgers)"
    cond = condition_column(ok)
    several = cond is not None
    keys = ([cond] if several else []) + ["arm", "workload", "concurrency", "category"]
    g = ok.groupby(keys, sort=True)[
        ["requests", "num_spec_steps", "num_draft_tokens", "num_accepted_draft_tokens", "output_tokens"]].sum()
    width = max(len(str(v)) for v in ok[cond]) if several else 0
    lead = f"{cond:<{width}} " if several else ""
    head = (f"{lead}{'arm':<12} {'workload':<14} {'c':>3} {'category':<16} {'requests':>8} {'accept len':>10} "
            f"{'accept %':>8} {'drafted %':>9}")
    lines = [head, "-" * len(head)]

    def shown(r) -> tuple[str, str, str]:
        mal = 1 + r.num_accepted_draft_tokens / r.num_spec_steps if r.num_spec_steps else None
        rate = 100 * r.num_accepted_draft_tokens / r.num_draft_tokens if r.num_draft_tokens else None
        share = 100 * r.num_accepted_draft_tokens / r.output_tokens if r.output_tokens else None
        return ("-" if mal is None else f"{mal:.2f}", "-" if rate is None else f"{rate:.0f}",
                "-" if share is None else f"{share:.0f}")

    # a category whose every level prints the same numbers (the same requests, drafted alike at
    # every level: greedy n-gram on one panel) is one row, its requests summed; else one per level
    pooled = False
    per_level = g.reset_index()
    for key, rows in per_level.groupby(keys[:-2] + ["category"], sort=True):
        rows = rows.sort_values("concurrency")
        vals = [shown(r) for r in rows.itertuples(index=False)]
        if len(rows) > 1 and len(set(vals)) == 1:
            pooled = True
            entries = [("all", int(rows["requests"].sum()), vals[0])]
        else:
            entries = [(str(int(c)), int(n), v) for c, n, v in zip(rows["concurrency"], rows["requests"], vals,
                                                                    strict=True)]
        arm, wl, cat = key[-3], key[-2], key[-1]
        lead = f"{key[0]:<{width}} " if several else ""
        for c, n, (mal, rate, share) in entries:
            lines.append(f"{lead}{arm:<12} {wl:<14} {c:>3} {cat:<16} {n:>8} {mal:>10} {rate:>8} {share:>9}")
    lines.append("per prompt category, pooled over requests and repeats (vLLM --per-request-spec-decode-metrics); "
                 "drafted % = accepted draft tokens / output tokens."
                 + (" c = all: every level gave the same numbers, pooled into one row." if pooled else ""))
    return "\n".join(lines)


def format_latency_table(t: pd.DataFrame) -> str:
    """TTFT and TPOT p50 / p99 per arm and offered rate, with the rate achieved and peak in flight."""
    head = (f"{'arm':<12} {'workload':<10} {'rate':>6} {'achieved':>8} {'peak':>4} {'TTFT p50':>9} {'TTFT p99':>9} "
            f"{'TPOT p50':>9} {'TPOT p99':>9} {'late p99':>9}")
    lines = [head, "-" * len(head)]
    for r in t.itertuples(index=False):
        lines.append(f"{r.arm:<12} {r.workload:<10} {r.rate_rps:>6g} {_f(getattr(r, 'achieved_rate_rps', None)):>8} "
                     f"{_f(getattr(r, 'peak_in_flight', None), '.0f'):>4} {_f(r.p50_ttft_ms, '.0f'):>9} "
                     f"{_f(r.p99_ttft_ms, '.0f'):>9} {_f(r.p50_tpot_ms, '.1f'):>9} {_f(r.p99_tpot_ms, '.1f'):>9} "
                     f"{_f(getattr(r, 'p99_send_lateness_ms', None), '.0f'):>9}")
    lines.append("rate and achieved in requests/s; TTFT, TPOT and send lateness (how late the client sent a "
                 "request against its schedule) in ms.")
    return "\n".join(lines)


def format_schedules(df: pd.DataFrame) -> str:
    """The K schedule per workload of a closed-loop run with drafter arms; empty otherwise."""
    from specnb.analysis.schedule import (
        ScheduleError,
        derive_policy,
        drafter_methods,
        format_policy,
        off_arms,
    )

    if df.empty or not df["speculative"].astype(bool).any() or ("load_mode" in df.columns and (df["load_mode"] == LoadMode.RATE.shape).all()):
        return ""
    if "condition" in df.columns and df["condition"].nunique() > 1:
        return ""
    if "sweep" in df.columns and df["sweep"].nunique() > 1:
        return ""  # several sweeps in one folder: a schedule is derived from one (specnb policy on its folder)
    if "tune_round" in df.columns and df["tune_round"].notna().any():
        return ""  # a tune round measures a candidate: its verdict is the tune's (specnb.analysis.tune)
    offs = off_arms(df)  # drafter loaded, K = 0 everywhere: evidence for a derivation, not a schedule under test
    if any((cfg or {}).get("num_speculative_tokens_per_batch_size")
           for arm, cfg in arm_configs(df).items() if arm not in offs):
        return ""  # a run that measures a schedule: the verdict is in its table, not a new schedule
    out = []
    for wl in sorted(set(df["workload"])):
        methods = drafter_methods(df[df["workload"] == wl])
        for method in methods or [None]:  # one schedule per drafter method
            label = f"{wl} ({method})" if len(methods) > 1 else wl
            try:
                config, chosen, _ = derive_policy(df, workload=wl, method=method)
            except ScheduleError as exc:
                out.append(f"{label}: {exc}")
                continue
            out.append(f"{label}:\n" + format_policy(config, chosen, "lower_bound"))
    return "\n".join(out)


def format_machine(df: pd.DataFrame) -> str:
    """Where the ledgers were measured: one line per machine and engine build (from provenance).
    Numbers from one machine are that machine's: the same sweep elsewhere can cross 1.0 elsewhere."""
    if df.empty or "machine" not in df.columns:
        return "measured on: (no provenance in these ledgers)"
    lines = []
    # a server that never started reports no engine build: its failure record is not a machine
    ok = df[df["status"] == Status.OK] if "status" in df.columns and (df["status"] == Status.OK).any() else df
    cols = [c for c in ("machine", "engine_version", "vllm_version") if c in ok.columns]

    def known(v) -> bool:
        return v is not None and not (isinstance(v, float) and pd.isna(v)) and str(v) != ""

    for _, r in ok[cols].drop_duplicates().iterrows():
        if known(r.get("engine_version")):
            engine = f"vLLM {r['engine_version']}"
            if known(r.get("vllm_version")) and r.get("vllm_version") != r.get("engine_version"):
                engine += f" (installed {r['vllm_version']})"
        elif known(r.get("vllm_version")):  # no server ran (every point refused or failed to start)
            engine = f"vLLM {r['vllm_version']} (the installed build; no server ran)"
        else:
            engine = "vLLM ?"
        lines.append(f"measured on: {r['machine']}; engine {engine}")
    return "\n".join(lines)


def format_decision_differences(df: pd.DataFrame, baseline: str | None = None) -> str:
    """One line per arm whose servers' start-up decisions (``server.startup_decisions``: async
    scheduling, model runner, graph mode, kernels ...) differ from its baseline's in a pair, with
    what differs; "" when every pair's two servers decided alike (or the ledgers do not say)."""
    if df.empty or "startup_decisions" not in df.columns or df["startup_decisions"].isna().all():
        return ""
    try:
        pairs = paired(df, baseline)
    except AnalysisError:
        return ""
    if pairs.empty or "startup_decisions_base" not in pairs.columns:
        return ""
    seen: dict[str, dict[str, tuple[Any, Any]]] = {}
    for r in pairs.itertuples(index=False):
        if not isinstance(r.startup_decisions, str) or not isinstance(r.startup_decisions_base, str):
            continue
        a, b = json.loads(r.startup_decisions), json.loads(r.startup_decisions_base)
        diff = seen.setdefault(r.arm, {})
        for key in sorted(set(a) | set(b)):
            if a.get(key) != b.get(key):
                diff.setdefault(key, (a.get(key), b.get(key)))
    base = pairs["baseline_arm"].iloc[0]

    def show(v: Any) -> str:
        return "unstated" if v is None else ("on" if v is True else "off" if v is False else
                                             ", ".join(map(str, v)) if isinstance(v, list) else str(v))

    return "\n".join(f"{arm} vs {base}: " + "; ".join(f"{k} {show(x)} vs {show(y)}" for k, (x, y) in d.items())
                     for arm, d in sorted(seen.items()) if d)


def format_refused(df: pd.DataFrame) -> str:
    """One line per condition and arm that preflight refused (the engine build cannot serve it on
    the machine that ran the sweep; nothing was started for it), with the reason; "" when none."""
    if df.empty or "error_type" not in df.columns:
        return ""
    ref = df[df["error_type"] == REFUSED_ERROR]
    if ref.empty:
        return ""
    where = next((k for k in ("condition", "sweep") if k in ref.columns), None)
    lines = []
    for _, r in ref.drop_duplicates([c for c in (where, "arm") if c]).iterrows():
        label = f"{r[where]} / {r['arm']}" if where else r["arm"]
        same = ref[(ref["arm"] == r["arm"]) & ((ref[where] == r[where]) if where else True)]
        n = int(same["point_id"].nunique()) if "point_id" in same.columns else len(same)
        lines.append(f"{label}: {n} point(s) not measured: {r.get('error_message') or 'refused'}")
    return "\n".join(lines)
