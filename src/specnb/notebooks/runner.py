"""Execute the notebooks: jupytext sources in, papermill-executed ``.ipynb`` copies out.

Notebooks are stored as jupytext "percent" ``.py`` files (``notebooks/NN_axis.py``) so a diff
reads like code and the ``parameters`` cell tag survives (``# %% tags=["parameters"]``);
JupyterLab opens them as notebooks when jupytext is installed. :func:`execute` converts one
to a notebook in memory, lets papermill inject the parameters after the tagged cell, runs it
from the repository root (so relative paths such as ``ledgers/...`` mean the same thing in
every caller) and writes the executed copy for review.

The executed copy is byte-stable: two runs on the same ledgers write the same file
(:func:`stabilise`: cell ids from each cell's content instead of random ones, no timings,
no kernel noise, no widget state), so ``make -B figures`` leaves ``git status`` clean.

With ``progress``, the kernel's own output is relayed as it comes (``make demo``), and the
kernel's sweep prints one plain line per measured point (``SPECNB_PROGRESS=lines``,
:mod:`specnb.sweep.progress`): a notebook's widget bar never advances outside a notebook
front end, and a ``\r``-redrawn bar does not survive the kernel's output channel.

A notebook's ``parameters`` cell holds its defaults (the CPU run); a parameter file
(``notebooks/params/gpu/<axis>.yaml``, YAML: papermill's own format) overrides some of them.
:func:`read_params` reads one and refuses keys the notebook's parameters cell does not
define, so a typo fails in one line instead of being silently injected.

Before a kernel starts, an axis notebook's parameters are validated as its study, and with
``measure = True`` every preflight check runs (models, drafters, workloads, endpoints): bad
parameters are one line and exit 2, and no server starts. A measuring notebook that ends with
failed points makes the runner exit 1 (it names them), so ``make measure-<axis>`` says so too.
"""

from __future__ import annotations

import ast
import hashlib
import os
import sys
import tempfile
from collections import Counter
from pathlib import Path
from typing import Any

import yaml

from specnb import paths
from specnb.errors import EXIT_BAD_INPUT, EXIT_FAILED_POINTS, SpecnbError, exit_code, unknown_key
from specnb.ledger.runs import AXES, OUTCOME_FILE_ENV, read_failed_points, read_refused_all

__all__ = ["NotebookError", "notebook_parameters", "read_params", "execute", "stabilise", "stable_cell_ids",
           "NOTEBOOKS", "KERNELSPEC"]

NOTEBOOKS = paths.ROOT / "notebooks"
# what JupyterLab writes when it saves a notebook, so a save from Lab leaves a header as committed
KERNELSPEC = {"name": "python3", "display_name": "Python 3 (ipykernel)", "language": "python"}
WIDGET_VIEW = "application/vnd.jupyter.widget-view+json"


class NotebookError(SpecnbError):
    """A notebook or parameter file that cannot be run; one line for the user."""


def _read(source: Path):
    import jupytext

    try:
        return jupytext.read(source)
    except OSError as exc:
        raise NotebookError(f"{source}: {exc.strerror}") from None


def notebook_source(axis: str) -> Path | None:
    """``notebooks/NN_<axis>.py``, the notebook of an axis (None: there is none)."""
    found = sorted((paths.ROOT / "notebooks").glob(f"[0-9][0-9]_{axis}.py"))
    return found[0] if found else None


def notebook_parameters(source: Path | str) -> dict[str, Any]:
    """The literals of the notebook's ``parameters`` cell (name -> default value)."""
    nb = _read(Path(source))
    cells = [c for c in nb.cells if "parameters" in c.get("metadata", {}).get("tags", [])]
    if len(cells) != 1:
        raise NotebookError(f"{source}: needs exactly one cell tagged 'parameters', found {len(cells)}")
    out: dict[str, Any] = {}
    for node in ast.parse(cells[0].source).body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            try:
                out[node.targets[0].id] = ast.literal_eval(node.value)
            except ValueError:
                raise NotebookError(f"{source}: parameter {node.targets[0].id} is not a literal") from None
        elif not isinstance(node, ast.Expr):
            raise NotebookError(f"{source}: the parameters cell holds only literal assignments")
    return out


def parameter_comments(source: Path | str) -> dict[str, str]:
    """Each parameter's trailing comment in the ``parameters`` cell (what it is, where it comes from)."""
    nb = _read(Path(source))
    cell = next(c for c in nb.cells if "parameters" in c.get("metadata", {}).get("tags", []))
    out = {}
    for line in cell.source.splitlines():
        name, eq, rest = line.partition("=")
        if eq and name.strip().isidentifier() and "  # " in rest:
            out[name.strip()] = rest.split("  # ", 1)[1].strip()
    return out


def read_params(path: Path | str, source: Path | str | None = None) -> dict[str, Any]:
    """A YAML parameter file; with ``source``, every key must be a parameter of that notebook."""
    path = Path(path)
    try:
        data = yaml.safe_load(path.read_text()) or {}
    except OSError as exc:
        raise NotebookError(f"{path}: {exc.strerror}") from None
    except yaml.YAMLError as exc:
        raise NotebookError(f"{path}: not valid YAML ({str(exc).splitlines()[0]})") from None
    if not isinstance(data, dict):
        raise NotebookError(f"{path}: expected a mapping of parameter names to values")
    if source is not None:
        known = notebook_parameters(source)
        unknown = sorted(set(data) - set(known))
        if unknown:
            raise NotebookError(f"{path}: {unknown_key(unknown[0], known, 'parameter')} "
                                f"for {Path(source).name}")
    return data


def check_parameters(source: Path, params: dict[str, Any]) -> None:
    """An axis notebook's parameters (its defaults with ``params`` over them) as its study, one
    line per mistake; with ``measure`` true, every preflight check too. No kernel, no server."""
    axis = source.stem.split("_", 1)[-1]
    if axis not in AXES:
        return
    from specnb.sweep.study import Study  # reading a study's parameters loads no engine

    merged = {**notebook_parameters(source), **params}
    study = Study.from_parameters(axis, **merged)
    if merged.get("measure"):
        study.check()  # the engine side's preflight: only when the notebook will measure


def execute(
    source: Path | str,
    output: Path | str,
    parameters: dict[str, Any] | None = None,
    *,
    params_file: Path | str | None = None,
    cwd: Path | str | None = None,
    progress: bool = False,
    timeout_s: float | None = None,
    failed_points: list[str] | None = None,
    refused_all: list[str] | None = None,
) -> Path:
    """Run a jupytext notebook under papermill; returns the executed ``.ipynb``.

    Parameters are checked before the kernel starts (:func:`check_parameters`). Pass a list as
    ``failed_points`` to learn the points a measuring notebook could not measure, and as
    ``refused_all`` to learn the refusals of a study this engine build could measure nothing of."""
    import nbformat
    import papermill as pm

    source, output = Path(source), Path(output)
    params: dict[str, Any] = {}
    if params_file is not None:
        params.update(read_params(params_file, source))
    params.update(parameters or {})
    known = notebook_parameters(source)
    unknown = sorted(set(params) - set(known))
    if unknown:
        raise NotebookError(f"{source.name}: {unknown_key(unknown[0], known, 'parameter')}")
    check_parameters(source, params)
    nb = _read(source)
    nb.metadata["kernelspec"] = dict(KERNELSPEC)
    output.parent.mkdir(parents=True, exist_ok=True)
    tmp = output.with_suffix(".src.ipynb")
    nbformat.write(nb, tmp)
    # the kernel inherits this process' environment: a sweep in it prints a line per point
    saved = os.environ.get("SPECNB_PROGRESS")
    if progress and saved is None:
        os.environ["SPECNB_PROGRESS"] = "lines"
    fd, outcome = tempfile.mkstemp(prefix="specnb-outcome.", suffix=".jsonl")
    os.close(fd)
    before = os.environ.get(OUTCOME_FILE_ENV)
    os.environ[OUTCOME_FILE_ENV] = outcome  # the kernel inherits it too: Study.run appends failed points
    try:
        # relayed raw (stdout_file / stderr_file) as the kernel writes it, not through papermill's
        # logger, which would print stderr twice
        pm.execute_notebook(
            str(tmp), str(output), parameters=params, cwd=str(cwd or paths.ROOT),
            kernel_name="python3", progress_bar=False, log_output=False,
            execution_timeout=timeout_s, stdout_file=sys.stdout if progress else None,
            stderr_file=sys.stderr if progress else None,
        )
    finally:
        if progress and saved is None:
            os.environ.pop("SPECNB_PROGRESS", None)
        if failed_points is not None:  # also when a later cell failed: the points still failed
            failed_points += read_failed_points(outcome)
        if refused_all is not None:
            refused_all += read_refused_all(outcome)
        if before is None:
            os.environ.pop(OUTCOME_FILE_ENV, None)
        else:
            os.environ[OUTCOME_FILE_ENV] = before
        os.unlink(outcome)
        tmp.unlink(missing_ok=True)
        if output.exists():
            stabilise(output)
    return output


def stable_cell_ids(nb: Any) -> None:
    """Give every cell an id made from its type and source (in place).

    A jupytext ``.py`` stores no cell ids, so reading one gives every cell a random id, and
    papermill gives its injected-parameters cell another: without this, every run of the same
    notebook on the same data writes a different file. Content ids (the first 8 hex digits of
    sha256(type NUL source), ``-2``, ``-3``... for repeated content) stay put when another
    cell is inserted, so diffs stay small and the reports' ``#cell-id=`` links keep working.
    """
    seen: Counter[str] = Counter()
    for cell in nb.cells:
        src = cell.source if isinstance(cell.source, str) else "".join(cell.source)
        digest = hashlib.sha256(f"{cell.cell_type}\0{src}".encode()).hexdigest()[:8]
        seen[digest] += 1
        cell["id"] = digest if seen[digest] == 1 else f"{digest}-{seen[digest]}"


def stabilise(path: Path | str) -> Path:
    """Rewrite an executed notebook without what differs between two runs on the same data:
    papermill's timings and paths, nbclient's per-cell timings, stderr (kernel warnings),
    widget state and views (random model ids; a measuring run's progress widget), random
    cell ids. Idempotent."""
    import nbformat

    path = Path(path)
    nb = nbformat.read(path, as_version=4)
    pm_meta = nb.metadata.get("papermill", {})
    for key in ("start_time", "end_time", "duration", "input_path", "output_path", "environment_variables"):
        pm_meta.pop(key, None)
    nb.metadata.pop("widgets", None)
    for cell in nb.cells:
        cell.metadata.pop("papermill", None)
        cell.metadata.pop("execution", None)
        if cell.cell_type == "code":
            cell.outputs = [o for o in cell.outputs
                            if not (o.get("output_type") == "stream" and o.get("name") == "stderr")
                            and WIDGET_VIEW not in o.get("data", {})]
    stable_cell_ids(nb)
    nbformat.validate(nb)
    nbformat.write(nb, path)
    return path


def _run_one(source: Path, output: Path, params: dict[str, Any], params_file: Path | None,
             progress: bool, failed_points: list[str] | None = None, refused_all: list[str] | None = None) -> str | None:
    """Execute one notebook; None when it ran, else the one line that says why it did not.
    A measuring notebook's failed points are added to ``failed_points``, and the refusals of a
    study whose every condition was refused to ``refused_all``."""
    try:
        execute(source, output, params, params_file=params_file, progress=progress, failed_points=failed_points,
                refused_all=refused_all)
    except (SpecnbError, KeyboardInterrupt):
        raise
    except Exception as exc:  # papermill's PapermillExecutionError names the failing cell
        first = str(exc).strip().splitlines()
        return (f"specnb: {source.name} failed: {first[-1] if first else type(exc).__name__} "
                f"(executed copy with the traceback: {output})")
    return None


def run_many(pairs: list[tuple[Path, Path]], jobs: int = 1) -> list[str]:
    """Execute several notebooks (analysis mode, default parameters), ``jobs`` at a time.

    One process imports papermill and specnb once, then forks a worker per notebook: what
    ``make figures`` runs, where start-up is most of each notebook's time. Returns the
    failure lines (empty when every notebook ran)."""
    if jobs <= 1 or len(pairs) <= 1:
        return [m for s, o in pairs if (m := _run_one(s, o, {}, None, False))]
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    ctx = multiprocessing.get_context("fork")  # the workers inherit the imports
    with ProcessPoolExecutor(max_workers=jobs, mp_context=ctx) as pool:
        futures = [(o, pool.submit(_run_one, s, o, {}, None, False)) for s, o in pairs]
        failures = []
        for out, fut in futures:
            msg = fut.result()
            print(msg or out, file=sys.stderr if msg else sys.stdout, flush=True)
            if msg:
                failures.append(msg)
    return failures


def main(argv: list[str] | None = None) -> int:
    """``python -m specnb.notebooks.runner SOURCE OUT [SOURCE OUT ...] [-f PARAMS.yaml] [-p NAME VALUE]...``"""
    import argparse

    class Parser(argparse.ArgumentParser):
        def error(self, message: str):  # one line, like every other refusal
            print(f"specnb: {message} (see {self.prog} --help)", file=sys.stderr)
            raise SystemExit(2)

    p = Parser(prog="python -m specnb.notebooks.runner", description="Execute jupytext notebooks under papermill.")
    p.add_argument("paths", type=Path, nargs="+", metavar="SOURCE OUT",
                   help="a notebook and where its executed copy goes; several pairs run --jobs at a time")
    p.add_argument("-f", "--params-file", type=Path)
    p.add_argument("-p", "--param", nargs=2, action="append", default=[], metavar=("NAME", "VALUE"),
                   help="a parameter, value in YAML syntax (e.g. -p measure true)")
    p.add_argument("--progress", action="store_true")
    p.add_argument("-j", "--jobs", type=int, default=1, help="notebooks at a time (several pairs)")
    try:
        a = p.parse_args(argv)
        if len(a.paths) % 2:
            p.error("expected SOURCE OUT pairs")
        if len(a.paths) > 2 and (a.param or a.params_file or a.progress):
            p.error("parameters, a parameter file and --progress apply to one notebook at a time")
    except SystemExit as exc:  # --help, or a bad argument already said in one line
        return exc.code if isinstance(exc.code, int) else 2
    pairs = list(zip(a.paths[::2], a.paths[1::2], strict=True))

    def run() -> int:
        if len(pairs) > 1:
            failures = run_many(pairs, a.jobs)
            for msg in failures:
                print(msg, file=sys.stderr)
            return 1 if failures else 0
        (source, output), = pairs
        try:
            params = {k: yaml.safe_load(v) for k, v in a.param}
        except yaml.YAMLError as exc:
            raise NotebookError(f"-p: a value is not YAML ({' '.join(str(exc).split())[:120]})") from None
        failed: list[str] = []
        refused: list[str] = []
        msg = _run_one(source, output, params, a.params_file, a.progress, failed, refused)
        if refused:  # nothing could be measured here: the refusals are the whole answer
            for line in refused:
                print(line, file=sys.stderr)
            return EXIT_BAD_INPUT
        _say_failed(source, failed)
        if msg:
            print(msg, file=sys.stderr)
            return 1
        print(output)
        if failed:
            return EXIT_FAILED_POINTS
        return 0

    return exit_code(run, "rerun with the same run to resume")


def _say_failed(source: Path, failed: list[str]) -> None:
    if failed:
        shown = "; ".join(failed[:5]) + ("; ..." if len(failed) > 5 else "")
        print(f"specnb: {source.name}: {len(failed)} point(s) failed: {shown} (rerun with the same run "
              "to measure only them)", file=sys.stderr)


if __name__ == "__main__":
    raise SystemExit(main())
