"""The busy-host check counts neither the server's tree nor specnb's own client processes, and its
threshold scales with the host's cores."""

from __future__ import annotations

import multiprocessing as mp
import os
import time

import pytest

from specnb.engine import hostload
from specnb.engine.hostload import HOST_BUSY_SHARE, HostLoad, host_busy_cores
from specnb.sweep.arm import Arm
from specnb.sweep.ledgers import point_flags

# these read the host's load: another test running beside them would be that load
pytestmark = pytest.mark.serial


def _burn(seconds: float) -> None:
    t = time.process_time() + seconds
    while time.process_time() < t:
        pass


def test_client_processes_started_and_joined_during_a_point_are_not_other_load():
    # a host whose only load is this process and the children it reaps (so the test reads the same
    # on a busy machine): every CPU second the host spent is one of specnb's own
    def host_busy_seconds() -> float:
        t = os.times()
        return t.user + t.system + t.children_user + t.children_system

    sleeper = mp.get_context("spawn").Process(target=time.sleep, args=(30,))  # the "server": idle
    sleeper.start()
    try:
        load = HostLoad(sleeper.pid, busy_seconds=host_busy_seconds)
        busy0 = host_busy_seconds()
        t0 = time.perf_counter()
        procs = [mp.get_context("spawn").Process(target=_burn, args=(0.5,)) for _ in range(2)]
        for p in procs:
            p.start()
        for p in procs:
            p.join()
        clients = (host_busy_seconds() - busy0) / (time.perf_counter() - t0)
        other = load.other_cores()
    finally:
        sleeper.kill()
        sleeper.join()
    assert clients > 0.3  # counted as other load, the two client processes would flag the point
    assert other is not None and other < 0.05, (other, clients)


def test_the_threshold_is_a_share_of_the_host_and_is_what_the_flag_uses():
    assert host_busy_cores(2) == HOST_BUSY_SHARE * 2 == 0.3
    assert host_busy_cores(64) == HOST_BUSY_SHARE * 64
    assert hostload.HOST_BUSY == host_busy_cores()
    results = {"num_errors": 0, "steady_window_s": 1.0, "host_other_cpu_cores": 2.0, "host_busy_cores": 9.6}
    assert "host_busy" not in point_flags(Arm(name="baseline"), results, None, {}, True)  # a 64-core host
    results["host_busy_cores"] = 0.3
    assert "host_busy" in point_flags(Arm(name="baseline"), results, None, {}, True)  # a 2-core one


def test_a_point_confined_to_some_cpus_counts_only_what_runs_there():
    """A point whose process and server may use only some CPUs (a pinned run's test workers,
    taskset) reads the busy-host check on those CPUs: a busy process on another CPU is not its
    neighbour, the same process on its CPU is."""
    import subprocess
    import sys

    from specnb.engine.hostload import point_cpus

    cpus = sorted(os.sched_getaffinity(0))
    assert len(cpus) >= 2, "this check needs two CPUs (every machine here has them)"
    mine, other = cpus[0], cpus[-1]
    burn = [sys.executable, "-c", "import time\nt=time.time()\nwhile time.time()-t<1.6: pass"]

    def pinned(argv, cpu):
        return subprocess.Popen(argv, preexec_fn=lambda: os.sched_setaffinity(0, {cpu}))

    idle = pinned([sys.executable, "-c", "import time; time.sleep(8)"], mine)  # the "server"
    try:
        os.sched_setaffinity(0, {mine})
        assert point_cpus(idle.pid) == [mine]
        seen = {}
        for where, cpu in (("elsewhere", other), ("here", mine)):
            burner = pinned(burn, cpu)
            time.sleep(0.3)  # its interpreter started
            load = HostLoad(idle.pid)
            time.sleep(1.0)
            seen[where] = load.other_cores()
            burner.wait()
    finally:
        os.sched_setaffinity(0, set(cpus))
        idle.kill()
        idle.wait()
    import psutil

    from specnb.engine.hostload import busy_threshold

    # unconfined (every CPU of the machine): the host's own count and threshold, as before
    assert point_cpus(None) == (None if len(cpus) >= psutil.cpu_count() else cpus)
    assert busy_threshold(None) == HOST_BUSY_SHARE * psutil.cpu_count() and busy_threshold([mine]) == HOST_BUSY_SHARE
    assert seen["elsewhere"] < 0.3 < 0.6 < seen["here"], seen
