"""specnb's load client and vLLM's own (``vllm bench serve``) on the same server, round by round.

vLLM's client runs as the ``vllm bench serve`` subcommand does (its module's own ``add_cli_args``
parser and ``main``, the same arguments), in one process that serves every round: an invocation
of the CLI spent about 18 s of a 2-core machine importing vLLM before its first request.

Both clients send the same prompts (a custom JSONL dataset, ``--skip-chat-template``: the server
applies the chat template to the bare user message, as it does for specnb's chat requests), in
the same order, at the same concurrency, greedy, with ``ignore_eos`` and the same ``max_tokens``:
their output token totals are equal by construction. Output tok/s is total output tokens over the
wall time from the first send to the last token, as vLLM bench counts it.

Used by ``make bench`` (``bench_engine.py``: the ratio's spread over runs, printed) and by the
real-server test (``tests/integration/test_bench_agreement_real.py``: the exact totals only).
"""

from __future__ import annotations

import asyncio
import json
import os
import queue
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
SERVED = "smol"
PROMPTS = 16
CONCURRENCY = 4
MAX_TOKENS = 32

# one JSON argv per stdin line, answered on stdout with "ok" or "error ..." once the round's result
# file is written (vLLM's own prints go to stderr)
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


class BenchError(RuntimeError):
    """vLLM's bench client did not answer as expected; the message carries its log's tail."""


class BenchClient:
    """``vllm bench serve`` rounds in one process (started once, stopped by its group id).
    ``wait_s``: how long to wait for an answer (its start, a round) before calling it hung."""

    def __init__(self, env: dict[str, str], log: Path, wait_s: float):
        self.log, self.wait_s = log, wait_s
        with log.open("w") as fh:
            self.proc = subprocess.Popen([sys.executable, "-c", BENCH_DRIVER], stdin=subprocess.PIPE,
                                         stdout=subprocess.PIPE, stderr=fh, text=True, env=env, cwd=str(ROOT),
                                         start_new_session=True)
        self.answers: queue.Queue[str] = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()
        try:
            self._expect("ready")
        except BaseException:
            self.stop()
            raise

    def _read(self) -> None:
        for line in self.proc.stdout:
            self.answers.put(line.strip())
        self.answers.put("exited")

    def _expect(self, what: str) -> None:
        try:
            got = self.answers.get(timeout=self.wait_s)
        except queue.Empty:
            got = f"nothing within {self.wait_s:.0f} s"
        if got != what:
            raise BenchError(f"vLLM's bench client: {got}: {self.log.read_text()[-3000:]}")

    def run(self, argv: list[str]) -> None:
        self.proc.stdin.write(json.dumps(argv) + "\n")
        self.proc.stdin.flush()
        self._expect("ok")

    def stop(self) -> None:
        try:
            self.proc.stdin.close()
            self.proc.wait(timeout=self.wait_s)
        except (OSError, subprocess.TimeoutExpired):
            pass
        finally:
            if self.proc.poll() is None:  # a hung client: stop its group by id, never leave it behind
                os.killpg(self.proc.pid, 9)
                self.proc.wait()

    def __enter__(self) -> BenchClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def prompts(n: int = PROMPTS) -> list:
    from specnb.prompts.sources import resolve

    return [p for p in resolve("freeform").prompts if len(p.messages) == 1][:n]


def write_dataset(chosen: list, path: Path) -> Path:
    path.write_text("".join(json.dumps({"prompt": p.messages[0]["content"]}) + "\n" for p in chosen))
    return path


def warm_up(ep: Any, chosen: list, concurrency: int = CONCURRENCY) -> None:
    """One short pass of specnb's client, so neither client pays for the server's first requests."""
    from specnb.engine import loadgen

    asyncio.run(loadgen.run_load(ep.base_url, ep.model, chosen[:concurrency], concurrency, concurrency,
                                 {"max_tokens": 8, "temperature": 0.0}))


def specnb_round(ep: Any, chosen: list, concurrency: int = CONCURRENCY, max_tokens: int = MAX_TOKENS) -> dict:
    from specnb.analysis.point import summarize_point
    from specnb.engine import loadgen

    pl = asyncio.run(loadgen.run_load(ep.base_url, ep.model, chosen, concurrency, len(chosen),
                                      {"max_tokens": max_tokens, "temperature": 0.0, "ignore_eos": True}))
    s = summarize_point(pl)
    return {"client": "specnb", "completed": s["num_ok"], "errors": s["num_errors"],
            "output_tok_s": s["output_tok_s_wall"], "ttft_p50_ms": s["p50_ttft_ms"],
            "output_tokens": s["output_tokens"], "duration_s": s["duration_s"]}


def bench_round(bench: BenchClient, ep: Any, dataset: Path, out: Path, name: str, tokenizer: Path, n: int,
                concurrency: int = CONCURRENCY, max_tokens: int = MAX_TOKENS) -> dict:
    argv = [
        "--backend", "openai-chat", "--base-url", ep.base_url,
        "--endpoint", "/v1/chat/completions", "--model", ep.model, "--tokenizer", str(tokenizer),
        "--dataset-name", "custom", "--dataset-path", str(dataset), "--skip-chat-template",
        "--disable-shuffle", "--custom-output-len", str(max_tokens), "--num-prompts", str(n),
        "--max-concurrency", str(concurrency), "--request-rate", "inf", "--ignore-eos",
        "--temperature", "0", "--num-warmups", "0", "--disable-tqdm",
        "--save-result", "--result-dir", str(out), "--result-filename", f"{name}.json",
    ]
    bench.run(argv)
    r = json.loads((out / f"{name}.json").read_text())
    return {"client": "vllm-bench", "completed": r["completed"], "errors": r.get("failed") or 0,
            "output_tok_s": r["output_throughput"], "ttft_p50_ms": r["median_ttft_ms"],
            "output_tokens": r["total_output_tokens"], "duration_s": r["duration"]}


def alternating_rounds(bench: BenchClient, ep: Any, folder: Path, tokenizer: Path, rounds: int,
                       chosen: list | None = None, concurrency: int = CONCURRENCY,
                       max_tokens: int = MAX_TOKENS) -> list[dict]:
    """A warm-up of each client, then ``rounds`` rounds of both, alternating who goes first (A B,
    B A, ...) so a drift of the machine lands on both alike. One row per client and round."""
    chosen = chosen or prompts()
    dataset = write_dataset(chosen, folder / "prompts.jsonl")
    warm_up(ep, chosen, concurrency)
    # and one unmeasured invocation of vLLM's client, as specnb's had its warm-up: in a fresh
    # clone's venv its first two rounds once ran at 0.66-0.70x of its third
    bench_round(bench, ep, dataset, folder, "bench-warmup", tokenizer, concurrency, concurrency, max_tokens)
    rows = []
    for i in range(rounds):
        order = ("specnb", "vllm-bench") if i % 2 == 0 else ("vllm-bench", "specnb")
        for client in order:
            res = (specnb_round(ep, chosen, concurrency, max_tokens) if client == "specnb" else
                   bench_round(bench, ep, dataset, folder, f"bench-{i}", tokenizer, len(chosen), concurrency,
                               max_tokens))
            rows.append({"round": i, **res})
    return rows


def ratios(rows: list[dict]) -> list[float]:
    """specnb's output tok/s over vLLM bench's, round by round."""
    ours = [r for r in rows if r["client"] == "specnb"]
    theirs = [r for r in rows if r["client"] == "vllm-bench"]
    return [a["output_tok_s"] / b["output_tok_s"] for a, b in zip(ours, theirs, strict=True)]


def table(rows: list[dict]) -> list[str]:
    lines = [f"{'round':>5} {'client':<11} {'out tok/s':>10} {'TTFT p50 ms':>12} {'out tokens':>11} {'wall s':>7}"]
    for r in rows:
        lines.append(f"{r['round']:>5} {r['client']:<11} {r['output_tok_s']:>10.1f} {r['ttft_p50_ms']:>12.1f} "
                     f"{r['output_tokens']:>11} {r['duration_s']:>7.2f}")
    return lines
