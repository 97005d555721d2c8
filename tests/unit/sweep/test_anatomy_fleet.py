"""The step anatomy on the Ray executor, the driver's side (no cluster): what a lost block
leaves is recorded as failed and submitted again with only what it left, what nodes send is
written and counted as the local run counts it. A real profiled block on Ray:
tests/integration/test_anatomy_real.py."""

from __future__ import annotations

import json
from collections import deque
from pathlib import Path
from types import SimpleNamespace

from specnb.sweep.anatomy import AnatomyBlock, AnatomyFleet, AnatomyOutcome, record_path
from specnb.sweep.executor import ExecutorSpec

STAND_IN_RAY = SimpleNamespace(exceptions=SimpleNamespace(
    TaskCancelledError=type("TaskCancelled", (Exception,), {}), WorkerCrashedError=type("Crashed", (Exception,), {}),
    RayTaskError=type("RayTaskError", (Exception,), {})))


def _fleet(tmp_path: Path, retries: int):
    failed: list[tuple] = []
    run = SimpleNamespace(out_dir=tmp_path, spec=SimpleNamespace(name="anat"), outcome=AnatomyOutcome(tmp_path),
                          fail=lambda arm, w, c, r, why: failed.append((arm.name, w, c, r, why)))
    fl = AnatomyFleet([run], ExecutorSpec(kind="ray", retries=retries), False, lambda s: None, ray=STAND_IN_RAY)
    ticks: list[int] = []
    fl.bar = SimpleNamespace(update=ticks.append)
    fl.queue, fl.blocks_done, fl.records = deque(), 0, {0: []}
    return fl, run, failed, ticks


def test_a_lost_anatomy_block_records_what_it_left_and_goes_again_with_only_that(tmp_path):
    fl, run, failed, ticks = _fleet(tmp_path, retries=1)
    arm = SimpleNamespace(name="ngram-k4")
    done = record_path(tmp_path, "ngram-k4", "copy", 1, 0)  # profiled and sent before the node died
    done.parent.mkdir(parents=True)
    done.write_text("{}")
    blk = AnatomyBlock(run, 0, 0, None, [("copy", 1), ("copy", 4), ("freeform", 1)], arm=arm)
    assert blk.key == "anat/r0/ngram-k4"
    fl.lost(blk, RuntimeError("node n2 died"))
    assert [(f[1], f[2]) for f in failed] == [("copy", 4), ("freeform", 1)]
    assert all(f[0] == "ngram-k4" and f[3] == 0 and "try 1 of 2" in f[4] and "node n2 died" in f[4] for f in failed)
    (again,) = fl.queue
    assert isinstance(again, AnatomyBlock) and again.arm is arm and again.attempt == 1
    assert again.points == [("copy", 4), ("freeform", 1)] and again.key == blk.key
    assert ticks == []  # retried: its windows count when profiled
    failed.clear()
    fl.queue.clear()
    fl.lost(again, RuntimeError("node n3 died"))  # no retry left: recorded, counted done
    assert len(failed) == 2 and not fl.queue and ticks == [2]


def test_what_a_node_sends_is_written_and_counted_as_a_local_run_counts_it(tmp_path):
    fl, run, _, ticks = _fleet(tmp_path, retries=0)
    ok = {"status": "ok", "arm": "b", "workload": "copy", "concurrency": 2, "repeat": 0}
    bad = {**ok, "status": "failed", "error": "trace not written"}
    fl.write(run, "traces/b-r00/rank0.1.pt.trace.json.gz", b"\x1f\x8b")
    fl.write(run, "logs/b-r00.log", b"log")
    fl.write(run, "b/copy/anatomy-c002-r00.json", json.dumps(ok).encode())
    fl.write(run, "b/copy/anatomy-c004-r00.failed-20261204T000000000000Z.json",
              json.dumps({**bad, "concurrency": 4}).encode())
    assert (tmp_path / "traces/b-r00/rank0.1.pt.trace.json.gz").read_bytes() == b"\x1f\x8b"
    assert run.outcome.written == [tmp_path / "b/copy/anatomy-c002-r00.json"]
    assert run.outcome.failed == ["b/copy/c004-r0 (trace not written)"] and ticks == [1]
