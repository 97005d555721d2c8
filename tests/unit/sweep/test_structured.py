"""Structured output: a response_format checked in one line before anything starts, recorded
in the ledger, and read by the report (the flag's cause named under a grammar)."""

from __future__ import annotations

from pathlib import Path

import pytest

from specnb.ledger import load_ledgers, write_ledger
from specnb.ledger.schema import Sampling
from specnb.prompts.workload import bundled
from specnb.sweep import SweepSpec
from specnb.sweep.spec import SweepError
from tests.unit.factories import ledger

SCHEMA = {"type": "object", "properties": {"name": {"type": "string"}}, "required": ["name"]}


def _spec(rf):
    return SweepSpec.parse({"name": "s", "model": "m", "arms": [{"name": "baseline"}], "concurrency": [1],
                            "sampling": {"response_format": rf}})


@pytest.mark.parametrize("rf, why", [
    ({"type": "xml"}, "type is one of text, json_object, json_schema"),
    ("json", "valid dictionary"),
    ({"type": "json_schema"}, "needs json_schema"),
    ({"type": "json_schema", "json_schema": {"schema": SCHEMA}}, "needs a name"),
    ({"type": "json_schema", "json_schema": {"name": "p", "schema": {"type": "objekt"}}}, "not a valid JSON Schema"),
    ({"type": "json_schema", "json_schema": {"name": "p", "schema": SCHEMA, "grammar": "x"}}, "unknown key"),
    ({"type": "json_object", "json_schema": {"name": "p", "schema": SCHEMA}}, "takes no json_schema"),
    ({"type": "json_object", "schema": SCHEMA}, "unknown key"),
])
def test_a_bad_response_format_is_refused_in_one_line(rf, why):
    with pytest.raises(SweepError, match=why) as err:
        _spec(rf)
    assert "\n" not in str(err.value) and str(err.value).startswith("sweep: ") and "response_format" in str(err.value)


def test_good_formats_are_kept_and_old_runs_still_resume():
    ok = {"type": "json_schema", "json_schema": {"name": "p", "schema": SCHEMA, "strict": True}}
    assert _spec(ok).sampling.response_format == ok and _spec(ok).sampling.structured_output == "json_schema"
    assert _spec({"type": "json_object"}).sampling.structured_output == "json_object"
    assert _spec({"type": "text"}).sampling.structured_output is None
    plain = _spec(None)
    assert "response_format" not in plain.identity()["sampling"]  # the identity of runs made before the field
    assert "response_format" in _spec({"type": "json_object"}).identity()["sampling"]


def test_the_bundled_json_set_has_extraction_and_copy_categories():
    wl = bundled("json")
    assert {p.category for p in wl.prompts} == {"json-extract", "json-copy"} and len(wl.prompts) >= 16


def _structured(df):
    from specnb.analysis.report import ReportOptions, structured
    from specnb.ledger.records import RunRecords

    return structured(RunRecords(Path("run"), df), ReportOptions())


def _frame(tmp_path, mal_or_none):
    rf = {"type": "json_object"}
    base = ledger("baseline")
    spec = ledger("ngram-k4", mal=mal_or_none)
    for i, led in enumerate((base, spec)):
        led.sampling = Sampling(response_format=rf)
        write_ledger(tmp_path / f"{i}.json", led)
    return load_ledgers(tmp_path)


def test_the_report_names_the_grammar_and_says_whether_the_drafter_drafted(tmp_path):
    df = _frame(tmp_path / "a", 3.0)
    lines = _structured(df)
    assert lines[0].startswith("structured output: 2 point(s) ran under a grammar (json_object")
    assert lines[1].startswith("the drafter drafted under the grammar: 100 drafts")
    assert _structured(df.assign(structured_output=None)) == []  # no grammar: nothing to say


def test_no_drafts_under_a_grammar_is_flagged_with_its_cause(tmp_path):
    df = _frame(tmp_path / "b", None)
    df.loc[df["arm"] == "ngram-k4", "flags"] = "spec_no_drafts"
    (_, line) = _structured(df)
    assert line.startswith("spec_no_drafts under structured output: 1 of 1 speculative point(s) made no drafts")
    assert "fell back to plain decoding" in line
