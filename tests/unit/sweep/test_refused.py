"""What the engine build cannot serve on this machine is refused before anything starts, and
recorded; an engine that dies at its first request is reported with its cause; a fallback
path is flagged on the points it slows. Against the fake vLLM (seconds); the AVX2 probe is a
hand-made one, as an AMD EPYC machine's extension answers (``_C_AVX2``: no cpu_gemm_wna16, no
oneDNN bf16 matmul). The real probe and the real W4A16 server are in
``tests/integration/test_checkpoints_real.py``."""

from __future__ import annotations

import glob
import json
from pathlib import Path

import pytest

from specnb import paths
from specnb.analysis.report import format_run_report
from specnb.engine import kernels
from specnb.ledger import Flag, load_ledgers, read_ledger
from specnb.ledger.names import REFUSED_ERROR
from specnb.ledger.records import RunRecords
from specnb.notebooks.runner import notebook_parameters
from specnb.sweep import SweepSpec, run_sweep
from specnb.sweep.study import Study
from tests.unit.engine.test_kernels import AVX2_PROBE
from tests.unit.fakevllm import fake_model

QUIET = lambda s: None  # noqa: E731


@pytest.fixture
def avx2(monkeypatch):
    monkeypatch.setattr(kernels, "probe", lambda env=None: AVX2_PROBE)


def w4a16(folder):
    fake_model(folder)
    cfg = json.loads((folder / "config.json").read_text())
    cfg.update(torch_dtype="bfloat16", quantization_config={
        "quant_method": "compressed-tensors",
        "config_groups": {"g": {"weights": {"num_bits": 4, "type": "int", "group_size": 64}, "input_activations": None}}})
    (folder / "config.json").write_text(json.dumps(cfg))
    return folder


def study(fake, tmp_path, **kw):
    cfg = json.loads((fake.model / "config.json").read_text())
    (fake.model / "config.json").write_text(json.dumps({**cfg, "torch_dtype": "bfloat16"}))
    (nb,) = glob.glob(str(paths.ROOT / "notebooks" / "[0-9][0-9]_quantization.py"))
    params = {**notebook_parameters(nb), "study": "t", "model": str(fake.model), "served_model_name": "fake",
              "drafters": {"ngram": {"method": "ngram", "num_speculative_tokens": 2, "prompt_lookup_max": 2}},
              "conditions": {"bf16": {}, "w4a16": {"model": str(w4a16(tmp_path / "w4"))}},
              "concurrency": [1], "repeats": 1, "panel_size": 2, "work_floor_tokens": 0, "warmup_requests": 0,
              "max_tokens": 8, "server_args": [], "env": {"FAKE_VLLM_STATE": str(fake.state), "FAKE_VLLM_FALLBACK": "1"},
              "workloads": ["freeform"]}
    params.update(kw)
    return Study.from_parameters("quantization", **params)


def test_a_condition_the_build_cannot_serve_is_recorded_refused_and_the_study_goes_on(fake_vllm, avx2, tmp_path,
                                                                                         capsys):
    folder, outcomes = study(fake_vllm, tmp_path).run(root=tmp_path / "ledgers", progress=False)
    err = capsys.readouterr().err
    refused_lines = [ln for ln in err.splitlines() if ln.startswith("refused: ")]
    # one reason for both arms of the condition, said once naming them
    assert len(refused_lines) == 1 and all("cpu_gemm_wna16" in ln and "CPU level avx2" in ln for ln in refused_lines)
    assert refused_lines[0].startswith("refused: arms 'baseline', 'ngram': ")
    assert len(fake_vllm.started) == 2  # baseline and ngram of bf16; nothing for w4a16
    assert not (folder / "w4a16" / "logs").exists()
    failed = sorted((folder / "w4a16").rglob("*.failed-*.json"))
    assert len(failed) == 2
    for p in failed:
        led = read_ledger(p)
        assert led.status == "failed" and led.server is None
        assert led.failure.error_type == REFUSED_ERROR and "W4A16" in led.failure.message
        assert led.provenance.hardware["cpu_isa"]  # the level is in every ledger
        assert led.provenance.hardware["engine_kernels"]["missing"] == ["cpu_gemm_wna16"]
    assert all(not o.failed_points for o in outcomes)  # a refusal is recorded, not retried
    assert any(o.refused for o in outcomes)
    df = load_ledgers(folder)
    ok = df[df["status"] == "ok"]
    assert set(ok["condition"]) == {"bf16"} and len(ok) == 2
    # the fake logs oneDNN's fallback: every point of that server is flagged, and preflight said why
    assert all(Flag.ENGINE_FALLBACK in f.split(",") for f in ok["flags"])
    led = read_ledger(ok["path"].iloc[0])
    assert any("torch's fallback" in n and "float32" in n for n in led.parameters["notes"])
    text = format_run_report(RunRecords(tmp_path, df))
    assert "refused before any server started" in text
    assert "w4a16 / baseline: 1 point(s) not measured" in text and "cpu_gemm_wna16" in text


def test_the_same_study_on_a_build_that_has_the_kernel_measures_every_condition(fake_vllm, tmp_path, monkeypatch):
    from tests.unit.engine.test_kernels import AVX512_PROBE

    monkeypatch.setattr(kernels, "probe", lambda env=None: AVX512_PROBE)
    folder, outcomes = study(fake_vllm, tmp_path, env={"FAKE_VLLM_STATE": str(fake_vllm.state)}).run(
        root=tmp_path / "ledgers", progress=False)
    df = load_ledgers(folder)
    assert set(df.loc[df["status"] == "ok", "condition"]) == {"bf16", "w4a16"}
    assert not any(Flag.ENGINE_FALLBACK in f for f in df["flags"])
    assert not any(o.refused for o in outcomes)


def _dead_spec(fake, warmup):
    return SweepSpec.parse(dict(
        name="d", model=str(fake.model), served_model_name="fake", workloads=["freeform"], concurrency=[1, 2],
        repeats=1, panel_size=2, work_floor_tokens=0, warmup_requests=warmup, request_timeout_s=5,
        metrics_interval_s=0.05, ready_timeout_s=30, sampling={"max_tokens": 8},
        env={"FAKE_VLLM_STATE": str(fake.state), "FAKE_VLLM_ENGINE_DEAD": "1"}, arms=[{"name": "baseline"}]))


def test_an_engine_that_dies_at_its_first_warmup_request_fails_its_points_with_the_cause(fake_vllm, tmp_path):
    said = []
    out = run_sweep(_dead_spec(fake_vllm, 2), tmp_path, progress=False, echo=said.append)
    assert len(out.failed) == 2 and not out.written and len(fake_vllm.started) == 1  # no retry of a dead engine
    for p in out.failed:
        f = read_ledger(p).failure
        assert f.error_type == "EngineDiedError"
        assert "the engine died at its first requests: AttributeError" in f.message and "cpu_gemm_wna16" in f.message
        assert "cpu_gemm_wna16" in (f.log_tail or "")
    failed_lines = [s for s in said if s.startswith("FAILED")]
    assert failed_lines and all("\n" not in s and "cpu_gemm_wna16" in s for s in failed_lines)
    assert all("cpu_gemm_wna16" in p for p in out.failed_points)


def test_an_engine_that_dies_during_a_point_names_the_cause_not_a_bare_http_500(fake_vllm, tmp_path):
    out = run_sweep(_dead_spec(fake_vllm, 0), tmp_path, progress=False, echo=QUIET)
    first = read_ledger(sorted(out.failed)[0])
    assert first.failure.error_type in ("EngineDied", "ServerStartError", "EngineDiedError")
    msgs = " ".join(read_ledger(p).failure.message for p in out.failed)
    assert "the engine failed: AttributeError: '_OpNamespace' '_C' object has no attribute 'cpu_gemm_wna16'" in msgs


def test_a_refusal_is_recorded_once_however_many_repeats_or_resumes(fake_vllm, avx2, tmp_path):
    st = study(fake_vllm, tmp_path, repeats=2)
    folder, _ = st.run(root=tmp_path / "ledgers", progress=False)
    assert len(list((folder / "w4a16").rglob("*.failed-*.json"))) == 4  # 2 arms x 2 repeats, once each
    st.run(root=tmp_path / "ledgers", run=folder.name, progress=False)  # resume: nothing new to say
    assert len(list((folder / "w4a16").rglob("*.failed-*.json"))) == 4
    assert "w4a16 / baseline: 2 point(s) not measured" in format_run_report(RunRecords(folder, load_ledgers(folder)))


def test_an_engine_that_dies_while_the_panel_is_sized_says_why(fake_vllm, tmp_path):
    spec = _dead_spec(fake_vllm, 0).model_copy(update={"work_floor_tokens": 40})
    out = run_sweep(spec, tmp_path, progress=False, echo=QUIET)
    assert out.failed and not out.written
    f = read_ledger(out.failed[0]).failure
    assert f.error_type == "EngineDiedError" and "cpu_gemm_wna16" in f.message


def test_the_last_dtype_given_is_the_one_assessed(fake_vllm, avx2, tmp_path):
    from specnb.sweep.preflight import check_kernels, flag_value

    assert flag_value(["--dtype", "bfloat16", "--max-model-len", "2", "--dtype=float32"], "--dtype") == "float32"
    cfg = json.loads((fake_vllm.model / "config.json").read_text())
    (fake_vllm.model / "config.json").write_text(json.dumps({**cfg, "torch_dtype": "bfloat16"}))
    spec = SweepSpec.parse(dict(name="d", model=str(fake_vllm.model), workloads=["copy"], concurrency=[1],
                                server_args=["--dtype", "bfloat16"],
                                arms=[{"name": "baseline"}, {"name": "fp32", "server_args": ["--dtype", "float32"],
                                                             "speculative_config": {"method": "ngram",
                                                                                    "num_speculative_tokens": 2}}]))
    _, fallback, _ = check_kernels(spec, str(fake_vllm.model))
    assert set(fallback) == {"baseline"}  # the arm's own --dtype float32 has a oneDNN kernel


def test_a_probe_that_answers_nothing_readable_refuses_nothing(monkeypatch, tmp_path):
    import subprocess

    # a CPU build whose extension is there (so the probe is asked, on any engine this runs beside)
    lib = tmp_path / "vllm" / "_C_AVX2.abi3.so"
    lib.parent.mkdir()
    lib.write_bytes(b"")
    monkeypatch.setattr(kernels, "installed_vllm", lambda: {"cpu_build": True})
    monkeypatch.setattr(kernels, "vllm_package_dirs", lambda: [lib.parent])
    monkeypatch.setattr(kernels, "find_library", lambda root, ext: lib)
    monkeypatch.setattr(subprocess, "run", lambda *a, **k: subprocess.CompletedProcess(a, 0, stdout="", stderr=""))
    monkeypatch.setattr(kernels, "cache_file", lambda *a: Path("/nonexistent/kernels.json"))
    kernels.probe_for.cache_clear()
    try:
        kp = kernels.probe({kernels.EMULATE_ENV: "avx2"})
    finally:
        kernels.probe_for.cache_clear()
    assert kp is not None and kp.error and "nothing readable" in kp.error


def test_dtype_machine_is_assessed_and_launched_as_this_cpus_dtype(fake_vllm, avx2, tmp_path):
    """The notebooks' default `--dtype machine` on an AVX2-only CPU: fp32, which has a oneDNN kernel
    there (no fallback note), and fp32 is what the server is started with."""
    from specnb.sweep.preflight import check_kernels
    from specnb.sweep.runner import server_args_for

    cfg = json.loads((fake_vllm.model / "config.json").read_text())
    (fake_vllm.model / "config.json").write_text(json.dumps({**cfg, "torch_dtype": "bfloat16"}))
    spec = SweepSpec.parse(dict(name="d", model=str(fake_vllm.model), workloads=["copy"], concurrency=[1],
                                server_args=["--enforce-eager", "--dtype", "machine"],
                                arms=[{"name": "baseline"}, {"name": "bf16", "server_args": ["--dtype", "bfloat16"]}]))
    _, fallback, _ = check_kernels(spec, str(fake_vllm.model))
    assert set(fallback) == {"bf16"}  # asked for bf16 by name: served on the fallback, and said
    assert server_args_for(spec, spec.arms[0]) == ["--enforce-eager", "--dtype", "float32"]
    assert server_args_for(spec, spec.arms[1])[-2:] == ["--dtype", "bfloat16"]


def test_make_tune_on_an_avx2_cpu_serves_fp32_with_no_fallback_note(fake_vllm, avx2):
    """configs/cpu-tune.toml (`make tune`) as an AVX2-only machine reads it: every arm, the off arm
    the tune adds included, is served in fp32, and nothing runs on torch's bf16 fallback."""
    from specnb.sweep.preflight import check_kernels
    from specnb.sweep.runner import server_args_for
    from specnb.sweep.tune import TuneSpec

    cfg = json.loads((fake_vllm.model / "config.json").read_text())
    (fake_vllm.model / "config.json").write_text(json.dumps({**cfg, "torch_dtype": "bfloat16"}))
    proposal = TuneSpec.from_toml(paths.CONFIGS / "cpu-tune.toml").proposal
    spec = proposal.model_copy(update={"model": str(fake_vllm.model)})
    refused, fallback, _ = check_kernels(spec, str(fake_vllm.model))
    assert refused == {} and fallback == {}
    for arm in spec.arms:
        args = server_args_for(spec, arm)
        assert args[args.index("--dtype") + 1] == "float32", arm.name


def test_a_note_that_holds_for_several_arms_is_said_once_naming_them(fake_vllm, avx2, tmp_path):
    cfg = json.loads((fake_vllm.model / "config.json").read_text())
    (fake_vllm.model / "config.json").write_text(json.dumps({**cfg, "torch_dtype": "bfloat16"}))
    ngram = {"method": "ngram", "num_speculative_tokens": 2, "prompt_lookup_max": 2}
    spec = SweepSpec.parse(dict(
        name="n", model=str(fake_vllm.model), served_model_name="fake", workloads=["freeform"], concurrency=[1],
        repeats=1, panel_size=2, work_floor_tokens=0, warmup_requests=0, metrics_interval_s=0.05,
        ready_timeout_s=30, sampling={"max_tokens": 8}, server_args=["--dtype", "bfloat16"],
        env={"FAKE_VLLM_STATE": str(fake_vllm.state)},
        arms=[{"name": "baseline"}, {"name": "ngram", "speculative_config": ngram},
              {"name": "fp32", "server_args": ["--dtype", "float32"], "speculative_config": ngram}]))
    said: list[str] = []
    run_sweep(spec, tmp_path / "out", progress=False, echo=said.append)
    notes = [s for s in said if s.startswith("note: ")]
    assert len(notes) == 1, notes
    assert notes[0].startswith("note: arms 'baseline', 'ngram': ") and "torch's fallback" in notes[0]


def _w4_sweep_file(tmp_path, fake, arms: str) -> Path:
    model = w4a16(tmp_path / "w4")
    cfg = tmp_path / "s.toml"
    cfg.write_text(f'name = "w4probe"\nmodel = "{model}"\nserved_model_name = "fake"\nworkloads = ["freeform"]\n'
                   'concurrency = [1, 2]\nrepeats = 1\npanel_size = 2\nwork_floor_tokens = 0\nwarmup_requests = 0\n'
                   f'ready_timeout_s = 30\n[env]\nFAKE_VLLM_STATE = "{fake.state}"\n[sampling]\nmax_tokens = 8\n'
                   + arms)
    return cfg


NGRAM_ARM = ('[[arms]]\nname = "ngram"\n'
             'speculative_config = { method = "ngram", num_speculative_tokens = 2, prompt_lookup_max = 2 }\n')


def test_a_sweep_whose_every_arm_is_refused_says_so_in_one_line_and_exits_2(fake_vllm, avx2, tmp_path, capsys):
    from specnb.cli import main

    cfg = _w4_sweep_file(tmp_path, fake_vllm, '[[arms]]\nname = "baseline"\n' + NGRAM_ARM)
    out = tmp_path / "out"
    assert main(["sweep", str(cfg), "--out", str(out)]) == 2  # progress on: nothing of it may show
    captured = capsys.readouterr()
    lines = [ln for ln in captured.err.splitlines() if ln.strip()]
    assert len(lines) == 1, lines
    assert lines[0].startswith("specnb: refused: arms 'baseline', 'ngram': model ") and "cpu_gemm_wna16" in lines[0]
    assert captured.out == "" and fake_vllm.started == []
    assert len(list(out.rglob("*.failed-*.json"))) == 4  # recorded for `specnb report`
    assert not (out / "timings").exists()  # nothing ran, nothing timed
    assert main(["report", str(out)]) in (0, 1)
    text = capsys.readouterr().out
    assert "(the installed build; no server ran)" in text and "vLLM ?" not in text
    assert "baseline: 2 point(s) not measured" in text


def test_a_sweep_with_one_arm_refused_plans_and_counts_only_what_it_runs(fake_vllm, avx2, tmp_path):
    """The refused arm's points send no request and start no server: the plan, the progress total
    and the first line say what the run will really do."""
    model = w4a16(tmp_path / "w4")
    plain = fake_vllm.model
    cfg = json.loads((plain / "config.json").read_text())
    (plain / "config.json").write_text(json.dumps({**cfg, "torch_dtype": "float32"}))
    spec = SweepSpec.parse(dict(
        name="half", model=str(plain), served_model_name="fake", workloads=["freeform"], concurrency=[1, 2],
        repeats=1, panel_size=2, work_floor_tokens=0, warmup_requests=0, ready_timeout_s=30,
        sampling={"max_tokens": 8}, env={"FAKE_VLLM_STATE": str(fake_vllm.state)},
        arms=[{"name": "baseline"}, {"name": "draft", "speculative_config": {"method": "draft_model", "model": str(model),
                                                                            "num_speculative_tokens": 2}}]))
    said: list[str] = []
    outcome = run_sweep(spec, tmp_path / "out", progress=False, echo=said.append)
    assert not outcome.refused_all and len(outcome.written) == 2 and len(fake_vllm.started) == 1
    assert not any("every check passed" in s for s in said)
    assert any("(1 of 2 arms refused below, the others checked" in s for s in said)
    (plan,) = [s for s in said if s.startswith("plan: ")]
    assert plan.startswith("plan: 2 point(s), 1 server start(s), "), plan
    refused = [s for s in said if s.startswith("refused: ")]
    assert len(refused) == 1 and refused[0].startswith("refused: arm 'draft': draft model ")


def test_a_study_whose_every_condition_is_refused_makes_the_runner_exit_2(fake_vllm, avx2, tmp_path, monkeypatch):
    from specnb.ledger.runs import OUTCOME_FILE_ENV, read_failed_points, read_refused_all

    outcome_file = tmp_path / "outcome.jsonl"
    monkeypatch.setenv(OUTCOME_FILE_ENV, str(outcome_file))
    st = study(fake_vllm, tmp_path, conditions={"w4a16": {"model": str(w4a16(tmp_path / "w4"))}})
    st.run(root=tmp_path / "ledgers", progress=False)
    lines = read_refused_all(outcome_file)
    assert len(lines) == 1 and lines[0].startswith("refused: w4a16: arms 'baseline', 'ngram': model ")
    assert read_failed_points(outcome_file) == []  # a refusal is no failed point to retry
    assert fake_vllm.started == []
