"""The Ray executor's parts that need no cluster (options, resources, the driver's write rules,
refusals before anything starts), and one run on a local Ray of blocks attached to a fake
endpoint: parallel blocks, every file on the driver, resume. The real-server runs, with a node
killed mid-block, are tests/integration/test_fleet_real.py."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import pytest

from specnb import cli
from specnb.sweep import SweepError, SweepSpec
from specnb.sweep.executor import ExecutorSpec
from specnb.sweep.fleet import Fleet, SweepBlocks, block_gpus, block_options, layout_gpus
from specnb.sweep.runner import SweepOutcome
from specnb.sweep.study import Study


@pytest.mark.parametrize("value, kind, address", [
    ("local", "local", None), ("", "local", None), (None, "local", None), ("ray", "ray", None),
    ("10.0.0.5:6379", "ray", "10.0.0.5:6379"), ("ray://head:10001", "ray", "ray://head:10001"),
    ("auto", "ray", "auto"), ({"kind": "ray", "max_blocks": 2}, "ray", None),
])
def test_executor_from_text_or_table(value, kind, address):
    ex = ExecutorSpec.model_validate(value)
    assert (ex.kind, ex.address) == (kind, address)


@pytest.mark.parametrize("value", ["rya", "Ray", {"kind": "ray", "max_blocks": 0}, {"kind": "slurm"},
                                   {"kind": "ray", "retries": -1}, {"kind": "ray", "typo": 1}])
def test_bad_executor_is_refused(value):
    with pytest.raises(ValueError):
        ExecutorSpec.model_validate(value)


@pytest.mark.parametrize("args, gpus", [
    ([], 1), (["--tensor-parallel-size", "2"], 2), (["-tp", "4", "-pp", "2"], 8),
    (["--tensor-parallel-size=2", "--data-parallel-size", "2"], 4), (["--pipeline-parallel-size=3"], 3),
])
def test_a_server_asks_for_tensor_x_pipeline_x_data_parallel_gpus(args, gpus):
    assert layout_gpus(args) == gpus


def test_a_layout_that_is_not_a_number_is_refused():
    with pytest.raises(SweepError, match="not a whole number"):
        layout_gpus(["-tp", "two"])


def _spec(**kw) -> SweepSpec:
    base = dict(name="f", model="m", workloads=["copy"], concurrency=[1], server_args=["-tp", "2"],
                arms=[{"name": "baseline"}, {"name": "ngram", "speculative_config": {"method": "ngram",
                      "num_speculative_tokens": 3}, "server_args": ["--data-parallel-size", "2"]}])
    base.update(kw)
    return SweepSpec.parse(base)


def test_a_block_asks_for_its_largest_arm_and_is_pinned_as_asked():
    spec = _spec()
    assert block_gpus(spec) == 4  # the n-gram arm: tp 2 x dp 2; the arms run one after another
    ex = ExecutorSpec(kind="ray", accelerator_type="H100", labels={"pool": "bench"}, resources={"slot": 1})
    opts = block_options(spec, ex, cpu_engine=False, node_cpus=64)
    assert (opts["num_gpus"], opts["num_cpus"], opts["max_retries"]) == (4, 1, 0)
    assert opts["accelerator_type"] == "H100" and opts["label_selector"] == {"pool": "bench"}
    assert opts["resources"] == {"slot": 1} and opts["scheduling_strategy"] == "SPREAD"


def test_a_cpu_engine_block_takes_a_whole_node_and_an_attached_sweep_no_gpu():
    opts = block_options(_spec(), ExecutorSpec(kind="ray"), cpu_engine=True, node_cpus=16)
    assert (opts["num_gpus"], opts["num_cpus"]) == (0, 16)
    attached = _spec(arms=[{"name": "theirs", "endpoint": "http://127.0.0.1:9"}])
    opts = block_options(attached, ExecutorSpec(kind="ray"), cpu_engine=False, node_cpus=16)
    assert (opts["num_gpus"], opts["num_cpus"]) == (0, 1)


def _fleet(tmp_path: Path) -> tuple[Fleet, SimpleNamespace]:
    fl = Fleet([], SimpleNamespace(retries=0), False, lambda s: None, SweepBlocks(),
               ray=SimpleNamespace())  # the write rules need no Ray
    fl.bar = SimpleNamespace(update=lambda n: None)
    run = SimpleNamespace(out_dir=tmp_path, outcome=SweepOutcome(out_dir=tmp_path))
    return fl, run


def test_the_driver_writes_block_files_once_and_never_over_another(tmp_path):
    fl, run = _fleet(tmp_path)
    fl.sink.write(run, "baseline/copy/c001-r00.requests.parquet", b"side")
    fl.sink.write(run, "baseline/copy/c001-r00.json", b'{"a": 1}')
    assert run.outcome.written == [tmp_path / "baseline/copy/c001-r00.json"]
    fl.sink.write(run, "baseline/copy/c001-r00.json", b'{"a": 1}')  # the same bytes again: nothing new
    assert len(list((tmp_path / "baseline/copy").glob("*.json"))) == 1
    fl.sink.write(run, "baseline/copy/c001-r00.json", b'{"a": 2}')  # measured twice: kept, never over the first
    assert (tmp_path / "baseline/copy/c001-r00.json").read_bytes() == b'{"a": 1}'
    assert len(run.outcome.superseded) == 1 and ".superseded-" in run.outcome.superseded[0].name
    fl.sink.write(run, "logs/baseline-r00.log", b"first start")
    fl.sink.write(run, "logs/baseline-r00.log", b"a retried block's start")
    assert sorted(p.read_bytes() for p in (tmp_path / "logs").iterdir()) == [b"a retried block's start", b"first start"]
    fl.sink.write(run, "sizing/copy.json", b"1")
    fl.sink.write(run, "sizing/copy.json", b"2")  # the run's first sizing stands
    assert (tmp_path / "sizing/copy.json").read_bytes() == b"1"
    # a sidecar whose name is taken (an orphan of a run that died between sidecar and JSON): the
    # ledger is written naming the sidecar the driver wrote, not the orphan
    (tmp_path / "ngram/copy").mkdir(parents=True)
    (tmp_path / "ngram/copy/c001-r00.requests.parquet").write_bytes(b"orphan")
    fl.sink.write(run, "ngram/copy/c001-r00.requests.parquet", b"mine")
    fl.sink.write(run, "ngram/copy/c001-r00.json", json.dumps({"requests_file": "c001-r00.requests.parquet"}).encode())
    named = json.loads((tmp_path / "ngram/copy/c001-r00.json").read_text())["requests_file"]
    assert named != "c001-r00.requests.parquet" and (tmp_path / "ngram/copy" / named).read_bytes() == b"mine"
    fl.sink.write(run, "../escape.json", b"x")
    assert not (tmp_path.parent / "escape.json").exists()


def test_a_study_takes_the_executor_as_a_parameter():
    base = dict(study="s", model="m", server_args=[], env={}, drafters={"ngram": {"method": "ngram",
                "num_speculative_tokens": 3}}, conditions={}, workloads=["copy"], concurrency=[1], repeats=1,
                panel_size=2, work_floor_tokens=0, warmup_requests=0, max_tokens=8, temperature=0.0, seed=0)
    assert Study.from_parameters("concurrency", **base).executor.local
    st = Study.from_parameters("concurrency", **base, executor="ray")
    assert st.executor.kind == "ray"
    with pytest.raises(SweepError, match="executor"):
        Study.from_parameters("concurrency", **base, executor="rya")


@pytest.mark.parametrize("args, needle", [
    (["--executor", "rya"], "--executor"),
    (["--max-blocks", "2"], "add --executor ray"),
    (["--executor", "ray", "--node-label", "pool"], "KEY=VALUE"),
])
def test_bad_executor_options_are_one_line_before_anything(tmp_path, capsys, args, needle):
    cfg = tmp_path / "s.toml"
    cfg.write_text('name = "s"\nmodel = "m"\nworkloads = ["copy"]\nconcurrency = [1]\n[[arms]]\nname = "baseline"\n')
    rc = cli.main(["sweep", str(cfg), "--out", str(tmp_path / "out"), *args])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(err) == 1 and needle in err[0], err
    assert not (tmp_path / "out").exists()


# -- on a local Ray -----------------------------------------------------------------------------
@pytest.fixture(scope="module")
def local_ray():
    from tests.conftest import require

    try:
        import ray
    except ImportError:
        ray = None
    require(ray is not None, "ray (the Ray executor's tests)", "the dev extra installs it: make setup")
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, logging_level="ERROR")
    yield ray
    ray.shutdown()


def test_blocks_on_ray_send_every_file_to_the_driver_and_resume(local_ray, fake, tmp_path):
    from specnb.sweep import run_sweep
    from tests.unit.sweep.test_runner_failures import fake_spec

    fake.fail, fake.chunk_delay_s = False, 0.1  # a block of seconds: long enough to see two overlap
    spec = fake_spec(fake.url).model_copy(update={"repeats": 2})
    out = tmp_path / "out"
    lines: list[str] = []
    outcome = run_sweep(spec, out, progress=False, echo=lines.append, executor="ray")
    assert outcome.ok, outcome.summary()
    leds = sorted(out.glob("theirs/*/c*-r0*.json"))
    assert [p.name for p in leds] == ["c001-r00.json", "c001-r01.json", "c002-r00.json", "c002-r01.json"]
    blocks = {json.loads(p.read_text())["provenance"]["executor"]["block"] for p in leds}
    assert blocks == {"f/r0", "f/r1"}
    for p in leds:  # the Parquet sidecar each ledger names came along
        assert (p.parent / json.loads(p.read_text())["requests_file"]).exists()
    records = [json.loads(p.read_text()) for p in out.glob("timings/*.json")]
    assert sum(1 for r in records if r["executor"].get("role") == "driver") == 1
    blocks = [r for r in records if r["executor"].get("block")]
    assert len(blocks) == 2  # one per block, from its node
    # the two blocks ran at the same time (an endpoint block asks for one CPU; this Ray has two)
    placed = next(r for r in records if r["executor"].get("role") == "driver")["executor"]["blocks"]
    assert max(b["node_began"] for b in placed) < min(b["node_ended"] for b in placed), placed
    # the report counts one invocation, its blocks' records apart (each was counted as one)
    from specnb.ledger.timing import timing_lines

    assert timing_lines(out)[0].startswith("sweep time (1 invocation(s), 2 Ray block record(s)): ")
    again = run_sweep(spec, out, progress=False, echo=lines.append, executor="ray")
    assert again.ok and not again.written and len(again.skipped) == 4


@pytest.fixture(scope="module")
def fake():
    from tests.unit.fakevllm import FakeVllm

    srv = FakeVllm(fail=True)
    srv.start()
    yield srv
    srv.stop()


def test_a_block_no_node_can_hold_is_refused_before_any_is_submitted(local_ray, fake, tmp_path):
    from specnb.sweep import run_sweep
    from specnb.sweep.fleet import FleetError
    from tests.unit.sweep.test_runner_failures import fake_spec

    ex = {"kind": "ray", "accelerator_type": "H100"}
    with pytest.raises(FleetError, match="no node of the cluster can hold a block"):
        run_sweep(fake_spec(fake.url), tmp_path / "out", progress=False, echo=lambda s: None, executor=ex)
    assert not list((tmp_path / "out").rglob("c*.json"))


def test_a_lost_blocks_failure_records_carry_the_nodes_hardware_not_the_drivers():
    from specnb.ledger.schema import Provenance
    from specnb.sweep.fleet import lost_provenance

    driver = Provenance(git_sha="a", git_dirty=False, versions={}, hardware={"cpu_model": "the driver's CPU"})
    node = {"kind": "ray", "node_id": "n2", "host": "gpu-7", "hardware": {"cpu_model": "EPYC", "gpus": [{"name": "H100"}]}}
    got = lost_provenance(driver, node, "s/r1", 0)
    assert got.hardware == node["hardware"] and got.executor["node_id"] == "n2" and "hardware" not in got.executor
    assert got.executor["block"] == "s/r1" and driver.hardware == {"cpu_model": "the driver's CPU"}  # untouched
    early = lost_provenance(driver, {}, "s/r1", 1)  # lost before its block started: said, not the driver's
    assert early.hardware["cpu_model"].startswith("unknown: the node was lost before")


def test_a_lost_blocks_points_are_counted_done_when_they_are_not_retried(tmp_path):
    """The progress bar counted measured points only, so a block lost for good left it short of
    its total: its points now count as done when no retry is left (a retried block's count when
    measured)."""
    from collections import deque

    from specnb.ledger.schema import Provenance
    from specnb.sweep.fleet import FleetBlock

    ticks: list[int] = []
    fl, _ = _fleet(tmp_path)
    fl.bar = SimpleNamespace(update=ticks.append)
    fl.ray = SimpleNamespace(exceptions=SimpleNamespace(
        TaskCancelledError=type("TaskCancelled", (Exception,), {}), WorkerCrashedError=type("Crashed", (Exception,), {}),
        RayTaskError=type("RayTaskError", (Exception,), {})))
    fl.queue, fl.blocks_done = deque(), 0
    run = SimpleNamespace(out_dir=tmp_path, spec=SimpleNamespace(name="s"), path=lambda pt: tmp_path / f"{pt}.json",
                          record_failure=lambda *a, **k: None,
                          provenance=Provenance(git_sha="a", git_dirty=False, versions={}, hardware={}))
    fl.runs, fl.records = [run], {0: []}
    for retries, want in ((1, []), (0, [2])):
        ticks.clear()
        fl.ex = SimpleNamespace(retries=retries)
        fl.lost(FleetBlock(run, 0, 0, {}, ["p1", "p2"]), RuntimeError("node n2 died"))
        assert ticks == want, (retries, ticks)
