"""Reading ledgers: every file validated, a bad one named in one line or skipped and counted
(``skip_bad``), never a silent NaN; invalid points stay out of every pair."""

from __future__ import annotations

import json
import warnings

import pytest

from specnb.analysis import paired, usable
from specnb.ledger import Flag, load_ledgers, load_requests, load_spec_by_category, read_ledger, write_ledger
from specnb.ledger.frame import SkippedLedgersWarning
from specnb.ledger.store import LedgerError
from tests.unit.factories import ledger


def _folder(tmp_path):
    for arm, tok in (("baseline", 100.0), ("ngram-k4", 150.0)):
        write_ledger(tmp_path / arm / "copy" / "c001-r00.json", ledger(arm, tok_s=tok, mal=2.0))
    return tmp_path


def test_a_number_written_as_text_is_refused_not_read_as_nan(tmp_path):
    p = _folder(tmp_path) / "baseline" / "copy" / "c001-r00.json"
    data = json.loads(p.read_text())
    data["results"]["output_tok_s"] = "100.0"
    p.unlink()
    p.write_text(json.dumps(data))
    with pytest.raises(LedgerError, match=r"c001-r00.json: results.output_tok_s: must be a number or null, got '100.0'"):
        load_ledgers(tmp_path)
    with pytest.warns(SkippedLedgersWarning, match=r"skipped 1 bad ledger file\(s\) of 2"):
        df = load_ledgers(tmp_path, skip_bad=True)
    assert list(df["arm"]) == ["ngram-k4"] and len(df.attrs["skipped"]) == 1
    assert "baseline" not in set(df["arm"])  # the pair is gone, and the warning said why


def test_strict_types_and_newer_versions(tmp_path):
    p = tmp_path / "x.json"
    data = json.loads(ledger().model_dump_json())
    p.write_text(json.dumps({**data, "repeat": "0"}))
    with pytest.raises(LedgerError, match=r"x.json: repeat: Input should be a valid integer \(got '0'\)"):
        read_ledger(p)
    p.write_text(json.dumps({**data, "schema_version": 7}))
    with pytest.raises(LedgerError, match="schema version 7 is newer than this specnb reads"):
        read_ledger(p)
    p.write_text(json.dumps(data)[:-30])
    with pytest.raises(LedgerError, match="truncated"):
        read_ledger(p)


def test_skip_bad_also_for_per_category_frames(tmp_path):
    _folder(tmp_path)
    (tmp_path / "ngram-k4" / "copy" / "c002-r00.json").write_text("{")
    with pytest.raises(LedgerError):
        load_spec_by_category(tmp_path)
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        load_spec_by_category(tmp_path, skip_bad=True)
    assert any(issubclass(w.category, SkippedLedgersWarning) for w in seen)


def test_a_missing_sidecar_is_named(tmp_path):
    import pandas as pd

    p = write_ledger(tmp_path / "a.json", ledger(), pd.DataFrame({"index": [0]}))
    (tmp_path / read_ledger(p).requests_file).unlink()
    with pytest.raises(LedgerError, match="requests.parquet: cannot read the requests of a.json"):
        load_requests(p)


def test_invalid_points_never_enter_a_pair(tmp_path):
    write_ledger(tmp_path / "b.json", ledger("baseline", tok_s=100.0))
    write_ledger(tmp_path / "s.json", ledger("ngram-k4", tok_s=150.0, mal=2.0, flags=[Flag.INVALID]))
    df = load_ledgers(tmp_path)
    assert len(usable(df)) == 1 and paired(df).empty
