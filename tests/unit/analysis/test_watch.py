"""specnb watch's verdicts and specnb alerts' rules, on the committed demo run and on hand-made
windows: each verdict where it must come, the threshold carried into running requests between
the measured levels, one-line refusals, and promtool (Debian's prometheus) checking and testing
every rule file the command writes."""

from __future__ import annotations

import shutil
import subprocess
from dataclasses import replace

import pytest
import yaml

from specnb import paths
from specnb.analysis.alerts import AlertsError, check_selector, rule_groups, threshold_of
from specnb.analysis.pairing import AnalysisError
from specnb.analysis.watch import Verdict, WindowStats, expectation, judge
from specnb.cli import main
from specnb.ledger.records import load_run
from tests.conftest import require
from tests.hang import guard

DEMO = paths.LEDGERS / "concurrency" / "cpu-demo" / "20261201T184823Z"
PROMTOOL = shutil.which("promtool") or "/usr/bin/promtool"


@pytest.fixture(scope="module")
def demo():
    return expectation(load_run(DEMO).df, "demo")


def _w(running=3.0, drafts=100.0, draft_tokens=400.0, accepted=340.0, out=1000.0, seconds=60.0):
    return WindowStats(seconds, drafts, draft_tokens, accepted, out, running, 0.0, 4)


def test_the_demo_runs_answer_in_running_requests(demo):
    assert demo.arm == "ngram-k4" and demo.workload == "copy" and demo.k == 4 and demo.kind == "crosses"
    placed = {lv.concurrency: lv.running for lv in demo.levels}
    below = max(c for c, lv in zip(placed, demo.levels, strict=True) if lv.speedup > 1)
    # the crossing lies between the last level that paid and the next, in the batch the server ran
    assert placed[8] < demo.threshold_running < placed[32] and below >= 8
    assert 0 < demo.acceptance_floor <= demo.acceptance_rate < 1


@pytest.mark.parametrize("window,verdict", [
    (dict(running=1.0), Verdict.PAYS),
    (dict(running=20.0), Verdict.ABOVE_THRESHOLD),
    (dict(accepted=200.0), Verdict.ACCEPTANCE_FELL),
    (dict(drafts=0.0, draft_tokens=0.0, accepted=0.0), Verdict.SPEC_OFF),
    (dict(running=0.0, drafts=0.0, draft_tokens=0.0, accepted=0.0, out=0.0), Verdict.IDLE),
    (dict(accepted=200.0, draft_tokens=40.0, drafts=10.0), Verdict.PAYS),  # too few drafts to judge acceptance
])
def test_each_verdict_where_it_must_come(demo, window, verdict):
    got, why = judge(_w(**window), demo)
    assert got == verdict, why


def test_verdicts_exit_as_cron_reads_them(demo):
    assert judge(replace(_w(), drafts=None), demo)[0] == Verdict.UNKNOWN  # no speculative metrics
    assert judge(_w(), None)[0] == Verdict.UNKNOWN
    assert [v.exit_status for v in (Verdict.PAYS, Verdict.IDLE, Verdict.ABOVE_THRESHOLD, Verdict.UNKNOWN)] == [0, 0, 1, 2]


def test_a_run_without_a_drafter_arm_is_refused(demo):
    df = load_run(DEMO).df
    with pytest.raises(AnalysisError, match="no drafter arm"):
        expectation(df[df["arm"] == "baseline"], "demo")
    with pytest.raises(AnalysisError, match="no drafter arm 'eagle'"):
        expectation(df, "demo", arm="eagle")


def test_selectors_are_label_matchers():
    assert check_selector('{job="vllm", instance=~"10\\\\..*"}') == 'job="vllm",instance=~"10\\\\..*"'
    for bad in ("job=vllm", 'job="a" or 1', '"x"="y"'):
        with pytest.raises(AlertsError):
            check_selector(bad)


def test_alerts_cli_refuses_bad_input_in_one_line(tmp_path, capsys):
    assert main(["alerts", str(DEMO), "--out", str(tmp_path), "--selector", "job=vllm"]) == 2
    assert main(["alerts", str(tmp_path / "none"), "--out", str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 2 and "label matcher" in err[0] and "no such run folder" in err[1]
    assert not list(tmp_path.glob("*.yml"))


def test_promtool_accepts_the_rules_and_each_alert_fires_on_its_series(tmp_path, demo):
    require(shutil.which("promtool") is not None, "promtool", "make prometheus installs Debian's prometheus")
    assert main(["alerts", str(DEMO), "--out", str(tmp_path / "out"), "--selector", 'job="vllm"']) == 0
    (rules,) = (tmp_path / "out").glob("*.rules.yml")
    check = subprocess.run([PROMTOOL, "check", "rules", str(rules)], capture_output=True, text=True, timeout=guard("child_start"))
    assert check.returncode == 0, check.stdout + check.stderr
    th, _ = threshold_of(demo)
    # the same rules with a 1m window and 2m hold, fed series a minute apart: each alert fires on the
    # series made for it and on no other (promtool test rules)
    fast = tmp_path / "fast.rules.yml"
    fast.write_text(yaml.safe_dump(rule_groups(demo, 'job="vllm"', window_s=60, for_s=120)))
    lab = 'job="vllm"'

    def series(running, drafts_per_min, accepted_per_min):
        return [{"series": f'vllm:num_requests_running{{{lab}}}', "values": f"{running}x30"},
                {"series": f'vllm:spec_decode_num_drafts_total{{{lab}}}', "values": f"0+{drafts_per_min / 4}x30"},
                {"series": f'vllm:spec_decode_num_draft_tokens_total{{{lab}}}', "values": f"0+{drafts_per_min}x30"},
                {"series": f'vllm:spec_decode_num_accepted_tokens_total{{{lab}}}',
                 "values": f"0+{accepted_per_min}x30"}]

    good = demo.acceptance_rate * 4000
    loaded = round(th * 2, 1)
    cases = [("healthy", series(1, 4000, good), []),
             ("loaded", series(loaded, 4000, good), ["SpecDecodeAboveThreshold"]),
             ("traffic changed", series(1, 4000, 0.3 * 4000), ["SpecDecodeAcceptanceLow"]),
             ("spec off", series(2, 0, 0), ["SpecDecodeNoDrafts"])]
    rendered = {'{{ $value | printf "%.1f" }}': f"{loaded:.1f}", "{{ $value | humanizePercentage }}": "30%"}
    annotations = {}
    for rule in rule_groups(demo, lab)["groups"][0]["rules"]:
        if "alert" in rule:  # what each alert says, its $value rendered as the series make it
            ann = dict(rule["annotations"])
            for k, v in ann.items():
                for tmpl, value in rendered.items():
                    v = v.replace(tmpl, value)
                ann[k] = v
            annotations[rule["alert"]] = ann
    labels = {"severity": "warning", "specnb_run": "demo", "specnb_arm": "ngram-k4", "specnb_workload": "copy"}
    tests = {"rule_files": [fast.name], "evaluation_interval": "1m", "tests": [
        {"name": name, "interval": "1m", "input_series": s, "alert_rule_test": [
            {"eval_time": "10m", "alertname": a,
             "exp_alerts": [{"exp_labels": labels, "exp_annotations": ann}] if a in firing else []}
            for a, ann in annotations.items()]}
        for name, s, firing in cases]}
    spec = tmp_path / "alerts.test.yml"
    spec.write_text(yaml.safe_dump(tests))
    run = subprocess.run([PROMTOOL, "test", "rules", spec.name], capture_output=True, text=True, timeout=guard("child_start"),
                         cwd=tmp_path)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-2000:]


@pytest.mark.parametrize("model,root,k,refusal", [
    ("smollm2-135m", None, 4, None),  # the run's served name
    ("smol", "/srv/models/SmolLM2-135M-Instruct", 4, None),  # the same checkpoint under another name
    ("llama", "/srv/models/Llama-3.2-1B", 4, "serves llama (Llama-3.2-1B); the run measured smollm2-135m "
                                             "(SmolLM2-135M-Instruct): measure this model first"),
    ("smollm2-135m", None, 3, "drafts 3 token(s) per step; the run's ngram-k4 drafts 4"),
])
def test_an_endpoint_is_held_against_the_run_only_when_it_serves_what_the_run_measured(
        model, root, k, refusal, capsys):
    from tests.unit.fakevllm import FakeVllm, spec_metrics

    with FakeVllm(model=model, root=root, metrics=spec_metrics(k)) as url:
        rc = main(["watch", url, "--run", str(DEMO), "--once", "--window", "0.2", "--interval", "0.1", "--json"])
    out, err = capsys.readouterr()
    if refusal is None:
        assert rc == 0 and '"verdict": "idle"' in out and not err.strip(), (out, err)
    else:
        lines = err.strip().splitlines()
        assert rc == 2 and len(lines) == 1 and refusal in lines[0] and not out.strip(), (out, err)


def test_a_window_holds_the_spread_of_the_runs_requests_not_only_the_binomial(demo):
    # the demo's requests differ by prompt: their acceptance varies more per draft token than
    # independent tokens would (the binomial p(1-p)), so a short window needs a wider margin
    binomial = demo.acceptance_floor * (1 - demo.acceptance_floor)
    assert demo.acceptance_var_per_token is not None and demo.acceptance_var_per_token > 2 * binomial
    assert demo.acceptance_margin(400) > 2 * (binomial / 400) ** 0.5
    # a window whose acceptance is inside the run's request-level spread: not a fall
    d = 400.0
    inside = demo.acceptance_floor - 0.8 * demo.acceptance_margin(d)
    assert judge(_w(draft_tokens=d, accepted=inside * d), demo)[0] == Verdict.PAYS
    outside = demo.acceptance_floor - 1.2 * demo.acceptance_margin(d)
    assert judge(_w(draft_tokens=d, accepted=outside * d), demo)[0] == Verdict.ACCEPTANCE_FELL


def _log_line(t: int, verdict: str, running: float, rate: float, tokens: float = 600.0, **kw) -> str:
    import json

    return json.dumps({"time": f"2026-12-04T08:{t // 60:02d}:{t % 60:02d}+00:00", "verdict": verdict, "why": "",
                       "running_mean": running, "acceptance_rate": rate, "draft_tokens": tokens,
                       "run": str(DEMO.relative_to(paths.ROOT)), "arm": "ngram-k4", "workload": "copy", **kw})


def test_a_watch_log_is_drawn_against_the_runs_bands(tmp_path, capsys):
    import json

    log = tmp_path / "Watch Log.jsonl"
    lines = [_log_line(10 * i, "pays", 3.0, 0.87) for i in range(6)]
    lines += [_log_line(60 + 10 * i, "above_threshold", 20.0, 0.86) for i in range(6)]
    lines += ["watching ... (a status line a tee caught)"]
    lines += [_log_line(120 + 10 * i, "acceptance_fell", 7.0, 0.55) for i in range(6)]
    log.write_text("\n".join(lines) + "\n")
    assert main(["watch-plot", str(log), "--out", str(tmp_path / "fig")]) == 0
    written = sorted(p.name for p in (tmp_path / "fig").iterdir())
    assert written == ["watch-watch-log.json", "watch-watch-log.png", "watch-watch-log.svg"], written
    side = json.loads((tmp_path / "fig" / "watch-watch-log.json").read_text())
    assert side["source_files"] > 2 and "ngram-k4 on copy" in side["caption"]
    svg = (tmp_path / "fig" / "watch-watch-log.svg").read_text()
    for label in ("threshold 12.6 running", "lowest point 85%", "acceptance_fell", "above_threshold"):
        assert label in svg, label


def test_watch_plot_refuses_what_it_cannot_draw_in_one_line(tmp_path, capsys):
    bad = tmp_path / "bad.jsonl"
    cases = {"missing.jsonl": "cannot read the log", "bad.jsonl": "bad.jsonl:2: not a JSON line",
             "empty.jsonl": "no specnb watch --json lines", "two.jsonl": "names 2 runs"}
    bad.write_text(_log_line(0, "pays", 1.0, 0.9) + "\n{not json\n")
    (tmp_path / "empty.jsonl").write_text('{"verdict": "idle"}\n')
    (tmp_path / "two.jsonl").write_text(_log_line(0, "pays", 1.0, 0.9) + "\n"
                                        + _log_line(10, "pays", 1.0, 0.9, run="ledgers/elsewhere") + "\n")
    for name, said in cases.items():
        assert main(["watch-plot", str(tmp_path / name)]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and said in err[0], (name, err)
    assert not list(tmp_path.glob("*.svg"))


# --------------------------------------------------------------------------- against a break-even map

def _line(floor1=1.6, where1="inside"):
    from specnb.analysis.breakeven import BreakEvenLine, MapLevel

    return BreakEvenLine(run="map", kind="ngram(prompt_lookup_max=4)", k=4, workload="copy", levels=[
        MapLevel(1, 1.0, floor1, where1, None, floor1, None),  # floor: the band's lower end
        MapLevel(4, 3.9, 4.5, "above", None, None, None)])  # every cell's interval below 1.0 up to 4.5


@pytest.mark.parametrize("window,verdict", [
    (dict(running=1.0, drafts=200.0, draft_tokens=800.0, accepted=640.0), Verdict.PAYS),  # 4.2 >> 1.6
    (dict(running=4.0, drafts=1000.0, draft_tokens=4000.0, accepted=3200.0), Verdict.BELOW_BREAK_EVEN),  # 4.2 < 4.5
    (dict(running=4.0, drafts=200.0, draft_tokens=800.0, accepted=640.0), Verdict.PAYS),  # 4.2 within 0.34 of 4.5
    (dict(running=4.0, drafts=20.0, draft_tokens=80.0, accepted=64.0), Verdict.PAYS),  # too few drafts to judge
    (dict(running=3.0, drafts=200.0, draft_tokens=800.0, accepted=640.0), Verdict.PAYS),  # 3.6 between the levels
    (dict(running=3.0, drafts=1000.0, draft_tokens=4000.0, accepted=2000.0), Verdict.BELOW_BREAK_EVEN),  # 3.0 < 3.6
    (dict(running=6.0, drafts=200.0, draft_tokens=800.0, accepted=640.0), Verdict.PAYS),  # past the map: unmeasured
])
def test_a_window_is_judged_against_the_break_even_at_its_load(demo, window, verdict):
    got, why = judge(_w(**window), demo, _line())
    assert got == verdict, why
    if verdict == Verdict.BELOW_BREAK_EVEN:
        assert "below break-even at this load: acceptance length" in why and "below which the map's cells lose" in why
    else:
        assert "map: " in why


def test_the_break_even_is_read_between_the_levels_around_the_windows_load():
    line = _line()
    assert line.at(1.0) == (1.6, "c=1") and line.at(0.85) == (1.6, "c=1")  # from 0.8 x the first level's batch
    floor, where = line.at(2.45)
    assert floor == pytest.approx(1.6 + 1.45 * 2.9 / 2.9) and where == "between c=1 and c=4"
    assert line.at(4.5) == (4.5, "c=4") and line.at(0.7) is None and line.at(5.9) is None  # 1.5 x 3.9 = 5.85
    assert _line(floor1=None, where1="below").at(2.0) == (None, "c=1")  # pays at every length there


def test_the_break_even_margin_is_the_widest_a_bounded_count_allows():
    line = _line()
    # accepted per draft in [0, 4] with mean 3.2: variance at most 3.2 * 0.8 (Bhatia-Davis)
    assert line.margin(4.2, 100) == pytest.approx(3.0 * (3.2 * 0.8 / 100) ** 0.5)
    assert line.margin(1.0, 100) == 0.0 and line.margin(5.0, 100) == 0.0


def test_promtool_fires_the_break_even_alert_only_below_the_map_at_a_measured_load(tmp_path, demo):
    require(shutil.which("promtool") is not None, "promtool", "make prometheus installs Debian's prometheus")
    lab = 'job="vllm"'
    groups = rule_groups(demo, lab, window_s=60, for_s=120, line=_line())
    rules = tmp_path / "map.rules.yml"
    rules.write_text(yaml.safe_dump(groups))
    check = subprocess.run([PROMTOOL, "check", "rules", str(rules)], capture_output=True, text=True,
                           timeout=guard("child_start"))
    assert check.returncode == 0, check.stdout + check.stderr
    (alert,) = [r for r in groups["groups"][0]["rules"] if r.get("alert") == "SpecDecodeBelowBreakEven"]

    def series(running, drafts_per_min, length):
        return [{"series": f'vllm:num_requests_running{{{lab}}}', "values": f"{running}x30"},
                {"series": f'vllm:spec_decode_num_drafts_total{{{lab}}}', "values": f"0+{drafts_per_min}x30"},
                {"series": f'vllm:spec_decode_num_draft_tokens_total{{{lab}}}', "values": f"0+{drafts_per_min * 4}x30"},
                {"series": f'vllm:spec_decode_num_accepted_tokens_total{{{lab}}}',
                 "values": f"0+{drafts_per_min * (length - 1)}x30"}]

    cases = [("pays at c=1", series(1, 1000, 4.2), None), ("below at c=4", series(4, 1000, 4.2), 4.2),
             ("too few drafts", series(4, 20, 4.2), None), ("past the map", series(10, 1000, 4.2), None),
             ("within the margin", series(4, 100, 4.2), None), ("low but at c=1", series(1.2, 1000, 1.3), 1.3)]
    labels = {"severity": "warning", "specnb_run": "demo", "specnb_arm": "ngram-k4", "specnb_workload": "copy",
              "specnb_map": "map"}

    def said(value):  # the annotations with $value rendered as the series make it
        tmpl = '{{ $value | printf "%.2f" }}'
        return {k: v.replace(tmpl, f"{value:.2f}") for k, v in alert["annotations"].items()}

    tests = {"rule_files": [rules.name], "evaluation_interval": "1m", "tests": [
        {"name": name, "interval": "1m", "input_series": s, "alert_rule_test": [
            {"eval_time": "10m", "alertname": "SpecDecodeBelowBreakEven",
             "exp_alerts": [{"exp_labels": labels, "exp_annotations": said(fires)}] if fires else []}]}
        for name, s, fires in cases]}
    spec = tmp_path / "map.test.yml"
    spec.write_text(yaml.safe_dump(tests))
    run = subprocess.run([PROMTOOL, "test", "rules", spec.name], capture_output=True, text=True,
                         timeout=guard("child_start"), cwd=tmp_path)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-2000:]
    assert "c=4 (3.9 running): 4.50 (every cell loses up to it)" in alert["annotations"]["description"]


def test_a_run_that_paid_everywhere_says_measure_past_its_top_never_turn_off(demo):
    paid = replace(demo, kind="above", threshold_running=None)
    names = {r.get("alert"): r for r in rule_groups(paid)["groups"][0]["rules"]}
    assert "SpecDecodeAboveThreshold" not in names
    unmeasured = names["SpecDecodeUnmeasuredLoad"]["annotations"]
    assert "nobody measured this one" in unmeasured["description"]
    assert "turn the drafter off" not in unmeasured["description"].lower()
    assert "unmeasured" in unmeasured["summary"]


MAP = paths.LEDGERS / "map" / "cpu" / "20261206T103239Z"


def test_the_committed_map_gives_the_served_drafters_line_in_running_requests(demo):
    from specnb.commands.watch import load_map_line

    line = load_map_line(MAP, demo)  # the demo's ngram-k4: the map's n-gram kind at K=4
    assert (line.kind, line.k, line.workload) == ("ngram(prompt_lookup_max=4)", 4, "copy")
    c1, c4 = sorted(line.levels, key=lambda lv: lv.concurrency)
    assert 0 < c1.running < c4.running <= 4  # a closed loop's batch: at most its concurrency
    assert c1.where == c4.where == "inside" and c1.break_even < c4.break_even  # the break-even rises with load
    # the floor is the band's lower end: at c=1 no cell is shown to lose (the band starts below the cells)
    assert c1.floor is None and c4.floor == c4.band_lo and 2.0 < c4.floor < c4.break_even


def test_a_map_that_cannot_judge_the_served_drafter_is_refused_in_one_line(tmp_path, capsys, demo):
    head = replace(demo, speculative_config={"method": "eagle3", "model": "x/other-head", "num_speculative_tokens": 3})
    from specnb.commands.watch import load_map_line
    from specnb.errors import SpecnbError

    with pytest.raises(SpecnbError, match=r"no curve for eagle3:other-head at K=3 \(it has: eagle3:SmolLM2"):
        load_map_line(MAP, head)
    assert main(["alerts", str(DEMO), "--out", str(tmp_path), "--map", str(tmp_path / "none")]) == 2
    assert main(["watch", "http://127.0.0.1:9", "--map", str(MAP), "--once"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 2 and "--map" in err[0] and "no such run folder" in err[0] and "--map needs --run" in err[1]
    assert not list(tmp_path.glob("*.yml"))
