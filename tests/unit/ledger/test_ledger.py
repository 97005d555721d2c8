"""Ledger schema round trip, write-once files, the exported JSON Schema and load_ledgers."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest

from specnb import paths
from specnb.ledger import (
    SCHEMA_VERSION,
    PointLedger,
    load_ledgers,
    load_requests,
    load_spec_by_category,
    read_ledger,
    schema_json,
    write_ledger,
    write_once,
)
from tests.unit.factories import ledger


def test_round_trip_is_lossless(tmp_path):
    led = ledger("ngram-k4", mal=2.5, tok_s=123.4)
    p = write_ledger(tmp_path / "a.json", led)
    back = read_ledger(p)
    assert back == led
    assert back.schema_version == SCHEMA_VERSION
    assert back.spec_decode.mean_acceptance_length == pytest.approx(2.5)


def test_unknown_fields_and_bad_values_are_rejected():
    data = json.loads(ledger().model_dump_json())
    data["surprise"] = 1
    with pytest.raises(ValueError):
        PointLedger.model_validate(data)
    data = json.loads(ledger().model_dump_json())
    data["concurrency"] = 0
    with pytest.raises(ValueError):
        PointLedger.model_validate(data)
    data = json.loads(ledger().model_dump_json())
    data["schema_version"] = 99
    with pytest.raises(ValueError):
        PointLedger.model_validate(data)


def test_write_once_never_replaces(tmp_path):
    p = write_once(tmp_path / "x" / "l.json", b"first")
    with pytest.raises(FileExistsError):
        write_once(p, b"second")
    assert p.read_bytes() == b"first"
    assert [q.name for q in p.parent.iterdir()] == ["l.json"]  # no temp files left


def test_sidecar_written_and_named(tmp_path):
    frame = pd.DataFrame({"index": [0, 1], "chunk_times_s": [[0.1, 0.2], [0.3]],
                          "chunk_tokens": [[1, 3], [1]]})
    p = write_ledger(tmp_path / "c001-r00.json", ledger(), frame)
    led = read_ledger(p)
    assert led.requests_file == "c001-r00.requests.parquet"
    back = load_requests(p)
    assert list(back["chunk_tokens"].iloc[0]) == [1, 3]


def test_committed_schema_matches_the_model():
    committed = paths.SCHEMAS / f"point-ledger.v{SCHEMA_VERSION}.json"
    assert committed.read_text() == schema_json(), "run `make schemas` and commit the result"


def test_load_ledgers_is_tidy(tmp_path):
    for r in range(2):
        for c in (1, 2):
            write_ledger(tmp_path / "baseline" / f"c{c}-r{r}.json", ledger("baseline", c=c, r=r))
            write_ledger(tmp_path / "ngram" / f"c{c}-r{r}.json", ledger("ngram-k4", c=c, r=r, mal=3.0))
    (tmp_path / "sweep.json").write_text("{}")  # the sweep record is not a ledger
    df = load_ledgers(tmp_path)
    assert len(df) == 8
    assert set(df["arm"]) == {"baseline", "ngram-k4"}
    assert df.loc[df["arm"] == "ngram-k4", "mean_acceptance_length"].eq(3.0).all()
    assert df.loc[df["arm"] == "baseline", "mean_acceptance_length"].isna().all()
    assert {"output_tok_s", "concurrency", "repeat", "workload_hash", "kv_cache_tokens"} <= set(df.columns)


def test_load_ledgers_missing_path(tmp_path):
    with pytest.raises(FileNotFoundError):
        load_ledgers(tmp_path / "nope")


def test_orphan_sidecar_from_an_interrupted_write_does_not_block_the_point(tmp_path):
    frame = pd.DataFrame({"index": [0], "chunk_tokens": [[2]]})
    orphan = tmp_path / "c001-r00.requests.parquet"
    orphan.write_bytes(b"half written")
    p = write_ledger(tmp_path / "c001-r00.json", ledger(), frame)
    led = read_ledger(p)
    assert led.requests_file != orphan.name and led.requests_file.endswith(".parquet")
    assert list(load_requests(p)["chunk_tokens"].iloc[0]) == [2]
    assert orphan.read_bytes() == b"half written"


def test_committed_ledgers_still_read_and_carry_no_new_blocks():
    # ledgers written before the per-category and traffic fields existed stay valid
    files = sorted((paths.LEDGERS).rglob("c*-r*.json"))
    assert files
    for p in files[:4]:
        led = read_ledger(p)
        assert led.spec_decode_by_category is None and led.workload.imported is None
    assert load_spec_by_category(files[:4]).empty


def _published(path):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"schema_version": 1, "kind": "published", "id": path.stem, "rows": []}))
    return path


def test_load_ledgers_leaves_published_ledgers_out(tmp_path):
    write_ledger(tmp_path / "run" / "baseline" / "c1-r0.json", ledger("baseline"))
    pub = _published(tmp_path / "published" / "someone-table.json")
    df = load_ledgers(tmp_path)
    assert df["path"].tolist() == [str(tmp_path / "run" / "baseline" / "c1-r0.json")]
    with pytest.raises(ValueError, match="published ledger"):
        load_ledgers(pub)


def test_load_ledgers_reads_the_whole_committed_tree():
    # ledgers/ holds measured runs and ledgers/published/ side by side
    df = load_ledgers(paths.LEDGERS)
    tops = {Path(p).relative_to(paths.LEDGERS).parts[0] for p in df["path"]}
    assert len(df) and "published" not in tops


def test_a_run_confined_to_some_cpus_says_how_many_it_had(monkeypatch):
    """A thread confined to one CPU (as under taskset) records ``usable_cpus`` in its provenance and
    its machine reads "1 of N CPUs"; an unconfined one records nothing new (ledgers as before)."""
    import os

    from specnb.ledger.frame import machine_label
    from specnb.ledger.provenance import collect, confinement
    from tests.conftest import on_one_cpu

    hw = on_one_cpu(max(os.sched_getaffinity(0)), lambda: collect()["hardware"])
    total = os.cpu_count()
    if total > 1:
        assert hw["usable_cpus"] == 1 and hw["cpu_count"] == total, hw
        assert f", 1 of {total} CPUs" in machine_label(hw), machine_label(hw)
    else:
        assert "usable_cpus" not in hw
    # a thread that may use every CPU (this process may itself be confined: a pinned test worker)
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: set(range(total)))
    free = collect()["hardware"]
    assert confinement() == {} and "usable_cpus" not in free and f", {total} CPUs" in machine_label(free)
