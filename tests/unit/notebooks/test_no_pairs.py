"""A notebook whose run forms no pair (no condition has a drafter arm and its baseline both
measured) says so in one line where it opens the run, instead of failing cells later with an
AttributeError on an empty table (issue 46 item 1: quantization with ``plain: {"drafters": []}``)."""

from __future__ import annotations

import glob

import pytest

from specnb import paths
from specnb.analysis.pairing import AnalysisError
from specnb.ledger import write_ledger
from specnb.notebooks import open_axis
from specnb.notebooks.runner import notebook_parameters
from tests.unit.factories import ledger


def _params(root, **kw):
    (nb,) = glob.glob(str(paths.ROOT / "notebooks" / "[0-9][0-9]_quantization.py"))
    return {**notebook_parameters(nb), "study": "t", "run": "run1", "ledger_root": str(root), "measure": False,
            "conditions": {"plain": {"drafters": []}}, **kw}


def test_a_run_that_forms_no_pair_is_one_line_naming_what_was_measured(tmp_path):
    folder = tmp_path / "quantization" / "t" / "run1" / "plain"
    for c in (1, 2):
        write_ledger(folder / "baseline" / "copy" / f"c{c:03d}-r00.json", ledger("baseline", c=c))
    with pytest.raises(AnalysisError) as info:
        open_axis("quantization", _params(tmp_path), quiet=True)
    msg = str(info.value)
    assert "\n" not in msg and msg.startswith("nothing pairs in ") and "/baseline" in msg and "ngram" not in msg


def test_the_same_run_with_its_drafter_arm_opens(tmp_path):
    folder = tmp_path / "quantization" / "t" / "run1" / "plain"
    for c in (1, 2):
        write_ledger(folder / "baseline" / "copy" / f"c{c:03d}-r00.json", ledger("baseline", c=c))
        write_ledger(folder / "ngram-k4" / "copy" / f"c{c:03d}-r00.json", ledger("ngram-k4", c=c, mal=2.0, tok_s=150.0))
    nb = open_axis("quantization", _params(tmp_path, conditions={"plain": {}}), quiet=True)
    assert len(nb.table) == 2
