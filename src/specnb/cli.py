"""``specnb``: run a sweep from a TOML file, print the paired table, export the schema.

    specnb sweep configs/cpu-demo.toml --out ledgers/mine/run1
    specnb sweep configs/cpu-demo.toml --set repeats=1 --set 'concurrency=[1,2]'
    specnb report ledgers/mine/run1
    specnb tune configs/cpu-tune.toml                 # proposal -> schedule -> verified config
    specnb tune configs/cpu-tune.toml --set tune.max_rounds=2 --out ledgers/tune/cpu/run1
    specnb report ledgers/mine/run1 --n-boot 5000 --seed 1 --context 2048
    specnb predict ledgers/temperature/cpu/<run>      # n-gram acceptance from the target's probabilities
    specnb schema --out schemas/
    specnb mix traffic.jsonl --tokenizer models/SmolLM2-135M-Instruct
    specnb mix traffic.jsonl --ledgers ledgers/cpu-demo/run1 --arm ngram-k4 --concurrency 1
    specnb mix --serve http://127.0.0.1:8000 prompts.jsonl --save answered.jsonl

Exit status: 0 when every point of the sweep has a measurement; 1 when the run finished but
some points failed (they are listed, and a rerun with the same ``--out`` measures only them);
2 for bad input, refused in one line on stderr before any server starts (or a ledger that
cannot be read or written, named), and for a sweep whose every arm this engine build cannot
serve here (its refusal is the one line; the failure records are written for ``specnb report``);
130 after Ctrl-C (finished points are kept).
"""

from __future__ import annotations

import argparse
import json
import sys
import tomllib
import warnings
from pathlib import Path
from typing import Any

from specnb import paths
from specnb.analysis import DEFAULT_N_BOOT, DEFAULT_SEED, category_speedups, expected_speedup, paired
from specnb.analysis.latency import parse_slos
from specnb.analysis.report import ReportOptions
from specnb.analysis.schedule import RULES, derive_policy, format_policy
from specnb.errors import EXIT_BAD_INPUT, EXIT_FAILED_POINTS, SpecnbError, exit_code
from specnb.ledger import SCHEMA_VERSION, load_ledgers, schema_json, write_once
from specnb.ledger.frame import SkippedLedgersWarning
from specnb.ledger.runs import new_run_name
from specnb.prompts.copyshare import MixError, format_mix, load_tokenizer, measure_mix
from specnb.prompts.traffic import load_traffic

__all__ = ["main"]


def _overrides(items: list[str]) -> dict:
    out = {}
    for item in items:
        if "=" not in item:
            raise SpecnbError(f"--set {item!r}: expected key=value")
        key, value = item.split("=", 1)
        try:
            out[key.strip()] = tomllib.loads(f"v = {value}")["v"]
        except tomllib.TOMLDecodeError:
            out[key.strip()] = value  # a bare string
    return out


class _Parser(argparse.ArgumentParser):
    """argparse that refuses bad arguments in one line (its usage block is ``--help``'s)."""

    def error(self, message: str):
        print(f"specnb: {message} (see {self.prog} --help)", file=sys.stderr)
        raise SystemExit(EXIT_BAD_INPUT)


def _load(out_dir: Path, skip_bad: bool, loader=load_ledgers, announce: bool = True):
    """A frame of the folder; with ``skip_bad``, bad files are left out and counted on stderr."""
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always", SkippedLedgersWarning)
        df = loader(out_dir, skip_bad=skip_bad)
    for w in seen:
        if issubclass(w.category, SkippedLedgersWarning):
            if announce:
                print(f"specnb: {w.message}", file=sys.stderr)
        else:
            warnings.warn_explicit(w.message, w.category, w.filename, w.lineno)
    return df


def _print_report(folder: Path, opts: ReportOptions | None = None, skip_bad: bool = False) -> int:
    """``specnb report``: the run's report (:mod:`specnb.analysis.report`), printed section by
    section; 1 when the folder holds no ledgers, 2 when the report cannot be made (said in one line)."""
    from specnb.analysis.report import report_blocks
    from specnb.ledger.records import load_run

    run = _load(folder, skip_bad, load_run)
    if run.tune is None and run.df.empty:
        print(f"no ledgers under {folder}", file=sys.stderr)
        return 1
    try:
        for block in report_blocks(run, opts):
            print(block)
    except SpecnbError as exc:
        print(f"specnb: {exc}", file=sys.stderr)
        return 2
    last = run.last_round if run.tune is not None else run
    if last is None:
        return 0
    if last.df.empty:
        print(f"no ledgers under {last.folder}", file=sys.stderr)
        return 1
    return 0


def _mix(a: argparse.Namespace) -> int:
    wl = load_traffic(a.traffic, sample=a.sample, seed=a.seed)
    if a.serve:
        from specnb.engine.collect import collect_responses, write_jsonl  # the engine side, only here

        print(f"collecting {len(wl.prompts)} responses from {a.serve} (openai client)", file=sys.stderr)
        wl = collect_responses(wl, a.serve, model=a.model, max_tokens=a.max_tokens, concurrency=a.serve_concurrency)
        if a.save:
            print(f"prompts with the served responses: {write_jsonl(wl, a.save)}", file=sys.stderr)
    kw = {} if a.threshold is None else {"threshold": a.threshold}
    rep = measure_mix(wl, load_tokenizer(a.tokenizer), n_min=a.ngram_min, n_max=a.ngram_max,
                      context=a.context, **kw)
    print(format_mix(rep))
    dropped = wl.imported["dropped"]
    if dropped:
        print("dropped on import: " + ", ".join(f"{k} x{v}" for k, v in dropped.items()))
    if a.csv:
        rep.requests.to_csv(a.csv, index=False)
        print(f"per-request copy shares: {a.csv}")
    if a.ledgers:
        if not a.arm or a.concurrency is None:
            raise MixError("--ledgers needs --arm and --concurrency")
        frame = category_speedups(paired(load_ledgers(a.ledgers)), arm=a.arm, concurrency=a.concurrency)
        est = expected_speedup(frame, rep.mix("tokens"))
        print(f"\nexpected speedup of {a.arm} at c={a.concurrency} on this mix (by output tokens): {est}")
        print("  from " + ", ".join(f"{c} x{w:.3f}" for c, w in est.weights.items())
              + " (time-weighted; see specnb.analysis.mix)")
    return 0


def _policy(a: argparse.Namespace) -> int:
    df = load_ledgers(a.folder)
    if df.empty:
        raise SpecnbError(f"no ledgers under {a.folder}")
    config, chosen, doc = derive_policy(df, workload=a.workload, rule=a.rule, max_batch=a.max_batch,
                                        n_boot=a.n_boot, source=str(a.folder), method=a.method)
    print(format_policy(config, chosen, a.rule))
    workload = json.loads(doc)["workload"]
    stem = workload.replace('/', '_').replace(':', '-') + (f"-{a.method}" if a.method else "")
    out = a.out or a.folder / f"policy-{stem}.json"
    try:
        write_once(out, doc.encode())
    except FileExistsError:
        raise SpecnbError(f"{out} exists (policies are written once): choose another --out") from None
    print(f"written: {out}  (measure it: an arm with speculative_config = {{policy_file = \"{out}\"}})")
    return 0


def _run_command(sub: Any, name: str, summary: str, *, config: str, out: str, override: str) -> None:
    """A command that measures into a resumable folder: ``sweep`` and ``tune``."""
    c = sub.add_parser(name, help=summary)
    c.add_argument("config", type=Path, help=config)
    c.add_argument("--out", type=Path, help=out)
    c.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help=override)
    c.add_argument("--no-progress", action="store_true")


def _executor(a: Any) -> Any:
    """The sweep's executor from its options, checked before anything starts."""
    from pydantic import ValidationError

    from specnb.sweep.executor import ExecutorSpec
    from specnb.sweep.spec import SweepError

    labels = {}
    for item in a.node_label:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise SweepError(f"--node-label {item!r}: use KEY=VALUE")
        labels[key] = value
    try:
        ex = ExecutorSpec.model_validate(a.executor)
        ray_opts = {"max_blocks": a.max_blocks, "accelerator_type": a.accelerator_type,
                    "labels": labels or None, "retries": a.retries}
        given = {k: v for k, v in ray_opts.items() if v is not None}
        if given and ex.local:
            raise SweepError(f"--{next(iter(given)).replace('_', '-')} is a Ray option: add --executor ray")
        return ExecutorSpec.model_validate({**ex.model_dump(), **given})
    except ValidationError as exc:
        err = exc.errors()[0]
        raise SweepError(f"--executor: {err['msg'].removeprefix('Value error, ')}") from None


def _echo(line: str) -> None:
    print(f"specnb: {line}", file=sys.stderr)


def _finished(out: Path, failed_points: list[str], rc: int) -> int:
    """The exit status of a measuring command: 1 when points failed (a rerun measures only them)."""
    if failed_points:
        _echo(f"{len(failed_points)} point(s) failed; rerun with --out {out} to measure only them (exit status 1)")
        return EXIT_FAILED_POINTS
    return rc


def main(argv: list[str] | None = None) -> int:
    p = _Parser(prog="specnb", description="Paired speculative-decoding sweeps on vLLM.")
    sub = p.add_subparsers(dest="cmd", required=True)
    _run_command(sub, "sweep", "run or resume a sweep, then print the paired table", config="sweep TOML file",
                 out="ledger folder (default: ledgers/<name>/<UTC time>); an existing folder of the same sweep "
                 "resumes", override="override a top-level setting, value in TOML syntax")
    _run_command(sub, "anatomy", "profile one window per arm and level on servers of their own and split each "
                 "engine step into drafting, verification, sampling and scheduling (vLLM's torch profiler)",
                 config="sweep TOML file (its arms, levels, workloads and sampling)",
                 out="record folder (default: ledgers/anatomy/<name>/<UTC time>); an existing one resumes",
                 override="override a top-level setting, value in TOML syntax")
    sw = sub.choices["sweep"]
    sw.add_argument("--executor", default="local", metavar="local|ray|ADDRESS",
                    help="where the pairing blocks run: here one after another (local, the default), or on a Ray "
                    "cluster (ray: RAY_ADDRESS or a Ray started here; or its address), each block on one node "
                    "(docs/fleet.md)")
    sw.add_argument("--max-blocks", type=int, default=None, metavar="N", help="Ray: blocks running at once")
    sw.add_argument("--retries", type=int, default=None, metavar="N",
                    help="Ray: times a block lost with its node is submitted again (default 2)")
    sw.add_argument("--accelerator-type", default=None, metavar="TYPE", help="Ray: run blocks on this GPU type only")
    sw.add_argument("--node-label", action="append", default=[], metavar="KEY=VALUE",
                    help="Ray: run blocks only on nodes with this label (repeat for several)")
    sub.choices["anatomy"].add_argument("--window-requests", type=int, default=None, metavar="N",
                                        help="requests per profiled window (default: the level; at least the level)")
    r = sub.add_parser("report", help="print the paired table of a ledger folder, with bootstrap "
                       "intervals, where each curve crosses 1.0, and whether to attach the drafter")
    r.add_argument("folder", type=Path)
    r.add_argument("--n-boot", type=int, default=DEFAULT_N_BOOT, help="bootstrap replicates")
    r.add_argument("--seed", type=int, default=DEFAULT_SEED, help="bootstrap seed")
    r.add_argument("--context", type=int, default=None, metavar="TOKENS",
                   help="also report concurrent sessions the KV pool holds at this context length")
    r.add_argument("--slo", action="append", default=[], metavar="KEY=VALUE",
                   help="an SLO for goodput: ttft_ms, itl_p99_ms, e2el_ms (at most) or decode_tok_s (at least); "
                   "repeat for several; the report then names the arm and level with the most goodput")
    r.add_argument("--skip-bad", action="store_true",
                   help="leave out ledger files that cannot be read (counted on stderr) instead of stopping")
    po = sub.add_parser("policy", help="derive vLLM's dynamic speculation schedule (K per batch-size range) "
                        "from a run, print it as a --speculative-config and write it to a file")
    po.add_argument("folder", type=Path, help="a run with one arm per K (or one K and the baseline)")
    po.add_argument("--workload", help="the workload your traffic looks like (needed when the run has several)")
    po.add_argument("--method", help="the drafter method to schedule (needed when the run's arms use several, "
                    "e.g. ngram and eagle3: one schedule per method)")
    po.add_argument("--rule", choices=RULES, default="lower_bound",
                    help="per level keep the best K or K = 0 (the off arm where measured, else the baseline), "
                    "whichever has the higher 95%% lower bound (default) or point estimate")
    po.add_argument("--max-batch", type=int, default=None, help="end of the last range (default: the run's "
                    "--max-num-seqs, else 256)")
    po.add_argument("--out", type=Path, help="where to write the policy (default: <folder>/policy-<workload>.json)")
    po.add_argument("--n-boot", type=int, default=DEFAULT_N_BOOT)
    _run_command(sub, "tune", "measure a K sweep with an off arm, derive the schedule, measure it against the "
                 "baseline and the best static K, re-derive until it wins (or say where it cannot)",
                 config="tune TOML: a proposal sweep and a [tune] table",
                 out="tune folder (default: ledgers/tune/<name>/<UTC time>); an existing one resumes",
                 override="override a setting (tune.<key> for the [tune] table), value in TOML syntax")
    pr = sub.add_parser("predict", help="predict each n-gram arm's acceptance from the target's own probabilities "
                        "(the baseline's text replayed through vLLM's n-gram rule; a baseline server is started "
                        "after the measurement) and print it beside the measured acceptance")
    pr.add_argument("folder", type=Path, help="a measured run (a sweep folder or a study's run of conditions)")
    pr.add_argument("--endpoint", help="attach to this running baseline server instead of launching one")
    pr.add_argument("--top", type=int, default=20, help="prompt logprobs per position (vLLM serves up to 20)")
    pr.add_argument("--no-progress", action="store_true")
    sc = sub.add_parser("schema", help="write the ledger JSON Schema")
    sc.add_argument("--out", type=Path, default=paths.SCHEMAS)
    m = sub.add_parser("mix", help="copy share and copy-style / free-form mix of a traffic log with responses")
    m.add_argument("traffic", type=Path, help="JSONL: {prompt, response} or {messages} ending with the answer")
    m.add_argument("--tokenizer", type=Path, help="local model folder (default: count words)")
    m.add_argument("--ngram-min", type=int, help="prompt_lookup_min (vLLM default: 5, or --ngram-max)")
    m.add_argument("--ngram-max", type=int, help="prompt_lookup_max (vLLM default: 5, or --ngram-min)")
    m.add_argument("--context", choices=["prompt+response", "prompt"], default="prompt+response",
                   help="where a copied n-gram may come from (default: as vLLM's n-gram drafter looks)")
    m.add_argument("--threshold", type=float, default=None, help="copy share at which a request is copy-style")
    m.add_argument("--sample", type=int, help="measure a seeded sample of N requests")
    m.add_argument("--seed", type=int, default=0)
    m.add_argument("--csv", type=Path, help="write the per-request copy shares here")
    m.add_argument("--serve", metavar="URL", help="prompts without responses: collect them from this "
                   "OpenAI-compatible endpoint (official openai client, temperature 0)")
    m.add_argument("--model", help="with --serve: the served model (default: the first it lists)")
    m.add_argument("--max-tokens", type=int, default=512, help="with --serve: output tokens per response")
    m.add_argument("--serve-concurrency", type=int, default=4, help="with --serve: requests at a time")
    m.add_argument("--save", type=Path, help="with --serve: write the prompts with their responses (JSONL)")
    m.add_argument("--ledgers", type=Path, help="a sweep folder: estimate the speedup on this mix")
    m.add_argument("--arm", help="with --ledgers: the speculative arm")
    m.add_argument("--concurrency", type=int, help="with --ledgers: the concurrency level")
    try:
        a = p.parse_args(argv)
    except SystemExit as exc:  # --help, or a bad argument already said in one line
        return exc.code if isinstance(exc.code, int) else EXIT_BAD_INPUT

    def run() -> int:
        if a.cmd == "sweep":
            from specnb.sweep.executor import run_sweep  # the engine side (here or on Ray), only for a sweep
            from specnb.sweep.spec import SweepSpec

            spec = SweepSpec.from_toml(a.config, _overrides(a.set))
            executor = _executor(a)
            out = a.out or paths.LEDGERS / spec.name / new_run_name()
            outcome = run_sweep(spec, out, progress=not a.no_progress, echo=_echo, executor=executor)
            if outcome.refused_all:  # measured nothing: the refusal line(s) said why; the records are there
                return EXIT_BAD_INPUT
            print(outcome.summary(), file=sys.stderr)
            return _finished(out, outcome.failed_points, _print_report(out))
        if a.cmd == "anatomy":
            from specnb.sweep.anatomy import format_anatomy, load_anatomy, run_anatomy  # the engine side
            from specnb.sweep.spec import SweepSpec

            spec = SweepSpec.from_toml(a.config, _overrides(a.set))
            out = a.out or paths.LEDGERS / "anatomy" / spec.name / new_run_name()
            outcome = run_anatomy(spec, out, window_requests=a.window_requests, progress=not a.no_progress,
                                  echo=_echo)
            print(outcome.summary(), file=sys.stderr)
            print(format_anatomy(load_anatomy(out)))
            return _finished(out, outcome.failed, 0)
        if a.cmd == "tune":
            from specnb.sweep.tune import TuneSpec, run_tune  # the engine side, only for a tune

            spec = TuneSpec.from_toml(a.config, _overrides(a.set))
            out = a.out or paths.LEDGERS / "tune" / spec.proposal.name / new_run_name()
            outcome = run_tune(spec, out, progress=not a.no_progress, echo=_echo)
            print(outcome.summary(), file=sys.stderr)
            return _finished(out, outcome.failed_points, _print_report(out))
        if a.cmd == "report":
            opts = ReportOptions(n_boot=a.n_boot, seed=a.seed, context_tokens=a.context, slos=parse_slos(a.slo))
            return _print_report(a.folder, opts, a.skip_bad)
        if a.cmd == "mix":
            return _mix(a)
        if a.cmd == "predict":
            from specnb.sweep.predict import predict_run  # the engine side, only here

            outcome = predict_run(a.folder, endpoint=a.endpoint, top=a.top, progress=not a.no_progress, echo=_echo)
            print(outcome.summary(), file=sys.stderr)
            from specnb.analysis.report import predicted
            from specnb.ledger.records import load_run

            lines = predicted(load_run(a.folder), ReportOptions())
            print("\n".join(lines) if lines else "no n-gram arm to predict in this run")
            return 0
        if a.cmd == "policy":
            return _policy(a)
        if a.cmd == "schema":
            a.out.mkdir(parents=True, exist_ok=True)
            path = a.out / f"point-ledger.v{SCHEMA_VERSION}.json"
            path.write_text(schema_json())
            print(path)
            return 0
        return 1

    return exit_code(run, "rerun with the same --out to resume", also=(FileNotFoundError,))


if __name__ == "__main__":
    raise SystemExit(main())
