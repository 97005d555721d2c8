"""Who watches a sweep run: a progress bar, and hooks on the files it writes.

A run tells its observers what it plans, what it is doing and when files are in place; it never
knows who listens. The progress bar is one (:class:`ProgressObserver`); a Ray block's shipper,
which sends every new file to the driver (:mod:`specnb.sweep.fleet`), is another.
"""

from __future__ import annotations

from typing import Any

__all__ = ["Observers", "ProgressObserver", "SweepObserver"]


class SweepObserver:
    """What a sweep run tells whoever watches it; each method does nothing unless overridden."""

    def requests_planned(self, n: int) -> None:
        """A round adds ``n`` requests to send (skipped points' requests count as done at once)."""

    def requests_added(self, n: int) -> None:
        """A point is measured once more (a busy host): its ``n`` requests are sent again."""

    def requests_done(self, n: int) -> None:
        """``n`` requests answered, failed, or skipped."""

    def status(self, text: str) -> None:
        """What the run is doing now (starting a server, a point)."""

    def point_result(self, text: str) -> None:
        """The last point's result in a few words."""

    def files_written(self) -> None:
        """After every point, sizing and block: the run's files are in place."""

    def close(self) -> None:
        """The run ended (finished, failed or interrupted)."""


class ProgressObserver(SweepObserver):
    """The run's progress bar (:func:`specnb.sweep.progress.progress_bar`), one tick per request."""

    def __init__(self, bar: Any):
        self.bar = bar

    def requests_planned(self, n: int) -> None:
        self.bar.total += n
        self.bar.refresh()

    def requests_added(self, n: int) -> None:
        self.bar.total += n

    def requests_done(self, n: int) -> None:
        self.bar.update(n)

    def status(self, text: str) -> None:
        self.bar.set_description(text)

    def point_result(self, text: str) -> None:
        self.bar.set_postfix_str(text)

    def close(self) -> None:
        self.bar.close()


class Observers(SweepObserver):
    """Every observer of a run, told in turn."""

    def __init__(self, observers: list[SweepObserver]):
        self.observers = list(observers)

    def requests_planned(self, n: int) -> None:
        for o in self.observers:
            o.requests_planned(n)

    def requests_added(self, n: int) -> None:
        for o in self.observers:
            o.requests_added(n)

    def requests_done(self, n: int) -> None:
        for o in self.observers:
            o.requests_done(n)

    def status(self, text: str) -> None:
        for o in self.observers:
            o.status(text)

    def point_result(self, text: str) -> None:
        for o in self.observers:
            o.point_result(text)

    def files_written(self) -> None:
        for o in self.observers:
            o.files_written()

    def close(self) -> None:
        for o in self.observers:
            o.close()
