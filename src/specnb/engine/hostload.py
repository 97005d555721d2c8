"""How busy the machine was during a point, apart from the server and the client.

A paired measurement cancels slow drift (the ABBA order) but not a noisy neighbour that comes
and goes: another process that takes CPU during one arm's point and not the other's. This
measures the CPU used by everything except the server's process tree, this process and the
client processes it started for the point (``client_workers``: they are reaped before the point
ends, so their CPU is in this process's children times), so a disturbed point can be flagged
(``host_busy``) and measured again. The threshold scales with the host: a share of its cores
(:func:`host_busy_cores`; 0.3 of a core on the 2-core machines here), recorded in each ledger.

Only the CPUs the point can run on are read: those this process and the server's processes may use
(their affinity). A run confined to some CPUs (``taskset``, one of two test workers each given
its own core) is disturbed by what runs there, not by work on the machine's other CPUs; the
threshold is then the share of those CPUs. Unconfined, that is every CPU, as before.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterable
from functools import partial
from pathlib import Path

import psutil

from specnb.ledger.provenance import usable_cpus  # the one reader of this thread's CPUs

__all__ = ["HOST_BUSY_SHARE", "HOST_BUSY", "host_busy_cores", "usable_cpus", "busy_seconds", "point_cpus", "busy_threshold", "HostLoad", "wait_for_quiet"]

# share of the host's cores that processes neither the server nor specnb's own may use during a
# point before it is flagged: on a shared machine a noisy neighbour moves one arm and not the other
HOST_BUSY_SHARE = 0.15


def host_busy_cores(ncpu: int | None = None) -> float:
    """The ``host_busy`` threshold in cores (``ncpu`` cores; default: the CPUs this process may use)."""
    return HOST_BUSY_SHARE * (ncpu or len(usable_cpus()) or 1)


HOST_BUSY = host_busy_cores()  # on this machine, for this process's CPUs


_BUSY_FIELDS = ("user", "nice", "system", "irq", "softirq", "steal")
# /proc/stat's per-CPU columns: user nice system idle iowait irq softirq steal (clock ticks)
_STAT_BUSY = (0, 1, 2, 5, 6, 7)


def _per_cpu_busy() -> dict[int, float] | None:
    """Each CPU's busy seconds so far, by CPU id, from /proc/stat (None where it cannot be read)."""
    try:
        lines = Path("/proc/stat").read_text().splitlines()
        tick = os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, AttributeError):
        return None
    out = {}
    for line in lines:
        name, *cols = line.split() or [""]
        if name.startswith("cpu") and name[3:].isdigit():
            out[int(name[3:])] = sum(int(cols[i]) for i in _STAT_BUSY if i < len(cols)) / tick
    return out or None


def busy_seconds(cpus: Iterable[int] | None = None) -> float:
    """The host's busy CPU seconds so far (user, nice, system, interrupts, steal; not idle or waiting
    on I/O): all cores, or only ``cpus`` (all cores where /proc/stat does not list each of them, as a
    container that renumbers its CPUs there)."""
    if cpus is not None:
        per = _per_cpu_busy()
        if per is not None and all(c in per for c in cpus):
            return sum(per[c] for c in cpus)
    t = psutil.cpu_times()
    return sum(getattr(t, k, 0.0) for k in _BUSY_FIELDS)


_busy_of = busy_seconds  # HostLoad's argument of the same name hides it there


def _thread_cpus(proc: psutil.Process) -> set[int]:
    """The CPUs any thread of ``proc`` may run on (vLLM's OpenMP threads bind their own)."""
    cpus = set(proc.cpu_affinity())
    for thread in proc.threads():
        try:
            cpus.update(os.sched_getaffinity(thread.id))
        except OSError:  # the thread ended meanwhile
            continue
    return cpus


def point_cpus(server_pid: int | None) -> list[int] | None:
    """The CPUs a point runs on: those this process and any thread of the server's processes may use;
    None where that is every CPU of the machine, or cannot be read."""
    if not hasattr(os, "sched_getaffinity"):
        return None
    cpus = set(usable_cpus())
    if server_pid is not None:
        try:
            root = psutil.Process(server_pid)
            tree = [root, *root.children(recursive=True)]
        except psutil.NoSuchProcess:
            tree = []
        except psutil.Error:
            return None
        for proc in tree:
            try:
                cpus |= _thread_cpus(proc)
            except (psutil.NoSuchProcess, psutil.ZombieProcess):  # ended meanwhile: no CPU of its own now
                continue
            except (psutil.Error, AttributeError):
                return None
    every = psutil.cpu_count() or 0
    return None if len(cpus) >= every else sorted(cpus)


def busy_threshold(cpus: list[int] | None) -> float:
    """The ``host_busy`` threshold for a point read on ``cpus`` (None: every CPU of the machine)."""
    return host_busy_cores(len(cpus) if cpus else (psutil.cpu_count() or 1))


def _own_cpu() -> float:
    """CPU seconds of this process and of its children reaped so far (the client processes)."""
    t = os.times()
    return t.user + t.system + t.children_user + t.children_system

class HostLoad:
    """CPU used during a point by everything except the server's process tree, this process and
    the client processes it reaped: the noisy neighbour a paired measurement cannot cancel if it
    comes and goes."""

    def __init__(self, server_pid: int | None, busy_seconds: Callable[[], float] | None = None):
        """``busy_seconds``: the host's busy CPU seconds so far (default: those of the CPUs the point
        runs on, :func:`point_cpus`)."""
        self.server_pid = server_pid
        self.cpus = point_cpus(server_pid) if busy_seconds is None else None
        self.threshold = busy_threshold(self.cpus)  # what other_cores() is held against
        self._busy = busy_seconds if busy_seconds is not None else partial(_busy_of, self.cpus)
        self._t0 = time.perf_counter()
        self._busy0 = self._busy()
        self._srv0 = self._tree(server_pid)
        self._own0 = _own_cpu()

    @staticmethod
    def _tree(pid: int | None) -> float | None:
        if pid is None:
            return None
        total = 0.0
        try:
            root = psutil.Process(pid)
            for proc in [root, *root.children(recursive=True)]:
                try:
                    ct = proc.cpu_times()
                    total += ct.user + ct.system
                except psutil.Error:
                    pass
        except psutil.Error:
            return None
        return total

    def other_cores(self) -> float | None:
        """Average cores used by other processes since construction (None if unknown)."""
        srv = self._tree(self.server_pid)
        if srv is None or self._srv0 is None:
            return None
        wall = max(time.perf_counter() - self._t0, 1e-9)
        other = (self._busy() - self._busy0) - (srv - self._srv0) - (_own_cpu() - self._own0)
        return max(other, 0.0) / wall


def wait_for_quiet(server_pid: int | None, timeout_s: float = 120.0, window_s: float = 3.0) -> None:
    """Wait (bounded) until other processes leave the CPU alone for one window."""
    if server_pid is None:
        return
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        probe = HostLoad(server_pid)
        time.sleep(window_s)
        other = probe.other_cores()
        if other is None or other < probe.threshold:
            return
