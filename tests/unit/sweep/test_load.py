"""A sweep's load read from its flat keys into one profile per mode (specnb.sweep.load): the
levels, file names, sizing, identity, ledger shape and driver shape each mode gives."""

from __future__ import annotations

import pytest

from specnb.engine.loadgen import ClosedLoop, ConversationReplay, OpenLoop
from specnb.ledger import LoadMode, LoadShape
from specnb.sweep import SweepSpec
from specnb.sweep.load import ConcurrencyLoad, ConversationLoad, RateLoad, profile_of
from specnb.sweep.spec import level_tag

ARMS = [{"name": "baseline"}, {"name": "ngram-k4",
                               "speculative_config": {"method": "ngram", "num_speculative_tokens": 4}}]


def spec(**kw) -> SweepSpec:
    return SweepSpec.parse({"name": "t", "model": "some/hub-id", "arms": ARMS, **kw})


def test_the_flat_keys_a_sweep_file_writes_become_its_modes_profile():
    closed = spec(concurrency=[4, 1]).load
    assert isinstance(closed, ConcurrencyLoad) and closed.levels() == [1, 4] and closed.mode is LoadMode.CONCURRENCY
    rate = spec(load="rate", rates=[2, 0.5], burstiness=0.5, max_in_flight=8, arrival_seed=3).load
    assert isinstance(rate, RateLoad) and rate.levels() == [0.5, 2.0]
    assert (rate.burstiness, rate.max_in_flight, rate.arrival_seed) == (0.5, 8, 3)
    conv = spec(load="conversation", concurrency=[2], history="model", think_time_s=1.5,
                workloads=[{"conversations": "edit-chat"}]).load
    assert isinstance(conv, ConversationLoad) and conv.levels() == [2]
    assert (conv.history, conv.think_time_s) == ("model", 1.5)
    assert profile_of("rate") is RateLoad and profile_of(LoadMode.CONVERSATION) is ConversationLoad


def test_each_mode_names_its_levels_sizes_its_points_and_keeps_its_identity_keys():
    assert [level_tag(8), level_tag(0.5, "rate"), level_tag(4, LoadMode.CONVERSATION)] == ["c008", "rate0.5", "u004"]
    rate = spec(load="rate", rates=[1.0], work_floor_tokens=100)
    assert rate.passes(10, 64, 50.0) == 2  # at least 20 arrivals, whatever the work floor
    assert spec(concurrency=[1], work_floor_tokens=100).passes(10, 4, 50.0) == 1
    closed = spec(concurrency=[1]).identity()
    assert "history" not in closed and "think_time_s" not in closed  # runs from before these keys resume
    conv = spec(load="conversation", concurrency=[2], workloads=[{"conversations": "edit-chat"}]).identity()
    assert conv["history"] is None and conv["think_time_s"] == 0.0


def test_each_mode_gives_the_ledger_its_shape_and_the_driver_its_point():
    closed = spec(concurrency=[4], client_workers=2)
    assert closed.load.shape(4, client_workers=2) == LoadShape(mode="closed", concurrency=4, client_workers=2)
    assert closed.load.point(4, 40, prompt_offset=3) == ClosedLoop(4, 40, 3)
    rate = spec(load="rate", rates=[0.5], max_in_flight=8).load
    assert rate.shape(0.5) == LoadShape(mode="rate", rate_rps=0.5, burstiness=1.0, max_in_flight=8, arrival_seed=0)
    assert rate.point(0.5, 30) == OpenLoop(0.5, 30, 1.0, 8, 0)
    conv = spec(load="conversation", concurrency=[2], think_time_s=0.5,
                workloads=[{"conversations": "edit-chat"}]).load
    assert conv.shape(2, history="recorded", conversations=6) == LoadShape(
        mode="conversation", concurrency=2, users=2, history="recorded", think_time_s=0.5, conversations=6)
    assert conv.point(2, 6, history="model") == ConversationReplay(2, 6, "model", 0.5)


@pytest.mark.parametrize("change, needle", [
    ({"load": "rate", "rates": [1.0], "concurrency": [2]}, "give rates, not concurrency levels"),
    ({"load": "rate"}, "needs request rates"),
    ({"rates": [1.0]}, "needs concurrency levels"),
    ({"concurrency": [1], "rates": [1.0]}, "rates are open-loop levels"),
    ({"concurrency": [1], "think_time_s": 1.0}, "conversation settings"),
    ({"load": "conversation", "concurrency": [1]}, "replays conversation sets only"),
])
def test_a_mode_refuses_the_other_modes_keys_in_one_line(change, needle):
    with pytest.raises(Exception, match=needle):
        spec(**change)


def test_an_open_loop_ledger_keeps_its_cap_as_max_in_flight_and_the_frame_reads_old_and_new_alike(tmp_path):
    from types import SimpleNamespace

    from specnb.ledger import Provenance, load_ledgers, write_ledger
    from specnb.prompts.workload import Prompt, Workload
    from specnb.sweep.ledgers import PointSize, RunFacts, point_fields
    from tests.unit.factories import ledger

    rate = spec(load="rate", rates=[0.5], max_in_flight=8)
    wl = Workload(name="copy", source="test", prompts=[Prompt(id="p0", category="copy", messages=[])])
    place = SimpleNamespace(point_id="baseline/copy/rate0.5-r0", arm=rate.arms[0], workload=wl, level=0.5,
                            load="rate", repeat=0, position=0, round=0, reason="")
    size = PointSize(panel=wl.prompts, in_flight=8, num_requests=20, tokens_per_request=None)
    run = RunFacts(Provenance(git_sha="abc", git_dirty=False, versions={}, hardware={}))
    fields = point_fields(rate, place, size, run)
    assert fields["concurrency"] is None and fields["load"].max_in_flight == 8  # the cap under its own name
    closed = point_fields(spec(concurrency=[4]), SimpleNamespace(**{**vars(place), "load": "concurrency", "level": 4}),
                          PointSize(panel=wl.prompts, in_flight=4, num_requests=8, tokens_per_request=None), run)
    assert closed["concurrency"] == 4
    # an old open-loop ledger (the cap as its concurrency) and a new one read the same in a frame
    shape = LoadShape(mode="rate", rate_rps=0.5, burstiness=1.0, max_in_flight=8, arrival_seed=0)
    old = ledger(c=8, r=0).model_copy(update={"load": shape})
    new = ledger(c=8, r=1).model_copy(update={"load": shape, "concurrency": None})
    assert new.in_flight == 8 and old.in_flight == 8
    write_ledger(tmp_path / "old.json", old)
    write_ledger(tmp_path / "new.json", new)
    df = load_ledgers(tmp_path)
    assert list(df["concurrency"]) == [8, 8] and list(df["rate_rps"]) == [0.5, 0.5]
    with pytest.raises(Exception, match="concurrency is required"):
        type(old).model_validate({**old.model_dump(), "concurrency": None, "load": None})


def test_an_open_loop_sweep_against_the_fake_engine_writes_its_cap_under_its_own_name(fake_vllm, tmp_path):
    from specnb.ledger import load_ledgers, read_ledger
    from specnb.sweep import run_sweep

    s = SweepSpec.parse(dict(
        name="rate", model=str(fake_vllm.model), served_model_name="fake", load="rate", rates=[50.0],
        max_in_flight=3, arrival_seed=2, workloads=["copy"], repeats=1, panel_size=4, work_floor_tokens=0,
        warmup_requests=0, request_timeout_s=5, metrics_interval_s=0.05, ready_timeout_s=30,
        sampling={"max_tokens": 4}, env={"FAKE_VLLM_STATE": str(fake_vllm.state)}, arms=[{"name": "baseline"}]))
    out = run_sweep(s, tmp_path / "out", progress=False, echo=lambda _line: None)
    assert out.ok and [p.name for p in out.written] == ["rate50-r00.json"]
    led = read_ledger(out.written[0])
    assert led.concurrency is None and led.load.max_in_flight == 3 and led.in_flight == 3
    assert led.load.rate_rps == 50.0 and led.num_requests >= 20  # at least MIN_ARRIVALS arrivals
    df = load_ledgers(tmp_path / "out")
    assert list(df["concurrency"]) == [3] and list(df["load_mode"]) == ["rate"]  # the frame as before


def test_the_load_is_one_field_its_profile_and_a_dump_writes_the_flat_keys_again():
    rate = spec(load="rate", rates=[2, 0.5], max_in_flight=8)
    assert isinstance(rate.load, RateLoad) and set(type(rate).model_fields) & {"rates", "concurrency"} == set()
    dumped = rate.model_dump(mode="json")
    assert dumped["load"] == "rate" and dumped["rates"] == [0.5, 2.0] and dumped["concurrency"] == []
    assert SweepSpec.parse(dumped) == rate  # a run's sweep.json reads back to the same sweep
    only = rate.model_dump(include={"name", "load", "max_in_flight"})
    assert only == {"name": "t", "load": "rate", "max_in_flight": 8}
    assert "rates" not in rate.model_dump(exclude={"rates"})


def test_a_closed_loop_run_recorded_with_an_open_loop_setting_still_resumes(tmp_path, monkeypatch):
    """Studies once passed max_in_flight to every sweep, and a closed loop's identity held it; the
    profile now drops it, so a folder whose sweep.json recorded it (its hash over the old
    identity) is still the same sweep, on this machine's dtype only."""
    import json

    import specnb.sweep.ledgers as ledgers
    from specnb.prompts.workload import Prompt, Workload

    wl = Workload(name="copy", source="test", prompts=[Prompt(id="p0", category="copy", messages=[])])
    args = ["--dtype", "machine"]
    s = spec(concurrency=[1, 2], workloads=["copy"], server_args=args, max_in_flight=32)
    hashes = {"copy": wl.content_hash}
    # the folder as the code before the profiles wrote it: max_in_flight 32 in its spec and identity
    old = {"identity_hash": ledgers.identity_digest(s, hashes, {"max_in_flight": 32}),
           "spec": {**s.model_dump(mode="json"), "max_in_flight": 32}, "workloads": {"copy": wl.describe()}}
    (tmp_path / "sweep.json").write_text(json.dumps(old))
    digest = ledgers.sweep_record(tmp_path, s, {"copy": wl})
    assert digest == ledgers.identity_digest(s, hashes) != old["identity_hash"]  # what a Ray node computes
    with pytest.raises(Exception, match="holds a sweep with different settings"):  # another setting: refused
        ledgers.sweep_record(tmp_path, spec(concurrency=[1, 2], workloads=["copy"], server_args=args,
                                            warmup_requests=0), {"copy": wl})
    # begun on a CPU family whose machine dtype is another: still refused
    monkeypatch.setattr(ledgers.kernels, "resolve_dtype", lambda a: [x.replace("machine", "other") for x in a])
    with pytest.raises(Exception, match="holds a sweep with different settings"):
        ledgers.sweep_record(tmp_path, s, {"copy": wl})


def test_a_foreign_key_is_checked_as_its_mode_checks_it_and_a_copy_cannot_set_a_flat_key():
    with pytest.raises(Exception, match=r"burstiness: Input should be greater than 0 \(got 0\)"):
        spec(concurrency=[1], burstiness=0)
    with pytest.raises(Exception, match=r"history: Input should be 'recorded' or 'model' \(got 'bogus'\)"):
        spec(concurrency=[1], history="bogus")
    assert spec(concurrency=[1], max_in_flight=32).load == spec(concurrency=[1]).load  # ignored where unused
    with pytest.raises(TypeError, match="the load is one field"):
        spec(concurrency=[1]).model_copy(update={"concurrency": [4]})
