"""vLLM's Prometheus ``/metrics``: snapshots, counter deltas and gauge sampling.

A point is bracketed by two snapshots; counter deltas between them, summed over the
``engine`` label (one per data-parallel engine), give the speculative-decoding numbers
with vLLM's own formulas:

- acceptance rate = accepted tokens / draft tokens
- mean acceptance length = 1 + accepted tokens / drafts (the bonus token included)
- per-position acceptance = accepted at position i / drafts

Gauges (KV-cache usage, running and waiting requests) are sampled while the point runs.
Text is parsed with ``prometheus_client``'s parser, not regexes.
"""

from __future__ import annotations

import asyncio
import time
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

import aiohttp
from prometheus_client.parser import text_string_to_metric_families

from specnb.analysis import stats

__all__ = [
    "SPEC_DRAFTS",
    "GaugeSampler",
    "MetricsError",
    "Snapshot",
    "cache_delta",
    "counter_delta",
    "parse_metrics",
    "scrape",
    "spec_decode_delta",
]

SPEC_DRAFTS = "vllm:spec_decode_num_drafts_total"
SPEC_DRAFT_TOKENS = "vllm:spec_decode_num_draft_tokens_total"
SPEC_ACCEPTED = "vllm:spec_decode_num_accepted_tokens_total"
SPEC_ACCEPTED_PER_POS = "vllm:spec_decode_num_accepted_tokens_per_pos_total"
KV_USAGE = "vllm:kv_cache_usage_perc"
RUNNING = "vllm:num_requests_running"
WAITING = "vllm:num_requests_waiting"
PREEMPTIONS = "vllm:num_preemptions_total"
PREFIX_QUERIES = "vllm:prefix_cache_queries_total"
PREFIX_HITS = "vllm:prefix_cache_hits_total"
PROMPT_CACHED = "vllm:prompt_tokens_cached_total"
CACHE_CONFIG = "vllm:cache_config_info"

LabelKey = tuple[tuple[str, str], ...]


class MetricsError(RuntimeError):
    pass


@dataclass(frozen=True)
class Snapshot:
    """All samples of one scrape: ``{(sample name, sorted labels): value}``."""

    samples: dict[tuple[str, LabelKey], float]
    t: float = 0.0

    def has(self, name: str) -> bool:
        return any(n == name for n, _ in self.samples)

    def select(self, name: str, **match: str) -> list[tuple[dict[str, str], float]]:
        out = []
        for (n, labels), v in self.samples.items():
            if n != name:
                continue
            d = dict(labels)
            if all(d.get(k) == val for k, val in match.items()):
                out.append((d, v))
        return out

    def total(self, name: str, **match: str) -> float:
        """Sum over every series of ``name`` whose labels match (e.g. all engines)."""
        return sum(v for _, v in self.select(name, **match))

    def by_label(self, name: str, label: str) -> dict[str, float]:
        """Sum over all other labels, keyed by one label's value."""
        acc: dict[str, float] = defaultdict(float)
        for d, v in self.select(name):
            if label in d:
                acc[d[label]] += v
        return dict(acc)

    def info_labels(self, name: str = CACHE_CONFIG) -> list[dict[str, str]]:
        return [d for d, _ in self.select(name)]


def parse_metrics(text: str, t: float | None = None) -> Snapshot:
    samples: dict[tuple[str, LabelKey], float] = {}
    try:
        for family in text_string_to_metric_families(text):
            for s in family.samples:
                samples[(s.name, tuple(sorted(s.labels.items())))] = float(s.value)
    except ValueError as exc:
        raise MetricsError(f"cannot parse /metrics text: {exc}") from exc
    return Snapshot(samples=samples, t=time.time() if t is None else t)


def counter_delta(before: Snapshot, after: Snapshot, name: str, **match: str) -> float:
    d = after.total(name, **match) - before.total(name, **match)
    if d < 0:
        raise MetricsError(f"counter {name} went backwards ({d}): was the server restarted?")
    return d


def spec_decode_delta(before: Snapshot, after: Snapshot) -> dict[str, Any] | None:
    """Speculative-decoding counters over a point; ``None`` if the server has none."""
    if not after.has(SPEC_DRAFTS):
        return None
    drafts = counter_delta(before, after, SPEC_DRAFTS)
    draft_tokens = counter_delta(before, after, SPEC_DRAFT_TOKENS)
    accepted = counter_delta(before, after, SPEC_ACCEPTED)
    pos_after = after.by_label(SPEC_ACCEPTED_PER_POS, "position")
    pos_before = before.by_label(SPEC_ACCEPTED_PER_POS, "position")
    positions = sorted(pos_after, key=int)
    per_pos_counts = [pos_after[p] - pos_before.get(p, 0.0) for p in positions]
    return {
        "num_drafts": drafts,
        "num_draft_tokens": draft_tokens,
        "num_accepted_tokens": accepted,
        "accepted_per_position": per_pos_counts,
        "acceptance_rate": accepted / draft_tokens if draft_tokens else None,
        "mean_acceptance_length": 1.0 + accepted / drafts if drafts else None,
        "per_position_acceptance": [c / drafts for c in per_pos_counts] if drafts else [],
    }


def cache_delta(before: Snapshot, after: Snapshot) -> dict[str, float]:
    """Preemptions and prefix-cache traffic over a point (0 where a counter is absent)."""
    out = {}
    for key, name in (
        ("preemptions", PREEMPTIONS),
        ("prefix_cache_queries", PREFIX_QUERIES),
        ("prefix_cache_hits", PREFIX_HITS),
        ("prompt_tokens_cached", PROMPT_CACHED),
    ):
        out[key] = counter_delta(before, after, name) if after.has(name) else 0.0
    return out


async def scrape(session: aiohttp.ClientSession, base_url: str) -> Snapshot:
    async with session.get(base_url.rstrip("/") + "/metrics") as resp:
        if resp.status != 200:
            raise MetricsError(f"GET /metrics returned HTTP {resp.status}")
        return parse_metrics(await resp.text())


@dataclass
class GaugeSampler:
    """Samples KV usage and queue depth every ``interval_s`` while a point runs."""

    session: aiohttp.ClientSession
    base_url: str
    interval_s: float = 1.0
    kv_usage: list[float] = field(default_factory=list)
    kv_usage_max_engine: list[float] = field(default_factory=list)
    running: list[float] = field(default_factory=list)
    waiting: list[float] = field(default_factory=list)
    errors: int = 0
    _task: asyncio.Task | None = None

    def add(self, snap: Snapshot) -> None:
        kv = [v for _, v in snap.select(KV_USAGE)]
        if kv:
            self.kv_usage.append(sum(kv) / len(kv))
            self.kv_usage_max_engine.append(max(kv))
        if snap.has(RUNNING):
            self.running.append(snap.total(RUNNING))
        if snap.has(WAITING):
            self.waiting.append(snap.total(WAITING))

    async def _loop(self) -> None:
        while True:
            try:
                self.add(await scrape(self.session, self.base_url))
            except (TimeoutError, aiohttp.ClientError, MetricsError):
                self.errors += 1
            await asyncio.sleep(self.interval_s)

    def start(self) -> None:
        self._task = asyncio.create_task(self._loop())

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            try:
                await self._task
            except asyncio.CancelledError:
                pass

    def summary(self) -> dict[str, Any]:
        def mx(v: list[float]) -> float | None:
            return max(v) if v else None

        return {
            "num_samples": len(self.running),
            "scrape_errors": self.errors,
            "kv_cache_usage_mean": stats.mean(self.kv_usage),
            "kv_cache_usage_max": mx(self.kv_usage_max_engine),
            "num_requests_running_mean": stats.mean(self.running),
            "num_requests_running_max": mx(self.running),
            "num_requests_waiting_mean": stats.mean(self.waiting),
            "num_requests_waiting_max": mx(self.waiting),
        }
