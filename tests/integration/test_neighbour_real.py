"""benchmarks/neighbour.py against the session's shared baseline server (attached: no start of
its own), one short round: it measures the server alone, beside niced and ordinary busy loops,
prints a line per measurement and the medians, and leaves no busy loop behind. What the numbers
are is the benchmark's to say (docs/timing.md), never asserted here."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import psutil

from tests.hang import guard

ROOT = Path(__file__).resolve().parents[2]


def test_one_round_beside_each_neighbour_on_a_real_server(baseline_server):
    ep = baseline_server.endpoint
    t0 = time.time()
    proc = subprocess.run([sys.executable, "benchmarks/neighbour.py", "--endpoint", ep.base_url,
                           "--served-model-name", ep.model, "--rounds", "1", "--hogs", "1", "--requests", "1",
                           "--tokens", "8"], cwd=ROOT, capture_output=True, text=True, timeout=guard("test_phase"))
    assert proc.returncode == 0, proc.stderr[-3000:]
    lines = proc.stdout.strip().splitlines()
    rows = [json.loads(x) for x in lines[:-1]]
    assert [(r["round"], r["neighbour"]) for r in rows] == [(0, "alone"), (0, "nice19"), (0, "nice0")]
    assert all(r["tok_s"] > 0 for r in rows)
    assert lines[-1].startswith("median tok/s: alone ")
    left = []
    for p in psutil.process_iter(["cmdline", "create_time"]):
        try:
            if p.info["create_time"] >= t0 and "while True: pass" in " ".join(p.info["cmdline"] or []):
                left.append(p.pid)
        except psutil.Error:
            continue
    assert not left, f"busy loops left running: {left}"
    assert baseline_server.server.alive()  # attaching never stops the server
