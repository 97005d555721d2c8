"""The seeds' closed-form models of speculative decoding, as tested functions.

- Expected acceptance length (seed 000, seed 002): with per-token acceptance probability
  alpha and K proposed tokens, MAL(alpha, K) = (1 - alpha^(K+1)) / (1 - alpha), the
  verifier's bonus token included; its inverse gives alpha from a measured length.
- Relative throughput (seed 002): MAL(alpha, K) / T(K) with T(K) = t0 (1 + (v + d) K), the
  step cost growing with the draft length; the best K for a given overhead v + d.
- Amdahl (seed 002): end-to-end gain G = 1 / ((1 - f) + f / x) when decode, a fraction f
  of request time, gets x times faster; the decode speedup needed for a target G, and the
  ceiling 1 / (1 - f).
- KV seats (seed 000): a drafter keeps its own KV cache, so the pool shrinks; concurrent
  sessions at a context length = pool tokens / context length.
- Seed 004's rule of thumb on the acceptance rate at the real batch size.

These are simplified models, not performance predictions; their value is in showing which
way a knob moves the answer and in checking measurements against them.
"""

from __future__ import annotations

import math

__all__ = [
    "acceptance_length",
    "alpha_from_acceptance_length",
    "relative_throughput",
    "best_k",
    "amdahl_gain",
    "required_decode_speedup",
    "amdahl_ceiling",
    "kv_sessions",
    "drafter_kv_share",
    "acceptance_verdict",
]


def _check_alpha(alpha: float) -> None:
    if not 0.0 <= alpha <= 1.0:
        raise ValueError(f"alpha must be in [0, 1], got {alpha}")


def _check_k(k: int) -> None:
    if int(k) != k or k < 0:
        raise ValueError(f"K must be a non-negative integer, got {k}")


def acceptance_length(alpha: float, k: int) -> float:
    """Expected tokens per verification step: (1 - alpha^(K+1)) / (1 - alpha)."""
    _check_alpha(alpha)
    _check_k(k)
    if alpha == 1.0:
        return float(k + 1)
    return (1.0 - alpha ** (k + 1)) / (1.0 - alpha)


def alpha_from_acceptance_length(mal: float, k: int, tol: float = 1e-12) -> float:
    """The alpha whose expected acceptance length at K equals ``mal`` (bisection; MAL rises with alpha)."""
    _check_k(k)
    if not 1.0 <= mal <= k + 1:
        raise ValueError(f"acceptance length must be in [1, K+1] = [1, {k + 1}], got {mal}")
    lo, hi = 0.0, 1.0
    while hi - lo > tol:
        mid = (lo + hi) / 2
        if acceptance_length(mid, k) < mal:
            lo = mid
        else:
            hi = mid
    return (lo + hi) / 2


def relative_throughput(alpha: float, k: int, overhead: float) -> float:
    """MAL(alpha, K) / (1 + overhead * K): throughput relative to plain decoding (K = 0 gives 1)."""
    if overhead < 0:
        raise ValueError(f"overhead must be >= 0, got {overhead}")
    return acceptance_length(alpha, k) / (1.0 + overhead * k)


def best_k(alpha: float, overhead: float, k_max: int = 16) -> tuple[int, float]:
    """The draft length in 0..k_max with the highest relative throughput, and that throughput."""
    scores = [(relative_throughput(alpha, k, overhead), -k) for k in range(k_max + 1)]
    score, neg_k = max(scores)
    return -neg_k, score


def _check_f(f: float) -> None:
    if not 0.0 <= f <= 1.0:
        raise ValueError(f"decode fraction must be in [0, 1], got {f}")


def amdahl_gain(f: float, x: float) -> float:
    """End-to-end speedup when a fraction ``f`` of request time gets ``x`` times faster."""
    _check_f(f)
    if x <= 0:
        raise ValueError(f"decode speedup must be > 0, got {x}")
    return 1.0 / ((1.0 - f) + f / x)


def amdahl_ceiling(f: float) -> float:
    """The end-to-end gain if decode took no time at all: 1 / (1 - f)."""
    _check_f(f)
    return math.inf if f == 1.0 else 1.0 / (1.0 - f)


def required_decode_speedup(f: float, target: float) -> float:
    """Decode speedup x needed for end-to-end gain ``target``; inf when beyond the ceiling."""
    _check_f(f)
    if target <= 0:
        raise ValueError(f"target gain must be > 0, got {target}")
    rest = 1.0 / target - (1.0 - f)
    if rest <= 0:
        return math.inf
    return f / rest


def kv_sessions(kv_tokens: float, context_tokens: float) -> float:
    """Concurrent sessions a KV pool holds at a given context length."""
    if kv_tokens < 0 or context_tokens <= 0:
        raise ValueError("kv_tokens must be >= 0 and context_tokens > 0")
    return kv_tokens / context_tokens


def drafter_kv_share(kv_without: float, kv_with: float) -> float:
    """The share of the KV pool the drafter takes: 1 - pool with drafter / pool without."""
    if kv_without <= 0 or kv_with < 0:
        raise ValueError("KV pools must be positive")
    return 1.0 - kv_with / kv_without


def acceptance_verdict(acceptance_rate: float) -> str:
    """Seed 004: above about 2/3 at the real batch size it is worth it; below 1/2 switch it
    off; in between, measure per-token latency and throughput together."""
    if not 0.0 <= acceptance_rate <= 1.0:
        raise ValueError(f"acceptance rate must be in [0, 1], got {acceptance_rate}")
    if acceptance_rate > 2 / 3:
        return "worth it"
    if acceptance_rate < 1 / 2:
        return "switch it off"
    return "measure latency and throughput together"
