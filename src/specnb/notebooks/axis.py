"""An axis notebook's set-up cell, as one call.

Every axis notebook does the same first steps: validate its parameters as a study, measure a
new run (``measure = True``) or find the run to read, load its ledgers, pair them into the
speedup table and say in one line what the run holds. :func:`open_axis` does all of it and
returns an :class:`AxisRun` the rest of the notebook draws from::

    nb = open_axis("concurrency", globals())
    nb.table      # paired speedups with bootstrap intervals (specnb.analysis.summarize)
    nb.save(fig, "concurrency-speedup", caption="...")

With ``measure = False`` nothing from the engine side is imported: figures rebuild from
ledgers alone.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from specnb import paths
from specnb.analysis.tables import label_conditions, run_summary, summarize
from specnb.figures.save import save_figure
from specnb.ledger import load_ledgers
from specnb.ledger.names import Status
from specnb.ledger.runs import RunError, find_run
from specnb.notebooks.runner import notebook_source
from specnb.sweep.study import Study

__all__ = ["AxisRun", "open_axis", "notebook_id", "show"]


def notebook_id(axis: str) -> str:
    """``NN_<axis>``: the notebook of an axis, as figure sidecars name it."""
    source = notebook_source(axis)
    return source.stem if source else axis


def show(markdown: str) -> None:
    """Markdown in a notebook, plain text elsewhere."""
    try:
        from IPython import get_ipython
        from IPython.display import Markdown, display
    except ImportError:  # pragma: no cover - IPython comes with the notebook stack
        print(markdown)
        return
    if get_ipython() is None:
        print(markdown)
    else:
        display(Markdown(markdown))


@dataclass
class AxisRun:
    """One axis notebook's run: its study, folder, frame, paired table and where figures go."""

    axis: str
    study: Study
    folder: Path
    df: pd.DataFrame
    table: pd.DataFrame
    figures_dir: Path | str
    notebook: str
    labels: dict[str, str] = field(default_factory=dict)

    @property
    def failed(self) -> pd.DataFrame:
        return self.df[self.df["status"] != Status.OK] if len(self.df) else self.df

    @property
    def summary(self) -> str:
        from specnb.ledger.timing import read_timings

        return run_summary(self.folder, self.df, self.labels, read_timings(self.folder))

    def report(self, opts: Any = None) -> None:
        """Print the run's report, the same text ``specnb report <folder>`` prints (one pipeline:
        :mod:`specnb.analysis.report`), under the command that prints it."""
        from specnb.analysis.report import format_run_report
        from specnb.ledger.records import load_run

        text = format_run_report(load_run(self.folder), opts)
        print(f"$ specnb report {paths.portable(str(self.folder))}\n{text}")

    def section(self, name: str, opts: Any = None) -> None:
        """One section of the run's report (:data:`specnb.analysis.report.SECTIONS`, by its function's
        name), the same lines ``specnb report`` prints there."""
        from specnb.analysis.report import SECTIONS, ReportOptions
        from specnb.ledger.records import load_run

        by_name = {s.__name__: s for s in SECTIONS}
        if name not in by_name:
            raise ValueError(f"no report section {name!r}; the sections are {', '.join(by_name)}")
        run = load_run(self.folder)
        lines = "" if run.df.empty else "\n".join(by_name[name](run, opts or ReportOptions())).strip("\n")
        show(f"```\n{lines}\n```" if lines else f"This run has nothing for the report's {name} section.")

    def condition_frontier(self, fig_id: str, what: str) -> pd.DataFrame:
        """Per-user decode tok/s against aggregate output tok/s for every condition (``what``: a
        checkpoint, a layout) and arm across concurrency, a panel per workload, rings on the Pareto
        front over all of them; saved as ``fig_id``. Returns the front's rows."""
        from specnb.analysis.latency import frontier
        from specnb.figures import panels

        front = frontier(self.df.assign(arm=self.df.condition_label.astype(str) + " · " + self.df.arm,
                                        condition="all"))
        fig, axes = panels.new_figure(ncols=front.workload.nunique(), width=5.0, height=3.8)
        for ax, (wl, g) in zip(axes[0], front.groupby("workload", sort=True), strict=True):
            panels.frontier(ax, g, title=wl)
        axes[0][0].legend(loc="best", fontsize=7)
        self.save(fig, fig_id, caption=f"Per-user decode tok/s against aggregate output tok/s for every {what} and "
                  "arm across concurrency (labels); rings: the Pareto front over all of them.")
        return front[front.pareto][["workload", "arm", "concurrency", "per_user_tok_s", "output_tok_s"]].round(1)

    def save(self, fig: Any, fig_id: str, caption: str = "", sources: Iterable[Path | str] | None = None,
             **kwargs: Any) -> dict[str, Path]:
        """:func:`specnb.figures.save.save_figure` with this run as the default source."""
        return save_figure(fig, fig_id, [self.folder] if sources is None else sources, caption=caption,
                           out_dir=self.figures_dir, notebook=self.notebook, **kwargs)


def open_axis(axis: str, params: Mapping[str, Any], *, progress: bool = True, quiet: bool = False,
              missing_ok: bool = False) -> AxisRun | None:
    """Validate the notebook's parameters, measure or find the run, load and pair it.

    ``params`` is the notebook's namespace (``globals()``): its study parameters and
    ``measure``, ``run``, ``ledger_root`` and ``figures_dir`` (relative paths are read against
    the repository root, :func:`specnb.paths.resolve`, so JupyterLab and papermill agree).
    ``missing_ok``: None instead of an error when the study has no run yet (a notebook's
    optional sections).
    """
    study = Study.from_namespace(axis, dict(params))
    # relative to the repository, not the kernel's folder (JupyterLab starts it in notebooks/)
    root = paths.resolve(params["ledger_root"]) if params.get("ledger_root") else None
    run = params.get("run") or ""
    if params.get("measure"):
        folder, outcomes = study.run(root, run or None, progress=progress)
        for o in outcomes:
            print(o.summary())
    else:
        try:
            folder = find_run(axis, study.study, run, root)
        except RunError:
            if missing_ok:
                return None
            raise
    labels = study.labels()
    df = label_conditions(load_ledgers(folder), labels)
    table = summarize(df, labels=labels)
    if table.empty:  # every figure and table below is of pairs: say so here, in one line
        from specnb.analysis.pairing import AnalysisError

        measured = sorted({f"{c}/{a}" for c, a in zip(df.get("condition", pd.Series(dtype=str)).fillna("-"),
                                                       df.get("arm", pd.Series(dtype=str)), strict=False)})
        raise AnalysisError(f"nothing pairs in {paths.portable(str(folder))}: no condition has a drafter arm and its "
                            f"baseline both measured at one level (measured: {', '.join(measured) or 'nothing'}); "
                            "give a condition drafters, or measure the missing arms")
    out = AxisRun(axis=axis, study=study, folder=folder, df=df, table=table,
                  figures_dir=params.get("figures_dir") or "figures", notebook=notebook_id(axis), labels=labels)
    if not quiet:
        show(out.summary)
    return out
