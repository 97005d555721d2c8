"""One way to save a figure: SVG + PNG under one id, with a sidecar naming its data.

Every published figure goes through :func:`save_figure`, so each has one id, a fixed style
and a JSON sidecar that lists the ledgers it was drawn from (folders plus a digest of the
files' contents). A reviewer can tell from the sidecar alone whether a figure is stale: if
the digest of the ledgers named there no longer matches, the figure was drawn from other
data. Output is byte-stable for the same data (no dates in SVG or PNG metadata, a fixed SVG
hash salt), so ``make figures`` on unchanged ledgers leaves ``git status`` clean.

Measured and published (transcribed) data are drawn in separate panels, never on one axis:
the seeds warn that absolute values from different serving configurations do not compare.
:data:`PUBLISHED_STYLE` marks published data the same way in every figure.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import matplotlib.pyplot as plt  # headless machines get matplotlib's agg fallback by itself

from specnb import paths

__all__ = ["FIGURES", "PUBLISHED_STYLE", "apply_style", "save_figure", "sources_digest", "arm_colors"]

FIGURES = paths.ROOT / "figures"
_ID = re.compile(r"^[a-z0-9][a-z0-9-]{1,80}$")

STYLE: dict[str, Any] = {
    "figure.dpi": 110,
    "savefig.dpi": 150,
    "savefig.bbox": "tight",
    "font.size": 9.5,
    "axes.titlesize": 10,
    "axes.labelsize": 9.5,
    "axes.spines.top": False,
    "axes.spines.right": False,
    "axes.grid": True,
    "grid.alpha": 0.3,
    "legend.frameon": False,
    "legend.fontsize": 8.5,
    "svg.hashsalt": "specnb",
    "svg.fonttype": "path",
}

# Colour-blind safe (Okabe-Ito), assigned to arms in a stable order.
PALETTE = ["#0072B2", "#E69F00", "#009E73", "#D55E00", "#CC79A7", "#56B4E9", "#F0E442", "#000000"]
PUBLISHED_STYLE: dict[str, Any] = {"linestyle": "--", "marker": "s", "alpha": 0.85}


def apply_style() -> None:
    """The fixed look of every specnb figure."""
    plt.rcParams.update(STYLE)


def arm_colors(names: Iterable[str]) -> dict[str, str]:
    """A stable colour per name (sorted), so an arm keeps its colour across figures."""
    return {n: PALETTE[i % len(PALETTE)] for i, n in enumerate(sorted(set(names)))}


def _files(sources: Iterable[Path | str]) -> list[Path]:
    out: list[Path] = []
    for s in sources:
        p = paths.resolve(s)
        if p.is_dir():
            out += sorted(q for q in p.rglob("*") if q.is_file() and "logs" not in q.parts and "traces" not in q.parts)
        elif p.is_file():
            out.append(p)
        else:
            raise FileNotFoundError(f"figure source {p} does not exist")
    return out


def sources_digest(sources: Iterable[Path | str]) -> tuple[str, int]:
    """sha256 over the (relative name, content) of every file under the sources."""
    h = hashlib.sha256()
    files = _files(sources)
    for f in files:
        h.update(_rel(f).encode())
        h.update(b"\0")
        h.update(f.read_bytes())
    return h.hexdigest()[:16], len(files)


def _rel(p: Path | str) -> str:
    p = paths.resolve(p).resolve()
    try:
        return str(p.relative_to(paths.ROOT))
    except ValueError:
        return str(p)


def _refuse_to_replace_a_ledger(path: Path) -> None:
    """A figure drawn beside its ledger must not take the ledger's name: ``<fig_id>.json`` is the
    sidecar, and a JSON file already there that is not a sidecar (a ledger, a record) is never
    overwritten. (A training curve drawn as ``training`` beside ``training.json`` once replaced the
    ledger it was drawn from.)"""
    if not path.exists():
        return
    try:
        old = json.loads(path.read_text())
    except (OSError, ValueError):
        old = None
    if not (isinstance(old, dict) and {"id", "files", "sources"} <= set(old)):
        raise FileExistsError(f"{path} exists and is not a figure's sidecar: give the figure another id")


def save_figure(
    fig: plt.Figure,
    fig_id: str,
    sources: Iterable[Path | str],
    *,
    caption: str = "",
    out_dir: Path | str | None = None,
    notebook: str | None = None,
    formats: tuple[str, ...] = ("svg", "png"),
) -> dict[str, Path]:
    """Write ``<out_dir>/<fig_id>.{svg,png}`` and ``<fig_id>.json`` (what it was drawn from).

    ``sources`` are the ledger files or folders (measured or published) the figure shows.
    Relative ``sources`` and ``out_dir`` are read against the repository root
    (:func:`specnb.paths.resolve`), whichever folder the kernel runs in; the returned paths
    keep ``out_dir`` as given (a notebook shows the same text in every checkout).
    """
    if not _ID.match(fig_id):
        raise ValueError(f"figure id {fig_id!r}: use lowercase letters, digits and '-'")
    sources = list(sources)
    named = Path(out_dir) if out_dir is not None else FIGURES  # returned as the caller named it
    out = paths.resolve(named)
    out.mkdir(parents=True, exist_ok=True)
    _refuse_to_replace_a_ledger(out / f"{fig_id}.json")
    written: dict[str, Path] = {}
    for fmt in formats:
        meta = {"Date": None} if fmt == "svg" else ({"Software": None} if fmt == "png" else None)
        fig.savefig(out / f"{fig_id}.{fmt}", format=fmt, metadata=meta)
        written[fmt] = named / f"{fig_id}.{fmt}"
    digest, n = sources_digest(sources)
    sidecar = {
        "id": fig_id,
        "caption": caption,
        "notebook": notebook,
        "sources": sorted({_rel(s) for s in sources}),
        "source_files": n,
        "sources_sha256": digest,
        "files": sorted(p.name for p in written.values()),
    }
    (out / f"{fig_id}.json").write_text(json.dumps(sidecar, indent=2) + "\n")
    written["json"] = named / f"{fig_id}.json"
    return written
