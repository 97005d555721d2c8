"""Predicted acceptance: what an n-gram drafter must accept, from the target's own probabilities.

An n-gram proposal carries no draft distribution, so vLLM's rejection sampler accepts drafted
token x with probability p_T(x), the target's probability of x under the request's sampling
temperature T (greedy: x must be the argmax), and on a rejection samples from the rest of the
distribution, so the token emitted at a position is distributed as p_T whatever was drafted
(vLLM PR #16899; ``vllm/v1/sample/rejection_sampler.py``). Two estimates follow from a sample of
the target's own text (the baseline arm's outputs, same prompts, same seeds):

- **replayed**: walk the baseline's output as the speculative engine would, proposing with
  vLLM's own n-gram rule (:func:`ngram_propose`, a port of
  ``vllm/v1/spec_decode/ngram_proposer.py``) from the context so far; a step accepts the longest
  prefix of its proposal that the baseline's text continues with (the emitted token equals the
  draft exactly when the draft is accepted), then moves on by that many tokens plus one. Its
  acceptance rate is accepted / drafted tokens, vLLM's formula, on a sample of the same
  process.
- **expected**: at every step of that walk, the expected number of accepted drafts given the
  context, sum over j of the product of p_T(d_1) ... p_T(d_j), with each p_T obtained from the
  engine (prompt logprobs of the context followed by the proposal, rescaled to T from the top
  logprobs: an interval where the top-k leaves tail mass unaccounted for).

A measured acceptance far outside both says the engine's speculative path does something else
than its own probabilities imply: the kind of fault that a sampler bug produces
(``docs/cpu.md``). Pure functions here; the engine queries are in :mod:`specnb.sweep.predict`.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from specnb.ledger.names import PLAIN_CONDITION
from specnb.ledger.records import PREDICTED_DIR, PREDICTED_KIND, load_predicted  # noqa: F401 - re-exported

__all__ = ["PREDICTED_DIR", "PREDICTED_KIND", "PredictError", "load_predicted", "Step", "expected_accepted", "flag_disagreement", "ngram_propose", "predicted_lines", "predicted_table",
           "summarize_steps", "summarize_path_steps", "tempered", "walk", "eagle_walk", "head_of"]

# how far measured acceptance may sit outside the predicted interval (absolute rate) before the
# report flags the arm: the replayed estimate's own sampling spread on a 10-prompt panel is a
# few points, and batch numerics move greedy ties
DISAGREE_MARGIN = 0.10



class PredictError(ValueError):
    """A prediction asked of something it cannot predict (sampling it does not model)."""


def ngram_propose(context: Sequence[int], min_n: int, max_n: int, k: int, max_model_len: int) -> list[int]:
    """vLLM's n-gram proposal for ``context`` (prompt and output so far): the longest suffix
    n-gram of length ``min_n`` .. ``max_n`` found earlier in the context (the earliest occurrence
    among the longest), and up to ``k`` tokens that followed it. A line-by-line port of
    ``_find_longest_matched_ngram_and_propose_tokens`` (vLLM 0.32), tested against it."""
    tokens = list(context)
    total = len(tokens)
    if total < min_n:
        return []
    k = min(k, max_model_len - total)
    if k <= 0:
        return []
    rev = tokens[::-1]
    lps = [0] * max_n
    longest = 0
    position = 0
    prev = 0
    i = 1
    while i < total:
        if rev[prev] == rev[i]:
            prev += 1
            if prev >= longest:
                longest = prev
                position = i
            if i < max_n:
                lps[i] = prev
            if prev == max_n:
                prev = lps[max_n - 1]
            i += 1
        elif prev != 0:
            prev = lps[prev - 1]
        else:
            i += 1
    if longest < min_n:
        return []
    start = total - 1 - position + longest
    k = min(k, total - start)
    return tokens[start:start + k]


@dataclass
class Step:
    """One drafting step of the replayed walk: the output position it drafts for, the proposal,
    and how many of its tokens the baseline's text continues with."""

    position: int  # index into the output of the first drafted token
    drafts: list[int]
    matched: int
    probs_lo: list[float] = field(default_factory=list)  # p_T of each draft given the ones before
    probs_hi: list[float] = field(default_factory=list)


def walk(prompt_ids: Sequence[int], output_ids: Sequence[int], *, min_n: int, max_n: int, k: int,
         max_model_len: int) -> list[Step]:
    """The drafting steps a speculative engine with vLLM's n-gram proposer takes on this output.

    The first output token comes from the prefill (nothing drafted); after each step the proposer
    sees the context so far. A proposal is cut where the output ends (the engine's drafts past
    the last token are not counted here: a request that stopped on EOS or max_tokens says
    nothing about them; vLLM's scheduler does count them, so with a short ``max_tokens`` the
    measured acceptance can sit a little below this). A step with no proposal moves on by one
    token."""
    prompt, out = list(prompt_ids), list(output_ids)
    steps: list[Step] = []
    i = 1
    while i < len(out):
        d = ngram_propose(prompt + out[:i], min_n, max_n, k, max_model_len)[: len(out) - i]
        if not d:
            i += 1
            continue
        m = 0
        while m < len(d) and d[m] == out[i + m]:
            m += 1
        steps.append(Step(position=i, drafts=d, matched=m))
        i += m + 1
    return steps


def eagle_walk(prompt_ids: Sequence[int], output_ids: Sequence[int], drafts: list[list[int]], k: int) -> list[Step]:
    """The engine's drafting steps on this output with a head that drafts ``k`` tokens a step
    (``drafts`` from :meth:`specnb.drafter.replay.HeadDrafter.drafts` over prompt + output). The first output token comes
    from the prefill; after emitting output token ``i - 1`` the head drafts from the state of the
    token before it, so the step's drafts for output positions ``i ..`` are ``drafts[m][P + i - 2]``.
    A step's drafts past its first mismatch are recorded as drafted (the engine drafts ``k``) with
    token -1: never compared, never asked. Drafts past the output's end are cut (as
    :func:`specnb.analysis.predicted.walk` cuts them)."""
    p, out = len(prompt_ids), list(output_ids)
    steps: list[Step] = []
    i = 1
    while i < len(out):
        j = p + i - 2
        d = [drafts[m][j] for m in range(min(k, len(out) - i))]
        m = 0
        while m < len(d) and d[m] == out[i + m]:
            m += 1
        d = d[: m + 1] + [-1] * (len(d) - m - 1)
        steps.append(Step(position=i, drafts=d, matched=m))
        i += m + 1
    return steps


def head_of(config: dict[str, Any] | None) -> tuple[str, int] | None:
    """(head folder, K) of an EAGLE-3 arm's speculative config; None for any other."""
    cfg = config or {}
    if cfg.get("method") != "eagle3" or not cfg.get("model"):
        return None
    return str(cfg["model"]), int(cfg.get("num_speculative_tokens", 1))


def tempered(token: int, logprob: float, top: Mapping[int, float], temperature: float) -> tuple[float, float]:
    """p_T(token) from the engine's raw log-probabilities (temperature 1): the token's own
    ``logprob`` and the ``top`` logprobs at that position (token id -> logprob, any size).
    Exact at T = 1 and at T = 0 (1 when the token is the argmax, else 0); for 0 < T < 1 an
    interval (lo, hi): the tokens outside ``top`` hold the rest of the mass, each no more likely
    than the least likely listed, so their tempered weight is at most rest * p_min ** (1/T - 1)."""
    if temperature < 0 or math.isnan(temperature):
        raise PredictError(f"temperature {temperature} is not a temperature")
    listed = {**{int(t): float(v) for t, v in top.items()}, int(token): float(logprob)}
    if temperature == 0:
        v = 1.0 if logprob >= max(listed.values()) else 0.0
        return v, v
    if temperature == 1:
        p = math.exp(logprob)
        return p, p
    if temperature > 1:
        raise PredictError(f"temperature {temperature} > 1: the top logprobs do not bound the tail's weight")
    vals = np.array(list(listed.values()), dtype=float)
    inv = 1.0 / temperature
    shift = vals.max()
    weight = float(np.exp((vals - shift) * inv).sum())
    rest = max(0.0, 1.0 - float(np.exp(vals).sum()))
    # every unlisted token is at most as likely as the least likely of the top k (the token itself
    # may rank below them: it does not bound the others)
    floor = min(top.values()) if top else float(logprob)
    tail = rest * math.exp(floor * (inv - 1.0) - shift * inv)
    num = math.exp((logprob - shift) * inv)
    return num / (weight + tail), min(1.0, num / weight)


def expected_accepted(probs: Sequence[float]) -> float:
    """Expected accepted drafts of one step: sum over j of p_1 * ... * p_j."""
    total, run = 0.0, 1.0
    for p in probs:
        run *= p
        total += run
    return total


def summarize_steps(steps: Sequence[Step]) -> dict[str, Any]:
    """One point's prediction from its steps: drafted tokens, replayed and expected accepted
    (with the expected interval), and the rates (accepted / drafted)."""
    drafted = sum(len(s.drafts) for s in steps)
    replayed = sum(s.matched for s in steps)
    lo = sum(expected_accepted(s.probs_lo) for s in steps if s.probs_lo)
    hi = sum(expected_accepted(s.probs_hi) for s in steps if s.probs_hi)
    have = all(len(s.probs_lo) == len(s.drafts) for s in steps)

    def rate(x: float) -> float | None:
        return x / drafted if drafted else None

    return {"steps": len(steps), "drafted_tokens": drafted, "replayed_accepted": replayed,
            "expected_accepted_lo": lo if have else None, "expected_accepted_hi": hi if have else None,
            "replayed_rate": rate(replayed), "expected_rate_lo": rate(lo) if have else None,
            "expected_rate_hi": rate(hi) if have else None}


def summarize_path_steps(steps: Sequence[Step]) -> dict[str, Any]:
    """:func:`summarize_steps` for a drafter whose drafts are known only up to each step's first
    mismatch (an EAGLE head replayed by teacher forcing, :mod:`specnb.drafter.replay`). Its
    expected count is the path form, sum over j <= matched + 1 of p_T(d_j): the draft at j is
    accepted with probability p_T(d_j) given the ones before it accepted, and whether they were is
    read from the text (its token equals the draft exactly when the engine accepted it), so each
    term is the conditional expectation of the replayed count's and the sum is unbiased for the
    same mean, with a smaller spread. No probability past a mismatch is needed."""
    drafted = sum(len(s.drafts) for s in steps)
    replayed = sum(s.matched for s in steps)
    have = all(len(s.probs_lo) > min(s.matched, len(s.drafts) - 1) for s in steps)
    lo = sum(sum(s.probs_lo[: s.matched + 1]) for s in steps) if have else None
    hi = sum(sum(s.probs_hi[: s.matched + 1]) for s in steps) if have else None

    def rate(x: float | None) -> float | None:
        return x / drafted if drafted and x is not None else None

    return {"steps": len(steps), "drafted_tokens": drafted, "replayed_accepted": replayed,
            "expected_accepted_lo": lo, "expected_accepted_hi": hi, "replayed_rate": rate(replayed),
            "expected_rate_lo": rate(lo), "expected_rate_hi": rate(hi)}


def _prompt_interval(per_request: list[dict[str, Any]], key: str, n_boot: int = 2000, seed: int = 0
                     ) -> tuple[float, float] | tuple[None, None]:
    """95 % interval of sum(key) / sum(drafted) over prompts (a cluster bootstrap: a prompt's
    requests in every repeat of the level resampled together, as seeded sampling repeats them)."""
    rows = pd.DataFrame(per_request)
    if rows.empty or key not in rows.columns or rows[key].isna().any():
        return None, None
    g = rows.groupby("prompt_id")[["drafted_tokens", key]].sum()
    g = g[g["drafted_tokens"] > 0]
    if len(g) < 2:
        return None, None
    rng = np.random.default_rng(seed)
    idx = rng.integers(0, len(g), size=(n_boot, len(g)))
    num, den = g[key].to_numpy()[idx].sum(axis=1), g["drafted_tokens"].to_numpy()[idx].sum(axis=1)
    ratio = num / np.maximum(den, 1)
    return float(np.quantile(ratio, 0.025)), float(np.quantile(ratio, 0.975))


def current_predictions(measured: pd.DataFrame, predicted: pd.DataFrame) -> pd.DataFrame:
    """The predictions of the baseline measurements the ledgers hold now: a record of an earlier
    measurement of a point measured again (its ``baseline_started_at`` is not the point's) is
    dropped, and of several records for one point and arm the newest is kept."""
    if predicted.empty:
        return predicted
    out = predicted
    cond = out["condition"].fillna(PLAIN_CONDITION) if "condition" in out.columns else pd.Series(PLAIN_CONDITION, index=out.index)
    if "baseline_started_at" in out.columns and {"point_id", "started_at"} <= set(measured.columns):
        ok = measured[measured["status"] == "ok"] if "status" in measured.columns else measured
        mcond = ok["condition"].fillna(PLAIN_CONDITION) if "condition" in ok.columns else pd.Series(PLAIN_CONDITION, index=ok.index)
        now = dict(zip(zip(mcond, ok["point_id"], strict=True), ok["started_at"], strict=True))
        stamp = out["baseline_started_at"]
        keep = [pd.isna(s) or now.get((c, bp)) in (None, s)
                for c, bp, s in zip(cond, out["baseline_point"], stamp, strict=True)]
        out, cond = out[keep], cond[keep]
    if "created_at" in out.columns and "baseline_point" in out.columns:
        order = out.assign(_c=cond).sort_values("created_at", na_position="first", kind="stable")
        out = order.drop_duplicates(["_c", "arm", "baseline_point"], keep="last").drop(columns="_c").sort_index()
    return out


def predicted_table(measured: pd.DataFrame, predicted: pd.DataFrame, *, margin: float = DISAGREE_MARGIN) -> pd.DataFrame:
    """Predicted beside measured acceptance, one row per (condition, arm, workload, concurrency).

    ``measured``: the ledger frame (speculative arms' points with ``acceptance_rate``);
    ``predicted``: :func:`load_predicted`. Measured is the mean over the arm's repeats with its
    range; predicted pools every baseline point of the same condition, workload and level (the
    text it replays): the replayed rate, the expected rate (lo-hi: the top-k bound) and a 95 %
    interval of the expected rate over prompts. ``flagged``: the measured mean lies more than
    ``margin`` outside everything predicted (both rates and the interval)."""
    if predicted.empty or measured.empty:
        return pd.DataFrame()
    predicted = current_predictions(measured, predicted)
    keys = ["condition", "arm", "workload", "concurrency"]
    m = measured[measured["status"] == "ok"] if "status" in measured.columns else measured
    m = m[m["arm"].isin(set(predicted["arm"]))]
    if m.empty:
        return pd.DataFrame()
    meas = (m.groupby(keys, dropna=False)["acceptance_rate"]
            .agg(measured="mean", measured_lo="min", measured_hi="max", measured_n="count").reset_index())
    rows = []
    for key, g in predicted.groupby(keys, dropna=False, sort=True):
        drafted = g["drafted_tokens"].sum()
        per = [r for cell in g.get("per_request", pd.Series(dtype=object)) if isinstance(cell, list) for r in cell]
        lo_ci, hi_ci = _prompt_interval(per, "expected_accepted_lo")
        rows.append({**dict(zip(keys, key, strict=True)), "temperature": g["temperature"].iloc[0],
                     "replayed": g["replayed_accepted"].sum() / drafted if drafted else np.nan,
                     "expected_lo": g["expected_accepted_lo"].sum(min_count=len(g)) / drafted if drafted else np.nan,
                     "expected_hi": g["expected_accepted_hi"].sum(min_count=len(g)) / drafted if drafted else np.nan,
                     "expected_ci_lo": lo_ci, "expected_ci_hi": hi_ci, "drafted_tokens": int(drafted),
                     "baseline_points": len(g)})
    out = meas.merge(pd.DataFrame(rows), on=keys, how="inner")
    if out.empty:
        return out
    out["flagged"] = [flag_disagreement(r, margin) for r in out.to_dict("records")]
    cols = keys + ["temperature", "measured", "measured_lo", "measured_hi", "measured_n", "replayed", "expected_lo",
                   "expected_hi", "expected_ci_lo", "expected_ci_hi", "drafted_tokens", "baseline_points", "flagged"]
    return out[cols].sort_values(keys).reset_index(drop=True)


def predicted_lines(table: pd.DataFrame) -> list[str]:
    """The report's lines: measured against predicted acceptance per row, then the flagged arms."""
    if table.empty:
        return []
    pct = (lambda x: "n/a" if x is None or (isinstance(x, float) and math.isnan(x)) else f"{100 * x:.0f}%")  # noqa: E731
    lines = ["acceptance predicted from the target's own probabilities (specnb predict; baseline text replayed):"]
    for r in table.to_dict("records"):
        ci = (f" [{pct(r['expected_ci_lo'])}, {pct(r['expected_ci_hi'])}]" if r.get("expected_ci_lo") is not None
              and not (isinstance(r["expected_ci_lo"], float) and math.isnan(r["expected_ci_lo"])) else "")
        exp = pct(r["expected_lo"]) if pct(r["expected_lo"]) == pct(r["expected_hi"]) else \
            f"{pct(r['expected_lo'])}-{pct(r['expected_hi'])}"
        lines.append(f"  {r['condition']} / {r['arm']} / {r['workload']} c={r['concurrency']:g}: measured "
                     f"{pct(r['measured'])}, expected {exp}{ci}, replayed {pct(r['replayed'])} "
                     f"({r['drafted_tokens']} drafted tokens, {r['baseline_points']} baseline point(s))"
                     f"{'  <- DISAGREES' if r['flagged'] else ''}")
    bad = table[table["flagged"]]
    if len(bad):
        lines.append(f"flagged: {len(bad)} row(s) measure an acceptance more than {DISAGREE_MARGIN:.0%} away from what "
                     "the target's probabilities allow: the engine's speculative path does not sample as its own "
                     "distribution says (see docs/cpu.md for the one found so far)")
    return lines


def flag_disagreement(row: Mapping[str, Any], margin: float = DISAGREE_MARGIN) -> bool:
    """Whether a row's measured acceptance is more than ``margin`` away from every prediction."""
    meas = row.get("measured")
    vals = [row.get(k) for k in ("replayed", "expected_lo", "expected_hi", "expected_ci_lo", "expected_ci_hi")]
    vals = [float(v) for v in vals if v is not None and not (isinstance(v, float) and math.isnan(v))]
    if meas is None or (isinstance(meas, float) and math.isnan(meas)) or not vals:
        return False
    return bool(meas < min(vals) - margin or meas > max(vals) + margin)
