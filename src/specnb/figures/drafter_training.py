"""The EAGLE-3 head's training curve, from its ledger (``make drafter``, :mod:`specnb.drafter`):
the KL loss (training batches and held-out conversations) against tokens seen, and the held-out
per-position accuracy (position k conditional on positions before it being right) with the
acceptance length those accuracies imply at K = 3; where the ledger holds a seed spread
(``make drafter DRAFTER_ARGS="--spread-seeds 1,2"``), the other seeds' final accuracies as grey
ticks and the spread in the title.

``python -m specnb.figures.drafter_training <run folder>`` draws ``training-curve.png``/``.svg`` (and
its sidecar ``training-curve.json``) beside the ledger.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Sequence
from pathlib import Path

import matplotlib.pyplot as plt
from matplotlib.ticker import LogLocator

from specnb.figures.save import PALETTE, apply_style, save_figure

__all__ = ["training_figure", "draw_run", "head_training", "held_out_accuracy"]


def head_training(head: str | Path) -> tuple[dict, Path, dict] | None:
    """A head ``make drafter`` made: its provenance, the path of the training ledger it names and that
    ledger; None for a folder without ``specnb-provenance.json`` (a head made elsewhere)."""
    from specnb import paths

    prov = paths.resolve(str(head)) / "specnb-provenance.json"
    if not prov.is_file():
        return None
    made = json.loads(prov.read_text())
    ledger = paths.resolve(made["training_ledger"])
    return made, ledger, json.loads(ledger.read_text())


def held_out_accuracy(doc: dict) -> list[float]:
    """The training ledger's last held-out per-position accuracy, each position with the earlier
    ones right too (what the head accepts per draft position at temperature 0 on that data)."""
    last = [r for r in doc["curve"] if r["split"] == "val"][-1]
    return [last[f"full_acc_{k}"] for k in range(doc["settings"]["ttt_steps"])]


def training_figure(doc: dict) -> plt.Figure:
    apply_style()
    fig, (ax, vx) = plt.subplots(1, 2, figsize=(10.4, 3.6))
    train = [r for r in doc["curve"] if r["split"] == "train"]
    val = [r for r in doc["curve"] if r["split"] == "val"]
    ax.plot([r["tokens"] for r in train], [r["loss"] for r in train], color=PALETTE[0], lw=0.8, alpha=0.7,
            label="training batches")
    ax.plot([r["tokens"] for r in val], [r["loss"] for r in val], color=PALETTE[1], marker="o", ms=4, lw=1.2,
            label="held-out (response positions)")
    ax.set_yscale("log")
    ax.yaxis.set_major_locator(LogLocator(subs=(1.0, 2.0, 5.0)))
    ax.yaxis.set_major_formatter(plt.FuncFormatter(lambda v, _: f"{v:g}"))
    ax.yaxis.set_minor_formatter(plt.NullFormatter())
    ax.set_xlabel("tokens trained on")
    ax.set_ylabel("KL loss (sum over drafting steps)")
    ax.legend(fontsize=7)
    steps = doc["settings"]["ttt_steps"]
    for k in range(steps):
        # position k's accuracy given the earlier ones right: undefined where almost nothing was right before
        ys = [r[f"cond_acc_{k}"] if k == 0 or r[f"full_acc_{k - 1}"] >= 0.01 else float("nan") for r in val]
        vx.plot([r["tokens"] for r in val], ys, color=PALETTE[k % len(PALETTE)], marker="o", ms=4, lw=1.2,
                label=f"position {k + 1}")
    vx.set_ylim(0, 1)
    vx.set_xlabel("tokens trained on")
    vx.set_ylabel("held-out accuracy\n(earlier positions right)")
    last = val[-1] if val else {}
    title = f"implied acceptance length at K = {steps}: {last.get('expected_acceptance_length', float('nan')):.2f}"
    spread = doc.get("seed_spread") or {}
    if spread.get("interval") and spread.get("status", "done") == "done":
        lo, hi = spread["interval"]
        title += (f"\nseeds {', '.join(map(str, spread['seeds']))}: {spread['min']:.2f}-{spread['max']:.2f}; "
                  f"one more seed: [{lo:.2f}, {hi:.2f}] ({spread['level']:.0%})")
        for r in spread["runs"][1:]:  # the other seeds' final held-out accuracies, beside this head's
            vx.scatter([last.get("tokens", 0)] * steps, [r[f"cond_acc_{k}"] for k in range(steps)], marker="_",
                       s=60, color="0.35", zorder=3)
    vx.set_title(title, fontsize=9)
    vx.legend(fontsize=7)
    d = doc["data"]
    fig.suptitle(f"EAGLE-3 head for {doc['target']}: {d['conversations']} self-distilled conversations "
                 f"({d['response_tokens']:,} response tokens), draft vocabulary {doc['settings']['draft_vocab']} "
                 f"({100 * d['draft_vocab_coverage']:.1f} % of response tokens), seed {doc['settings']['seed']}",
                 fontsize=8.5)
    fig.tight_layout(rect=(0, 0, 1, 0.95))
    return fig


def draw_run(folder: Path | str, out_dir: Path | str | None = None) -> Path:
    folder = Path(folder)
    path = folder / "training.json"
    doc = json.loads(path.read_text())
    fig = training_figure(doc)
    files = save_figure(fig, "training-curve", [path], out_dir=out_dir or folder,
                        caption=f"Training curve of the EAGLE-3 head for {doc['target']} (loss, held-out "
                                "per-position accuracy, implied acceptance length).")
    plt.close(fig)
    return files["png"]


def main(argv: Sequence[str] | None = None) -> int:
    import argparse

    p = argparse.ArgumentParser(prog="python -m specnb.figures.drafter_training", description=__doc__.split("\n\n")[0])
    p.add_argument("run", help="a drafter-training run's folder (holding training.json)")
    a = p.parse_args(argv)
    if not (Path(a.run) / "training.json").is_file():
        p.error(f"{a.run}: no training.json in it")
    print(draw_run(a.run))
    return 0


if __name__ == "__main__":
    sys.exit(main())
