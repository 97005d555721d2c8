"""Read the Llama-3.1-8B row of SpecDecode-Bench Figure 1 (speedup vs batch size) off its vector PDF.

Provenance of the n-gram rows of ledgers/published/specdecode-bench-batch-speedup.json (the EAGLE rows
were read off the PNG by digitize_specdecode_fig1.py; this reading of the same curves is within 0.05 of
those, up to 0.045 on ShareGPT at batch 64: the PNG's marker centres are the coarser reading). The figure is assets/img/fig1.pdf of
github.com/SpecDecode-Bench/specdecode-bench.github.io at commit fb0e24261927be497fe516526f569a3c89de786d
(SHA-256 334ef1919d6be6f31aa0ea60df40f28c34185ddc0d89d33a04af4e44c02a2ccc); it is not committed here.
Usage: python tools/published/digitize_specdecode_fig1_vector.py fig1.pdf  (one JSON row per point)

The PDF is vector (matplotlib, re-rendered): each curve is a stroked polyline of 4 vertices on the
grid columns of batch 1, 16, 64 and 128, in its panel's frame; y maps to speedup through the panel's
grey horizontal grid lines, uniformly spaced, 1.00 to 2.00 by 0.25 (the tick labels, read off the
PNG). Colours: blue n-gram, orange EAGLE, green EAGLE-3; the blue curve with square markers is
"N-gram-Fixed-3" (K = 3), the one with circles "N-gram-Fixed-5" (K = 5, InstructCoder only).
"""
import json
import re
import sys
import zlib

COLOURS = {(0.122, 0.467, 0.706): "ngram", (1.0, 0.498, 0.055): "eagle", (0.173, 0.627, 0.173): "eagle3"}
GRID = (0.69,)
WORKLOADS = ("GSM8K", "CNN/Dailymail", "ShareGPT", "InstructCoder")  # panels (a) to (d), left to right
BATCHES = (1, 16, 64, 128)
NUMBER = r"[-+]?\d*\.?\d+(?:[eE][-+]?\d+)?"


def content(path: str) -> str:
    data = open(path, "rb").read()
    m = re.search(rb"<<\s*/Filter /FlateDecode /Length (\d+)\s*>>\s*stream\r?\n", data)
    return zlib.decompress(data[m.end():m.end() + int(m.group(1))]).decode("latin1")


def paths(text: str) -> list[dict]:
    """Every painted path: operator, colours, its points in page space (the current matrix applied)."""
    tokens = re.findall(r"/[^\s/\[\]()<>]+|\[|\]|\((?:\\.|[^\\)])*\)|<[^>]*>|" + NUMBER + r"|[A-Za-z'\"*]+", text)
    stack, args, saved, pts, out = [], [], [], [], []
    ctm, fill, stroke = (1.0, 0.0, 0.0, 1.0, 0.0, 0.0), None, None

    def at(x: float, y: float) -> tuple[float, float]:
        return ctm[0] * x + ctm[2] * y + ctm[4], ctm[1] * x + ctm[3] * y + ctm[5]

    for t in tokens:
        if re.fullmatch(NUMBER, t):
            args.append(float(t))
            continue
        if t[0] in "/[]()<":
            continue
        if t == "q":
            saved.append((ctm, fill, stroke))
        elif t == "Q":
            ctm, fill, stroke = saved.pop()
        elif t == "cm":
            a, b, c, d, e, f = args[-6:]
            A = ctm
            ctm = (a * A[0] + b * A[2], a * A[1] + b * A[3], c * A[0] + d * A[2], c * A[1] + d * A[3],
                   e * A[0] + f * A[2] + A[4], e * A[1] + f * A[3] + A[5])
        elif t == "sc":
            fill = tuple(round(v, 3) for v in args)
        elif t == "SC":
            stroke = tuple(round(v, 3) for v in args)
        elif t in ("m", "l", "c", "v", "y"):
            pts.append(at(args[-2], args[-1]))
        elif t == "re":
            x, y, w, h = args[-4:]
            pts += [at(x, y), at(x + w, y + h)]
        elif t in ("f", "F", "f*", "B", "B*", "b", "b*", "S", "s", "n"):
            if pts and t != "n":
                out.append({"op": t, "fill": fill, "stroke": stroke, "pts": pts})
            pts = []
        args = []
    del stack
    return out


def rows(drawn: list[dict]) -> list[dict]:
    grid = [p for p in drawn if p["op"] == "S" and p["stroke"] == GRID and len(p["pts"]) == 2]
    flat = [p for p in grid if abs(p["pts"][0][1] - p["pts"][1][1]) < 1e-3]
    top = max(p["pts"][0][1] for p in flat)
    # the top row's panels: grid lines within one panel height of the highest one
    panels: dict[float, list[float]] = {}
    for p in flat:
        if top - p["pts"][0][1] < 60:  # a panel is 54 points high, the rows 103 apart
            panels.setdefault(round(min(p["pts"][0][0], p["pts"][1][0]), 1), []).append(p["pts"][0][1])
    lefts = sorted(panels)[:4]
    assert len(lefts) == 4 and all(len(panels[x]) == 5 for x in lefts), {x: len(v) for x, v in panels.items()}
    markers = [p for p in drawn if p["op"] in ("B", "f") and p["fill"] in COLOURS]
    out = []
    for p in drawn:
        if p["op"] != "S" or p["stroke"] not in COLOURS or len(p["pts"]) != len(BATCHES):
            continue
        x0, y0 = p["pts"][0]
        panel = max((x for x in lefts if x <= x0 + 1), default=None)
        ys = sorted(panels[panel]) if panel is not None else []
        if not ys or not ys[0] - 5 <= y0 <= ys[-1] + 5:
            continue  # a lower row's curve (Llama-3-70B, Qwen3-8B)
        step = (ys[-1] - ys[0]) / 4
        assert all(abs(ys[i] - ys[0] - i * step) < 0.01 for i in range(5)), ys
        kind = COLOURS[p["stroke"]]
        k = 3
        if kind == "ngram":  # a marker at the first vertex: 4 points a square (Fixed-3), more a circle (Fixed-5)
            near = [m for m in markers if m["fill"] == p["stroke"]
                    and abs(sum(q[0] for q in m["pts"]) / len(m["pts"]) - x0) < 0.8
                    and abs(sum(q[1] for q in m["pts"]) / len(m["pts"]) - y0) < 0.8]
            assert near, (panel, kind)
            k = 3 if len(near[0]["pts"]) <= 5 else 5
        for b, (_x, y) in zip(BATCHES, p["pts"], strict=True):
            out.append({"workload": WORKLOADS[lefts.index(panel)], "drafter": kind, "k": k, "batch": b,
                        "speedup": round(1.0 + 0.25 * (y - ys[0]) / step, 3)})
    return out


def main(path: str) -> None:
    got = rows(paths(content(path)))
    # 4 panels x (n-gram K=3, EAGLE, EAGLE-3) + InstructCoder's n-gram K=5, 4 batches each
    assert len(got) == (4 * 3 + 1) * 4, len(got)
    at = {(r["workload"], r["drafter"], r["k"], r["batch"]): r["speedup"] for r in got}
    assert round(at["GSM8K", "eagle", 3, 128], 2) == 1.21, "the blog's printed 1.21x (EAGLE, GSM8K, batch 128)"
    for r in got:
        print(json.dumps(r))


if __name__ == "__main__":
    main(sys.argv[1])
