"""Measure the test suite's time from a clean clone and record it (``specnb.ledger.suite``).

Clones the repository at a commit into a fresh folder, runs CI's command there
(``CI=true bash .ci/run``: ``make test`` with its own set-up), times each line of its output as it
arrives, and writes one record under ``ledgers/suite/<family>/`` of the repository it was run
from: set-up, each pass with pytest's counts, the real-server time and the shared sweep's server
start, the exit code. A failing run is recorded too (``rc`` says so); nothing else should run on
the machine meanwhile (two cores: anything beside it is in the figure).

    python tools/time_suite.py                 # HEAD, about 20-30 min on two cores
    python tools/time_suite.py --commit 1a2b3c4 --keep
    python tools/time_suite.py --table         # docs/timing.md's table of current figures
    python tools/time_suite.py --figure        # the history, drawn beside the records
"""

from __future__ import annotations

import argparse
import os
import platform
import re
import shutil
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from specnb.ledger.suite import (  # noqa: E402
    FAMILIES,
    cpu_family,
    current_table,
    describe,
    parse_log,
    read_runs,
    suite_dir,
    write_run,
)


def _cpu() -> str:
    try:
        m = re.search(r"^model name\s*:\s*(.+)$", Path("/proc/cpuinfo").read_text(), re.M)
        name = m.group(1).strip() if m else platform.processor()
    except OSError:
        name = platform.processor()
    return f"{os.cpu_count()}-vCPU {name}"


def measure(repo: Path, commit: str, workdir: Path, log_path: Path) -> dict:
    sha = subprocess.run(["git", "-C", str(repo), "rev-parse", "--short=7", commit], capture_output=True, text=True,
                         check=True).stdout.strip()
    subprocess.run(["git", "clone", "-q", str(repo), str(workdir)], check=True)
    subprocess.run(["git", "-C", str(workdir), "checkout", "-q", sha], check=True)
    started = datetime.now(UTC)
    t0 = time.monotonic()
    timed: list[tuple[float, str]] = []
    env = {**os.environ, "CI": "true"}
    with log_path.open("w") as log:
        proc = subprocess.Popen(["bash", ".ci/run"], cwd=workdir, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                text=True, env=env, start_new_session=True)
        try:
            assert proc.stdout is not None
            for line in proc.stdout:
                timed.append((time.monotonic() - t0, line.rstrip("\n")))
                log.write(f"{timed[-1][0]:9.1f} {line}")
                log.flush()
            rc = proc.wait()
        except KeyboardInterrupt:
            os.killpg(proc.pid, 15)
            proc.wait()
            raise
    parsed = parse_log(timed)
    return {"family": cpu_family(), "cpu": _cpu(), "commit": sha, "started_at": started.isoformat(timespec="seconds"),
            "how": f"clean clone of {sha}, CI=true bash .ci/run (tools/time_suite.py)", "clean_clone": True,
            "rc": rc, "total_s": round(time.monotonic() - t0, 1), **parsed}


def figure(root: Path) -> list[Path]:
    import matplotlib.pyplot as plt
    import pandas as pd

    from specnb.figures.save import PALETTE, apply_style, save_figure

    runs = pd.DataFrame([r for r in read_runs(root) if r.get("after_setup_s") and r.get("started_at")])
    apply_style()
    fig, ax = plt.subplots(figsize=(8.4, 3.6))
    for i, (family, name) in enumerate(FAMILIES.items()):
        for measured, marker in ((False, "o"), (True, "s")):
            sel = runs[(runs["family"] == family) & ((runs["source"] == "measured") == measured)] if len(runs) else runs
            if len(sel):
                ax.plot(pd.to_datetime(sel["started_at"]), sel["after_setup_s"] / 60, marker, color=PALETTE[i],
                        mfc="none" if not measured else PALETTE[i],
                        label=f"{name}, {'recorded by tools/time_suite.py' if measured else 'transcribed'}")
    ax.set_ylabel("make test after set-up, min")
    ax.set_xlabel("run started (UTC)")
    ax.legend(fontsize=7)
    fig.autofmt_xdate()
    fig.tight_layout()
    sources = sorted({Path(r["path"]) for r in read_runs(root)})
    files = save_figure(fig, "suite-time", sources, out_dir=root,
                        caption="make test's time after set-up, per clean-clone run and CPU family (ledgers/suite)")
    plt.close(fig)
    return [files["png"], files["svg"]]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--commit", default="HEAD", help="the commit to measure (default HEAD)")
    p.add_argument("--workdir", type=Path, help="where to clone (default: a new folder under /tmp)")
    p.add_argument("--keep", action="store_true", help="keep the clone afterwards")
    p.add_argument("--out", type=Path, default=None, help="the records' folder (default ledgers/suite)")
    p.add_argument("--table", action="store_true", help="print docs/timing.md's table of current figures and stop")
    p.add_argument("--figure", action="store_true", help="draw the history beside the records and stop")
    a = p.parse_args(argv)
    root = a.out or suite_dir()
    if a.table:
        print(current_table(root))
        return 0
    if a.figure:
        for path in figure(root):
            print(path)
        return 0
    workdir = a.workdir or Path(tempfile.mkdtemp(prefix="specnb-suite-"))
    if a.workdir and workdir.exists() and any(workdir.iterdir()):
        p.error(f"--workdir {workdir}: not empty")
    log_path = Path(tempfile.gettempdir()) / f"specnb-suite-{datetime.now(UTC):%Y%m%dT%H%M%SZ}.log"
    print(f"measuring {a.commit} in {workdir} (log: {log_path}); nothing else should run meanwhile", flush=True)
    try:
        record = measure(ROOT, a.commit, workdir, log_path)
    finally:
        if not a.keep:
            shutil.rmtree(workdir, ignore_errors=True)
    path = write_run(record, root)
    print(f"{'passed' if record['rc'] == 0 else 'FAILED (rc ' + str(record['rc']) + ')'}: "
          f"{describe(record) if record.get('after_setup_s') else 'no pass finished'}\n-> {path}")
    return 0 if record["rc"] == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
