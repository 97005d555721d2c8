"""Ledgers: the measurements, one write-once JSON file per point, and the frames read from them.

- :mod:`~specnb.ledger.schema`: what a point records (typed, versioned, with provenance);
- :mod:`~specnb.ledger.store`: write once, never replace; read back validated;
- :mod:`~specnb.ledger.frame`: folders of ledgers as tidy DataFrames;
- :mod:`~specnb.ledger.names`: flag names, the baseline arm and the plain condition;
- :mod:`~specnb.ledger.provenance`: git state, versions and hardware of a run;
- :mod:`~specnb.ledger.published`: the seeds' published tables, transcribed and kept apart;
- :mod:`~specnb.ledger.timing`: where a sweep's wall time went (servers, warmup, measuring, ...).

This package sits between the two sides: the sweep writes ledgers, the analysis reads them.
It imports nothing from either.
"""

from __future__ import annotations

from specnb.ledger.frame import (
    arm_configs,
    json_cell,
    ledger_files,
    load_ledgers,
    load_requests,
    load_spec_by_category,
    load_turns,
)
from specnb.ledger.names import (
    BASELINE,
    PLAIN_CONDITION,
    REFUSED_ERROR,
    Flag,
    LoadMode,
    Status,
    has_flag,
    usable,
)
from specnb.ledger.schema import (
    READABLE_VERSIONS,
    SCHEMA_VERSION,
    ArmRecord,
    CategorySpecDecode,
    ConversationSet,
    Failure,
    LoadShape,
    PointLedger,
    Provenance,
    Sampling,
    SearchInfo,
    ServerRecord,
    Sizing,
    SpecDecode,
    TrafficImport,
    TurnStats,
    WorkloadRecord,
    schema_json,
    utcnow,
)
from specnb.ledger.store import read_ledger, write_ledger, write_once

__all__ = [
    "arm_configs",
    "json_cell",
    "SCHEMA_VERSION",
    "BASELINE",
    "REFUSED_ERROR",
    "Status",
    "LoadMode",
    "usable",
    "PLAIN_CONDITION",
    "ArmRecord",
    "CategorySpecDecode",
    "ConversationSet",
    "TurnStats",
    "Failure",
    "Flag",
    "LoadShape",
    "READABLE_VERSIONS",
    "SearchInfo",
    "Sizing",
    "PointLedger",
    "Provenance",
    "Sampling",
    "ServerRecord",
    "SpecDecode",
    "TrafficImport",
    "WorkloadRecord",
    "has_flag",
    "ledger_files",
    "load_ledgers",
    "load_requests",
    "load_spec_by_category",
    "load_turns",
    "read_ledger",
    "schema_json",
    "utcnow",
    "write_ledger",
    "write_once",
]
