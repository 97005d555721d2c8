"""Read the top row of SpecDecode-Bench Figure 1 (Llama3.1-8B, speedup vs batch size) off its PNG.

Provenance of the inferred rows of ledgers/published/specdecode-bench-batch-speedup.json. The
figure is assets/img/fig1.png of github.com/SpecDecode-Bench/specdecode-bench.github.io at commit
fb0e24261927be497fe516526f569a3c89de786d (SHA-256 in the ledger); it is not committed here.
Usage: python tools/published/digitize_specdecode_fig1.py fig1.png

Each marker's centre is the middle of the rows where its colour spans more than a line's width
within +-10 px of the batch size's grid column; y pixels map to speedup through the panel's grid
rows (2.00, 1.75, 1.50, 1.25, 1.00), read from the same image.
"""
import sys

import numpy as np
from PIL import Image

COLOURS = {"eagle": (255, 127, 14), "eagle3": (44, 160, 44), "ngram": (31, 119, 180), "draft": (148, 103, 189)}
GRID_ROWS = {2.00: 134.0, 1.75: 177.5, 1.50: 220.5, 1.25: 264.0, 1.00: 307.0}  # gray (176) rows, top row of panels
PANELS = {"a_gsm8k": 224, "b_cnn": 680, "c_sharegpt": 1136, "d_instructcoder": 1592}  # x pixel of batch 1
PX_PER_BATCH = (259.5 - 224.0) / 15.0  # batch 1 -> 224, 16 -> 259.5, 64 -> 373, 128 -> 524 (linear axis)
BATCHES = (1, 16, 64, 128)


def speedup_at(y: float) -> float:
    ys, vs = np.array(list(GRID_ROWS.values())), np.array(list(GRID_ROWS))
    slope, icpt = np.polyfit(ys, vs, 1)
    return float(slope * y + icpt)


def main(path: str) -> None:
    im = np.asarray(Image.open(path).convert("RGB")).astype(int)
    for panel, x1 in PANELS.items():
        for name, rgb in COLOURS.items():
            mask = np.all(np.abs(im - np.array(rgb)) <= 30, axis=2)
            vals = []
            for b in BATCHES:
                x = int(round(x1 + (b - 1) * PX_PER_BATCH))
                width = mask[95:330, x - 10:x + 11].sum(axis=1)
                rows = np.nonzero(width >= 7)[0]
                vals.append(None if rows.size == 0 else round(speedup_at(95 + (rows.min() + rows.max()) / 2.0), 3))
            print(panel, name, dict(zip(BATCHES, vals, strict=True)))


if __name__ == "__main__":
    main(sys.argv[1])
