"""One point's numbers from its request records: throughput in the steady window, latency
percentiles, per-user decode rate, errors, open-loop lateness, acceptance per prompt
category, and a conversation replay's numbers per turn. What the ledger's ``results``,
``spec_decode_by_category`` and ``by_turn`` hold.

Analysis work on what the load driver observed (:class:`specnb.engine.loadgen.PointLoad` and its
:class:`specnb.engine.records.RequestRecord` list, read by attribute: nothing here imports the
engine side). Throughput is counted inside the steady window (:mod:`specnb.analysis.window`)
where the point has one, else over the wall clock.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from specnb.analysis import stats
from specnb.prompts.workload import UNCATEGORIZED

__all__ = ["summarize_point", "spec_decode_by_category", "by_turn"]


def summarize_point(load: Any) -> dict[str, Any]:
    """One point's aggregates (the ledger's ``results``); names carry units. Failed requests count
    only as errors. ``load`` is the driver's :class:`~specnb.engine.loadgen.PointLoad`."""
    ok = [r for r in load.records if r.ok]
    errors = [r for r in load.records if not r.ok]
    wall = load.wall_end_s - load.wall_start_s
    out_tokens = sum(r.output_tokens for r in ok)
    steady_tok_s = None
    if load.steady_start_s is not None and load.steady_end_s is not None:
        lo, hi = load.steady_start_s, load.steady_end_s
        n = sum(k for r in ok for t, k in zip(r.chunk_times_s, r.chunk_tokens, strict=True) if lo <= t <= hi)
        steady_tok_s = n / (hi - lo)
    ttft = [r.ttft_s * 1e3 for r in ok if r.ttft_s is not None]
    tpot = [r.tpot_s * 1e3 for r in ok if r.tpot_s is not None]
    itl = [x * 1e3 for r in ok for x in r.itl_per_token_s()]
    per_user = [1e3 / x for x in tpot if x > 0]
    chunks = sum(len(r.chunk_times_s) for r in ok)
    prompt_tokens = sum(r.prompt_tokens or 0 for r in ok)
    summary: dict[str, Any] = {
        "num_requests": len(load.records),
        "num_ok": len(ok),
        "num_errors": len(errors),
        "error_examples": sorted({r.error or "no output" for r in errors})[:3],
        "duration_s": wall,
        "steady_window_s": (
            None if steady_tok_s is None else load.steady_end_s - load.steady_start_s
        ),
        "output_tokens": out_tokens,
        "prompt_tokens": prompt_tokens,
        "output_tok_s": steady_tok_s if steady_tok_s is not None else (out_tokens / wall if wall > 0 else None),
        "output_tok_s_wall": out_tokens / wall if wall > 0 else None,
        "total_tok_s_wall": (out_tokens + prompt_tokens) / wall if wall > 0 else None,
        "per_user_decode_tok_s_mean": stats.mean(per_user),
        "per_user_decode_tok_s_p50": stats.percentile(per_user, 50),
        "tokens_per_chunk_mean": out_tokens / chunks if chunks else None,
        "token_count_source": sorted({r.token_count_source for r in ok}) or None,
        "client_loop_busy": load.client_loop_busy,
        "finish_reasons": {
            k: sum(1 for r in ok if r.finish_reason == k) for k in sorted({str(r.finish_reason) for r in ok})
        },
    }
    e2el = [(r.end_s - r.start_s) * 1e3 for r in ok]
    for name, values in (("ttft_ms", ttft), ("itl_ms", itl), ("tpot_ms", tpot), ("e2el_ms", e2el)):
        for key, v in stats.percentiles(values).items():
            summary[f"{key}_{name}"] = v
        summary[f"mean_{name}"] = stats.mean(values)
    if load.offered_rate_rps is not None:
        # open loop: did the client keep the schedule, and what rate was served
        late = [(r.start_s - r.scheduled_s) * 1e3 for r in load.records if r.scheduled_s is not None]
        summary.update(
            offered_rate_rps=load.offered_rate_rps,
            achieved_rate_rps=len(ok) / wall if wall > 0 else None,
            peak_in_flight=load.peak_in_flight,
            p50_send_lateness_ms=stats.percentile(late, 50),
            p99_send_lateness_ms=stats.percentile(late, 99),
            max_send_lateness_ms=max(late) if late else None,
        )
    if getattr(load, "conversations", None) is not None:
        # conversation replay: what was sent, and what the server said it served from its cache
        convs: dict[int, list[Any]] = {}
        for r in load.records:
            convs.setdefault(r.conversation, []).append(r)
        cached = [r.cached_prompt_tokens for r in ok if r.cached_prompt_tokens is not None]
        summary.update(
            conversations=load.conversations,
            conversations_all_ok=sum(all(r.ok for r in rs) for rs in convs.values()),
            turns_skipped=load.turns_skipped,
            cached_prompt_tokens_reported=sum(cached) if cached else None,
            requests_reporting_cached_tokens=len(cached),
        )
    return summary


def by_turn(records: Sequence[Any]) -> list[dict[str, Any]] | None:
    """A conversation point's requests pooled per turn position (turn 1: every conversation's
    first user turn): requests, prompt tokens, cached and computed prompt tokens (the server's
    per-request count; None when no ok request of the turn reported it), output tokens, mean
    TTFT and per-user decode rate. None when the records carry no turn (not a conversation)."""
    turns: dict[int, list[Any]] = {}
    for r in records:
        if getattr(r, "turn", None) is not None:
            turns.setdefault(r.turn, []).append(r)
    if not turns:
        return None
    out = []
    for t in sorted(turns):
        rs = turns[t]
        ok = [r for r in rs if r.ok]
        prompt = sum(r.prompt_tokens or 0 for r in ok)
        reported = [r for r in ok if r.cached_prompt_tokens is not None]
        cached = sum(r.cached_prompt_tokens for r in reported) if reported else None
        computed = (sum((r.prompt_tokens or 0) - r.cached_prompt_tokens for r in reported)
                    if reported and len(reported) == len(ok) else None)
        ttft = [r.ttft_s * 1e3 for r in ok if r.ttft_s is not None]
        per_user = [1.0 / r.tpot_s for r in ok if r.tpot_s]
        out.append({"turn": t, "requests": len(rs), "num_ok": len(ok), "prompt_tokens": prompt,
                    "cached_prompt_tokens": cached, "computed_prompt_tokens": computed,
                    "output_tokens": sum(r.output_tokens for r in ok), "mean_ttft_ms": stats.mean(ttft),
                    "per_user_decode_tok_s_mean": stats.mean(per_user)})
    return out


def spec_decode_by_category(records: Sequence[Any]) -> dict[str, dict[str, Any]] | None:
    """Per-request acceptance pooled per prompt category (ok requests that reported it).

    Counts are summed and the ratios use vLLM's formulas on the sums (mean acceptance length
    = 1 + accepted / steps, acceptance rate = accepted / draft tokens), as ``/metrics`` does
    for the whole point. ``None`` when no request carried the metrics.
    """
    groups: dict[str, list[Any]] = {}
    for r in records:
        if r.ok and r.spec_num_spec_steps is not None:
            groups.setdefault(r.category or UNCATEGORIZED, []).append(r)
    if not groups:
        return None
    out: dict[str, dict[str, Any]] = {}
    for cat in sorted(groups):
        rs = groups[cat]
        width = max(len(r.spec_acceptance_histogram or []) for r in rs)
        hist = [0] * width
        for r in rs:
            for j, v in enumerate(r.spec_acceptance_histogram or []):
                hist[j] += v
        steps = sum(r.spec_num_spec_steps or 0 for r in rs)
        drafted = sum(r.spec_num_draft_tokens or 0 for r in rs)
        accepted = sum(r.spec_num_accepted_draft_tokens or 0 for r in rs)
        out_tokens = sum(r.output_tokens for r in rs)
        own = [1.0 + (r.spec_num_accepted_draft_tokens or 0) / r.spec_num_spec_steps
               for r in rs if r.spec_num_spec_steps]
        out[cat] = {
            "requests": len(rs),
            "output_tokens": out_tokens,
            "num_spec_steps": steps,
            "num_draft_tokens": drafted,
            "num_accepted_draft_tokens": accepted,
            "acceptance_histogram": hist,
            "mean_acceptance_length": 1.0 + accepted / steps if steps else None,
            "draft_acceptance_rate": accepted / drafted if drafted else None,
            "accepted_output_share": accepted / out_tokens if out_tokens else None,
            "request_mean_acceptance_length_p50": stats.percentile(own, 50),
        }
    return out
