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
from collections import Counter
from pathlib import Path
from typing import Any

from specnb import paths
from specnb.analysis import DEFAULT_N_BOOT, DEFAULT_SEED, category_speedups, expected_speedup, paired
from specnb.analysis.latency import parse_slos
from specnb.analysis.lossless import load_margins
from specnb.analysis.predicted import load_predicted, predicted_lines, predicted_table
from specnb.analysis.schedule import RULES, derive_policy, format_policy
from specnb.analysis.text import format_category_acceptance, format_report
from specnb.analysis.tune import is_tune_run
from specnb.errors import EXIT_BAD_INPUT, EXIT_FAILED_POINTS, SpecnbError, exit_code
from specnb.ledger import SCHEMA_VERSION, Flag, load_ledgers, load_spec_by_category, schema_json, write_once
from specnb.ledger.frame import SkippedLedgersWarning
from specnb.ledger.names import Status
from specnb.ledger.runs import new_run_name, search_lines
from specnb.ledger.timing import timing_lines
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


def _print_tune(folder: Path, n_boot: int, seed: int, skip_bad: bool) -> int:
    """A tune run: its rounds and the config to deploy, then the paired table of its last round."""
    from specnb.analysis.tune import tune_lines  # reads the tune's own records, no engine

    for line in tune_lines(folder):
        print(line)
    rounds = sorted(p for p in folder.glob("round-*") if p.is_dir())
    if rounds:
        print(f"\n{rounds[-1].name} (baseline, static K and the candidate, paired on one run):")
        return _print_table(rounds[-1], n_boot, seed, skip_bad=skip_bad)
    return 0


def _print_table(out_dir: Path, n_boot: int = DEFAULT_N_BOOT, seed: int = DEFAULT_SEED,
                 context_tokens: int | None = None, slos: list[str] | None = None, skip_bad: bool = False) -> int:
    df = _load(out_dir, skip_bad)
    if df.empty:
        print(f"no ledgers under {out_dir}", file=sys.stderr)
        return 1
    failed = int((df["status"] != Status.OK).sum())
    try:
        print(format_report(df, n_boot=n_boot, seed=seed, context_tokens=context_tokens, slos=parse_slos(slos),
                            margins=load_margins(out_dir)))
    except SpecnbError as exc:
        print(f"specnb: {exc}", file=sys.stderr)
        return 2
    cats = _load(out_dir, skip_bad, load_spec_by_category, announce=False)
    if not cats.empty:
        print()
        print(format_category_acceptance(cats))
    if failed:
        print(f"{failed} failed point record(s) under {out_dir} (status=failed in the ledgers)")
    flags = Counter(f for cell in df["flags"].fillna("") for f in cell.split(",") if f and f != Flag.FAILED)
    if flags:
        print("flags: " + ", ".join(f"{k} x{v}" for k, v in sorted(flags.items()))
              + f"  (see the ledgers; {Flag.SPEC_NO_DRAFTS} and {Flag.INVALID} points are left out of the pairs)")
    for line in _structured_lines(df) + _conversation_lines(out_dir, df, skip_bad):
        print(line)
    for line in (_layout_lines(df) + search_lines(out_dir) + timing_lines(out_dir) + _predicted_lines(out_dir, df)
                 + _condition_lines(df, n_boot, seed)):
        print(line)
    return 0


def _structured_lines(df: Any) -> list[str]:
    """Which points ran under a grammar (a response_format), and the cause named where a
    speculative arm did not draft under one (seed 004: some stacks fall back to plain decoding
    when a grammar is active, silently)."""
    import pandas as pd

    from specnb.ledger.names import has_flag

    if "structured_output" not in df.columns or df["structured_output"].isna().all():
        return []
    under = df[df["structured_output"].notna() & (df["status"] == Status.OK)]
    if under.empty:
        return []
    modes = ", ".join(sorted(set(under["structured_output"])))
    out = [f"structured output: {len(under)} point(s) ran under a grammar ({modes}: every request carried that "
           "response_format); their acceptance is the drafter's under the grammar"]
    spec = under[under["speculative"].astype(bool)]
    if len(spec):
        dead = spec[has_flag(spec, Flag.SPEC_NO_DRAFTS)]
        if len(dead):
            out.append(f"{Flag.SPEC_NO_DRAFTS} under structured output: {len(dead)} of {len(spec)} speculative point(s) "
                       f"made no drafts with the grammar on ({', '.join(sorted(set(dead['arm'])))}): the engine fell "
                       "back to plain decoding under the grammar, so those points measure no drafter")
        else:
            drafts = int(pd.to_numeric(spec["num_drafts"], errors="coerce").fillna(0).sum())
            out.append(f"the drafter drafted under the grammar: {drafts:,} drafts over {len(spec)} speculative point(s)")
    return out


def _conversation_lines(out_dir: Path, df: Any, skip_bad: bool) -> list[str]:
    """Conversation points: what the prefix cache served turn by turn, and the speedup on total
    and on computed tokens beside the output one (specnb.analysis.conversation)."""
    if "load_mode" not in df.columns or not (df["load_mode"] == "conversation").any():
        return []
    from specnb.analysis.conversation import conversation_lines
    from specnb.ledger import load_turns

    return conversation_lines(df, load_turns(out_dir, skip_bad=skip_bad))


def _layout_lines(df: Any) -> list[str]:
    """A note when the run's launched servers did not use vLLM's own process layout (the
    two-process option changes the drafter arm's speed on vLLM-CPU: docs/timing.md)."""
    from specnb.engine.vllm import TWO_PROCESSES

    (key, value), = TWO_PROCESSES.items()
    layouts = set()
    for path in df.loc[df["status"] == Status.OK, "path"].dropna().unique()[:5000]:  # every server start's record
        try:
            env = (json.loads(Path(path).read_text()).get("server") or {}).get("env") or {}
        except (OSError, ValueError):
            continue
        layouts.add(env.get(key) == value)
    if True not in layouts:
        return []
    which = "every" if layouts == {True} else "some"
    return [f"serving layout: {which} launched server ran vLLM-CPU's worker inside its engine core ({key}={value}: two "
            "processes, not vLLM's three); on this engine that makes the drafter arm faster and leaves the baseline "
            "as it is (docs/timing.md), so compare with runs of the same layout"]


def _condition_lines(df: Any, n_boot: int, seed: int) -> list[str]:
    """A study's conditions against the first one it ran (a serving lever paired like an arm);
    none where there is one condition or the conditions change the sampling (not a serving lever)."""
    from specnb.analysis.conditions import (
        condition_effects,
        condition_lines,
        serving_gains,
        serving_verdicts,
        verdict_lines,
    )
    from specnb.analysis.pairing import AnalysisError, usable

    if "condition" not in df.columns or df["condition"].nunique() < 2:
        return []
    ok = usable(df)
    if ok.empty or ok["condition"].nunique() < 2 or ok["sampling_key"].nunique() > 1:
        return []
    ref = ok.sort_values("started_at")["condition"].iloc[0]
    try:
        eff = condition_effects(df, ref, n_boot=n_boot, seed=seed)
    except AnalysisError as exc:  # PairingError among them
        return [f"conditions not compared with each other: {exc}"]
    if eff.empty:
        return []
    out = ["", f"conditions against {ref} (the first one run): each arm's tok/s under the condition over "
               "its tok/s under the reference, paired per repeat, bootstrap over starts and prompts:",
           *condition_lines(eff)]
    try:
        verdicts = serving_verdicts(serving_gains(df, ref, n_boot=n_boot, seed=seed), ref)
    except AnalysisError:  # no single baseline arm, or none under the reference: nothing to weigh
        return out
    if len(verdicts):
        out += ["", f"the serving config against the drafter (seed 000: fix the serving config first; every "
                    f"condition and arm over {ref}'s baseline, paired per repeat):", *verdict_lines(verdicts, ref)]
    return out


def _predicted_lines(folder: Path, df: Any) -> list[str]:
    """The prediction records of ``folder`` (``specnb predict``) beside the measured acceptance."""
    pred = load_predicted(folder)
    return predicted_lines(predicted_table(df, pred)) if not pred.empty else []


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


def _executor_options(c: Any) -> None:
    """Where a measuring command's pairing blocks run (``sweep`` and ``tune``): read by :func:`_executor`."""
    c.add_argument("--executor", default="local", metavar="local|ray|ADDRESS",
                   help="where the pairing blocks run: here one after another (local, the default), or on a Ray "
                   "cluster (ray: RAY_ADDRESS or a Ray started here; or its address), each block on one node "
                   "(docs/fleet.md)")
    c.add_argument("--max-blocks", type=int, default=None, metavar="N", help="Ray: blocks running at once")
    c.add_argument("--retries", type=int, default=None, metavar="N",
                   help="Ray: times a block lost with its node is submitted again (default 2)")
    c.add_argument("--accelerator-type", default=None, metavar="TYPE", help="Ray: run blocks on this GPU type only")
    c.add_argument("--node-label", action="append", default=[], metavar="KEY=VALUE",
                   help="Ray: run blocks only on nodes with this label (repeat for several)")


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
    _executor_options(sub.choices["sweep"])
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
    _executor_options(sub.choices["tune"])
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
            return _finished(out, outcome.failed_points, _print_table(out))
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
        if a.cmd == "report" and is_tune_run(a.folder):
            return _print_tune(a.folder, a.n_boot, a.seed, a.skip_bad)
        if a.cmd == "tune":
            from specnb.sweep.tune import TuneSpec, run_tune  # the engine side, only for a tune

            spec = TuneSpec.from_toml(a.config, _overrides(a.set))
            executor = _executor(a)
            out = a.out or paths.LEDGERS / "tune" / spec.proposal.name / new_run_name()
            outcome = run_tune(spec, out, progress=not a.no_progress, echo=_echo, executor=executor)
            print(outcome.summary(), file=sys.stderr)
            return _finished(out, outcome.failed_points, _print_tune(out, DEFAULT_N_BOOT, DEFAULT_SEED, False))
        if a.cmd == "report":
            return _print_table(a.folder, a.n_boot, a.seed, a.context, a.slo, a.skip_bad)
        if a.cmd == "mix":
            return _mix(a)
        if a.cmd == "predict":
            from specnb.sweep.predict import predict_run  # the engine side, only here

            outcome = predict_run(a.folder, endpoint=a.endpoint, top=a.top, progress=not a.no_progress, echo=_echo)
            print(outcome.summary(), file=sys.stderr)
            lines = _predicted_lines(a.folder, load_ledgers(a.folder))
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
