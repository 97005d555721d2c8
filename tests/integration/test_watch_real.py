"""``specnb watch`` on the suite's real vLLM-CPU n-gram server, held against the suite's real
sweep (its ngram-k4 arm, the same K and model): idle when nothing runs, drafting and judged against
the run while a client keeps requests in flight, refused in one line on a server without a drafter
and on a closed port. Nothing is asserted about which side of the threshold this machine lands on:
that is the run's measurement; the verdict's inputs (running, drafts, acceptance) are."""

from __future__ import annotations

import json
import shutil
import socket
import subprocess
import time
import urllib.parse
import urllib.request
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path
from urllib.parse import urlparse

import pytest
import yaml

from specnb import paths
from specnb.analysis.alerts import threshold_of
from specnb.analysis.breakeven import below_break_even
from specnb.cli import main
from specnb.commands.watch import load_expectation, load_map_line
from specnb.engine.server import stop_group
from tests.conftest import require
from tests.hang import guard
from tests.integration.traffic import Traffic

pytestmark = pytest.mark.integration


def _watch(capsys, *args: str) -> tuple[int, list[dict]]:
    rc = main(["watch", *args, "--json"])
    out = capsys.readouterr().out
    return rc, [json.loads(line) for line in out.splitlines() if line.startswith("{")]


def test_watch_follows_a_real_server(ngram_server, baseline_server, real_sweep, capsys):
    url, model = ngram_server.endpoint.base_url, ngram_server.endpoint.model
    run = ["--run", str(real_sweep.out), "--arm", "ngram-k4"]
    rc, lines = _watch(capsys, url, *run, "--once", "--window", "2", "--interval", "1")
    assert rc == 0 and lines[0]["verdict"] == "idle", lines
    with Traffic(url, model, "copy", 2, max_tokens=48, prompts=8):
        time.sleep(3)  # the first requests in flight
        rc, lines = _watch(capsys, url, *run, "--once", "--window", "6", "--interval", "1")
    (line,) = lines
    assert line["running_mean"] > 0.5 and line["drafts"] > 0 and 0 < line["acceptance_rate"] <= 1, line
    assert line["verdict"] in ("pays", "above_threshold", "acceptance_fell"), line
    assert rc == (0 if line["verdict"] == "pays" else 1) and line["run"], line


def test_watch_refuses_what_it_cannot_judge_in_one_line(baseline_server, real_sweep, capsys):
    assert main(["watch", baseline_server.endpoint.base_url, "--once"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "no speculative-decoding metrics" in err[0]
    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        closed = s.getsockname()[1]
    assert main(["watch", f"http://127.0.0.1:{closed}", "--once"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and f"127.0.0.1:{closed}" in err[0]
    assert main(["watch", "localhost:8000", "--once"]) == 2  # no scheme
    assert main(["watch", baseline_server.endpoint.base_url, "--run", str(real_sweep.out), "--arm", "nope"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 2 and "http://HOST:PORT" in err[0] and "no drafter arm 'nope'" in err[1]


# --------------------------------------------------------------------------- a real Prometheus

DEMO = paths.LEDGERS / "concurrency" / "cpu-demo" / "20261201T184823Z"
# the committed break-even map (notebooks/12_map.py): its n-gram K=4 curve is the suite server's kind
MAP = paths.LEDGERS / "map" / "cpu" / "20261206T103239Z"
LISTS = ["List 40 different fruits, separated by commas.", "List 40 different animals, separated by commas.",
         "List 40 countries of the world, separated by commas."]
# the rules' rate window and for:, short enough for a test; 15 s of free-form traffic at 8 users still
# holds twice the 200 draft tokens the acceptance rule waits for (about 280 per 10 s on the slower, AVX2
# machines)
WINDOW_S, HOLD_S = 15, 5


@contextmanager
def prometheus(folder: Path, target: str, rules: Path) -> Iterator[str]:
    """Debian's Prometheus on 127.0.0.1, scraping ``target`` every second with ``rules``
    evaluated every second; stopped by its group id however the block ends."""
    exe = shutil.which("prometheus")
    require(exe is not None, "prometheus", "make prometheus installs Debian's prometheus")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    cfg = folder / "prometheus.yml"
    cfg.write_text(yaml.safe_dump({
        "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
        "rule_files": [str(rules)],
        "scrape_configs": [{"job_name": "vllm", "static_configs": [{"targets": [target]}]}]}))
    log = folder / "prometheus.log"
    with log.open("w") as fh:
        proc = subprocess.Popen([exe, f"--config.file={cfg}", f"--storage.tsdb.path={folder / 'data'}",
                                 f"--web.listen-address=127.0.0.1:{port}"], stdout=fh, stderr=subprocess.STDOUT,
                                start_new_session=True)
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + guard("child_start")
        while True:
            assert proc.poll() is None, f"prometheus exited {proc.returncode}: {log.read_text()[-2000:]}"
            try:
                with urllib.request.urlopen(base + "/-/ready", timeout=2) as r:
                    if r.status == 200:
                        break
            except OSError:
                pass
            assert time.monotonic() < deadline, f"prometheus not ready in {guard('child_start'):.0f} s: {log.read_text()[-2000:]}"
            time.sleep(0.5)
        yield base
    finally:
        stop_group(proc)


def _api(base: str, path: str) -> dict:
    with urllib.request.urlopen(base + path, timeout=10) as r:
        doc = json.loads(r.read())
    assert doc["status"] == "success", doc
    return doc["data"]


def _firing(base: str) -> set[str]:
    return {a["labels"]["alertname"] for a in _api(base, "/api/v1/alerts")["alerts"] if a["state"] == "firing"}


def _value(base: str, expr: str) -> float | None:
    res = _api(base, "/api/v1/query?" + urllib.parse.urlencode({"query": expr}))["result"]
    return float(res[0]["value"][1]) if res else None


def _until(what, timeout_s: float, base: str) -> set[str]:
    """Poll Prometheus's firing alerts until ``what(firing)``; the last set seen otherwise."""
    deadline = time.monotonic() + timeout_s
    while True:
        got = _firing(base)
        if what(got) or time.monotonic() > deadline:
            return got
        time.sleep(1)


def test_a_real_prometheus_fires_the_measured_alerts_on_a_real_server(ngram_server, tmp_path, capsys):
    """The committed demo run's rules (SmolLM2-135M, n-gram K=4 on copy-style work: threshold
    12.6 running requests, acceptance 85 % at its lowest point) on a real Prometheus scraping the
    suite's real n-gram server: copy-style traffic at 4 users fires nothing; 24 users (past the
    threshold) fire SpecDecodeAboveThreshold; free-form traffic at 8 fires SpecDecodeAcceptanceLow.
    specnb watch on the same server says the same at each step."""
    url, model = ngram_server.endpoint.base_url, ngram_server.endpoint.model
    rules_dir = tmp_path / "rules"
    assert main(["alerts", str(DEMO), "--out", str(rules_dir), "--selector", 'job="vllm"', "--map", str(MAP),
                 "--window", str(WINDOW_S), "--for", str(HOLD_S)]) == 0
    capsys.readouterr()
    (rules,) = rules_dir.glob("*.rules.yml")
    exp = load_expectation(DEMO, None, None)
    threshold = threshold_of(exp)[0]
    mapped = load_map_line(MAP, exp)
    run = ["--run", str(DEMO), "--map", str(MAP), "--interval", "1"]
    rec = f"specnb:spec_decode_acceptance_rate_{WINDOW_S}s"
    with prometheus(tmp_path, urlparse(url).netloc, rules) as prom, ThreadPoolExecutor(1) as pool:
        def watch(after_s: float, window_s: int):  # specnb watch beside Prometheus, on the same traffic
            time.sleep(after_s)
            return main(["watch", url, *run, "--once", "--window", str(window_s), "--json"])

        def said(future) -> tuple[int, dict]:
            rc = future.result(timeout=300)
            lines = [json.loads(x) for x in capsys.readouterr().out.splitlines() if x.startswith("{")]
            return rc, lines[-1]

        with Traffic(url, model, "copy", 4):
            seen = pool.submit(watch, 3, WINDOW_S + 5)
            time.sleep(WINDOW_S + HOLD_S + 5)  # a whole window, then the hold
            quiet = _firing(prom)
            acceptance = _value(prom, rec)  # Prometheus's reading of the real server's counters
            running = _value(prom, f"specnb:num_requests_running:avg_{WINDOW_S}s")
            rc, line = said(seen)
            length = _value(prom, f"specnb:spec_decode_acceptance_length_{WINDOW_S}s")
            drafts = _value(prom, f"specnb:spec_decode_drafts:rate_{WINDOW_S}s")
        assert quiet == set(), quiet
        assert acceptance is not None and 0 < acceptance <= 1 and 0.5 < running < threshold, (acceptance, running)
        assert (rc, line["verdict"]) == (0, "pays"), line
        # the map's own reading of Prometheus's window agrees: copy-style work accepts well above the
        # break-even at this load (4 users run near the map's c=4 batch)
        assert below_break_even(mapped, length, drafts * WINDOW_S, running)[0] is False, (length, running)
        assert "map: acceptance length" in line["why"] and line["map"] == mapped.run, line

        with Traffic(url, model, "copy", 24):
            seen = pool.submit(watch, 8, 10)  # once the 24 users are in
            loaded = _until(lambda f: f == {"SpecDecodeAboveThreshold"}, 120, prom)
            rc, line = said(seen)
        assert loaded == {"SpecDecodeAboveThreshold"}, (loaded, _value(prom, f"specnb:num_requests_running:avg_{WINDOW_S}s"))
        assert (rc, line["verdict"]) == (1, "above_threshold") and line["running_mean"] > threshold, line

        with Traffic(url, model, "freeform", 8):
            # the copy-style requests drained as their block ended, and watch reads the server's own
            # counters over its window: free-form traffic only, while Prometheus's window still holds
            # copy-style drafts for a while
            seen = pool.submit(watch, 2, WINDOW_S)
            changed = _until(lambda f: f == {"SpecDecodeAcceptanceLow"}, 150, prom)
            rc, line = said(seen)
        assert changed == {"SpecDecodeAcceptanceLow"}, (changed, _value(prom, rec))
        assert (rc, line["verdict"]) == (1, "acceptance_fell"), line
        alert = next(a for a in _api(prom, "/api/v1/alerts")["alerts"]
                     if a["labels"]["alertname"] == "SpecDecodeAcceptanceLow")
        assert alert["labels"]["specnb_run"] == exp.run and "lowest the run measured" in alert["annotations"]["summary"]

        with Traffic(url, model, "", 4, max_tokens=128, texts=LISTS):
            # lists of names at the map's c=4 batch: ", " recurs, so the n-gram proposer drafts at
            # nearly every step and the model names something else each time (acceptance length
            # 1.65 over 245 drafts in 15 s here, 2026-12-06), below the length under which the map's
            # cells lose there (its band's lower end, 2.15; the break-even is 3.04)
            # watch reads the server's own counters over its window: only these requests (the free-form
            # ones drained as their block ended), as in the block before
            seen = pool.submit(watch, 2, WINDOW_S)
            costs = _until(lambda f: "SpecDecodeBelowBreakEven" in f, 150, prom)
            rc, line = said(seen)
            length = _value(prom, f"specnb:spec_decode_acceptance_length_{WINDOW_S}s")
            running = _value(prom, f"specnb:num_requests_running:avg_{WINDOW_S}s")
        assert "SpecDecodeBelowBreakEven" in costs, (costs, length, running)
        assert (rc, line["verdict"]) == (1, "below_break_even"), line
        alert = next(a for a in _api(prom, "/api/v1/alerts")["alerts"]
                     if a["labels"]["alertname"] == "SpecDecodeBelowBreakEven")
        assert alert["labels"]["specnb_map"] == mapped.run and "break-even at this load" in alert["annotations"]["summary"]
