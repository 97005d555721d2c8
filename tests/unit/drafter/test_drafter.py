"""The EAGLE-3 head's recipe, in the parts that need no server: its training prompts are not the
evaluation panels, its draft vocabulary and packing are what vLLM and speculators expect, and bad
input is refused in one line before anything starts."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys

import pytest
import torch

from specnb import paths
from specnb.drafter import train as tr
from specnb.drafter.generate import data_hash, read_prompts
from specnb.prompts.workload import bundled
from tests.hang import guard

TRAIN_PROMPTS = paths.ROOT / "drafters" / "train-prompts.jsonl"


def _generator():
    spec = importlib.util.spec_from_file_location("make_workloads", paths.ROOT / "tools" / "make_workloads.py")
    gen = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(gen)
    return gen


def test_no_training_prompt_is_an_evaluation_prompt():
    train = read_prompts(TRAIN_PROMPTS)
    evaluation = {p.text if hasattr(p, "text") else json.dumps(p.messages) for s in ("copy", "freeform", "json")
                  for p in bundled(s).prompts}
    texts = {r["prompt"] for r in train}
    assert len(texts) == len(train) > 1000
    gen = _generator()
    assert texts.isdisjoint(gen.evaluation_prompts())
    # the same check through the workloads the sweeps send (messages, not the generator's strings)
    sent = {m["content"] for s in ("copy", "freeform", "json") for p in bundled(s).prompts for m in p.messages}
    assert sent and texts.isdisjoint(sent) and evaluation


def test_the_committed_training_prompts_are_what_the_generator_writes():
    """The generated categories byte for byte (the standard-library questions depend on the Python
    build's modules, so only their count is held)."""
    gen = _generator()
    rows = gen.build_train()
    committed = read_prompts(TRAIN_PROMPTS)
    assert [r for r in rows if r["category"] != "stdlib"] == [r for r in committed if r["category"] != "stdlib"], \
        "run python tools/make_workloads.py --train drafters/train-prompts.jsonl"
    assert sum(r["category"] == "stdlib" for r in committed) > 50


def test_the_evaluation_sets_did_not_move_when_the_train_split_was_built():
    gen = _generator()
    before = gen.render(gen.build("copy"))
    gen.build_train(per=8)
    assert gen.render(gen.build("copy")) == before


def test_aux_layers_follow_the_convention():
    assert tr.aux_layer_ids(30) == [2, 15, 27]
    assert tr.aux_layer_ids(32) == [2, 16, 29]
    with pytest.raises(ValueError, match="too shallow"):
        tr.aux_layer_ids(4)


def test_draft_vocab_keeps_the_most_frequent_tokens_with_vllm_offsets():
    convs = [{"output_ids": [5, 5, 5, 9, 9, 2]}, {"output_ids": [9, 7]}]
    t2d, d2t, covered = tr.draft_vocab(convs, 2, vocab_size=12)
    assert t2d.nonzero().flatten().tolist() == [5, 9]
    # vLLM maps draft id i to target id i + d2t[i]
    assert (torch.arange(2) + d2t).tolist() == [5, 9]
    assert covered == pytest.approx(6 / 8)


def test_expected_acceptance_length():
    assert tr.expected_acceptance_length([1.0, 1.0, 1.0]) == 4.0
    assert tr.expected_acceptance_length([0.5, 0.5, 0.5]) == pytest.approx(1.875)
    assert tr.expected_acceptance_length([0.0, float("nan"), float("nan")]) == 1.0


def test_pack_shifts_each_conversation_and_never_crosses_two():
    def sample(n, start):
        ids = torch.arange(start, start + n)
        return {"input_ids": ids, "hidden_states": ids[:, None].float().expand(n, 3).to(torch.bfloat16),
                "verifier_last_hidden_states": ids[:, None].float().to(torch.bfloat16),
                "response": torch.arange(n) >= n // 2}

    batches = tr.pack([sample(5, 0), sample(4, 100), sample(6, 200)], pack_tokens=8)
    assert len(batches) == 2
    b = batches[0]
    # token t+1 beside the state at t (speculators' shift_batch), per conversation
    assert b["input_ids"][0].tolist() == [1, 2, 3, 4, 101, 102, 103]
    assert b["hidden_states"][0, :, 0].tolist() == [0, 1, 2, 3, 100, 101, 102]
    assert b["verifier_last_hidden_states"][0, :, 0].tolist() == [1, 2, 3, 4, 101, 102, 103]
    assert b["document_ids"][0].tolist() == [0, 0, 0, 0, 1, 1, 1]
    assert b["position_ids"][0].tolist() == [1, 2, 3, 4, 1, 2, 3]
    assert b["loss_mask"][0].tolist() == [False, True, True, True, False, True, True]


def test_data_hash_ignores_completion_order():
    a = [{"id": "b", "x": [1]}, {"id": "a", "x": [2]}]
    assert data_hash(a, ("id", "x")) == data_hash(a[::-1], ("id", "x"))
    assert data_hash(a, ("id", "x")) != data_hash([{"id": "b", "x": [1]}], ("id", "x"))


@pytest.mark.parametrize("args, needle", [
    (["--model", "models/no-such-model"], "not a local model folder"),
    (["--prompts", "no/such/prompts.jsonl"], "no such file"),
    (["--epochs", "0"], "--epochs must be at least 1"),
])
def test_bad_input_is_one_line_before_any_server(tmp_path, args, needle):
    r = subprocess.run([sys.executable, "-m", "specnb.drafter", "--ledger-root", str(tmp_path), *args],
                       capture_output=True, text=True, cwd=paths.ROOT,
                       timeout=guard("child_start"))
    assert r.returncode == 2, r.stderr[-2000:]
    assert needle in r.stderr and len(r.stderr.strip().splitlines()) == 1, r.stderr
    assert not list(tmp_path.rglob("*.log"))  # no server was started


def test_a_prompt_file_that_is_not_prompts_is_refused(tmp_path):
    from specnb.errors import SpecnbError

    bad = tmp_path / "p.jsonl"
    bad.write_text('{"id": "a", "prompt": "x"}\n{"id": "a", "prompt": "y"}\n')
    with pytest.raises(SpecnbError, match="ids repeat"):
        read_prompts(bad)
    bad.write_text('{"text": "x"}\n')
    with pytest.raises(SpecnbError, match='non-empty "prompt"'):
        read_prompts(bad)


def test_the_committed_head_is_the_one_its_hashes_and_provenance_name():
    """The head in git (drafters/<model>-eagle3) is what `make drafter` built: its weights match the
    SHA256SUMS beside them, and its provenance names a committed training ledger of the same data."""
    import hashlib

    head = paths.ROOT / "drafters" / "SmolLM2-135M-Instruct-eagle3"
    for line in (head / "SHA256SUMS").read_text().splitlines():
        digest, name = line.split()
        assert hashlib.sha256((head / name).read_bytes()).hexdigest() == digest, name
    made = json.loads((head / "specnb-provenance.json").read_text())
    ledger = json.loads((paths.ROOT / made["training_ledger"]).read_text())
    assert ledger["kind"] == "drafter-training" and ledger["status"] == "done"
    assert ledger["data"] == made["data"] and ledger["settings"] == made["settings"]


def test_the_seed_spread_is_a_prediction_interval_and_a_rebuild_is_judged_against_the_newest_of_its_kind(tmp_path):
    from specnb.drafter.__main__ import judge_rebuild, spread_interval

    lo, hi = spread_interval([1.80, 1.78, 1.83])
    # mean 1.8033, s 0.0252, t(0.975, 2) 4.303, sqrt(4/3): +- 0.125
    assert lo == pytest.approx(1.678, abs=2e-3) and hi == pytest.approx(1.928, abs=2e-3)
    with pytest.raises(ValueError):
        spread_interval([1.8])
    data, settings = {"responses_sha256": "x"}, {"seed": 0, "epochs": 2}
    for run, spread, status, d in (("20260101T000000Z", [1.0, 1.1], "done", data),  # older
                                   ("20260102T000000Z", [1.7, 1.9], "done", data),  # the newest of its kind
                                   ("20260103T000000Z", [1.0, 1.1], "done", {"responses_sha256": "y"}),  # other data
                                   ("20260104T000000Z", [1.0, 1.1], "running", data)):  # not finished
        (tmp_path / run).mkdir()
        (tmp_path / run / "training.json").write_text(json.dumps({
            "status": status, "data": d, "settings": {**settings, "seed": 5},
            "seed_spread": {"seeds": [0, 1], "level": 0.95, "interval": spread}}))
    rec = {"run": "20260105T000000Z", "data": data, "settings": settings, "expected_acceptance_length": 1.8}
    assert "1.800 is inside the 95% seed spread [1.700, 1.900]" in judge_rebuild(rec, tmp_path)
    assert "OUTSIDE" in judge_rebuild({**rec, "expected_acceptance_length": 1.5}, tmp_path)
    assert judge_rebuild({**rec, "settings": {"seed": 0, "epochs": 3}}, tmp_path) is None  # nothing of its kind
