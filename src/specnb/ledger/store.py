"""Write-once ledger files: a point is written once and never replaced.

Files are written to a temporary name and hard-linked into place, so a reader never sees
half a file and an existing ledger is never replaced (``FileExistsError``). Per-request
records (every chunk's time and token count, and the request's own acceptance counts when
the server reports them) go in a Parquet sidecar next to the JSON, written first.
"""

from __future__ import annotations

import os
import secrets
import tempfile
from pathlib import Path

import pandas as pd

from specnb.ledger.schema import PointLedger

__all__ = ["write_once", "write_ledger", "read_ledger"]


def write_once(path: Path, data: bytes) -> Path:
    """Write ``data`` to ``path`` atomically; raise FileExistsError if it exists."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.chmod(tmp, 0o644)  # mkstemp makes 0600; ledgers are meant to be read by anyone
        os.link(tmp, path)  # fails if path exists: ledgers are never replaced
    finally:
        os.unlink(tmp)
    return path


def write_ledger(path: Path, ledger: PointLedger, requests: pd.DataFrame | None = None) -> Path:
    """Write the Parquet sidecar (if any) first, then the JSON that names it."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    if requests is not None and len(requests):
        stem = path.name.removesuffix(".json")
        tmp = path.with_name(f".{stem}.requests.parquet.tmp")
        requests.to_parquet(tmp, index=False)
        try:
            side = path.with_name(f"{stem}.requests.parquet")
            try:
                os.link(tmp, side)
            except FileExistsError:
                # An earlier attempt died between its sidecar and its JSON: that orphan is
                # left as it is, and this ledger names a sidecar of its own.
                side = path.with_name(f"{stem}.requests-{secrets.token_hex(4)}.parquet")
                os.link(tmp, side)
        finally:
            os.unlink(tmp)
        ledger = ledger.model_copy(update={"requests_file": side.name})
    return write_once(path, (ledger.model_dump_json(indent=2) + "\n").encode())


def read_ledger(path: Path | str) -> PointLedger:
    return PointLedger.model_validate_json(Path(path).read_text())


