"""The test suite's own time, as records: one JSON per measured ``make test`` from a clean clone
(``ledgers/suite/<family>/<UTC stamp>.json``, written once by ``tools/time_suite.py``, which runs
``CI=true bash .ci/run`` and times its passes), and the runs logged in docs/timing.md before there
were records, transcribed with their source (``ledgers/suite/transcribed/*.json``).

docs/timing.md's table of current figures, the suite's closing line (tests/conftest.py) and the
history figure (``python tools/time_suite.py --figure``) all read these, so a figure is written in
one place. Times are seconds; ``after_setup_s`` is both passes, ``real_server_s`` the summed time of
the real-server tests and ``shared_start_s`` the shared sweep's server start (the hour's unit of
speed: this machine's speed moves by a quarter within an hour).
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from specnb import paths

__all__ = ["KIND", "TRANSCRIBED_KIND", "FAMILIES", "cpu_family", "suite_dir", "read_runs", "latest", "describe", "current_table",
           "parse_log", "write_run"]

KIND = "suite_timing"
TRANSCRIBED_KIND = "suite_timing_transcribed"
FAMILIES = {"avx512": "AVX-512 BF16", "avx2": "AVX2 only (fp32 servers)"}

# the closing lines make test prints: pytest's summary per pass and the suite's real-server line
_SUMMARY = re.compile(r"^=*\s*(?:(\d+) failed, )?(\d+) passed.*? in ([\d.]+)s")
_FAILED_ONLY = re.compile(r"^=*\s*(\d+) failed.*? in ([\d.]+)s")
_REAL = re.compile(r"real-server tests: (\d+) s over (\d+) tests(?:, ([\d.]+) times the shared sweep's ([\d.]+) s start)?")
PASS_MARKS = ("--durations=10 -n", "--durations=40 -m")  # the two pass commands make test echoes


def cpu_family(isa: str | None = None) -> str:
    """``avx2`` for a CPU below AVX-512 (the engine's AVX2 build), else ``avx512``; ``isa``: this
    machine's real level where not given (an emulated level is not a family)."""
    if isa is None:
        from specnb.ledger.provenance import cpu_isa

        isa = cpu_isa(env={})[0]
    return "avx2" if isa in ("avx2", "none") else "avx512"


def suite_dir() -> Path:
    return paths.LEDGERS / "suite"


def read_runs(root: Path | str | None = None) -> list[dict[str, Any]]:
    """Every run, measured and transcribed, oldest first; each with its ``source`` (``measured``, or
    where it was transcribed from) and ``path``."""
    root = Path(root) if root is not None else suite_dir()
    runs = []
    for p in sorted(root.rglob("*.json")) if root.is_dir() else []:
        try:
            doc = json.loads(p.read_text())
        except (OSError, ValueError):
            continue
        if not isinstance(doc, dict):
            continue
        if doc.get("kind") == KIND:
            runs.append({**doc, "source": "measured", "path": str(p)})
        elif doc.get("kind") == TRANSCRIBED_KIND:
            runs += [{**r, "source": r.get("source", doc["source"]), "path": str(p)} for r in doc["runs"]]
    return sorted(runs, key=lambda r: r.get("started_at") or "")


def latest(family: str, root: Path | str | None = None) -> dict[str, Any] | None:
    """The newest passing clean-clone run of ``family`` with its time after set-up."""
    ok = [r for r in read_runs(root) if r.get("family") == family and r.get("rc") == 0 and r.get("after_setup_s")
          and r.get("clean_clone")]
    return ok[-1] if ok else None


def _mmss(s: float | None) -> str:
    if s is None:
        return "-"
    m, sec = divmod(round(s), 60)
    return f"{m} min {sec:02d} s"


def describe(run: dict[str, Any]) -> str:
    """One line: the time after set-up, its passes and real-server share, which commit, when, where."""
    real = ""
    if run.get("real_server_s"):
        real = f"; real-server {run['real_server_s']:,.0f} s"
        if run.get("shared_start_s"):
            real += f" = {run['real_server_s'] / run['shared_start_s']:.1f} x {run['shared_start_s']:.1f} s shared start"
    p1 = f"{run['pass1_tests']:,} tests in " if run.get("pass1_tests") else ""
    p2 = f"{run['pass2_tests']:,} tests in " if run.get("pass2_tests") else ""
    return (f"{run['after_setup_s'] / 60:.1f} min after set-up (pass 1 {p1}{_mmss(run.get('pass1_s'))}, pass 2 "
            f"{p2}{_mmss(run.get('pass2_s'))}{real}), {run.get('commit', '?')}, {(run.get('started_at') or '?')[:16]}"
            f"{' UTC' if run.get('started_at') else ''}, {run.get('cpu') or FAMILIES.get(run.get('family', ''), '?')}")


def current_table(root: Path | str | None = None) -> str:
    """docs/timing.md's table: the newest passing clean-clone run per CPU family."""
    lines = ["| CPU family | after set-up | set-up | pass 1 (two workers) | pass 2 (one at a time) | real-server "
             "| run |", "| --- | --- | --- | --- | --- | --- | --- |"]
    for family, name in FAMILIES.items():
        r = latest(family, root)
        if r is None:
            lines.append(f"| {name} | not measured | | | | | |")
            continue
        real = (f"{r['real_server_s']:,.0f} s = {r['real_server_s'] / r['shared_start_s']:.1f} x "
                f"{r['shared_start_s']:.1f} s" if r.get("real_server_s") and r.get("shared_start_s") else "-")
        src = "" if r["source"] == "measured" else f" (transcribed from {r['source']})"
        lines.append(f"| {name} | **{r['after_setup_s'] / 60:.1f} min** | {_mmss(r.get('setup_s'))} | "
                     f"{r.get('pass1_tests') or '?'} tests, {_mmss(r.get('pass1_s'))} | {r.get('pass2_tests') or '?'} "
                     f"tests, {_mmss(r.get('pass2_s'))} | {real} | {r.get('commit')}, {(r.get('started_at') or '')[:16]}, "
                     f"{r.get('cpu') or '?'}{src} |")
    return "\n".join(lines)


def parse_log(timed: list[tuple[float, str]]) -> dict[str, Any]:
    """What ``make test``'s output says, from its lines with the seconds since the start at which
    each arrived: set-up (until the first pass's command), each pass's time (to the next mark or
    the end) and pytest's counts, and the real-server line."""
    marks = [next((t for t, line in timed if mark in line and line.lstrip().startswith((".venv", "/"))), None)
             for mark in PASS_MARKS]
    end = timed[-1][0] if timed else 0.0
    out: dict[str, Any] = {"setup_s": None if marks[0] is None else round(marks[0], 1), "pass1_s": None, "pass2_s": None, "pass1_tests": None,
                           "pass2_tests": None, "failed": 0, "real_server_s": None, "shared_start_s": None}
    if marks[0] is not None:
        out["pass1_s"] = round((marks[1] if marks[1] is not None else end) - marks[0], 1)
    if marks[1] is not None:
        out["pass2_s"] = round(end - marks[1], 1)
    for t, line in timed:
        which = "pass2" if marks[1] is not None and t >= marks[1] else "pass1"
        m = _SUMMARY.search(line)
        if m:
            out[f"{which}_tests"] = int(m.group(2)) + int(m.group(1) or 0)
            out["failed"] += int(m.group(1) or 0)
        elif (m := _FAILED_ONLY.search(line)):
            out[f"{which}_tests"] = int(m.group(1))
            out["failed"] += int(m.group(1))
        m = _REAL.search(line)
        if m:
            out["real_server_s"] = float(m.group(1))
            out["shared_start_s"] = float(m.group(4)) if m.group(4) else None
    if out["pass1_s"] is not None and out["pass2_s"] is not None:
        out["after_setup_s"] = round(out["pass1_s"] + out["pass2_s"], 1)
    return out


def write_run(doc: dict[str, Any], root: Path | str | None = None) -> Path:
    """The record, written once under ``<root>/<family>/<stamp>.json``."""
    from specnb.ledger.store import write_once

    root = Path(root) if root is not None else suite_dir()
    stamp = re.sub(r"[^0-9TZ]", "", doc["started_at"].replace("+00:00", "Z"))
    path = root / doc["family"] / f"{stamp}-{doc['commit']}.json"
    return write_once(path, (json.dumps({"kind": KIND, **doc}, indent=1) + "\n").encode())
