"""The suite's timing records: make test's output read into a record (passes, counts, the
real-server line), written once, read back with the transcribed runs, the newest passing clean
clone per family found, and docs/timing.md's table of current figures the records' own."""

from __future__ import annotations

import json

import pytest

from specnb import paths
from specnb.ledger.suite import current_table, describe, latest, parse_log, read_runs, write_run

LOG = [
    (0.0, "python3 -m venv .venv"),
    (150.0, '.venv/bin/python -m pytest -q -ra --durations=10 -n 2 --dist loadfile -m "not integration"'),
    (300.0, "1 failed, 1238 passed, 14 warnings in 148.20s (0:02:28)"),
    (301.0, '.venv/bin/python -m pytest -q -ra --durations=40 -m "(integration or browser or serial)"'),
    (1100.0, "real-server tests: 779 s over 60 tests, 25.6 times the shared sweep's 30.4 s start (its servers side "
             "by side); a figure, not a budget"),
    (1101.0, "65 passed in 799.00s (0:13:19)"),
]


def test_make_tests_output_is_read_into_passes_counts_and_the_real_server_line():
    got = parse_log(LOG)
    assert got["setup_s"] == 150.0 and got["pass1_s"] == 151.0 and got["pass2_s"] == 800.0
    assert got["pass1_tests"] == 1239 and got["pass2_tests"] == 65 and got["failed"] == 1
    assert got["real_server_s"] == 779.0 and got["shared_start_s"] == 30.4 and got["after_setup_s"] == 951.0
    cut = parse_log(LOG[:3])  # a run that died in its first pass: no second pass, no time after set-up
    assert cut["pass2_s"] is None and "after_setup_s" not in cut


def test_a_record_is_written_once_and_the_newest_passing_clean_clone_is_current(tmp_path):
    base = {"family": "avx512", "cpu": "2-vCPU Test CPU", "how": "clean clone", "clean_clone": True, "rc": 0,
            **parse_log(LOG)}
    first = write_run({**base, "commit": "aaaaaaa", "started_at": "2026-12-05T10:00:00+00:00"}, tmp_path)
    write_run({**base, "commit": "bbbbbbb", "started_at": "2026-12-05T11:00:00+00:00", "rc": 1}, tmp_path)
    with pytest.raises(FileExistsError):
        write_run({**base, "commit": "aaaaaaa", "started_at": "2026-12-05T10:00:00+00:00"}, tmp_path)
    (tmp_path / "transcribed").mkdir()
    (tmp_path / "transcribed" / "log.json").write_text(json.dumps(
        {"kind": "suite_timing_transcribed", "source": "an old log",
         "runs": [{"family": "avx2", "commit": "ccccccc", "started_at": "2026-12-04T10:00:00+00:00", "rc": 0,
                   "clean_clone": True, "after_setup_s": 2034.0, "pass1_s": 262, "pass2_s": 1770}]}))
    runs = read_runs(tmp_path)
    assert [r["commit"] for r in runs] == ["ccccccc", "aaaaaaa", "bbbbbbb"]
    assert runs[0]["source"] == "an old log" and runs[1]["source"] == "measured" and runs[1]["path"] == str(first)
    assert latest("avx512", tmp_path)["commit"] == "aaaaaaa"  # the newer run failed
    assert describe(latest("avx512", tmp_path)).startswith(
        "15.8 min after set-up (pass 1 1,239 tests in 2 min 31 s, pass 2 65 tests in 13 min 20 s; real-server 779 s = "
        "25.6 x 30.4 s shared start), aaaaaaa, 2026-12-05T10:00 UTC, 2-vCPU Test CPU")
    table = current_table(tmp_path)
    assert "| AVX-512 BF16 | **15.8 min** |" in table and "(transcribed from an old log)" in table


def test_docs_timing_shows_the_records_current_figures():
    """docs/timing.md's table is `python tools/time_suite.py --table`, verbatim: a new record means
    pasting it there, and nowhere else holds the figure."""
    assert current_table() in (paths.ROOT / "docs" / "timing.md").read_text()
    assert latest("avx512") is not None and latest("avx2") is not None
