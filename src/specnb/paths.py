"""Where things live, so code runs the same from any working folder.

The repository root is found from this file when specnb is installed in editable mode
(the normal set-up); ``SPECNB_ROOT`` overrides it, e.g. for a wheel install.

Relative paths a notebook is given (``ledger_root = "ledgers"``, ``figures_dir = "figures"``)
mean the same folder whoever runs it: papermill runs a kernel in the repository root, but
JupyterLab starts it in the notebook's own folder (``notebooks/``). :func:`resolve` reads
them against :data:`ROOT`.
"""

from __future__ import annotations

import os
from pathlib import Path

__all__ = ["ROOT", "MODELS", "LEDGERS", "CACHE", "SCHEMAS", "CONFIGS", "resolve"]


def _root() -> Path:
    env = os.environ.get("SPECNB_ROOT")
    if env:
        return Path(env).resolve()
    here = Path(__file__).resolve()
    for parent in here.parents:
        if (parent / "pyproject.toml").exists() and (parent / "src" / "specnb").exists():
            return parent
    return Path.cwd().resolve()


ROOT = _root()
MODELS = ROOT / "models"
LEDGERS = ROOT / "ledgers"
CACHE = ROOT / ".cache"
SCHEMAS = ROOT / "schemas"
CONFIGS = ROOT / "configs"


def resolve(path: str | os.PathLike[str]) -> Path:
    """``path`` itself when absolute, else read against the repository root (not the working folder)."""
    p = Path(path).expanduser()
    return p if p.is_absolute() else ROOT / p
