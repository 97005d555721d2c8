"""The measured answer as Prometheus rules and a Grafana dashboard (``specnb alerts``).

From an :class:`~specnb.analysis.watch.Expectation` (one drafter arm and workload of a run):

- recording rules over a window: acceptance rate and length, draft tokens per second and mean
  running requests, each summed over the endpoint's engines;
- alerting rules: running requests past the measured threshold for a while (the drafter now slows
  the server), acceptance below the lowest the run measured (the traffic changed), and no drafts
  while requests run (speculation silently off); each annotated with the run, its numbers and
  what to do;
- a dashboard: acceptance against its measured band, running requests against the threshold band.

Every expression is scoped by a label selector (one endpoint's labels). Pure: the command writes
the files, ``promtool`` checks them.
"""

from __future__ import annotations

import re
from typing import Any

from specnb.analysis.breakeven import MIN_DRAFTS, WATCH_Z, BreakEvenLine
from specnb.analysis.watch import ACCEPTANCE_Z, MIN_DRAFT_TOKENS, Expectation
from specnb.errors import SpecnbError

__all__ = ["AlertsError", "RECORDED", "check_selector", "dashboard", "rule_groups", "threshold_of"]

# the recording rules' names (a window suffix is added: _5m)
RECORDED = {
    "acceptance_rate": "specnb:spec_decode_acceptance_rate",
    "acceptance_length": "specnb:spec_decode_acceptance_length",
    "draft_tokens": "specnb:spec_decode_draft_tokens:rate",
    "running": "specnb:num_requests_running:avg",
    "drafts": "specnb:spec_decode_drafts:rate",
}
_MATCHER = re.compile(r'\s*[a-zA-Z_][a-zA-Z0-9_]*\s*(=|!=|=~|!~)\s*"(?:[^"\\]|\\.)*"\s*')


class AlertsError(SpecnbError):
    pass


def check_selector(selector: str) -> str:
    """``name="value",...`` (PromQL label matchers), braces optional; refused in one line."""
    s = selector.strip().removeprefix("{").removesuffix("}").strip()
    if not s:
        return ""
    parts = re.split(r',(?=(?:[^"]*"[^"]*")*[^"]*$)', s)
    bad = [p for p in parts if not _MATCHER.fullmatch(p)]
    if bad:
        raise AlertsError(f"--selector {selector!r}: {bad[0].strip()!r} is not a label matcher like job=\"vllm\"")
    return ",".join(p.strip() for p in parts)


def _window(seconds: int) -> str:
    return f"{seconds // 60}m" if seconds % 60 == 0 else f"{seconds}s"


def threshold_of(exp: Expectation) -> tuple[float | None, str]:
    """The running-requests level to alert above, and what it means: the measured crossing; 0
    where the drafter loses over the whole measured range; the top of the measured range where it
    pays everywhere (past it nobody measured); None where it only pays above a load."""
    placed = [lv.running for lv in exp.levels if lv.running]
    if exp.kind == "crosses" and exp.threshold_running is not None:
        return exp.threshold_running, "where the measured speedup crosses 1.0"
    if exp.kind == "below":
        return 0.0, "the drafter lost at every measured load"
    if exp.kind == "above" and placed:
        return max(placed), "the top of the measured range (the drafter paid everywhere below it; above, unmeasured)"
    return None, f"no threshold to alert on (the curve {exp.kind})"


def _load_alert(exp: Expectation, rec: dict[str, str], labels: dict[str, str], measured: str, for_: str, *,
                mapped: bool) -> dict[str, Any] | None:
    """Running requests past the measured threshold (the drafter now slows the server); where the run
    paid at every level it measured, past the top of that range, where nobody measured: an alert
    that says measure there (and, with a map, read its break-even alert), never turn the drafter off."""
    th, meaning = threshold_of(exp)
    if th is None:
        return None
    summary = f"{{{{ $value | printf \"%.1f\" }}}} requests running, past {th:.1f}: {meaning}"
    if exp.kind == "above":
        return {
            "alert": "SpecDecodeUnmeasuredLoad", "expr": f"{rec['running']} > {th:.3g}", "for": for_,
            "labels": {**labels, "severity": "info"},
            "annotations": {
                "summary": summary,
                "description": f"{measured}: the drafter paid at every load measured, up to {th:.1f} running "
                               "requests; nobody measured this one. Measure a level here (a sweep with this "
                               "concurrency)" + (", and meanwhile read the map's break-even alert "
                                                 "(SpecDecodeBelowBreakEven)." if mapped else "."),
            },
        }
    near = min((lv for lv in exp.levels if lv.running and lv.running > th), key=lambda lv: lv.running, default=None)
    slower = (f" At {near.running:.1f} running (c={near.concurrency}) the run measured "
              f"{near.speedup:.2f}x [{near.lo:.2f}, {near.hi:.2f}].") if near else ""
    band = (f" (interval {exp.threshold_lo:.1f} to {exp.threshold_hi:.1f})"
            if exp.threshold_lo is not None and exp.threshold_hi is not None else "")
    return {
        "alert": "SpecDecodeAboveThreshold", "expr": f"{rec['running']} > {th:.3g}", "for": for_,
        "labels": {**labels, "severity": "warning"},
        "annotations": {
            "summary": summary,
            "description": f"{measured}: threshold {th:.1f} running requests{band}.{slower} Turn the drafter "
                           "off above this load, or deploy the schedule `specnb tune` verifies.",
        },
    }


def rule_groups(exp: Expectation, selector: str = "", window_s: int = 300, for_s: int = 600,
                line: BreakEvenLine | None = None) -> dict[str, Any]:
    """The rule file (``groups:``), ready for YAML; with a map's ``line`` for the served drafter's kind
    and K, the alert that judges a window's acceptance length against the break-even at its load."""
    sel = "{" + check_selector(selector) + "}" if selector else ""
    w, f = _window(window_s), _window(for_s)
    rec = {k: f"{v}_{w}" for k, v in RECORDED.items()}
    acc, drafts, tokens = (f"sum(rate(vllm:spec_decode_num_{n}_total{sel}[{w}]))"
                           for n in ("accepted_tokens", "drafts", "draft_tokens"))
    labels = {"specnb_run": exp.run, "specnb_arm": exp.arm, "specnb_workload": exp.workload}
    records = [
        {"record": rec["acceptance_rate"], "expr": f"{acc} / {tokens}", "labels": dict(labels)},
        {"record": rec["acceptance_length"], "expr": f"1 + {acc} / {drafts}", "labels": dict(labels)},
        {"record": rec["draft_tokens"], "expr": tokens, "labels": dict(labels)},
        {"record": rec["running"], "expr": f"sum(avg_over_time(vllm:num_requests_running{sel}[{w}]))",
         "labels": dict(labels)},
        {"record": rec["drafts"], "expr": drafts, "labels": dict(labels)},
    ]
    measured = (f"run {exp.run} ({exp.arm} on {exp.workload}, engine vLLM {exp.engine_version or '?'}, "
                f"model {exp.model or '?'})")
    load = _load_alert(exp, rec, labels, measured, f, mapped=line is not None)
    alerts = [load] if load else []
    if exp.acceptance_floor is not None:
        # the watch's rule (specnb.analysis.watch.judge): below the lowest point the run measured by
        # more than ACCEPTANCE_Z standard errors of the window's draft tokens (the per-token variance
        # the run's requests showed), judged only on windows with MIN_DRAFT_TOKENS or more
        floor = exp.acceptance_floor
        n_tokens = f"{rec['draft_tokens']} * {window_s}"
        alerts.append({
            "alert": "SpecDecodeAcceptanceLow",
            "expr": (f"{rec['acceptance_rate']} < {floor:.4f} - sqrt({ACCEPTANCE_Z ** 2 * exp.window_variance:.6f} / ({n_tokens})) "
                     f"and {n_tokens} >= {MIN_DRAFT_TOKENS}"),
            "for": f,
            "labels": {**labels, "severity": "warning"},
            "annotations": {
                "summary": f"acceptance {{{{ $value | humanizePercentage }}}} is below the lowest the run measured "
                           f"({floor:.0%}, less {ACCEPTANCE_Z:g} standard errors of the window's draft tokens)",
                "description": f"{measured}: acceptance {exp.acceptance_rate:.0%} on average, "
                               f"{floor:.0%} at the lowest point. The traffic changed: measure the "
                               "threshold again on traffic like today's (`specnb mix`, then a sweep).",
            },
        })
    if line is not None:
        alerts.append(_below_break_even(line, rec, labels, sel, w, window_s, f))
    alerts.append({
        "alert": "SpecDecodeNoDrafts",
        "expr": f"{rec['running']} > 0.5 and {rec['draft_tokens']} == 0",
        "for": f,
        "labels": {**labels, "severity": "warning"},
        "annotations": {
            "summary": "requests run but the drafter proposes nothing: speculation is silently off",
            "description": f"{measured}: the drafter drafted at every measured point. A grammar, a fallback or a "
                           "schedule at K = 0 can switch it off; check the server's log and its speculative config.",
        },
    })
    # no group interval: the server's evaluation_interval applies (a window shorter than it reads no rate)
    return {"groups": [{"name": f"specnb-{exp.arm}-{exp.workload}", "rules": records + alerts}]}


def _below_break_even(line: BreakEvenLine, rec: dict[str, str], labels: dict[str, str], sel: str, w: str,
                      window_s: int, for_: str) -> dict[str, Any]:
    """The map's alert (specnb.analysis.breakeven.below_break_even, the watch's rule): the window's
    mean acceptance length below the map's break-even at its running requests (linear between the
    levels around it), by more than WATCH_Z standard errors of its drafts (the largest variance an
    accepted count in [0, K] of that mean can have), on windows with MIN_DRAFTS drafts or more; one
    term per level, each over its range of running requests (none below 0.8 x the lowest level's
    batch or past 1.5 x the highest's: unmeasured)."""
    placed = sorted(line.levels, key=lambda lv: lv.running)
    n = f"({rec['drafts']} * {window_s})"
    extra = f"clamp(({rec['acceptance_length']} - 1), 0, {line.k})"
    margin = f"{WATCH_Z:g} * sqrt({extra} * ({line.k} - {extra}) / {n})"
    terms = []
    for lo, hi, lv, nxt in line.segments():
        if lv.floor is None:  # pays at every length the map set there: nothing to fall below
            continue
        floor = f"{lv.floor:.4f}"
        if nxt is not None and nxt.floor is not None:  # linear in running requests up to the next level
            slope = (nxt.floor - lv.floor) / (nxt.running - lv.running)
            floor = f"({floor} + clamp_min({rec['running']} - {lv.running:.4g}, 0) * {slope:.4f})"
        upper = "<=" if nxt is None else "<"
        terms.append(f"({rec['acceptance_length']} < {floor} - {margin} and {rec['running']} >= {lo:.4g} "
                     f"and {rec['running']} {upper} {hi:.4g} and {n} >= {MIN_DRAFTS})")
    levels = "; ".join(f"c={lv.concurrency} ({lv.running:.1f} running): "
                       + ("no cell shown to lose" if lv.floor is None else
                          f"{lv.floor:.2f}" + ("" if lv.band_lo is not None else " (every cell loses up to it)"))
                       for lv in placed)
    return {
        "alert": "SpecDecodeBelowBreakEven",
        "expr": " or ".join(terms) if terms else "vector(0) > 1",  # a map that pays everywhere: never fires
        "for": for_,
        "labels": {**labels, "severity": "warning", "specnb_map": line.run},
        "annotations": {
            "summary": "acceptance length {{ $value | printf \"%.2f\" }} is below the break-even at this load: "
                       "the drafter now costs, whatever traffic it meets",
            "description": f"map {line.run} ({line.kind} K={line.k} on {line.workload}); the acceptance length "
                           f"below which the map's cells lose (its band's lower end), per level: {levels}. Turn the "
                           "drafter off at this load, or give it traffic it accepts more of.",
        },
    }


def dashboard(exp: Expectation, selector: str = "", window_s: int = 300) -> dict[str, Any]:
    """A Grafana dashboard (JSON model): acceptance against its measured band, running requests
    against the threshold band."""
    sel = "{" + check_selector(selector) + "}" if selector else ""
    w = _window(window_s)
    acc = (f"sum(rate(vllm:spec_decode_num_accepted_tokens_total{sel}[{w}])) / "
           f"sum(rate(vllm:spec_decode_num_draft_tokens_total{sel}[{w}]))")
    run_q = f"sum(avg_over_time(vllm:num_requests_running{sel}[{w}]))"
    th, meaning = threshold_of(exp)

    def panel(pid: int, title: str, expr: str, unit: str, steps: list[dict[str, Any]], y: int) -> dict[str, Any]:
        return {"id": pid, "type": "timeseries", "title": title, "gridPos": {"h": 9, "w": 24, "x": 0, "y": y},
                "targets": [{"expr": expr, "refId": "A", "legendFormat": title}],
                "fieldConfig": {"defaults": {"unit": unit, "thresholds": {"mode": "absolute", "steps": steps},
                                             "custom": {"thresholdsStyle": {"mode": "line+area"}}},
                                "overrides": []},
                "description": f"measured in run {exp.run} ({exp.arm} on {exp.workload}, engine vLLM "
                               f"{exp.engine_version or '?'})"}

    acc_steps = [{"color": "red", "value": None}]
    if exp.acceptance_floor is not None:
        acc_steps.append({"color": "green", "value": round(exp.acceptance_floor, 4)})
    run_steps = [{"color": "green", "value": None}]
    if th is not None:
        if exp.threshold_lo is not None:
            run_steps.append({"color": "yellow", "value": round(exp.threshold_lo, 2)})
        run_steps.append({"color": "red", "value": round(th, 2)})
    return {
        "title": f"specnb: {exp.arm} on {exp.workload} ({exp.run})",
        "uid": None, "schemaVersion": 39, "time": {"from": "now-6h", "to": "now"},
        "tags": ["specnb", "speculative-decoding"],
        "description": f"Thresholds from {exp.run}; running requests: {meaning}",
        "panels": [
            panel(1, "acceptance rate (green: at or above the run's lowest point)", acc, "percentunit", acc_steps, 0),
            panel(2, "running requests (red: past the measured threshold)", run_q, "short", run_steps, 9),
        ],
    }
