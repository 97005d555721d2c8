"""Write-once ledger files: a point is written once and never replaced; read back validated.

Files are written to a temporary name and hard-linked into place, so a reader never sees
half a file and an existing ledger is never replaced (``FileExistsError``). Per-request
records (every chunk's time and token count, and the request's own acceptance counts when
the server reports them) go in a Parquet sidecar next to the JSON, written first. A write
that fails (a full disk, a folder that is not writable) leaves no temporary file behind and
raises :class:`LedgerWriteError` naming the file; ledgers written before it are untouched.

Reading validates every file, strictly (a number written as a string is refused, never read
as NaN), and refuses it in one line that names the file (:class:`LedgerError`): a truncated
file, a file that is not JSON or not UTF-8, a ledger of a newer schema version than this
specnb reads, a field of the wrong type.
"""

from __future__ import annotations

import json
import os
import secrets
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pandas as pd
from pydantic import ValidationError

from specnb.errors import SpecnbError, first_error
from specnb.ledger.schema import SCHEMA_VERSION, PointLedger

__all__ = ["LedgerError", "LedgerWriteError", "write_once", "write_ledger", "read_ledger", "read_json",
           "check_writable"]


class LedgerError(SpecnbError):
    """A ledger file that cannot be read or is not a valid ledger; the message names the file."""


class LedgerWriteError(SpecnbError):
    """A ledger file that could not be written (disk full, folder not writable); names the file."""


def _write_error(path: Path, exc: OSError) -> LedgerWriteError:
    return LedgerWriteError(f"cannot write {path}: {exc.strerror or exc}; ledgers written before it are kept")


def check_writable(folder: Path | str) -> None:
    """Create ``folder`` and write (then remove) a probe file in it; :class:`LedgerWriteError`
    naming the folder when that fails, so a sweep learns it before starting a server."""
    folder = Path(folder)
    try:
        folder.mkdir(parents=True, exist_ok=True)
        fd, probe = tempfile.mkstemp(dir=folder, prefix=".specnb-probe.", suffix=".tmp")
        os.close(fd)
        os.unlink(probe)
    except OSError as exc:
        raise LedgerWriteError(f"ledger folder {folder} is not writable: {exc.strerror or exc}") from None


def write_once(path: Path, data: bytes) -> Path:
    """Write ``data`` to ``path`` atomically; raise FileExistsError if it exists."""
    path = Path(path)
    tmp = None
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.chmod(tmp, 0o644)  # mkstemp makes 0600; ledgers are meant to be read by anyone
        os.link(tmp, path)  # fails if path exists: ledgers are never replaced
    except FileExistsError:
        raise
    except OSError as exc:
        raise _write_error(path, exc) from None
    finally:
        if tmp is not None:
            try:
                os.unlink(tmp)
            except OSError:
                pass
    return path


def write_ledger(path: Path, ledger: PointLedger, requests: pd.DataFrame | None = None) -> Path:
    """Write the Parquet sidecar (if any) first, then the JSON that names it."""
    path = Path(path)
    if requests is not None and len(requests):
        stem = path.name.removesuffix(".json")
        tmp = path.with_name(f".{stem}.requests.parquet.{secrets.token_hex(4)}.tmp")
        side = path.with_name(f"{stem}.requests.parquet")
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            requests.to_parquet(tmp, index=False)
            try:
                os.link(tmp, side)
            except FileExistsError:
                # An earlier attempt died between its sidecar and its JSON: that orphan is
                # left as it is, and this ledger names a sidecar of its own.
                side = path.with_name(f"{stem}.requests-{secrets.token_hex(4)}.parquet")
                os.link(tmp, side)
        except OSError as exc:
            raise _write_error(side, exc) from None
        finally:
            tmp.unlink(missing_ok=True)
        ledger = ledger.model_copy(update={"requests_file": side.name})
    # a free-text ledger reads as before the field (older readers forbid unknown keys)
    sampling = getattr(ledger, "sampling", None)
    exclude: dict[str, Any] = {"sampling": {"response_format"}} if sampling is not None and sampling.response_format is None else {}
    prov = getattr(ledger, "provenance", None)
    if prov is not None and prov.executor is None:  # a local run's ledger reads as before the field
        exclude["provenance"] = {"executor"}
    exclude = exclude or None
    return write_once(path, (ledger.model_dump_json(indent=2, exclude=exclude) + "\n").encode())


def read_records(folder: Path | str, pattern: str, kind: str) -> Iterator[tuple[Path, dict[str, Any]]]:
    """(path, document) of every JSON file under ``folder`` matching ``pattern`` whose ``kind`` is
    ``kind``, in path order; unreadable files and other kinds are passed over (records beside a
    run's ledgers, such as ``specnb predict``'s)."""
    for path in sorted(Path(folder).rglob(pattern)):
        try:
            doc = json.loads(path.read_text())
        except (OSError, ValueError):
            continue
        if isinstance(doc, dict) and doc.get("kind") == kind:
            yield path, doc


def read_json(path: Path | str) -> Any:
    """A JSON file, or :class:`LedgerError` naming it: unreadable, not UTF-8, not JSON (truncated)."""
    return _read(Path(path))[1]


def _read(path: Path) -> tuple[str, Any]:
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise LedgerError(f"{path}: cannot read ({exc.strerror or exc})") from None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise LedgerError(f"{path}: not UTF-8 (byte {raw[exc.start]:#04x} at offset {exc.start})") from None
    try:
        return text, json.loads(text)
    except json.JSONDecodeError as exc:
        body = text.rstrip()
        cut = "; it ends early: truncated?" if body.startswith(("{", "[")) and body[-1] not in "}]" else ""
        what = exc.msg.removesuffix(" starting at")
        raise LedgerError(f"{path}: not valid JSON at line {exc.lineno} column {exc.colno} ({what}){cut}") from None


# Values of these result keys are text or structures; every other one is a number or null.
_TEXT_RESULTS = ("error_examples", "token_count_source", "finish_reasons")


def _check_numbers(led: PointLedger) -> str | None:
    """The first free-form numeric field that holds text (the frame would read it as NaN)."""
    for block, values in (("results", led.results), ("server_samples", led.server_samples)):
        for key, v in (values or {}).items():
            if key not in _TEXT_RESULTS and isinstance(v, str):
                return f"{block}.{key}: must be a number or null, got {v[:40]!r}"
    return None


def read_ledger(path: Path | str) -> PointLedger:
    """One ledger, validated; :class:`LedgerError` naming the file and the first problem."""
    path = Path(path)
    text, data = _read(path)
    if not isinstance(data, dict):
        raise LedgerError(f"{path}: expected a JSON object (a point ledger), got {type(data).__name__}")
    version = data.get("schema_version")
    if isinstance(version, int) and not isinstance(version, bool) and version > SCHEMA_VERSION:
        raise LedgerError(f"{path}: schema version {version} is newer than this specnb reads "
                          f"(up to {SCHEMA_VERSION}): upgrade specnb to read it")
    try:
        led = PointLedger.model_validate_json(text, strict=True)
    except ValidationError as exc:
        raise LedgerError(f"{path}: {first_error(exc, count_more=True, model=PointLedger)}") from None
    problem = _check_numbers(led)
    if problem:
        raise LedgerError(f"{path}: {problem}")
    return led
