"""The lines every axis notebook's ``parameters`` cell shares: the CPU serving set-up and the
run's plumbing, written once.

The parameters cell stays papermill's source of defaults and shows a reader every value, so
these lines are *in* each notebook; this module is where they are edited. Change a line here,
then ``make notebook-defaults`` (``python -m specnb.notebooks.defaults --write``) rewrites it in
every notebook that has the parameter; ``make test`` fails while a notebook disagrees
(``tests/unit/notebooks/test_defaults.py``). A GPU set-up overrides them per axis in
``notebooks/params/gpu/<axis>.yaml``, never here.
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

from specnb import paths

__all__ = ["COMMON", "differences", "write", "main"]

# parameter -> its whole line in a parameters cell (value and the comment that says what it is)
COMMON: dict[str, str] = {
    'measure': 'measure = False  # True: start vLLM and measure a new run before the analysis (minutes)',
    'run': 'run = ""  # empty: the newest run (or a new time-stamped one when measuring); a run name reads or resumes it',
    'ledger_root': 'ledger_root = "ledgers"  # folder holding the <axis>/<study>/<run> tree',
    'model': 'model = "models/SmolLM2-135M-Instruct"  # target checkpoint: local folder or hub id',
    'served_model_name': 'served_model_name = "smollm2-135m"  # name the server answers to',
    'endpoint': 'endpoint = ""  # URL of a running server to attach every arm to instead of launching, or {arm: URL} for some (empty: launch)',
    'executor': 'executor = "local"  # where the pairing blocks run: "local" (here, one after another), "ray" or a Ray address (docs/fleet.md)',
    'start_together': "start_together = False  # True: launch a repeat's servers side by side, then measure them one at a time (about one start per repeat, not one per arm; every arm's server in memory at once)",
    'server_args': 'server_args = ["--enforce-eager", "--dtype", "machine", "--max-model-len", "2048"]  # every launch (--dtype machine: bf16 where this CPU has a oneDNN bf16 kernel, fp32 where it has none, as on AVX2-only CPUs: docs/cpu.md)',
    'env': 'env = {"VLLM_CPU_KVCACHE_SPACE": "1"}  # environment for every launch (CPU KV pool in GiB)',
    'panel_size': 'panel_size = 10  # prompts every point sends, balanced over categories, in whole passes',
    'work_floor_tokens': "work_floor_tokens = 400  # output tokens a point's steady window holds at least (sizes the passes)",
    'warmup_requests': 'warmup_requests = 2  # per server start, not measured',
    'max_tokens': 'max_tokens = 64  # output tokens per request',
    'temperature': 'temperature = 0.0  # sampling temperature (0 is greedy)',
    'seed': 'seed = 0  # sampling seed (per request: seed + prompt index)',
}

_CELL = re.compile(r'(# %% tags=\["parameters"\]\n)(.*?)(\n\n)', re.S)


def _cell(text: str) -> re.Match[str] | None:
    return _CELL.search(text)


def _rewrite(text: str) -> str:
    m = _cell(text)
    if m is None:
        return text
    lines = [COMMON.get(ln.split("=", 1)[0].strip(), ln) for ln in m.group(2).splitlines()]
    return text[:m.start(2)] + "\n".join(lines) + text[m.end(2):]


def differences(source: Path | str) -> list[str]:
    """The parameters of a notebook whose line differs from :data:`COMMON`'s."""
    text = Path(source).read_text()
    m = _cell(text)
    if m is None:
        return []
    return [ln.split("=", 1)[0].strip() for ln in m.group(2).splitlines()
            if ln.split("=", 1)[0].strip() in COMMON and ln != COMMON[ln.split("=", 1)[0].strip()]]


def write(source: Path | str) -> bool:
    """Rewrite a notebook's shared lines from :data:`COMMON`; True when the file changed."""
    p = Path(source)
    old = p.read_text()
    new = _rewrite(old)
    if new != old:
        p.write_text(new)
    return new != old


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m specnb.notebooks.defaults",
                                 description="check or rewrite the parameter lines every axis notebook shares")
    ap.add_argument("notebooks", nargs="*", help="default: notebooks/NN_*.py")
    ap.add_argument("--write", action="store_true", help="rewrite them (default: only check)")
    a = ap.parse_args(argv)
    files = [Path(f) for f in a.notebooks] or sorted((paths.ROOT / "notebooks").glob("[0-9][0-9]_*.py"))
    bad = 0
    for f in files:
        if a.write:
            if write(f):
                print(f"rewrote {f.name}")
        elif differences(f):
            bad += 1
            print(f"{f.name}: {', '.join(differences(f))} differ from specnb.notebooks.defaults.COMMON", file=sys.stderr)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
