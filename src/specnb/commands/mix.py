"""``specnb mix TRAFFIC``: the copy share and copy-style / free-form mix of a traffic log (its
responses served by an endpoint where it has none), and the speedup a run predicts on that mix."""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass
from pathlib import Path

from specnb.analysis import category_speedups, expected_speedup, paired
from specnb.commands.common import CliArgs, Command
from specnb.ledger import load_ledgers
from specnb.prompts.copyshare import MixError, format_mix, load_tokenizer, measure_mix
from specnb.prompts.traffic import load_traffic


@dataclass(frozen=True)
class MixArgs(CliArgs):
    """``specnb mix``'s arguments."""

    traffic: Path
    tokenizer: Path | None
    ngram_min: int | None
    ngram_max: int | None
    context: str
    threshold: float | None
    sample: int | None
    seed: int
    csv: Path | None
    serve: str | None
    model: str | None
    max_tokens: int
    serve_concurrency: int
    save: Path | None
    ledgers: Path | None
    arm: str | None
    concurrency: int | None


class Mix(Command):
    name = "mix"
    help = "copy share and copy-style / free-form mix of a traffic log with responses"

    Args = MixArgs

    @staticmethod
    def add_cli_args(p: argparse.ArgumentParser) -> None:
        p.add_argument("traffic", type=Path, help="JSONL: {prompt, response} or {messages} ending with the answer")
        p.add_argument("--tokenizer", type=Path, help="local model folder (default: count words)")
        p.add_argument("--ngram-min", type=int, help="prompt_lookup_min (vLLM default: 5, or --ngram-max)")
        p.add_argument("--ngram-max", type=int, help="prompt_lookup_max (vLLM default: 5, or --ngram-min)")
        p.add_argument("--context", choices=["prompt+response", "prompt"], default="prompt+response",
                       help="where a copied n-gram may come from (default: as vLLM's n-gram drafter looks)")
        p.add_argument("--threshold", type=float, default=None, help="copy share at which a request is copy-style")
        p.add_argument("--sample", type=int, help="measure a seeded sample of N requests")
        p.add_argument("--seed", type=int, default=0)
        p.add_argument("--csv", type=Path, help="write the per-request copy shares here")
        p.add_argument("--serve", metavar="URL", help="prompts without responses: collect them from this "
                       "OpenAI-compatible endpoint (official openai client, temperature 0)")
        p.add_argument("--model", help="with --serve: the served model (default: the first it lists)")
        p.add_argument("--max-tokens", type=int, default=512, help="with --serve: output tokens per response")
        p.add_argument("--serve-concurrency", type=int, default=4, help="with --serve: requests at a time")
        p.add_argument("--save", type=Path, help="with --serve: write the prompts with their responses (JSONL)")
        p.add_argument("--ledgers", type=Path, help="a sweep folder: estimate the speedup on this mix")
        p.add_argument("--arm", help="with --ledgers: the speculative arm")
        p.add_argument("--concurrency", type=int, help="with --ledgers: the concurrency level")

    @staticmethod
    def execute(a: MixArgs) -> int:
        wl = load_traffic(a.traffic, sample=a.sample, seed=a.seed)
        if a.serve:
            from specnb.engine.collect import collect_responses, write_jsonl  # the engine side, only here

            print(f"collecting {len(wl.prompts)} responses from {a.serve} (openai client)", file=sys.stderr)
            wl = collect_responses(wl, a.serve, model=a.model, max_tokens=a.max_tokens,
                                   concurrency=a.serve_concurrency)
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
