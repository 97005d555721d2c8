"""Failure records and resumption, against a fake OpenAI-compatible endpoint (no vLLM).

The fake (``FakeVllm``, tests/unit/fakevllm.py) serves /v1/models, /version, /metrics and
streaming chat completions; a switch makes every completion fail with HTTP 500, so the error
paths of a sweep can be driven.
"""

from __future__ import annotations

import json

import pytest

from specnb.ledger import load_ledgers, load_requests, load_spec_by_category, read_ledger
from specnb.sweep import SweepError, SweepSpec, run_sweep
from tests.unit.fakevllm import FakeVllm


@pytest.fixture(scope="module")
def fake():
    """A fake vLLM answering four tokens a request (tests/unit/fakevllm.py), every completion
    failing until a test sets ``fail = False``."""
    srv = FakeVllm(fail=True)
    srv.start()
    yield srv
    srv.stop()


def fake_spec(url):
    return SweepSpec.parse(dict(
        name="f", workloads=["freeform"], concurrency=[1, 2], repeats=1, panel_size=2,
        work_floor_tokens=None, warmup_requests=0, request_timeout_s=10, metrics_interval_s=0.05,
        arms=[{"name": "theirs", "endpoint": url}],
    ))


def test_failed_points_are_recorded_kept_and_retried(fake, tmp_path):
    fake.fail = True
    first = run_sweep(fake_spec(fake.url), tmp_path, progress=False, echo=lambda s: None)
    assert not first.written and len(first.failed) == 2
    led = read_ledger(first.failed[0])
    assert led.status == "failed" and led.failure.error_type == "AllRequestsFailed"
    assert "HTTP 500" in led.failure.message and "engine on fire" in led.failure.message
    assert led.requests_file  # the failed requests are kept too

    second = run_sweep(fake_spec(fake.url), tmp_path, progress=False, echo=lambda s: None)
    assert len(second.failed) == 2 and not second.skipped  # failures are retried on resume
    assert len(list(tmp_path.rglob("*.failed-*.json"))) == 4  # and never overwritten

    fake.fail = False
    third = run_sweep(fake_spec(fake.url), tmp_path, progress=False, echo=lambda s: None)
    assert len(third.written) == 2 and not third.failed
    df = load_ledgers(tmp_path)
    assert (df["status"] == "ok").sum() == 2 and (df["status"] == "failed").sum() == 4
    ok = df[df["status"] == "ok"]
    assert (ok["output_tokens"] == 4 * ok["num_ok"]).all()
    assert set(ok["server_mode"]) == {"attached"}

    fourth = run_sweep(fake_spec(fake.url), tmp_path, progress=False, echo=lambda s: None)
    assert len(fourth.skipped) == 2 and not fourth.written and not fourth.failed


def test_unreachable_endpoint_is_refused_before_anything(tmp_path):
    spec = SweepSpec.parse(dict(
        name="u", workloads=["freeform"], concurrency=[1, 2], repeats=2, warmup_requests=0,
        arms=[{"name": "gone", "endpoint": "http://127.0.0.1:9"}],
    ))
    with pytest.raises(SweepError, match="arm 'gone': cannot reach http://127.0.0.1:9/v1/models"):
        run_sweep(spec, tmp_path / "out", progress=False, echo=lambda s: None)
    assert not (tmp_path / "out").exists()


def test_endpoint_gone_after_preflight_fails_every_point_and_goes_on(tmp_path, monkeypatch):
    import specnb.sweep.preflight as preflight

    monkeypatch.setattr(preflight, "check_endpoints", lambda spec: None)  # it answered, then went away
    spec = SweepSpec.parse(dict(
        name="u", workloads=["freeform"], concurrency=[1, 2], repeats=2, warmup_requests=0,
        arms=[{"name": "gone", "endpoint": "http://127.0.0.1:9"}],
    ))
    out = run_sweep(spec, tmp_path, progress=False, echo=lambda s: None)
    assert len(out.failed) == 4  # 2 levels x 2 repeats, none lost, none raised
    assert {read_ledger(p).failure.error_type for p in out.failed} == {"ServerError"}


def test_per_request_acceptance_lands_per_category(fake, tmp_path, monkeypatch):
    fake.fail = False
    monkeypatch.setattr(fake, "spec", True)
    prompts = tmp_path / "mixed.jsonl"
    prompts.write_text("\n".join(json.dumps(x) for x in [
        {"prompt": "Fix this JSON: {a:1}", "category": "fix-json"},
        {"prompt": "Tell me a story", "category": "creative"},
        {"prompt": "Fix the typo: teh", "category": "fix-json"},
        {"prompt": "No category here"},
    ]) + "\n")
    spec = SweepSpec.parse(dict(
        name="s", workloads=[str(prompts)], concurrency=[2], repeats=1, panel_size=8, min_passes=2,
        work_floor_tokens=None, warmup_requests=0, request_timeout_s=10, metrics_interval_s=0.05,
        arms=[{"name": "theirs", "endpoint": fake.url}],
    ))
    out = run_sweep(spec, tmp_path / "out", progress=False, echo=lambda s: None)
    assert len(out.written) == 1
    led = read_ledger(out.written[0])
    by = led.spec_decode_by_category
    assert set(by) == {"fix-json", "creative", "uncategorized"}
    fj, cr = by["fix-json"], by["creative"]
    assert fj.requests == 4 and fj.num_spec_steps == 4 and fj.num_accepted_draft_tokens == 8
    assert fj.mean_acceptance_length == pytest.approx(3.0) and fj.acceptance_histogram == [0, 0, 4]
    assert fj.accepted_output_share == pytest.approx(8 / 16)
    assert cr.requests == 2 and cr.mean_acceptance_length == pytest.approx(1.0)
    assert cr.draft_acceptance_rate == pytest.approx(0.0)
    frame = load_requests(out.written[0])
    assert frame["spec_num_spec_steps"].tolist() == [1] * 8
    table = load_spec_by_category(tmp_path / "out")
    assert sorted(table["category"]) == ["creative", "fix-json", "uncategorized"]
    assert table.set_index("category").loc["fix-json", "requests"] == 4


def test_a_point_disturbed_by_another_process_is_kept_and_measured_again(fake, tmp_path, monkeypatch):
    from specnb.sweep import measure, runner

    readings = iter([1.2, 0.0, 1.5, 1.4, 1.3])  # c=1: busy then quiet; c=2: busy three times

    class FakeHostLoad:
        threshold = 0.3  # a 2-core host's

        def __init__(self, pid):
            pass

        def other_cores(self):
            return next(readings)

    monkeypatch.setattr(measure, "HostLoad", FakeHostLoad)
    monkeypatch.setattr(measure, "wait_for_quiet", lambda pid: None)
    real_bar, bars = runner.progress_bar, []
    monkeypatch.setattr(runner, "progress_bar", lambda *a, **k: bars.append(real_bar(*a, **k)) or bars[-1])
    fake.fail = False
    out = run_sweep(fake_spec(fake.url), tmp_path, progress=False, echo=lambda s: None)
    assert len(out.written) == 2 and len(out.superseded) == 3
    assert bars[0].n == bars[0].total  # the re-sent requests count in the total too
    assert all(".superseded-" in p.name for p in out.superseded)
    assert all("superseded" in read_ledger(p).flags for p in out.superseded)
    df = load_ledgers(tmp_path)  # superseded records never enter the frame of points
    assert len(df) == 2
    c2 = df[df["concurrency"] == 2].iloc[0]
    assert "host_busy" in c2["flags"]  # retries ran out: the last attempt stands, flagged
    assert "host_busy" not in df[df["concurrency"] == 1].iloc[0]["flags"]
    assert len(load_ledgers(tmp_path, superseded=True)) == 5


def test_points_are_sized_in_whole_panel_passes_from_the_measured_output_length(fake, tmp_path):
    fake.fail = False
    spec = SweepSpec.parse(dict(
        name="z", workloads=["copy"], concurrency=[1, 4], repeats=2, panel_size=5, work_floor_tokens=12,
        warmup_requests=0, request_timeout_s=10, metrics_interval_s=0.05, return_token_ids=True,
        arms=[{"name": "a", "endpoint": fake.url},
              {"name": "b", "endpoint": fake.url, "speculative_config": {"method": "ngram", "num_speculative_tokens": 2}}],
    ))
    out = run_sweep(spec, tmp_path, progress=False, echo=lambda s: None)
    sizing = json.loads((tmp_path / "sizing" / "copy.json").read_text())
    assert sizing["tokens_per_request"] == 4.0  # the fake answers 4 tokens, measured once per run
    df = load_ledgers(tmp_path)  # the sizing record is not a ledger
    assert len(df) == len(out.written) == 8
    # 12 tokens / 4 per request = 3 requests, plus the N in flight: one pass of 5 at c=1, two at c=4
    assert dict(zip(df["concurrency"], df["num_requests"], strict=True)) == {1: 5, 4: 10}
    led = read_ledger(out.written[0])
    assert led.sizing.panel_size == 5 and led.sizing.tokens_per_request == 4.0
    assert led.workload.panel_ids == ["copy-001", "copy-002", "copy-003", "copy-004", "copy-005"]
    assert led.load.mode == "closed" and led.load.concurrency == led.concurrency
    req = load_requests(out.written[0])
    assert req["prompt_id"].tolist() == led.workload.panel_ids * (led.num_requests // 5)
    assert set(df["panel_hash"]) == {led.workload.panel_hash}
