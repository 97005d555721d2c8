"""Where things live, so code runs the same from any working folder.

The repository root is found from this file when specnb is installed in editable mode
(the normal set-up); ``SPECNB_ROOT`` overrides it, e.g. for a wheel install.

Relative paths a notebook is given (``ledger_root = "ledgers"``, ``figures_dir = "figures"``)
mean the same folder whoever runs it: papermill runs a kernel in the repository root, but
JupyterLab starts it in the notebook's own folder (``notebooks/``). :func:`resolve` reads
them against :data:`ROOT`.

:func:`portable` writes a path the way a ledger records it: relative to the project, or with
the home folder as ``~``, so a ledger says where things ran without leaking a user's folders.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

__all__ = ["ROOT", "MODELS", "LEDGERS", "CACHE", "SCHEMAS", "CONFIGS", "resolve", "portable"]


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


def _prefixes() -> list[tuple[str, str]]:
    """(absolute prefix, what it becomes), longest first: the project's models (often a link to
    a shared folder), the project itself, then the home folder."""
    pairs = []
    for real, short in ((MODELS, "models"), (ROOT, ".")):
        for p in {str(real), str(real.resolve())}:
            pairs.append((p, short))
    home = os.path.expanduser("~")
    if home and home != "/":
        pairs += [(home, "~"), (str(Path(home).resolve()), "~")]
    return sorted(set(pairs), key=lambda x: -len(x[0]))


def portable(value: str) -> str:
    """``value`` with every absolute path in it made portable (a path alone, a ``:`` list, a
    ``--flag=/path``, a path inside JSON): under the project -> relative to it
    (``.venv/lib/libiomp5.so``), under the home folder -> ``~/...``. Anything else is left as it is."""
    if "/" not in value:
        return value
    for prefix, short in _prefixes():
        start = r"(?<![\w.~/-])" + re.escape(prefix)
        value = re.sub(start + "/", "" if short == "." else short + "/", value)
        value = re.sub(start + r"(?![\w.-])", short, value)
    return value
