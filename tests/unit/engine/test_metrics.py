"""Parsing vLLM's /metrics text, counter deltas, spec-decode formulas and gauge sampling."""

from __future__ import annotations

import pytest
from prometheus_client import CollectorRegistry, Counter, Gauge, generate_latest

from specnb.engine import metrics
from specnb.engine.metrics import (
    GaugeSampler,
    MetricsError,
    cache_delta,
    counter_delta,
    parse_metrics,
    spec_decode_delta,
)

MODEL = "smol"


def engine(drafts=0.0, draft_tokens=0.0, accepted=0.0, per_pos=(0.0, 0.0, 0.0, 0.0), kv=0.0, running=0.0,
           waiting=0.0, preemptions=0.0, prefix_queries=0.0, prefix_hits=0.0, prompt_cached=0.0,
           kv_tokens=46592):
    """The numbers one engine exposes, by name."""
    return dict(drafts=drafts, draft_tokens=draft_tokens, accepted=accepted, per_pos=list(per_pos), kv=kv,
                running=running, waiting=waiting, preemptions=preemptions, prefix_queries=prefix_queries,
                prefix_hits=prefix_hits, prompt_cached=prompt_cached, kv_tokens=kv_tokens)


def render(engines: dict[str, dict], *, spec: bool = True, cache_counters: bool = True) -> str:
    """vLLM-style exposition text, one series per engine label, families contiguous."""
    lines: list[str] = []

    def counter(base, help_, key, extra=None):
        lines.append(f"# HELP {base}_total {help_}")
        lines.append(f"# TYPE {base} counter")
        for e, vals in engines.items():
            series = [({}, vals[key])] if extra is None else extra(vals)
            for labels, v in series:
                lab = {"engine": e, "model_name": MODEL, **labels}
                text = ",".join(f'{k}="{val}"' for k, val in lab.items())
                lines.append(f"{base}_total{{{text}}} {float(v)}")
                lines.append(f"{base}_created{{{text}}} 1.7646e+09")

    def gauge(name, help_, key):
        lines.append(f"# HELP {name} {help_}")
        lines.append(f"# TYPE {name} gauge")
        for e, vals in engines.items():
            lines.append(f'{name}{{engine="{e}",model_name="{MODEL}"}} {float(vals[key])}')

    gauge("vllm:num_requests_running", "Number of requests in model execution batches.", "running")
    gauge("vllm:num_requests_waiting", "Number of requests waiting to be processed.", "waiting")
    gauge("vllm:kv_cache_usage_perc", "KV-cache usage. 1 means 100 percent usage.", "kv")
    if cache_counters:
        counter("vllm:num_preemptions", "Cumulative number of preemption from the engine.", "preemptions")
        counter("vllm:prefix_cache_queries", "Prefix cache queries, in terms of number of queried tokens.",
                "prefix_queries")
        counter("vllm:prefix_cache_hits", "Prefix cache hits, in terms of number of cached tokens.", "prefix_hits")
        counter("vllm:prompt_tokens_cached", "Number of cached prompt tokens (local + external).",
                "prompt_cached")
    if spec:
        counter("vllm:spec_decode_num_drafts", "Number of spec decoding drafts.", "drafts")
        counter("vllm:spec_decode_num_draft_tokens", "Number of draft tokens.", "draft_tokens")
        counter("vllm:spec_decode_num_accepted_tokens", "Number of accepted tokens.", "accepted")
        counter("vllm:spec_decode_num_accepted_tokens_per_pos", "Accepted tokens per draft position.",
                "per_pos", extra=lambda v: [({"position": str(i)}, x) for i, x in enumerate(v["per_pos"])])
    lines.append("# HELP vllm:cache_config_info Information of the LLMEngine CacheConfig")
    lines.append("# TYPE vllm:cache_config_info gauge")
    for e, vals in engines.items():
        lines.append(
            f'vllm:cache_config_info{{block_size="128",cache_dtype="auto",engine="{e}",'
            f'enable_prefix_caching="True",kv_cache_size_tokens="{vals["kv_tokens"]}",'
            f'num_gpu_blocks="364"}} 1.0'
        )
    return "\n".join(lines) + "\n"


def snap(**engines: dict) -> metrics.Snapshot:
    """``snap(e0=engine(...), e1=engine(...))``: engine label is the part after ``e``."""
    return parse_metrics(render({k[1:]: v for k, v in engines.items()}), t=0.0)


# ----------------------------------------------------------------------------- parsing


def test_parse_keys_samples_by_full_name_and_sorted_labels():
    s = snap(e0=engine(drafts=6, draft_tokens=24, accepted=10, kv=0.25, running=3))
    key = (metrics.SPEC_DRAFTS, (("engine", "0"), ("model_name", MODEL)))
    assert s.samples[key] == 6.0
    assert s.has(metrics.SPEC_DRAFTS)
    assert s.has("vllm:spec_decode_num_drafts_created")  # kept, but never summed with _total
    assert s.total(metrics.SPEC_DRAFTS) == 6.0
    assert s.total(metrics.KV_USAGE) == 0.25
    assert s.total(metrics.RUNNING) == 3.0
    assert s.t == 0.0


def test_parse_sums_over_engines_and_selects_by_label():
    s = snap(e0=engine(drafts=6, per_pos=(4, 2)), e1=engine(drafts=10, per_pos=(7, 5)))
    assert s.total(metrics.SPEC_DRAFTS) == 16.0
    assert s.total(metrics.SPEC_DRAFTS, engine="1") == 10.0
    assert s.total(metrics.SPEC_DRAFTS, engine="7") == 0.0
    assert s.by_label(metrics.SPEC_ACCEPTED_PER_POS, "position") == {"0": 11.0, "1": 7.0}
    assert sorted(d["engine"] for d, _ in s.select(metrics.SPEC_DRAFTS)) == ["0", "1"]


def test_parse_real_prometheus_client_exposition():
    """prometheus_client >= 0.2x writes TYPE with _total and _created as its own gauge family."""
    reg = CollectorRegistry()
    drafts = Counter("vllm:spec_decode_num_drafts", "Drafts.", ["model_name", "engine"], registry=reg)
    per_pos = Counter("vllm:spec_decode_num_accepted_tokens_per_pos", "Per position.",
                      ["model_name", "engine", "position"], registry=reg)
    kv = Gauge("vllm:kv_cache_usage_perc", "KV usage.", ["model_name", "engine"], registry=reg)
    drafts.labels(MODEL, "0").inc(6)
    drafts.labels(MODEL, "1").inc(4)
    per_pos.labels(MODEL, "0", "0").inc(5)
    per_pos.labels(MODEL, "1", "0").inc(2)
    kv.labels(MODEL, "0").set(0.5)
    s = parse_metrics(generate_latest(reg).decode())
    assert s.total(metrics.SPEC_DRAFTS) == 10.0
    assert s.by_label(metrics.SPEC_ACCEPTED_PER_POS, "position") == {"0": 7.0}
    assert s.total(metrics.KV_USAGE) == 0.5


@pytest.mark.parametrize("text", [
    "this is not metrics {{{",
    "<html><body>404 Not Found</body></html>",
    'vllm:num_requests_running{engine="0" 1.0',
    "# TYPE x counter\nx_total abc",
])
def test_parse_garbage_raises_metrics_error(text):
    with pytest.raises(MetricsError, match="cannot parse"):
        parse_metrics(text)


def test_empty_text_is_an_empty_snapshot():
    s = parse_metrics("")
    assert s.samples == {}
    assert not s.has(metrics.SPEC_DRAFTS)
    assert spec_decode_delta(s, s) is None


def test_info_labels_returns_cache_config_labels():
    s = snap(e0=engine(kv_tokens=46592), e1=engine(kv_tokens=40000))
    info = sorted(s.info_labels(), key=lambda d: d["engine"])
    assert len(info) == 2
    assert info[0]["block_size"] == "128"
    assert info[0]["kv_cache_size_tokens"] == "46592"
    assert info[1]["kv_cache_size_tokens"] == "40000"
    assert info[0]["enable_prefix_caching"] == "True"
    assert snap(e0=engine()).info_labels("vllm:no_such_info") == []


# ----------------------------------------------------------------------------- counters


def test_counter_delta_sums_engines_and_honours_label_match():
    before = snap(e0=engine(drafts=6), e1=engine(drafts=1))
    after = snap(e0=engine(drafts=16), e1=engine(drafts=21))
    assert counter_delta(before, after, metrics.SPEC_DRAFTS) == 30.0
    assert counter_delta(before, after, metrics.SPEC_DRAFTS, engine="1") == 20.0
    assert counter_delta(before, after, "vllm:absent_total") == 0.0


def test_counter_delta_backwards_raises():
    before = snap(e0=engine(drafts=16))
    after = snap(e0=engine(drafts=6))
    with pytest.raises(MetricsError, match="backwards"):
        counter_delta(before, after, metrics.SPEC_DRAFTS)


def test_spec_decode_delta_single_engine_exact():
    before = snap(e0=engine(drafts=6, draft_tokens=24, accepted=10, per_pos=(5, 3, 2, 0)))
    after = snap(e0=engine(drafts=16, draft_tokens=64, accepted=30, per_pos=(12, 9, 6, 3)))
    sd = spec_decode_delta(before, after)
    assert sd["num_drafts"] == 10.0
    assert sd["num_draft_tokens"] == 40.0
    assert sd["num_accepted_tokens"] == 20.0
    assert sd["accepted_per_position"] == [7.0, 6.0, 4.0, 3.0]
    assert sd["acceptance_rate"] == pytest.approx(20 / 40)
    assert sd["mean_acceptance_length"] == pytest.approx(1 + 20 / 10)
    assert sd["per_position_acceptance"] == pytest.approx([0.7, 0.6, 0.4, 0.3])


def test_spec_decode_delta_two_engines_sums_before_dividing():
    before = snap(
        e0=engine(drafts=6, draft_tokens=24, accepted=10, per_pos=(5, 3, 2, 0)),
        e1=engine(drafts=2, draft_tokens=8, accepted=1, per_pos=(1, 0, 0, 0)),
    )
    after = snap(
        e0=engine(drafts=16, draft_tokens=64, accepted=30, per_pos=(12, 9, 6, 3)),   # +10, +40, +20
        e1=engine(drafts=32, draft_tokens=128, accepted=31, per_pos=(21, 6, 3, 1)),  # +30, +120, +30
    )
    sd = spec_decode_delta(before, after)
    assert sd["num_drafts"] == 40.0
    assert sd["num_draft_tokens"] == 160.0
    assert sd["num_accepted_tokens"] == 50.0
    assert sd["accepted_per_position"] == [7.0 + 20.0, 6.0 + 6.0, 4.0 + 3.0, 3.0 + 1.0]
    assert sum(sd["accepted_per_position"]) == sd["num_accepted_tokens"]
    assert sd["acceptance_rate"] == pytest.approx(50 / 160)
    assert sd["mean_acceptance_length"] == pytest.approx(1 + 50 / 40)
    assert sd["per_position_acceptance"] == pytest.approx([27 / 40, 12 / 40, 7 / 40, 4 / 40])


def test_spec_decode_delta_orders_positions_numerically():
    before = snap(e0=engine(per_pos=[0.0] * 12))
    after = snap(e0=engine(drafts=100, draft_tokens=1200, accepted=66, per_pos=[float(11 - i) for i in range(12)]))
    sd = spec_decode_delta(before, after)
    assert sd["accepted_per_position"] == [float(11 - i) for i in range(12)]
    assert sd["per_position_acceptance"][10] == pytest.approx(0.01)


def test_spec_decode_delta_is_none_without_spec_counters():
    plain = parse_metrics(render({"0": engine(running=2)}, spec=False))
    assert spec_decode_delta(plain, plain) is None


def test_spec_decode_delta_with_no_drafts_has_no_ratios():
    s = snap(e0=engine(drafts=6, draft_tokens=24, accepted=10, per_pos=(5, 3, 2, 0)))
    sd = spec_decode_delta(s, s)
    assert sd["num_drafts"] == 0.0
    assert sd["num_draft_tokens"] == 0.0
    assert sd["acceptance_rate"] is None
    assert sd["mean_acceptance_length"] is None
    assert sd["per_position_acceptance"] == []
    assert sd["accepted_per_position"] == [0.0, 0.0, 0.0, 0.0]


def test_spec_decode_delta_backwards_raises():
    before = snap(e0=engine(drafts=16, draft_tokens=64, accepted=30))
    after = snap(e0=engine(drafts=2, draft_tokens=8, accepted=1))
    with pytest.raises(MetricsError):
        spec_decode_delta(before, after)


def test_cache_delta_values_summed_over_engines():
    before = snap(
        e0=engine(preemptions=1, prefix_queries=1000, prefix_hits=200, prompt_cached=200),
        e1=engine(preemptions=0, prefix_queries=500, prefix_hits=0, prompt_cached=0),
    )
    after = snap(
        e0=engine(preemptions=4, prefix_queries=3000, prefix_hits=900, prompt_cached=896),
        e1=engine(preemptions=2, prefix_queries=1500, prefix_hits=256, prompt_cached=256),
    )
    assert cache_delta(before, after) == {
        "preemptions": 5.0,
        "prefix_cache_queries": 3000.0,
        "prefix_cache_hits": 956.0,
        "prompt_tokens_cached": 952.0,
    }


def test_cache_delta_is_zero_for_absent_counters():
    s = parse_metrics(render({"0": engine()}, cache_counters=False))
    assert cache_delta(s, s) == {
        "preemptions": 0.0, "prefix_cache_queries": 0.0, "prefix_cache_hits": 0.0, "prompt_tokens_cached": 0.0,
    }


# ----------------------------------------------------------------------------- gauges


def test_gauge_sampler_summary_across_engines_and_samples():
    g = GaugeSampler(session=None, base_url="http://127.0.0.1:1")
    g.add(snap(e0=engine(kv=0.2, running=3, waiting=0), e1=engine(kv=0.4, running=5, waiting=1)))
    g.add(snap(e0=engine(kv=0.9, running=8, waiting=4), e1=engine(kv=0.1, running=2, waiting=0)))
    assert g.kv_usage == pytest.approx([0.3, 0.5])
    assert g.kv_usage_max_engine == pytest.approx([0.4, 0.9])
    assert g.running == [8.0, 10.0]
    assert g.waiting == [1.0, 4.0]
    s = g.summary()
    assert s["num_samples"] == 2
    assert s["scrape_errors"] == 0
    assert s["kv_cache_usage_mean"] == pytest.approx(0.4)
    assert s["kv_cache_usage_max"] == pytest.approx(0.9)
    assert s["num_requests_running_mean"] == pytest.approx(9.0)
    assert s["num_requests_running_max"] == 10.0
    assert s["num_requests_waiting_mean"] == pytest.approx(2.5)
    assert s["num_requests_waiting_max"] == 4.0


def test_gauge_sampler_ignores_snapshots_without_gauges():
    g = GaugeSampler(session=None, base_url="http://127.0.0.1:1")
    g.add(parse_metrics(""))
    s = g.summary()
    assert s["num_samples"] == 0
    assert s["kv_cache_usage_mean"] is None
    assert s["kv_cache_usage_max"] is None
    assert s["num_requests_running_max"] is None
    assert s["num_requests_waiting_mean"] is None
