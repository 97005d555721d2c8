"""A figure saved beside a ledger never replaces it: ``<id>.json`` is the sidecar's name, and a JSON
file there that is not a sidecar is refused."""

from __future__ import annotations

import json

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import pytest  # noqa: E402

from specnb.figures.drafter_training import draw_run  # noqa: E402
from specnb.figures.save import save_figure  # noqa: E402


def _fig():
    fig, ax = plt.subplots()
    ax.plot([0, 1], [0, 1])
    return fig


def test_a_ledger_with_the_figures_name_is_not_overwritten(tmp_path):
    ledger = tmp_path / "training.json"
    ledger.write_text(json.dumps({"kind": "drafter-training", "curve": [1, 2]}))
    with pytest.raises(FileExistsError, match="not a figure's sidecar"):
        save_figure(_fig(), "training", [ledger], out_dir=tmp_path)
    assert json.loads(ledger.read_text())["curve"] == [1, 2]


def test_a_figure_redrawn_replaces_its_own_sidecar(tmp_path):
    src = tmp_path / "run.json"
    src.write_text("{}")
    save_figure(_fig(), "curve", [src], out_dir=tmp_path, caption="first")
    save_figure(_fig(), "curve", [src], out_dir=tmp_path, caption="second")
    assert json.loads((tmp_path / "curve.json").read_text())["caption"] == "second"


def test_the_training_curve_is_drawn_beside_its_ledger_and_leaves_it_whole(tmp_path):
    row = {"full_acc_0": 0.5, "cond_acc_0": 0.5, "full_acc_1": 0.2, "cond_acc_1": 0.4, "full_acc_2": 0.1,
           "cond_acc_2": 0.5}
    doc = {"kind": "drafter-training", "target": "models/t", "settings": {"ttt_steps": 3, "draft_vocab": 8, "seed": 0},
           "data": {"conversations": 3, "response_tokens": 30, "draft_vocab_coverage": 0.9},
           "curve": [{"split": "val", "tokens": 0, "loss": 9.0, "expected_acceptance_length": 1.0, **row},
                     {"split": "train", "tokens": 10, "loss": 5.0, **row},
                     {"split": "val", "tokens": 20, "loss": 4.0, "expected_acceptance_length": 1.6, **row}]}
    (tmp_path / "training.json").write_text(json.dumps(doc))
    png = draw_run(tmp_path)
    assert png.name == "training-curve.png" and (tmp_path / "training-curve.svg").exists()
    assert json.loads((tmp_path / "training.json").read_text()) == doc
