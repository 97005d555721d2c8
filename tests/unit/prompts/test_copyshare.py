"""Copy share on constructed examples with known answers, the classifier, and the mix-weighted estimate."""

from __future__ import annotations

import json

import pandas as pd
import pytest

from specnb import paths
from specnb.analysis.mix import category_speedups, expected_speedup
from specnb.analysis.pairing import paired
from specnb.prompts.copyshare import (
    COPY_STYLE,
    FREE_FORM,
    MixError,
    classify,
    copy_share,
    format_mix,
    load_tokenizer,
    lookup_range,
    measure_mix,
    word_tokenizer,
)
from specnb.prompts.workload import Prompt, Workload
from tests.unit.factories import ledger

W = word_tokenizer()


def share(prompt, response, lo, hi=None):
    segs = [W.encode(p) for p in ([prompt] if isinstance(prompt, str) else prompt)]
    return copy_share(segs, W.encode(response), lo, hi)


def test_word_tokens():
    assert W.encode("Fix it, now!  {a:1}") == ["Fix", "it", ",", "now", "!", "{", "a", ":", "1", "}"]


def test_a_copied_span_counts_from_its_n_plus_first_token():
    # response x a b c d z; prompt a b c d e; n = 2: 'c' continues (a b) and 'd' continues (b c)
    cs = share("a b c d e", "x a b c d z", 2)
    assert (cs.tokens, cs.copied, cs.copied_from_prompt) == (6, 2, 2)
    assert cs.share == pytest.approx(2 / 6) and cs.prompt_share == pytest.approx(2 / 6)


def test_repeating_itself_counts_only_with_the_response_as_context():
    cs = share("zzz", "p q r p q r", 2)
    # only the last 'r': (p q r) already ended at position 2; nothing continues the prompt
    assert (cs.copied, cs.copied_from_prompt) == (1, 0)
    assert cs.share == pytest.approx(1 / 6) and cs.prompt_share == 0


def test_a_range_of_n_takes_any_length():
    cs = share("a b", "a b a b", 1, 2)
    assert (cs.copied, cs.copied_from_prompt) == (2, 2)  # both b's continue the 1-gram (a)
    assert share("a b", "a b a b", 2).copied == 0  # with n = 2 no 3-gram repeats


def test_ngrams_never_span_two_messages():
    assert share(["a b", "c d"], "b c d", 1).copied == 1  # (b c) crosses the message boundary
    assert share(["a b c d"], "b c d", 1).copied == 2


def test_a_verbatim_quote_is_all_copied_but_its_first_n_tokens():
    text = "the quick brown fox jumps over the lazy dog near the river bank"
    cs = share("Quote this: " + text, text, 3)
    assert cs.tokens == 13 and cs.copied == 10 and cs.share == pytest.approx(10 / 13)
    free = share("Write about dogs.", "Dogs are loyal and kind companions for many families", 3)
    assert free.copied == 0 and free.share == 0


def test_empty_response_and_bad_ranges():
    assert share("a b", "", 2).share is None
    with pytest.raises(MixError):
        copy_share([["a"]], ["a"], 3, 2)
    with pytest.raises(MixError):
        copy_share([["a"]], ["a"], 0)


def test_vllm_defaulting_of_the_range():
    assert lookup_range() == (5, 5)
    assert lookup_range(prompt_lookup_max=4) == (4, 4)
    assert lookup_range(prompt_lookup_min=2) == (2, 2)
    assert lookup_range(2, 5) == (2, 5)
    with pytest.raises(MixError):
        lookup_range(5, 2)


def test_classifier_threshold():
    assert classify(0.5) == COPY_STYLE and classify(0.49) == FREE_FORM
    assert classify(0.3, threshold=0.25) == COPY_STYLE
    assert classify(None) is None


def _traffic():
    quote = "one two three four five six seven eight nine ten"
    return Workload(name="t", source="test", prompts=[
        # 10 tokens, all copied but the first 2 (n = 2): 8 / 10
        Prompt("q", "quote", [{"role": "user", "content": f"Repeat: {quote}"}], response=quote),
        # 5 tokens, none copied
        Prompt("c", "chat", [{"role": "user", "content": "Say hi"}], response="Hello there , my friend"),
        # 4 tokens repeating themselves: copied only when n = 1 (see below)
        Prompt("r", "chat", [{"role": "user", "content": "Go"}], response="x y x y"),
        Prompt("n", "chat", [{"role": "user", "content": "no response logged"}]),
    ])


def test_measure_mix_on_known_answers():
    rep = measure_mix(_traffic(), n_min=2)
    df = rep.requests.set_index("id")
    assert list(df.index) == ["q", "c", "r"] and rep.skipped_no_response == 1
    assert df.loc["q", "copied_tokens"] == 8 and df.loc["q", "response_tokens"] == 10
    assert df.loc["c", "copied_tokens"] == 0 and df.loc["c", "response_tokens"] == 5
    # 'x y x y' with n = 2: (x y x) ends at 2, (y x y) at 3, neither earlier -> 0
    assert df.loc["r", "copied_tokens"] == 0
    assert rep.copy_share == pytest.approx(8 / 19)
    assert list(df["label"]) == [COPY_STYLE, FREE_FORM, FREE_FORM]
    assert rep.mix("tokens") == pytest.approx({COPY_STYLE: 10 / 19, FREE_FORM: 9 / 19})
    assert rep.mix("requests") == pytest.approx({COPY_STYLE: 1 / 3, FREE_FORM: 2 / 3})
    # with n = 1 the repetition counts: (x y) continues at 3
    assert measure_mix(_traffic(), n_min=1).requests.set_index("id").loc["r", "copied_tokens"] == 1
    cats = rep.by_category().set_index("category")
    assert cats.loc["quote", "copy_share"] == pytest.approx(0.8) and cats.loc["chat", "requests"] == 2
    text = format_mix(rep)
    assert "42.1 %" in text and "3 requests with a response" in text and "1 without a response" in text


def test_measure_mix_refuses_traffic_without_responses_and_bad_options():
    wl = Workload(name="t", source="x", prompts=[Prompt("a", None, [{"role": "user", "content": "hi"}])])
    with pytest.raises(MixError, match="no responses"):
        measure_mix(wl)
    with pytest.raises(MixError, match="context"):
        measure_mix(_traffic(), context="everything")
    with pytest.raises(MixError, match="threshold"):
        measure_mix(_traffic(), threshold=2)


def test_target_tokenizer_from_a_local_folder():
    folder = paths.MODELS / "SmolLM2-135M-Instruct"
    from tests.conftest import require

    require((folder / "tokenizer.json").exists(), "the CPU default model", "make setup builds it")
    tok = load_tokenizer(folder)
    ids = tok.encode("Fix this JSON")
    assert ids and all(isinstance(i, int) for i in ids)
    rep = measure_mix(_traffic(), tok, n_min=2)
    assert rep.requests.set_index("id").loc["q", "copy_share"] > 0.5
    assert "SmolLM2" in rep.tokenizer


def test_tokenizer_errors(tmp_path):
    with pytest.raises(MixError, match="does not exist"):
        load_tokenizer(tmp_path / "nope")
    with pytest.raises(MixError, match="cannot load a tokenizer"):
        load_tokenizer(tmp_path)
    assert load_tokenizer(None).name == "words"


# ----------------------------------------------------------------------------- estimate


def test_mixed_speedup_is_time_weighted():
    df = pd.DataFrame({"category": ["copy", "freeform"], "speedup": [2.0, 0.5]})
    est = expected_speedup(df, {"copy": 1, "freeform": 1})
    assert est.speedup == pytest.approx(1 / (0.5 / 2 + 0.5 / 0.5))  # 0.8, not the arithmetic 1.25
    assert est.method == "point" and est.lo is None and est.weights == {"copy": 0.5, "freeform": 0.5}
    assert expected_speedup(df, {"copy": 1.0}).speedup == pytest.approx(2.0)
    # baseline rates weight by time: the slower baseline category takes longer
    df["base_tok_s"] = [100.0, 50.0]
    est = expected_speedup(df, {"copy": 0.5, "freeform": 0.5})
    assert est.speedup == pytest.approx((0.5 / 100 + 0.5 / 50) / (0.5 / 200 + 0.5 / 25))


def test_seed_000_numbers_as_an_example():
    # seed 000: copy-style held 1.1x at eight users, free-form sank to 0.8x, and 93.5 % of real
    # output tokens were free-form; the traffic's speedup is then close to the free-form one
    df = pd.DataFrame({"category": ["copy", "freeform"], "speedup": [1.1, 0.8]})
    est = expected_speedup(df, {COPY_STYLE: 0.065, FREE_FORM: 0.935})
    assert est.speedup == pytest.approx(1 / (0.065 / 1.1 + 0.935 / 0.8))
    assert 0.81 < est.speedup < 0.82


def test_class_shares_spread_over_their_categories():
    df = pd.DataFrame({"category": ["edit-code", "fix-json", "chat"], "speedup": [2.0, 4.0, 0.5]})
    est = expected_speedup(df, {COPY_STYLE: 0.2, FREE_FORM: 0.8})
    assert est.weights == pytest.approx({"edit-code": 0.1, "fix-json": 0.1, "chat": 0.8})
    assert est.speedup == pytest.approx(1 / (0.1 / 2 + 0.1 / 4 + 0.8 / 0.5))
    # sweep workloads cut by category are mapped too
    df2 = pd.DataFrame({"workload": ["copy:fix-json", "freeform:chat"], "speedup": [4.0, 0.5]})
    assert expected_speedup(df2, {COPY_STYLE: 1, FREE_FORM: 1}).speedup == pytest.approx(1 / (0.5 / 4 + 0.5 / 0.5))
    # own groups
    est = expected_speedup(df, {"fast": 1}, groups={"fix-json": "fast"})
    assert est.speedup == pytest.approx(4.0)


def test_propagated_range_from_lo_hi():
    df = pd.DataFrame({"category": ["copy", "freeform"], "speedup": [1.3, 0.9],
                       "speedup_min": [1.2, 0.8], "speedup_max": [1.4, 1.0]})
    est = expected_speedup(df, {"copy": 0.25, "freeform": 0.75})
    assert est.method == "propagated"
    assert est.lo == pytest.approx(1 / (0.25 / 1.2 + 0.75 / 0.8))
    assert est.hi == pytest.approx(1 / (0.25 / 1.4 + 0.75 / 1.0))
    assert est.lo < est.speedup < est.hi
    assert "range at lo/hi" in str(est)


def test_bootstrap_over_repeats():
    df = pd.DataFrame({"category": ["copy"] * 3 + ["freeform"] * 3, "repeat": [0, 1, 2] * 2,
                       "speedup": [1.2, 1.4, 1.3, 0.8, 0.9, 0.85]})
    est = expected_speedup(df, {"copy": 0.1, "freeform": 0.9}, seed=1)
    assert est.method == "bootstrap" and est.level == 0.95
    assert est.speedup == pytest.approx(1 / (0.1 / 1.3 + 0.9 / 0.85))
    # the interval lies within what the extreme repeats allow, and contains the point
    assert 1 / (0.1 / 1.2 + 0.9 / 0.8) <= est.lo <= est.speedup <= est.hi <= 1 / (0.1 / 1.4 + 0.9 / 0.9)
    assert est == expected_speedup(df, {"copy": 0.1, "freeform": 0.9}, seed=1)  # seeded
    same = pd.DataFrame({"category": ["copy", "copy"], "speedup": [1.5, 1.5]})
    e2 = expected_speedup(same, {"copy": 1})
    assert e2.lo == pytest.approx(1.5) and e2.hi == pytest.approx(1.5)


@pytest.mark.parametrize("frame, mix, needle", [
    (pd.DataFrame({"category": ["copy"], "speedup": [1.2]}), {"freeform": 1}, "matches no category"),
    (pd.DataFrame({"category": ["copy"], "speedup": [1.2]}), {"copy": -1}, ">= 0"),
    (pd.DataFrame({"category": ["copy"], "speedup": [1.2]}), {"copy": 0}, "add up to 0"),
    (pd.DataFrame({"category": ["copy"], "speedup": [-1.0]}), {"copy": 1}, "positive"),
    (pd.DataFrame({"name": ["copy"], "speedup": [1.0]}), {"copy": 1}, "'category'"),
    (pd.DataFrame({"category": ["copy", "copy"], "arm": ["a", "b"], "speedup": [1.0, 1.1]}), {"copy": 1},
     "one arm"),
    (pd.DataFrame(), {"copy": 1}, "no speedups"),
])
def test_estimate_errors(frame, mix, needle):
    with pytest.raises(MixError, match=needle):
        expected_speedup(frame, mix)


def test_category_speedups_from_paired_ledgers(tmp_path):
    leds = [ledger("baseline", "copy", 1, r, tok_s=100.0) for r in (0, 1)]
    leds += [ledger("ngram", "copy", 1, r, tok_s=130.0 + 10 * r, mal=3.0) for r in (0, 1)]
    leds += [ledger("baseline", "freeform", 1, r, tok_s=100.0) for r in (0, 1)]
    leds += [ledger("ngram", "freeform", 1, r, tok_s=80.0, mal=1.5) for r in (0, 1)]
    from specnb.ledger import load_ledgers, write_ledger

    for i, x in enumerate(leds):  # the frame as a notebook reads it (load_ledgers), not its private row builder
        write_ledger(tmp_path / f"{i:03d}.json", x)
    df = load_ledgers(tmp_path)
    frame = category_speedups(paired(df), arm="ngram", concurrency=1)
    assert sorted(frame["category"]) == ["copy", "copy", "freeform", "freeform"]
    est = expected_speedup(frame, {COPY_STYLE: 0.065, FREE_FORM: 0.935})
    assert est.method == "bootstrap"
    assert est.speedup == pytest.approx(1 / (0.065 / 1.35 + 0.935 / 0.8))
    with pytest.raises(MixError, match="no paired points for arm"):
        category_speedups(paired(df), arm="eagle", concurrency=1)


# ----------------------------------------------------------------------------- CLI


def test_cli_mix(tmp_path, capsys):
    from specnb.cli import main

    p = tmp_path / "traffic.jsonl"
    quote = "one two three four five six seven eight nine ten"
    p.write_text("\n".join(json.dumps(x) for x in [
        {"prompt": f"Repeat: {quote}", "response": quote},
        {"messages": [{"role": "user", "content": "Say hi"}, {"role": "assistant", "content": "Hello there , friend"}]},
        {"prompt": ""},
    ]) + "\n")
    assert main(["mix", str(p), "--ngram-min", "2"]) == 0
    out = capsys.readouterr().out
    assert "2 requests with a response" in out and "copy-style 71.4 %" in out
    assert "dropped on import: empty x1" in out
    csv = tmp_path / "r.csv"
    assert main(["mix", str(p), "--csv", str(csv)]) == 0
    assert len(pd.read_csv(csv)) == 2
    assert main(["mix", str(tmp_path / "none.jsonl")]) == 2
    assert "no such traffic file" in capsys.readouterr().err


def test_cli_mix_with_a_sweep_estimates_the_speedup(tmp_path, capsys):
    from specnb.cli import main
    from specnb.ledger import write_ledger

    for r in (0, 1):
        for wl, base, spec in (("copy", 100.0, 140.0), ("freeform", 100.0, 80.0)):
            write_ledger(tmp_path / "sweep" / f"b-{wl}-{r}.json", ledger("baseline", wl, 1, r, tok_s=base))
            write_ledger(tmp_path / "sweep" / f"s-{wl}-{r}.json", ledger("ngram", wl, 1, r, tok_s=spec, mal=2.0))
    p = tmp_path / "traffic.jsonl"
    p.write_text(json.dumps({"prompt": "Repeat: a b c d e f g h", "response": "a b c d e f g h"}) + "\n"
                 + json.dumps({"prompt": "Hi", "response": "Hello to you as well my friend"}) + "\n")
    assert main(["mix", str(p), "--ngram-min", "2", "--ledgers", str(tmp_path / "sweep"), "--arm", "ngram",
                 "--concurrency", "1"]) == 0
    out = capsys.readouterr().out
    # 8 copy-style tokens, 7 free-form: 1 / (8/15 / 1.4 + 7/15 / 0.8)
    assert f"{1 / (8 / 15 / 1.4 + 7 / 15 / 0.8):.2f}x" in out and "expected speedup of ngram at c=1" in out
    assert main(["mix", str(p), "--ledgers", str(tmp_path / "sweep")]) == 2
    assert "--arm and --concurrency" in capsys.readouterr().err
