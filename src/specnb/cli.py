"""``specnb``: run a sweep from a TOML file, print the paired table, export the schema.

    specnb sweep configs/cpu-demo.toml --out ledgers/mine/run1
    specnb sweep configs/cpu-demo.toml --set repeats=1 --set 'concurrency=[1,2]'
    specnb report ledgers/mine/run1
    specnb report ledgers/mine/run1 --n-boot 5000 --seed 1 --context 2048
    specnb schema --out schemas/

Bad input fails with one line on stderr and exit code 2, before any server starts.
"""

from __future__ import annotations

import argparse
import sys
import tomllib
from collections import Counter
from datetime import UTC, datetime
from pathlib import Path

from specnb import paths
from specnb.analysis import DEFAULT_N_BOOT, DEFAULT_SEED, AnalysisError, format_report
from specnb.ledger import SCHEMA_VERSION, load_ledgers, schema_json
from specnb.report import PairingError
from specnb.sweep import SweepError, SweepSpec, run_sweep

__all__ = ["main"]


def _overrides(items: list[str]) -> dict:
    out = {}
    for item in items:
        if "=" not in item:
            raise SweepError(f"--set {item!r}: expected key=value")
        key, value = item.split("=", 1)
        try:
            out[key.strip()] = tomllib.loads(f"v = {value}")["v"]
        except tomllib.TOMLDecodeError:
            out[key.strip()] = value  # a bare string
    return out


def _print_table(out_dir: Path, n_boot: int = DEFAULT_N_BOOT, seed: int = DEFAULT_SEED,
                 context_tokens: int | None = None) -> int:
    df = load_ledgers(out_dir)
    if df.empty:
        print(f"no ledgers under {out_dir}", file=sys.stderr)
        return 1
    failed = int((df["status"] != "ok").sum())
    try:
        print(format_report(df, n_boot=n_boot, seed=seed, context_tokens=context_tokens))
    except (PairingError, AnalysisError) as exc:
        print(f"specnb: {exc}", file=sys.stderr)
        return 2
    if failed:
        print(f"{failed} failed point record(s) under {out_dir} (status=failed in the ledgers)")
    flags = Counter(f for cell in df["flags"].fillna("") for f in cell.split(",") if f and f != "failed")
    if flags:
        print("flags: " + ", ".join(f"{k} x{v}" for k, v in sorted(flags.items()))
              + "  (see the ledgers; spec_no_drafts points are left out of the pairs)")
    return 0


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="specnb", description="Paired speculative-decoding sweeps on vLLM.")
    sub = p.add_subparsers(dest="cmd", required=True)
    s = sub.add_parser("sweep", help="run or resume a sweep, then print the paired table")
    s.add_argument("config", type=Path, help="sweep TOML file")
    s.add_argument("--out", type=Path, help="ledger folder (default: ledgers/<name>/<UTC time>); "
                   "an existing folder of the same sweep resumes")
    s.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                   help="override a top-level setting, value in TOML syntax")
    s.add_argument("--no-progress", action="store_true")
    r = sub.add_parser("report", help="print the paired table of a ledger folder, with bootstrap "
                       "intervals, where each curve crosses 1.0, and whether to attach the drafter")
    r.add_argument("folder", type=Path)
    r.add_argument("--n-boot", type=int, default=DEFAULT_N_BOOT, help="bootstrap replicates")
    r.add_argument("--seed", type=int, default=DEFAULT_SEED, help="bootstrap seed")
    r.add_argument("--context", type=int, default=None, metavar="TOKENS",
                   help="also report concurrent sessions the KV pool holds at this context length")
    sc = sub.add_parser("schema", help="write the ledger JSON Schema")
    sc.add_argument("--out", type=Path, default=paths.SCHEMAS)
    a = p.parse_args(argv)

    try:
        if a.cmd == "sweep":
            spec = SweepSpec.from_toml(a.config, _overrides(a.set))
            out = a.out or paths.LEDGERS / spec.name / datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
            print(f"specnb: sweep {spec.name!r} -> {out}  (resume: --out {out})", file=sys.stderr)
            outcome = run_sweep(spec, out, progress=not a.no_progress)
            print(outcome.summary(), file=sys.stderr)
            return _print_table(out)
        if a.cmd == "report":
            return _print_table(a.folder, a.n_boot, a.seed, a.context)
        if a.cmd == "schema":
            a.out.mkdir(parents=True, exist_ok=True)
            path = a.out / f"point-ledger.v{SCHEMA_VERSION}.json"
            path.write_text(schema_json())
            print(path)
            return 0
    except (SweepError, FileNotFoundError) as exc:
        print(f"specnb: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("specnb: interrupted; finished points are kept, rerun with the same --out to resume",
              file=sys.stderr)
        return 130
    return 1


if __name__ == "__main__":
    raise SystemExit(main())
