"""The step-time probe's figures, from its ledgers (:mod:`specnb.probe`): step time against tokens
per step (b x q), one line per cached length L and width q, with each cell's 10th-90th
percentile; and the verification/decode cost ratio T(b, K+1) / T(b, 1) against b for K = 3, 4 and
7, the ratio speculative decoding's acceptance must beat.

``python -m specnb.figures.probe <run folder>`` draws each ledger of a probe run beside it
(``<shape>.png``/``.svg`` and the sidecar); ``--beside <anatomy run>`` also prints its step times
beside a profiled vLLM's (:mod:`specnb.analysis.probe`).
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from pathlib import Path

import matplotlib.pyplot as plt

from specnb.figures.save import PALETTE, apply_style, save_figure
from specnb.probe.run import probe_ledgers

__all__ = ["cost_ratios", "probe_figure", "draw_run"]

VERIFY_K = (3, 4, 7)


def _cell(doc: dict) -> dict[tuple[int, int, int], dict]:
    return {(c["b"], c["q"], c["L"]): c for c in doc["cells"]}


def cost_ratios(doc: dict, ks: Sequence[int] = VERIFY_K) -> list[dict]:
    """T(b, K+1) / T(b, 1) per (K, L, b) where both cells were measured."""
    cells = _cell(doc)
    out = []
    for (b, q, length), c in sorted(cells.items()):
        if q - 1 in ks and (b, 1, length) in cells:
            out.append({"k": q - 1, "L": length, "b": b,
                        "ratio": c["median_ms"] / cells[(b, 1, length)]["median_ms"]})
    return out


def _title(doc: dict) -> str:
    dev = doc["device"]
    how = "CUDA graphs" if doc.get("graphs") else "eager"
    shared = ", layers share weights" if doc.get("weights_shared") else ""
    return f"{doc['shape']['name']} ({doc['dtype']}) on {dev.get('name')}: {how}, {doc['attention']}{shared}"


def probe_figure(doc: dict) -> plt.Figure:
    apply_style()
    fig, (ax, rx) = plt.subplots(1, 2, figsize=(10.4, 3.8))
    lengths = sorted({c["L"] for c in doc["cells"]})
    qs = sorted({c["q"] for c in doc["cells"]})
    styles = ["-", "--", ":", "-."]
    for li, length in enumerate(lengths):
        for qi, q in enumerate(qs):
            pts = sorted((c for c in doc["cells"] if c["L"] == length and c["q"] == q), key=lambda c: c["tokens"])
            if not pts:
                continue
            x = [c["tokens"] for c in pts]
            y = [c["median_ms"] for c in pts]
            err = [[c["median_ms"] - c["p10_ms"] for c in pts], [c["p90_ms"] - c["median_ms"] for c in pts]]
            ax.errorbar(x, y, yerr=err, color=PALETTE[qi % len(PALETTE)], ls=styles[li % len(styles)], marker="o",
                        ms=3, lw=1, capsize=1.5, label=f"q={q}, L={length}")
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlabel("tokens per step (b x q)")
    ax.set_ylabel("step time, ms (median; p10-p90)")
    ax.legend(ncol=2, fontsize=7)
    ratios = cost_ratios(doc)
    for i, k in enumerate(VERIFY_K):
        for li, length in enumerate(lengths):
            pts = [r for r in ratios if r["k"] == k and r["L"] == length]
            if pts:
                rx.plot([r["b"] for r in pts], [r["ratio"] for r in pts], color=PALETTE[i], ls=styles[li % len(styles)],
                        marker="o", ms=3, lw=1, label=f"K={k}, L={length}")
    rx.axhline(1.0, color="0.5", lw=0.8)
    rx.set_xscale("log", base=2)
    rx.set_xlabel("sequences per step, b")
    rx.set_ylabel("T(b, K+1) / T(b, 1)")
    rx.set_title("what verifying K drafts costs over a decode step", fontsize=9)
    if ratios:
        rx.legend(fontsize=7)
    skipped = len(doc.get("skipped", []))
    fig.suptitle(_title(doc) + (f"; {skipped} cells skipped (the ledger says why)" if skipped else ""), fontsize=9)
    fig.tight_layout()
    return fig


def draw_run(folder: Path | str, out_dir: Path | str | None = None) -> list[Path]:
    """Each probe ledger of a run folder drawn beside it (or in ``out_dir``)."""
    folder = Path(folder)
    written = []
    for path, doc in probe_ledgers(folder):
        if not doc["cells"]:
            continue
        fig = probe_figure(doc)
        fig_id = f"probe-{path.stem}"
        files = save_figure(fig, fig_id, [path], out_dir=out_dir or folder,
                            caption=f"Step time of {doc['shape']['name']} by tokens per step, and the cost of "
                                    f"verifying K drafts over a decode step: {_title(doc)}")
        plt.close(fig)
        written.append(files["png"])
    return written


def main(argv: Sequence[str] | None = None) -> int:
    import argparse

    p = argparse.ArgumentParser(prog="python -m specnb.figures.probe", description=__doc__.split("\n\n")[0])
    p.add_argument("run", help="a probe run's folder")
    p.add_argument("--beside", metavar="ANATOMY_RUN",
                   help="a `specnb anatomy` run of the same model on the same machine: print the probe's steps "
                        "beside the engine's (specnb.analysis.probe)")
    p.add_argument("--no-draw", action="store_true", help="print the comparison only")
    p.add_argument("--length", type=int, help="the probe's cached length to compare (default: its shortest)")
    a = p.parse_args(argv)
    if not Path(a.run).is_dir():
        p.error(f"{a.run}: not a folder")
    for path in [] if a.no_draw else draw_run(a.run):
        print(path)
    if a.beside:
        from specnb.analysis.probe import beside_engine, format_beside
        from specnb.ledger.records import load_anatomy

        anatomy = load_anatomy(a.beside)
        if not anatomy:
            p.error(f"{a.beside}: no step anatomy records under it")
        for path, doc in probe_ledgers(a.run):
            rows = beside_engine(doc, anatomy, a.length)
            print(f"\n{doc['shape']['name']} ({doc['dtype']}), L = {rows[0]['L'] if rows else '-'}: probe {path} "
                  f"beside {a.beside}")
            print(format_beside(rows) if rows else "no (b, q) measured on both sides")
    return 0


if __name__ == "__main__":
    sys.exit(main())
