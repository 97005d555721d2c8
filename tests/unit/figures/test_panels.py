import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import pandas as pd  # noqa: E402
import pytest  # noqa: E402

from specnb.figures import panels  # noqa: E402


def _norm(values):
    fig, ax = plt.subplots()
    panels.heatmap(ax, pd.DataFrame([values], columns=range(len(values))))
    norm = ax.images[0].norm
    plt.close(fig)
    return norm


def test_heatmap_colours_are_symmetric_in_ratio_around_one():
    norm = _norm([0.99, 1.8])
    assert norm(0.99) == pytest.approx(0.5, abs=0.02)  # barely below 1: pale, not the darkest red
    assert norm(1 / 1.8) == pytest.approx(1 - norm(1.8), abs=1e-6)  # 0.56x as saturated as 1.8x
    norm = _norm([0.5, 1.1])
    assert norm(0.5) == pytest.approx(0.0) and norm(1.1) < 0.6
