"""The step anatomy on the Ray executor, the driver's side (no cluster): what a lost block
leaves is recorded as failed (where, quietly) and submitted again with only what it left, a
window a retry profiled is not a failure, what nodes send is written and counted as the local
run counts it, and a block asks Ray for its own arm's devices. A real profiled block on Ray:
tests/integration/test_anatomy_real.py."""

from __future__ import annotations

import json
from collections import deque
from pathlib import Path
from types import SimpleNamespace

from specnb.ledger.records import load_anatomy
from specnb.sweep import SweepSpec
from specnb.sweep.anatomy import AnatomyBlock, AnatomyBlocks, AnatomyOutcome, record_path
from specnb.sweep.executor import ExecutorSpec
from specnb.sweep.fleet import Fleet

STAND_IN_RAY = SimpleNamespace(exceptions=SimpleNamespace(
    TaskCancelledError=type("TaskCancelled", (Exception,), {}), WorkerCrashedError=type("Crashed", (Exception,), {}),
    RayTaskError=type("RayTaskError", (Exception,), {})))


def _fleet(tmp_path: Path, retries: int):
    failed: list[tuple] = []
    run = SimpleNamespace(out_dir=tmp_path, spec=SimpleNamespace(name="anat"), outcome=AnatomyOutcome(tmp_path),
                          fail=lambda arm, w, c, r, why, **kw: failed.append((arm.name, w, c, r, why, kw)))
    fl = Fleet([run], ExecutorSpec(kind="ray", retries=retries), False, lambda s: None, AnatomyBlocks(),
               ray=STAND_IN_RAY)
    ticks: list[int] = []
    fl.bar = SimpleNamespace(update=ticks.append)
    fl.queue, fl.blocks_done, fl.records = deque(), 0, {0: []}
    return fl, run, failed, ticks


def _write(path: Path, doc: dict) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(doc))


def test_a_lost_anatomy_block_records_what_it_left_and_goes_again_with_only_that(tmp_path):
    fl, run, failed, ticks = _fleet(tmp_path, retries=1)
    arm = SimpleNamespace(name="ngram-k4")
    _write(record_path(tmp_path, "ngram-k4", "copy", 1, 0), {})  # profiled and sent before the node died
    blk = AnatomyBlock(run, 0, 0, None, [("copy", 1), ("copy", 4), ("freeform", 1)], arm=arm)
    assert blk.key == "anat/r0/ngram-k4"
    blk.node = {"kind": "ray", "node_id": "n2", "host": "gpu-7", "hardware": {"cpu_model": "EPYC"}}
    fl.lost(blk, RuntimeError("node n2 died"))
    assert [(f[1], f[2]) for f in failed] == [("copy", 4), ("freeform", 1)]
    for name, _, _, repeat, why, kw in failed:
        assert name == "ngram-k4" and repeat == 0 and "try 1 of 2" in why and "node n2 died" in why
        # said once by the fleet, not per window; where it ran, with that node's hardware
        assert kw["quiet"] and kw["provenance"]["hardware"] == {"cpu_model": "EPYC"}
        assert kw["provenance"]["executor"]["host"] == "gpu-7" and "hardware" not in kw["provenance"]["executor"]
    (again,) = fl.queue
    assert isinstance(again, AnatomyBlock) and again.arm is arm and again.attempt == 1
    assert again.points == [("copy", 4), ("freeform", 1)] and again.key == blk.key
    assert ticks == []  # retried: its windows count when profiled
    failed.clear()
    fl.queue.clear()
    fl.lost(again, RuntimeError("node n3 died"))  # no retry left: recorded, counted done
    assert len(failed) == 2 and not fl.queue and ticks == [2]
    assert failed[0][5]["provenance"]["hardware"].startswith("unknown")  # lost before it said where


def test_a_window_a_retry_profiled_is_not_a_failure(tmp_path):
    fl, run, _, _ = _fleet(tmp_path, retries=1)
    arm = SimpleNamespace(name="b")
    base = {"kind": "step_anatomy", "arm": "b", "workload": "copy", "repeat": 0}
    for c in (1, 2):  # both lost with the first node ...
        p = record_path(tmp_path, "b", "copy", c, 0)
        _write(p.with_name(f"{p.stem}.failed-20261204T000000000000Z.json"),
               {**base, "status": "failed", "concurrency": c, "error": "NodeLost: gone"})
    _write(record_path(tmp_path, "b", "copy", 1, 0), {**base, "status": "ok", "concurrency": 1})  # ... c=1 retried
    p = record_path(tmp_path, "b", "copy", 2, 0)
    _write(p.with_name(f"{p.stem}.failed-20261204T000001000000Z.json"),  # c=2 failed again, later
           {**base, "status": "failed", "concurrency": 2, "error": "the trace was not written"})
    blocks = [AnatomyBlock(run, 0, 0, None, [("copy", 1), ("copy", 2)], arm=arm)]
    assert fl.blocks.still_failed(blocks) == ["b/copy/c002-r0 (the trace was not written)"]


def test_what_a_node_sends_is_written_and_counted_as_a_local_run_counts_it(tmp_path):
    fl, run, _, ticks = _fleet(tmp_path, retries=0)
    ok = {"kind": "step_anatomy", "status": "ok", "arm": "b", "workload": "copy", "concurrency": 2, "repeat": 0}
    bad = {**ok, "status": "failed", "concurrency": 4, "error": "trace not written"}
    fl.sink.write(run, "traces/b-r00/rank0.1.pt.trace.json.gz", b"\x1f\x8b")
    fl.sink.write(run, "logs/b-r00.log", b"log")
    fl.sink.write(run, "b/copy/anatomy-c002-r00.json", json.dumps(ok).encode())
    fl.sink.write(run, "b/copy/anatomy-c004-r00.failed-20261204T000000000000Z.json", json.dumps(bad).encode())
    assert (tmp_path / "traces/b-r00/rank0.1.pt.trace.json.gz").read_bytes() == b"\x1f\x8b"
    assert run.outcome.written == [tmp_path / "b/copy/anatomy-c002-r00.json"]
    assert ticks == [1, 1]  # the failed window is done too, as a local run ticks it
    # the same window sent again with other bytes (a block declared lost that was not): kept apart,
    # not counted, and the table still reads the first
    fl.sink.write(run, "b/copy/anatomy-c002-r00.json", json.dumps({**ok, "steps": []}).encode())
    assert len(list((tmp_path / "b/copy").glob("*.superseded-*.json"))) == 1 and ticks == [1, 1]
    assert [d["status"] for d in load_anatomy(tmp_path)] == ["ok", "failed"]


def test_a_block_asks_ray_for_its_own_arms_devices(tmp_path):
    spec = SweepSpec.parse({"name": "a", "model": "m", "concurrency": [1], "start_together": True, "arms": [
        {"name": "baseline"}, {"name": "eagle", "speculative_config": {"method": "ngram", "num_speculative_tokens": 2,
                                                                        "prompt_lookup_max": 2},
                               "server_args": ["--tensor-parallel-size", "4"]}]})
    fl, run, _, _ = _fleet(tmp_path, retries=0)
    run.spec = spec
    from specnb.sweep.fleet import block_gpus

    assert block_gpus(spec) == 5  # a sweep's block starts both servers together: 1 + 4 GPUs
    assert [block_gpus(s) for s in fl.blocks.block_specs(run)] == [1, 4]
    blk = AnatomyBlock(run, 0, 0, None, [("copy", 1)], arm=spec.arms[0])
    assert block_gpus(fl.blocks.block_spec(blk)) == 1
