"""Where things live, so code runs the same from any working folder.

The repository root is found from this file when specnb is installed in editable mode
(the normal set-up); ``SPECNB_ROOT`` overrides it, e.g. for a wheel install.
"""

from __future__ import annotations

import os
from pathlib import Path

__all__ = ["ROOT", "MODELS", "LEDGERS", "CACHE", "SCHEMAS", "CONFIGS"]


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
