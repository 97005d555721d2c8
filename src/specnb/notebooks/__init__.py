"""The notebooks' own library: the set-up call every axis notebook makes, and the papermill
runner that executes them.

- :mod:`~specnb.notebooks.axis`: :func:`open_axis`, an axis notebook's set-up cell as one call;
- :mod:`~specnb.notebooks.runner`: execute a jupytext notebook under papermill
  (``python -m specnb.notebooks.runner``, what ``make figures`` and ``make measure-<axis>`` run),
  into a byte-stable executed copy;
- :mod:`~specnb.notebooks.reports`: HTML pages of the executed notebooks and a figure gallery
  (``make reports``);
- :mod:`~specnb.notebooks.defaults`: the parameter lines every axis notebook shares, written once
  (``make notebook-defaults``);
- :mod:`~specnb.notebooks.gpucheck`: every GPU parameter file against the installed vLLM
  (``make gpu-check``), in seconds, with no server.
"""

from __future__ import annotations

from specnb.notebooks.axis import AxisRun, open_axis, show

__all__ = ["AxisRun", "open_axis", "show"]
