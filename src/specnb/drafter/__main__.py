"""``python -m specnb.drafter``: train an EAGLE-3 head for a target (``make drafter``).

    python -m specnb.drafter --model models/SmolLM2-135M-Instruct --prompts drafters/train-prompts.jsonl \\
        --out drafters/SmolLM2-135M-Instruct-eagle3

Bad input (a missing model or prompt file, a target EAGLE-3 cannot read) is refused in one
line before any server starts. Responses are kept in ``--data`` (JSONL, appended as they come),
so a second run after a crash or Ctrl-C resumes the generation where it stopped.
"""

from __future__ import annotations

import argparse
import datetime as dt
import hashlib
import json
import math
import sys
import time
from pathlib import Path

from specnb.engine.hostload import usable_cpus
from specnb.errors import SpecnbError

DEFAULT_SERVER_ARGS = ["--enforce-eager", "--dtype", "machine", "--max-model-len", "2048"]


def _bar(total: int, desc: str, unit: str):
    """The project's progress (tqdm with its ETA in a terminal; elsewhere a line every tenth of the way
    with the time left)."""
    from specnb.sweep.progress import progress_bar

    return progress_bar(total, desc=desc, unit=unit, tenths=True)


def _parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="python -m specnb.drafter", description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="models/SmolLM2-135M-Instruct", help="the target (a local folder)")
    ap.add_argument("--prompts", default="drafters/train-prompts.jsonl", help="training prompts (JSONL: id, prompt)")
    ap.add_argument("--out", help="where the head goes (default drafters/<model>-eagle3)")
    ap.add_argument("--data", help="the responses' JSONL (default .cache/drafter/<model>/responses-<max-tokens>.jsonl)")
    ap.add_argument("--ledger-root", default="ledgers", help="the training ledger goes to <this>/drafter-training/")
    ap.add_argument("--max-tokens", type=int, default=128, help="tokens per response")
    ap.add_argument("--concurrency", type=int, default=16, help="requests in flight while generating")
    ap.add_argument("--limit", type=int, default=0, help="use only the first N prompts (0: all)")
    ap.add_argument("--draft-vocab", type=int, default=4096)
    ap.add_argument("--epochs", type=int, default=2)
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--spread-seeds", default="", help="comma-separated seeds of further heads trained on the same "
                    "states and held-out set to state the seed-to-seed spread of the held-out acceptance length "
                    "(not saved; about the training time once more each)")
    ap.add_argument("--device", help="where the target's states and the head are computed (default: cuda when "
                    "torch sees a GPU, else cpu)")
    ap.add_argument("--server-arg", action="append", default=None, help="a vLLM argument (repeat; default: "
                    + " ".join(DEFAULT_SERVER_ARGS) + ")")
    return ap


def _check(a: argparse.Namespace) -> tuple[Path, dict]:
    model = Path(a.model)
    if not (model / "config.json").is_file():
        raise SpecnbError(f"--model {a.model}: not a local model folder (no config.json); make setup builds the CPU default")
    cfg = json.loads((model / "config.json").read_text())
    if cfg.get("model_type") not in ("llama", "qwen3"):
        raise SpecnbError(f"--model {a.model}: EAGLE-3 heads are built for llama and qwen3 targets here, not "
                          f"{cfg.get('model_type')!r}")
    try:
        a.spread_seeds = [int(x) for x in a.spread_seeds.split(",") if x.strip()]
    except ValueError:
        raise SpecnbError(f"--spread-seeds {a.spread_seeds!r}: comma-separated integers (1,2)") from None
    if a.seed in a.spread_seeds or len(set(a.spread_seeds)) != len(a.spread_seeds):
        raise SpecnbError(f"--spread-seeds {a.spread_seeds}: each seed once, and not --seed ({a.seed}) again")
    for name, v in (("--max-tokens", a.max_tokens), ("--concurrency", a.concurrency), ("--draft-vocab", a.draft_vocab),
                    ("--epochs", a.epochs)):
        if v < 1:
            raise SpecnbError(f"{name} must be at least 1, got {v}")
    return model, cfg


def _check_speculators() -> None:
    try:
        import speculators  # noqa: F401
    except ImportError:
        raise SpecnbError("speculators is not installed: make drafter installs it (pip --no-deps; see "
                          "specnb.drafter)") from None


def _responses(a: argparse.Namespace, model: Path, prompts: list[dict], data: Path, log_dir: Path) -> list[dict]:
    """Step 1: the target's responses through a real server (only the prompts not yet answered)."""
    from specnb.drafter.generate import generate, read_conversations
    from specnb.engine.kernels import resolve_dtype
    from specnb.engine.server import VllmServer

    wanted = {p["id"] for p in prompts}
    have = {c["id"] for c in read_conversations(data)} if data.exists() else set()
    if wanted - have:
        args = resolve_dtype(a.server_arg or DEFAULT_SERVER_ARGS)
        bar = _bar(len(prompts), desc="responses", unit="requests")
        with VllmServer(str(model), args=args, served_model_name="target", env={"VLLM_CPU_KVCACHE_SPACE": "2"},
                        log_path=log_dir / "generate.log") as ep:
            generate(ep.base_url, ep.model, prompts, data, max_tokens=a.max_tokens, seed=a.seed,
                     concurrency=a.concurrency, progress=bar)
        bar.close()
    return sorted((c for c in read_conversations(data) if c["id"] in wanted), key=lambda c: c["id"])


class _Ledger:
    """The training ledger, rewritten whole (atomically) after every row: a run that dies keeps its curve."""

    def __init__(self, path: Path, record: dict):
        self.path, self.record = path, record
        self.write()

    def write(self) -> None:
        tmp = self.path.with_suffix(".tmp")
        tmp.write_text(json.dumps(self.record, indent=1) + "\n")
        tmp.replace(self.path)

    def row(self, row: dict) -> None:
        self.record["curve"].append(row)
        self.write()


def _record(a: argparse.Namespace, model: Path, run: str, convs: list[dict], val_ids: set[str], settings, layers,
            covered: float, head, argv: list[str] | None) -> dict:
    import torch

    from specnb.drafter.generate import data_hash

    return {
        "kind": "drafter-training", "method": "eagle3", "target": str(model), "run": run,
        "command": " ".join(["python -m specnb.drafter", *(argv if argv is not None else sys.argv[1:])]),
        "settings": settings.as_dict(), "aux_layer_ids": layers,
        "data": {"prompts": a.prompts, "conversations": len(convs), "validation_conversations": len(val_ids),
                 "max_tokens": a.max_tokens, "prompt_tokens": sum(len(c["prompt_ids"]) for c in convs),
                 "response_tokens": sum(len(c["output_ids"]) for c in convs),
                 "prompts_sha256": data_hash(convs, ("id", "prompt_ids")),
                 "responses_sha256": data_hash(convs, ("id", "output_ids")),
                 "draft_vocab_coverage": round(covered, 4)},
        "trainable_parameters": sum(p.numel() for p in head.parameters() if p.requires_grad),
        "torch": torch.__version__, "threads": torch.get_num_threads(), "device": a.device, "timings": {},
        "curve": [],
        "status": "running",
    }


def _spread(a: argparse.Namespace, model: Path, ledger: _Ledger, parts: dict, settings) -> None:
    """Further heads on the same states, vocabulary and held-out conversations, one per ``--spread-seeds``
    seed (its initialisation and batch order): the held-out figures each ends with, and their range, go
    into the ledger as the spread a rebuild is judged against."""
    import dataclasses

    import torch

    from specnb.drafter import train as tr

    spread = ledger.record.setdefault("seed_spread", {"seeds": [], "runs": [], "status": "running"})
    main_val = [r for r in ledger.record["curve"] if r["split"] == "val"][-1]
    spread["seeds"] = [settings.seed, *a.spread_seeds]
    spread["runs"] = [{"seed": settings.seed, **{k: main_val[k] for k in main_val if k not in ("split",)}}]
    for seed in a.spread_seeds:
        torch.manual_seed(seed)
        s = dataclasses.replace(settings, seed=seed)
        head = tr.build_head(str(model), parts["t2d"], parts["d2t"], s).to(a.device)
        bar = _bar(s.epochs * len(parts["train"]), desc=f"training (seed {seed})", unit="batch")
        try:
            rows = tr.fit(head, parts["train"], parts["val"], s, lambda _row: None, progress=bar)
        finally:
            bar.close()
        last = [r for r in rows if r["split"] == "val"][-1]
        spread["runs"].append({"seed": seed, **{k: last[k] for k in last if k not in ("split",)}})
        ledger.write()
    als = [r["expected_acceptance_length"] for r in spread["runs"]]
    lo, hi = spread_interval(als, 0.95)
    spread.update(min=round(min(als), 3), max=round(max(als), 3), level=0.95, interval=[round(lo, 3), round(hi, 3)],
                  rule="normal prediction interval for one further seed: mean +- t(n-1) s sqrt(1 + 1/n)")
    ledger.write()


def _train(a: argparse.Namespace, model: Path, cfg: dict, convs: list[dict], ledger_dir: Path, run: str,
           argv: list[str] | None) -> tuple[_Ledger, object, object, dict]:
    """Steps 2-4: the target's states, the draft vocabulary, the head trained, its ledger written as it goes."""
    from specnb.drafter import train as tr

    layers = tr.aux_layer_ids(cfg["num_hidden_layers"])
    t0 = time.monotonic()
    bar = _bar(len(convs), desc="target states", unit="conv")
    samples = tr.target_states(str(model), convs, layers, progress=bar, device=a.device)
    bar.close()
    states_s = round(time.monotonic() - t0, 1)
    settings = tr.TrainSettings(draft_vocab=a.draft_vocab, epochs=a.epochs, lr=a.lr, seed=a.seed)
    t2d, d2t, covered = tr.draft_vocab(convs, settings.draft_vocab, cfg["vocab_size"])
    # every 20th conversation in id order is held out (deterministic, spread over the categories)
    n_val = max(1, round(settings.val_share * len(samples)))
    val_ids = set(sorted(c["id"] for c in convs)[::max(1, len(convs) // n_val)][:n_val])
    train_b = tr.pack([s for s in samples if s["id"] not in val_ids], settings.pack_tokens)
    val_b = tr.pack([s for s in samples if s["id"] in val_ids], settings.pack_tokens)
    head = tr.build_head(str(model), t2d, d2t, settings).to(a.device)
    ledger = _Ledger(ledger_dir / "training.json",
                     _record(a, model, run, convs, val_ids, settings, layers, covered, head, argv))
    ledger.record["timings"]["states_s"] = states_s
    t0 = time.monotonic()
    bar = _bar(settings.epochs * len(train_b), desc="training", unit="batch")
    try:
        tr.fit(head, train_b, val_b, settings, ledger.row, progress=bar)
    except BaseException as e:
        ledger.record["status"] = f"failed: {type(e).__name__}: {e}"
        ledger.write()
        raise
    finally:
        bar.close()
    ledger.record["timings"]["train_s"] = round(time.monotonic() - t0, 1)
    return ledger, head, settings, {"train": train_b, "val": val_b, "t2d": t2d, "d2t": d2t}


def _provenance(a: argparse.Namespace, model: Path, out: Path, ledger: _Ledger) -> None:
    rec = ledger.record
    (out / "specnb-provenance.json").write_text(json.dumps({
        "kind": "eagle3-head", "target": str(model), "training_ledger": str(ledger.path), "command": rec["command"],
        "seed": a.seed, "data": rec["data"], "settings": rec["settings"],
        "weights_sha256": hashlib.sha256((out / "model.safetensors").read_bytes()).hexdigest(),
        "expected_acceptance_length": rec["expected_acceptance_length"]}, indent=1) + "\n")
    sums = {name: hashlib.sha256((out / name).read_bytes()).hexdigest() for name in ("model.safetensors", "config.json")}
    (out / "SHA256SUMS").write_text("".join(f"{d}  {n}\n" for n, d in sums.items()))  # sha256sum -c reads it


def spread_interval(values: list[float], level: float = 0.95) -> tuple[float, float]:
    """Where a further seed's held-out acceptance length falls with probability ``level``: the normal
    prediction interval mean +- t(n-1) s sqrt(1 + 1/n) over the seeds' values (the range of three seeds
    would hold a fourth only half the time)."""
    from specnb.analysis.estimator import t_quantile

    n = len(values)
    if n < 2:
        raise ValueError("a spread needs two seeds or more")
    mean = sum(values) / n
    sd = math.sqrt(sum((v - mean) ** 2 for v in values) / (n - 1))
    half = t_quantile(0.5 + level / 2, n - 1) * sd * math.sqrt(1 + 1 / n)
    return mean - half, mean + half


def judge_rebuild(record: dict, runs_dir: Path) -> str | None:
    """The newest other training run of this target with a seed spread under the same data and settings
    (seed aside): is this head's held-out acceptance length inside that spread's prediction interval?"""
    def same(d: dict) -> bool:
        keep = lambda s: {k: v for k, v in s.items() if k != "seed"}  # noqa: E731
        return d.get("data") == record["data"] and keep(d.get("settings", {})) == keep(record["settings"])

    for path in sorted(runs_dir.glob("*/training.json"), reverse=True):
        if path.parent.name == record["run"]:
            continue
        try:
            doc = json.loads(path.read_text())
        except (OSError, ValueError):
            continue  # an unreadable ledger judges nothing
        spread = doc.get("seed_spread") or {}
        if doc.get("status") != "done" or spread.get("status", "done") != "done" or "interval" not in spread \
                or not same(doc):
            continue
        lo, hi = spread["interval"]
        al = record["expected_acceptance_length"]
        where = "inside" if lo <= al <= hi else "OUTSIDE"
        return (f"held-out acceptance length {al:.3f} is {where} the {spread['level']:.0%} seed spread "
                f"[{lo:.3f}, {hi:.3f}] of {path.parent} (seeds {spread['seeds']})")
    return None


def main(argv: list[str] | None = None) -> int:
    a = _parser().parse_args(argv)
    try:
        model, cfg = _check(a)
        from specnb.drafter.generate import read_prompts

        prompts = read_prompts(a.prompts)
        _check_speculators()
    except SpecnbError as e:
        print(f"specnb drafter: {e}", file=sys.stderr)
        return 2
    if a.limit:
        prompts = prompts[: a.limit]
    import torch

    from specnb.drafter import train as tr

    a.device = a.device or ("cuda" if torch.cuda.is_available() else "cpu")
    torch.manual_seed(a.seed)
    torch.set_num_threads(len(usable_cpus()))  # the CPUs this process may use (taskset, a container)
    out = Path(a.out or f"drafters/{model.name}-eagle3")
    data = Path(a.data or f".cache/drafter/{model.name}/responses-{a.max_tokens}.jsonl")
    run = dt.datetime.now(dt.UTC).strftime("%Y%m%dT%H%M%SZ")
    ledger_dir = Path(a.ledger_root) / "drafter-training" / model.name / run
    ledger_dir.mkdir(parents=True, exist_ok=True)
    t_start = time.monotonic()
    convs = _responses(a, model, prompts, data, ledger_dir / "logs")
    generate_s = round(time.monotonic() - t_start, 1)
    ledger, head, settings, parts = _train(a, model, cfg, convs, ledger_dir, run, argv)
    rec = ledger.record
    rec["timings"]["generate_s"] = generate_s
    rec.update(head=str(out), saved_tensors=tr.save_head(head, out),
               expected_acceptance_length=round(rec["curve"][-1]["expected_acceptance_length"], 3))
    _provenance(a, model, out, ledger)
    rec["status"] = "done"  # the head is whole: the seed spread below only adds to what its ledger says
    rec["timings"]["total_s"] = round(time.monotonic() - t_start, 1)
    ledger.write()
    if a.spread_seeds:
        t0 = time.monotonic()
        try:
            _spread(a, model, ledger, parts, settings)
        except BaseException as e:
            rec["seed_spread"]["status"] = f"failed: {type(e).__name__}: {e}"
            ledger.write()
            raise
        rec["seed_spread"]["status"] = "done"
        rec["timings"]["spread_s"] = round(time.monotonic() - t0, 1)
        ledger.write()
    print(f"specnb drafter: {out} (held-out expected acceptance length {rec['expected_acceptance_length']} at "
          f"k={settings.ttt_steps}; {rec['timings']['total_s'] / 60:.1f} min); ledger {ledger.path}")
    verdict = judge_rebuild(rec, Path(a.ledger_root) / "drafter-training" / model.name)
    if verdict:
        print(f"specnb drafter: {verdict}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
