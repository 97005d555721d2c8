"""Sweep planning and every refusal that must happen before a server starts."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from specnb.sweep import SweepError, SweepSpec, blocks, point_path, prepare, run_sweep
from specnb.sweep.arm import Arm, ArmError, check_drafter
from tests.hang import guard

NGRAM = {"method": "ngram", "num_speculative_tokens": 4, "prompt_lookup_max": 4}


def spec(**kw) -> SweepSpec:
    base = dict(name="t", model="some/hub-id", concurrency=[4, 1, 2], repeats=3,
                arms=[{"name": "baseline"}, {"name": "ngram-k4", "speculative_config": NGRAM}])
    base.update(kw)
    return SweepSpec.parse(base)


def test_arm_order_alternates_between_repeats():
    order = [(r, a.name) for r, _, a in blocks(spec())]
    assert order == [(0, "baseline"), (0, "ngram-k4"), (1, "ngram-k4"), (1, "baseline"),
                     (2, "baseline"), (2, "ngram-k4")]
    assert [pos for _, pos, _ in blocks(spec())] == [0, 1, 0, 1, 0, 1]


def test_levels_sorted_and_points_sized_in_whole_panel_passes():
    s = spec(panel_size=10, work_floor_tokens=400)
    assert s.load.concurrency == [1, 2, 4]
    # 400 tokens at 50 per request is 8 requests in the steady window, plus the N in flight at its ends
    assert [s.passes(10, c, 50.0) for c in (1, 2, 4, 8, 16)] == [1, 1, 2, 2, 3]
    assert s.passes(10, 1, 10.0) == 5  # short answers: more passes for the same work
    assert spec(panel_size=10, work_floor_tokens=None).passes(10, 8, None) == 2  # each worker sent twice
    assert spec(min_passes=3).passes(10, 1, 500.0) == 3


def test_point_paths_are_stable(tmp_path):
    assert point_path(tmp_path, "ngram-k4", "copy", 8, 1) == tmp_path / "ngram-k4/copy/c008-r01.json"


@pytest.mark.parametrize("change, needle", [
    ({"concurrency": [0, 1]}, "concurrency"),
    ({"concurrency": [1, 1]}, "distinct"),
    ({"concurrency": []}, "concurrency"),
    ({"repeats": 0}, "repeats"),
    ({"arms": [{"name": "a"}, {"name": "a"}]}, "distinct"),
    ({"arms": [{"name": "bad name"}]}, "arm name"),
    ({"arms": [{"name": "x", "speculative_config": {"method": "ngram"}}]}, "num_speculative_tokens"),
    ({"arms": [{"name": "x", "speculative_config": {"method": "magic", "num_speculative_tokens": 2}}]},
     "unknown speculative method"),
    ({"arms": [{"name": "x", "server_args": ["--speculative-config", "{}"]}]}, "speculative_config"),
    ({"model": None}, "'model' is required"),
    ({"sampling": {"temperature": -1}}, "temperature"),
    ({"colour": "blue"}, "colour"),
])
def test_bad_spec_is_one_line(change, needle):
    with pytest.raises(SweepError) as exc:
        spec(**change)
    assert needle in str(exc.value) and "\n" not in str(exc.value)


def test_missing_local_model_and_workload_fail_before_start(tmp_path):
    with pytest.raises(SweepError, match="does not exist"):
        prepare(spec(model=str(tmp_path / "nope")))
    with pytest.raises(SweepError, match="no such prompt file"):
        prepare(spec(workloads=[str(tmp_path / "x.jsonl")]))


def _model_dir(tmp_path, name, vocab, eos=2):
    d = tmp_path / name
    d.mkdir()
    (d / "config.json").write_text(json.dumps({"vocab_size": vocab, "bos_token_id": 1, "eos_token_id": eos}))
    return d


def test_draft_vocabulary_must_match(tmp_path):
    target = _model_dir(tmp_path, "target", 49152)
    same = _model_dir(tmp_path, "same", 49152)
    other = _model_dir(tmp_path, "other", 32000)
    eos = _model_dir(tmp_path, "eos", 49152, eos=0)
    ok = Arm(name="d", speculative_config={"model": str(same), "num_speculative_tokens": 3})
    assert "vocabulary contents not checked" in check_drafter(ok, str(target))[0]  # no tokenizer files here
    bad = Arm(name="d", speculative_config={"model": str(other), "num_speculative_tokens": 3})
    with pytest.raises(ArmError, match="vocabulary"):
        check_drafter(bad, str(target))
    with pytest.raises(ArmError, match="special tokens"):
        check_drafter(Arm(name="d", speculative_config={"model": str(eos), "num_speculative_tokens": 3}),
                      str(target))
    remote = Arm(name="d", speculative_config={"model": "org/draft", "num_speculative_tokens": 3})
    assert "not checked" in check_drafter(remote, str(target))[0]
    # the sweep refuses it before any server starts
    with pytest.raises(SweepError, match="vocabulary"):
        prepare(spec(model=str(target), arms=[{"name": "b"}, bad.model_dump()]))


def test_resuming_with_other_settings_is_refused(tmp_path, monkeypatch):
    import specnb.sweep.plan as plan

    monkeypatch.setattr(plan, "blocks", lambda s, repeats=None: iter(()))  # record the sweep, run nothing
    run_sweep(spec(), tmp_path, progress=False)
    run_sweep(spec(concurrency=[1, 2, 4, 8], repeats=5), tmp_path, progress=False)  # may extend
    with pytest.raises(SweepError, match="different settings"):
        run_sweep(spec(sampling={"max_tokens": 7}), tmp_path, progress=False)


def test_dtype_machine_resumes_a_run_of_the_dtype_it_names_here_and_no_other(tmp_path, monkeypatch):
    import specnb.sweep.plan as plan
    from specnb.engine import kernels
    from tests.unit.engine.test_kernels import AVX2_PROBE, AVX512_PROBE

    monkeypatch.setattr(plan, "blocks", lambda s, repeats=None: iter(()))  # record the sweep, run nothing
    run_sweep(spec(server_args=["--dtype", "bfloat16"]), tmp_path, progress=False)  # a run from before the value
    monkeypatch.setattr(kernels, "probe", lambda env=None: AVX512_PROBE)
    run_sweep(spec(server_args=["--dtype", "machine"]), tmp_path, progress=False)  # bf16 here: the same run
    monkeypatch.setattr(kernels, "probe", lambda env=None: AVX2_PROBE)  # the other family serves fp32
    with pytest.raises(SweepError, match="different settings"):
        run_sweep(spec(server_args=["--dtype", "machine"]), tmp_path, progress=False)


def test_cli_bad_config_is_one_line_exit_2(tmp_path):
    cfg = tmp_path / "s.toml"
    cfg.write_text('name = "x"\nmodel = "m"\nconcurrency = [1]\n[[arms]]\nname = "a b"\n')
    r = subprocess.run([sys.executable, "-m", "specnb.cli", "sweep", str(cfg), "--out", str(tmp_path / "o")],
                       capture_output=True, text=True, timeout=guard("child_start"))
    assert r.returncode == 2
    assert r.stderr.strip().count("\n") == 0 and "arm name" in r.stderr
    assert not (tmp_path / "o").exists()
    r = subprocess.run([sys.executable, "-m", "specnb.cli", "sweep", str(tmp_path / "none.toml")],
                       capture_output=True, text=True, timeout=guard("child_start"))
    assert r.returncode == 2 and "none.toml" in r.stderr


def test_missing_engine_is_named_before_start(monkeypatch):
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda n, *a: None if n == "vllm" else real(n, *a))
    with pytest.raises(SweepError, match="vLLM is not installed"):
        prepare(spec())
    # attaching needs no local engine: the next check is the endpoint's
    with pytest.raises(SweepError, match="cannot reach http://127.0.0.1:9/v1/models"):
        prepare(spec(arms=[{"name": "b", "endpoint": "http://127.0.0.1:9"}]))


def test_per_request_acceptance_flag_only_for_launched_speculative_arms(monkeypatch):
    import specnb.sweep.servers as servers
    from specnb.sweep.runner import PER_REQUEST_SPEC_FLAG, server_args_for

    monkeypatch.setattr(servers, "engine_supports_flag", lambda flag: flag == PER_REQUEST_SPEC_FLAG)
    s = spec(server_args=["--enforce-eager"])
    base, ngram = s.arms
    assert server_args_for(s, base) == ["--enforce-eager"]  # vLLM refuses the flag without a drafter
    assert server_args_for(s, ngram) == ["--enforce-eager", PER_REQUEST_SPEC_FLAG, "summary"]
    own = Arm(name="own", speculative_config=NGRAM, server_args=[f"{PER_REQUEST_SPEC_FLAG}=detailed"])
    assert server_args_for(s, own) == ["--enforce-eager", f"{PER_REQUEST_SPEC_FLAG}=detailed"]
    assert server_args_for(spec(per_request_spec_metrics=False), ngram) == []
    monkeypatch.setattr(servers, "engine_supports_flag", lambda flag: False)  # an older engine
    assert server_args_for(s, ngram) == ["--enforce-eager"]


def test_engine_flag_detection_reads_the_installed_arg_parser(tmp_path, monkeypatch):
    import importlib.machinery
    import importlib.util

    from specnb.engine.vllm import engine_supports_flag

    pkg = tmp_path / "vllm"
    (pkg / "engine").mkdir(parents=True)
    (pkg / "engine" / "arg_utils.py").write_text(
        'class EngineArgs:\n    enforce_eager: bool = False\n\n'
        'parser.add_argument("--per-request-spec-decode-metrics", choices=["none", "summary"])\n')
    fake = importlib.machinery.ModuleSpec("vllm", None, is_package=True)
    fake.submodule_search_locations = [str(pkg)]
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda n, *a: fake if n == "vllm" else real(n, *a))
    assert engine_supports_flag("--per-request-spec-decode-metrics")
    assert engine_supports_flag("--enforce-eager")  # an EngineArgs field is a flag
    assert not engine_supports_flag("--speculative-metrics-per-request")
    (pkg / "engine" / "arg_utils.py").unlink()
    assert not engine_supports_flag("--per-request-spec-decode-metrics")
    monkeypatch.setattr(importlib.util, "find_spec", lambda n, *a: None if n == "vllm" else real(n, *a))
    assert not engine_supports_flag("--per-request-spec-decode-metrics")


def test_traffic_and_category_workloads_in_a_sweep(tmp_path):
    log = tmp_path / "chat.jsonl"
    log.write_text("\n".join(json.dumps({"prompt": f"q{i}", "response": "a"}) for i in range(20)) + "\n")
    s = spec(workloads=["copy:fix-json", {"traffic": str(log), "sample": 5, "seed": 2}])
    wls = prepare(s).workloads
    assert list(wls) == ["copy:fix-json", "chat"]
    assert wls["chat"].imported["sample"] == 5 and len(wls["chat"].prompts) == 5
    assert "chat" in json.dumps(s.identity())
    with pytest.raises(SweepError, match="both named 'chat'"):
        prepare(spec(workloads=[{"traffic": str(log)}, {"traffic": str(log), "sample": 3}]))
    with pytest.raises(SweepError, match="distinct"):
        spec(workloads=[{"traffic": str(log)}, {"traffic": str(log)}])
    with pytest.raises(SweepError, match="has no category"):
        prepare(spec(workloads=["copy:poetry"]))
    prepare(spec(workloads=[{"traffic": str(log)}, {"traffic": str(log), "sample": 3, "name": "chat-3"}]))


def test_run_async_works_inside_a_running_event_loop():
    """Notebooks run the sweep inside ipykernel's event loop, where asyncio.run refuses."""
    import asyncio

    from specnb.sweep.measure import run_async as _run_async

    async def value():
        await asyncio.sleep(0)
        return 42

    async def outer():
        return _run_async(value())

    assert _run_async(value()) == 42
    assert asyncio.run(outer()) == 42


@pytest.mark.serial  # reads the host's load: another test beside it would be that load
def test_host_load_sees_a_noisy_neighbour_but_not_the_server():
    """Two views of the same second, so background load on the machine cancels: counting
    the burner as the server must see about one core less than counting an idle process."""
    import subprocess
    import sys
    import time

    from specnb.engine.hostload import HostLoad

    burner = subprocess.Popen([sys.executable, "-c", "import time\nt=time.time()\nwhile time.time()-t<2: pass"])
    idle = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(3)"])
    try:
        time.sleep(0.2)
        as_server, as_neighbour = HostLoad(burner.pid), HostLoad(idle.pid)
        time.sleep(1.0)
        excluded, included = as_server.other_cores(), as_neighbour.other_cores()
        assert included - excluded > 0.5
    finally:
        burner.wait()
        idle.kill()
    assert HostLoad(None).other_cores() is None
