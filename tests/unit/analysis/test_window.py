"""The steady window, defined once: from the last slot's first send to the first slot's last end,
for the load driver's records and for a sidecar read again (old sidecars name the slot worker)."""

from __future__ import annotations

import pandas as pd

from specnb.analysis.window import frame_window, slot_column, steady_window


def test_the_window_is_where_every_slot_is_busy():
    # slot 0: 0-1, 1-2.5; slot 1: 0.2-1.5, 1.5-2.0 -> all busy from 0.2 until slot 1 ran out at 2.0
    assert steady_window([0, 0, 1, 1], [0.0, 1.0, 0.2, 1.5], [1.0, 2.5, 1.5, 2.0], 2) == (0.2, 2.0)


def test_no_window_when_fewer_slots_sent_than_the_concurrency_or_it_is_empty():
    assert steady_window([0, 0], [0.0, 1.0], [1.0, 2.0], 2) is None  # c=2, one slot ever sent
    assert steady_window([0, 1], [0.0, 3.0], [1.0, 4.0], 2) is None  # slot 0 done before slot 1 began
    assert steady_window([], [], [], 1) is None


def test_a_sidecar_reads_the_same_window_and_falls_back_to_the_wall_clock():
    req = pd.DataFrame({"slot": [0, 0, 1, 1], "start_s": [0.0, 1.0, 0.2, 1.5], "end_s": [1.0, 2.5, 1.5, 2.0]})
    assert frame_window(req, 2) == (0.2, 2.0)
    old = req.rename(columns={"slot": "worker"})  # sidecars written before 2026-12-01
    assert slot_column(old) == "worker" and frame_window(old, 2) == (0.2, 2.0)
    open_loop = req.assign(scheduled_s=[0.0, 0.5, 1.0, 1.5])  # an open loop has no steady window
    assert frame_window(open_loop, 2) == (0.0, 2.5)
    assert frame_window(req, 4) == (0.0, 2.5)  # c=4 never reached: the wall clock
