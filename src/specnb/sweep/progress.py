"""A sweep's progress, shown where it can be seen: a bar in a terminal or a JupyterLab
kernel, one plain line per point in a file or a CI log.

A ``\\r``-redrawn bar written to a file is one ever-growing line that a CI log shows only at
the end, and a notebook widget bar relayed from a papermill kernel never advances (its updates
are widget messages, not output). :func:`progress_bar` picks the form:

- ``SPECNB_PROGRESS`` = ``bar`` | ``lines`` | ``widget`` | ``off`` when set (the notebook
  runner sets ``lines`` for the kernel whose output it relays: ``make demo``);
- otherwise a widget inside a Jupyter kernel (JupyterLab shows it live), a text bar when
  stderr is a terminal, and lines when it is not.

:class:`LineProgress` has the part of tqdm's interface a sweep uses (``update``,
``set_description``, ``set_postfix_str``, ``close``) and prints when a point ends.
"""

from __future__ import annotations

import os
import sys
import time
from typing import Any, TextIO

__all__ = ["LineProgress", "progress_bar", "progress_mode"]

MODES = ("bar", "lines", "widget", "off")


def _in_kernel() -> bool:
    shell = sys.modules.get("IPython")
    if shell is None:
        return False
    try:
        from IPython import get_ipython
    except ImportError:
        return False
    ip = get_ipython()
    return ip is not None and hasattr(ip, "kernel")


def progress_mode(stream: TextIO | None = None) -> str:
    """``bar``, ``lines``, ``widget`` or ``off``, as described in the module docstring."""
    env = os.environ.get("SPECNB_PROGRESS", "").strip().lower()
    if env in MODES:
        return env
    if _in_kernel():
        return "widget"
    stream = stream or sys.stderr
    try:
        return "bar" if stream.isatty() else "lines"
    except (AttributeError, ValueError):
        return "lines"


class LineProgress:
    """One plain line per finished point: ``[done/total req, elapsed] what: result``."""

    def __init__(self, total: int, desc: str = "", unit: str = "req", file: TextIO | None = None,
                 disable: bool = False, tenths: bool = False):
        self.total, self.n, self.desc, self.unit = total, 0, desc, unit
        self.file = file or sys.stderr
        self.disable = disable
        self.t0 = time.monotonic()
        # tenths: also a line every tenth of the way with the time left at the rate so far (a long loop
        # of small steps, such as training, where no step is a point)
        self.tenths, self._next = tenths, 1  # the next tenth to report

    def _say(self, text: str) -> None:
        if self.disable:
            return
        el = int(time.monotonic() - self.t0)
        print(f"[{self.n}/{self.total} {self.unit}, {el // 60}:{el % 60:02d}] {text}", file=self.file, flush=True)

    def update(self, n: int = 1) -> None:
        self.n += n
        if self.tenths and self.total and 10 * self.n >= self._next * self.total:
            left = (time.monotonic() - self.t0) / self.n * (self.total - self.n)
            self._say(f"{self.desc}: about {left / 60:.1f} min left")
            while 10 * self.n >= self._next * self.total:
                self._next += 1

    def set_description(self, desc: str, refresh: bool = True) -> None:  # noqa: ARG002 - tqdm's signature
        self.desc = desc
        if ": " in desc:  # a step between points ("...: starting server", "...: sizing ..."), not a point
            self._say(desc)

    def refresh(self) -> None:
        pass

    def set_postfix_str(self, s: str = "", refresh: bool = True) -> None:  # noqa: ARG002 - tqdm's signature
        self._say(f"{self.desc}: {s}" if s else self.desc)

    def close(self) -> None:
        if not self.disable and self.n:
            self._say(f"{self.desc.split(' ', 1)[0]}: done")
        self.disable = True


def progress_bar(total: int, *, desc: str, enabled: bool = True, unit: str = "req", file: TextIO | None = None,
                 tenths: bool = False, **tqdm_kwargs: Any) -> Any:
    """A tqdm bar, a widget or a :class:`LineProgress`, whichever can be seen (see module doc)."""
    file = file or sys.stderr
    mode = progress_mode(file) if enabled else "off"
    if mode == "lines" or mode == "off":
        return LineProgress(total, desc=desc, unit=unit, file=file, disable=mode == "off", tenths=tenths)
    if mode == "widget":
        from tqdm.auto import tqdm
    else:
        from tqdm.std import tqdm
    return tqdm(total=total, desc=desc, unit=unit, file=file, **tqdm_kwargs)
