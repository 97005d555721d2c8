"""Run a command against a Ray cluster of simulated nodes on this machine (Ray's own test-cluster
utilities: a head with no CPUs for work, then N nodes of the given CPUs each), then stop it.

``{address}`` in the command is replaced by the cluster's address; RAY_ADDRESS is set too. The
nodes share this machine's cores: give ``--max-blocks 1`` to a sweep whose numbers you keep, or
two servers measure each other. The Ray executor's real-server tests use the same utilities
(tests/integration/test_fleet_real.py); docs/fleet.md.

    .venv/bin/python tools/local_cluster.py --nodes 2 -- .venv/bin/specnb sweep configs/cpu-fleet.toml \\
        --executor '{address}' --max-blocks 1 --out ledgers/fleet/ray/20261202T190000Z
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys


def parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="tools/local_cluster.py", description=__doc__.splitlines()[0])
    ap.add_argument("--nodes", type=int, default=2, help="simulated worker nodes (default 2)")
    from specnb.ledger.provenance import usable_cpus

    ap.add_argument("--cpus", type=float, default=float(len(usable_cpus())),
                    help="CPUs each node offers (default: those this process may use, as under taskset)")
    ap.add_argument("command", nargs=argparse.REMAINDER, help="-- then the command to run")
    return ap


def main(argv: list[str] | None = None) -> int:
    ap = parser()
    a = ap.parse_args(argv)
    cmd = a.command[1:] if a.command[:1] == ["--"] else a.command
    if not cmd or a.nodes < 1:
        ap.error("give --nodes >= 1 and a command after --")
    from ray.cluster_utils import Cluster

    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 0, "include_dashboard": False})
    try:
        for _ in range(a.nodes):
            cluster.add_node(num_cpus=a.cpus, object_store_memory=100 * 2**20)
        cluster.wait_for_nodes()
        print(f"local_cluster: head at {cluster.address}, {a.nodes} node(s) of {a.cpus:g} CPU(s)", file=sys.stderr)
        cmd = [c.replace("{address}", cluster.address) for c in cmd]
        proc = subprocess.Popen(cmd, env={**os.environ, "RAY_ADDRESS": cluster.address})
        try:
            return proc.wait()
        except KeyboardInterrupt:  # the command had the same Ctrl-C: it cancels its blocks before the cluster goes
            try:
                return proc.wait(timeout=120)
            except (subprocess.TimeoutExpired, KeyboardInterrupt):
                proc.kill()
                return 130
    finally:
        cluster.shutdown()


if __name__ == "__main__":
    sys.exit(main())
