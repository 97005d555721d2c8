"""Read SpecDecode-Bench Figure 2 (tree vs chain verification, speedup vs batch size) off its PDF.

Provenance of the inferred rows of ledgers/published/specdecode-bench-tree-chain.json. The figure
is assets/img/fig2.pdf of github.com/SpecDecode-Bench/specdecode-bench.github.io at commit
fb0e24261927be497fe516526f569a3c89de786d (SHA-256 in the ledger); it is not committed here.
Usage: python tools/published/digitize_specdecode_fig2.py fig2.pdf  (prints one JSON row per point)

The PDF is vector (matplotlib): each curve is a stroked 4-vertex polyline in its panel's frame,
its vertices on the x ticks of batch 1, 16, 64 and 128, and its markers follow it (a filled plus
for the k=6 tree, an x for the k=21 tree; the chain's own marker). y maps to speedup through the
panel's y tick marks, uniformly spaced, labelled 0.5, 1.0, 1.5, ... from the lowest (read off the
PNG). The printed anchors (panel (a) at batch 1: chain 1.65x, tree k=21 1.85x) are checked.
"""
import json
import re
import sys
import zlib

COLOURS = {"0.1725490 0.6274510 0.1725490": ("EAGLE-3", "chain"), "0.8901961 0.4666667 0.7607843": ("EAGLE-3", "tree"),
           "1 0.4980392 0.05490196": ("EAGLE", "chain"), "0.8392157 0.1529412 0.1568627": ("EAGLE", "tree")}
PANELS = {("27.415", "131.166"): ("a", "Qwen3-8B", "GSM8K"), ("136.827", "131.166"): ("b", "Qwen3-8B", "CNN/Dailymail"),
          ("246.238", "131.166"): ("c", "Qwen3-8B", "ShareGPT"), ("355.649", "131.166"): ("d", "Qwen3-8B", "InstructCoder"),
          ("26.17", "27.895"): ("e", "Llama3-70B", "GSM8K"), ("135.581", "27.895"): ("f", "Llama3-70B", "CNN/Dailymail"),
          ("244.993", "27.895"): ("g", "Llama3-70B", "ShareGPT"),
          ("354.404", "27.895"): ("h", "Llama3-70B", "InstructCoder")}
BATCHES = (1, 16, 64, 128)
LINE = re.compile(r"1\.5 w 2 J 1 j /Cs2 CS ([\d. ]+?) SC q [\d.]+ 0 0 [\d.]+ ([\d.]+) ([\d.]+) cm ((?:[\d.]+ [\d.]+ [ml] )+)S")
YTICK = re.compile(r"q [\d.]+ 0 0 [\d.]+ ([\d.]+) ([\d.]+) cm 47\.72 ([\d.]+) m 44\.22 [\d.]+ l")
PLUS = "-1.666667 -5 m 1.666667 -5 l"  # matplotlib's filled plus ('P')
CROSS = "-5 -5 m 5 5 l -5 5 m 5 -5 l"  # its x ('x')


def content(path: str) -> str:
    data = open(path, "rb").read()
    streams = []
    for m in re.finditer(rb"stream\r?\n(.*?)\r?\nendstream", data, re.S):
        try:
            streams.append(zlib.decompress(m.group(1)))
        except zlib.error:
            pass
    return max(streams, key=len).decode("latin1").replace("\n", " ")


def rows(text: str) -> list[dict]:
    ticks: dict[tuple[str, str], set[float]] = {}
    for m in YTICK.finditer(text):
        ticks.setdefault((m.group(1), m.group(2)), set()).add(float(m.group(3)))
    lines = list(LINE.finditer(text))
    out = []
    for n, m in enumerate(lines):
        colour, tx, ty, path = m.groups()
        drafter, kind = COLOURS[colour]
        letter, model, workload = PANELS[(tx, ty)]
        tk = sorted(ticks[(tx, ty)])
        step = (tk[-1] - tk[0]) / (len(tk) - 1)
        assert all(abs(tk[i + 1] - tk[i] - step) < 0.01 for i in range(len(tk) - 1)), tk
        k = 3
        if kind == "tree":  # the markers drawn after this line, before the next one, say which tree
            after = text[m.end():lines[n + 1].start() if n + 1 < len(lines) else len(text)]
            has_plus, has_cross = PLUS in after, CROSS in after
            assert has_plus != has_cross, (letter, drafter)
            k = 6 if has_plus else 21
        pts = re.findall(r"([\d.]+) ([\d.]+) [ml]", path)
        assert len(pts) == len(BATCHES), pts
        for b, (_x, y) in zip(BATCHES, pts, strict=True):
            out.append({"panel": letter, "model": model, "workload": workload, "drafter": drafter, "verify": kind,
                        "k": k, "batch": b, "speedup": round(0.5 + 0.5 * (float(y) - tk[0]) / step, 3)})
    return out


def main(path: str) -> None:
    got = rows(content(path))
    assert len(got) == 8 * 3 * 4, len(got)
    at = {(r["panel"], r["verify"], r["k"], r["batch"]): r["speedup"] for r in got}
    assert round(at["a", "chain", 3, 1], 2) == 1.65 and round(at["a", "tree", 21, 1], 2) == 1.85, "printed anchors"
    for r in got:
        print(json.dumps(r))


if __name__ == "__main__":
    main(sys.argv[1])
