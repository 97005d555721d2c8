"""Train an EAGLE-3 head (speculators' ``Eagle3DraftModel``) on the target's own conversations.

CPU-friendly on purpose: one decoder layer, a draft vocabulary of the responses' most frequent
tokens, hidden states computed once and kept in memory (bf16), conversations packed into
sequences of ``pack_tokens`` with document ids so attention never crosses two of them, and
speculators' own ``forward`` (training-time test over ``ttt_steps`` drafting steps, KL loss against
the target's distribution restricted to the draft vocabulary) with its ``eager`` loss.
"""

from __future__ import annotations

import json
import math
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

__all__ = ["TrainSettings", "aux_layer_ids", "target_states", "draft_vocab", "pack", "build_head", "fit",
           "save_head", "expected_acceptance_length"]


@dataclass
class TrainSettings:
    draft_vocab: int = 4096
    ttt_steps: int = 3
    epochs: int = 2
    lr: float = 1e-3
    warmup_steps: int = 20
    pack_tokens: int = 2048
    val_share: float = 0.05
    seed: int = 0
    log_every: int = 5

    def as_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


def aux_layer_ids(num_layers: int) -> list[int]:
    """The layers EAGLE-3 reads, by speculators' and vLLM's convention: (2, L // 2, L - 3). Layer id
    i is the residual stream entering decoder layer i (``transformers``' ``hidden_states[i]``)."""
    ids = [2, num_layers // 2, num_layers - 3]
    if len(set(ids)) != 3 or min(ids) < 1:
        raise ValueError(f"a target of {num_layers} layers is too shallow for EAGLE-3's three aux layers")
    return ids


@torch.no_grad()
def target_states(model_dir: str, conversations: list[dict[str, Any]], layers: list[int],
                  progress: Any = None, device: str = "cpu") -> list[dict[str, torch.Tensor]]:
    """Per conversation: token ids, the aux layers' states concatenated, the last layer's state before
    the final norm (what the target's head reads), and which positions are the response (kept on the
    CPU in bf16 whatever ``device`` computes them)."""
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32 if device == "cpu" else torch.bfloat16)
    model.to(device)
    model.eval()
    last: list[torch.Tensor] = []
    hook = model.model.norm.register_forward_pre_hook(lambda _m, args: last.append(args[0]))
    out = []
    try:
        for c in conversations:
            ids = torch.tensor(c["prompt_ids"] + c["output_ids"], dtype=torch.long)
            last.clear()
            hs = model.model(input_ids=ids[None].to(device), output_hidden_states=True).hidden_states
            aux = torch.cat([hs[i][0] for i in layers], dim=-1).cpu()
            response = torch.zeros(len(ids), dtype=torch.bool)
            response[len(c["prompt_ids"]):] = True
            out.append({"id": c["id"], "input_ids": ids, "hidden_states": aux.to(torch.bfloat16),
                        "verifier_last_hidden_states": last[0][0].cpu().to(torch.bfloat16), "response": response})
            if progress is not None:
                progress.update(1)
    finally:
        hook.remove()
    return out


def draft_vocab(conversations: list[dict[str, Any]], size: int, vocab_size: int) -> tuple[torch.Tensor, torch.Tensor, float]:
    """The ``size`` most frequent response tokens (ties by id): ``t2d`` (target -> in draft vocab),
    ``d2t`` (draft id -> target id minus draft id, vLLM's and speculators' offset form) and the
    share of response tokens the draft vocabulary covers."""
    counts = torch.zeros(vocab_size, dtype=torch.long)
    for c in conversations:
        counts += torch.bincount(torch.tensor(c["output_ids"], dtype=torch.long), minlength=vocab_size)[:vocab_size]
    size = min(size, vocab_size)
    order = sorted(range(vocab_size), key=lambda t: (-int(counts[t]), t))[:size]
    chosen = torch.tensor(sorted(order), dtype=torch.long)
    t2d = torch.zeros(vocab_size, dtype=torch.bool)
    t2d[chosen] = True
    d2t = chosen - torch.arange(size)
    covered = float(counts[chosen].sum()) / max(1, int(counts.sum()))
    return t2d, d2t, covered


def pack(samples: list[dict[str, torch.Tensor]], pack_tokens: int) -> list[dict[str, torch.Tensor]]:
    """Samples shifted as speculators shifts them (token t+1 beside the state at t) and packed into
    sequences of at most ``pack_tokens``, each with its document ids and positions (from 1)."""
    batches, cur, n = [], [], 0
    for s in samples:
        length = len(s["input_ids"]) - 1
        if length < 2:
            continue
        length = min(length, pack_tokens)
        if cur and n + length > pack_tokens:
            batches.append(cur)
            cur, n = [], 0
        cur.append((s, length))
        n += length
    if cur:
        batches.append(cur)
    packed = []
    for group in batches:
        parts: dict[str, list[torch.Tensor]] = {k: [] for k in ("input_ids", "hidden_states", "verifier_last_hidden_states",
                                                               "loss_mask", "document_ids", "position_ids")}
        for d, (s, length) in enumerate(group):
            parts["input_ids"].append(s["input_ids"][1:length + 1])
            parts["hidden_states"].append(s["hidden_states"][:length].float())
            parts["verifier_last_hidden_states"].append(s["verifier_last_hidden_states"][1:length + 1].float())
            parts["loss_mask"].append(s["response"][1:length + 1])
            parts["document_ids"].append(torch.full((length,), d, dtype=torch.long))
            parts["position_ids"].append(torch.arange(1, length + 1))
        packed.append({k: torch.cat(v)[None] for k, v in parts.items()})
    return packed


def build_head(model_dir: str, t2d: torch.Tensor, d2t: torch.Tensor, settings: TrainSettings) -> Any:
    """speculators' ``Eagle3DraftModel`` for this target: one decoder layer of the target's shape, the
    reduced vocabulary, the target's embedding (frozen) and its head's rows for the draft vocabulary
    (the head's starting point and the loss's reference)."""
    from safetensors.torch import load_file
    from speculators.models.eagle3 import Eagle3DraftModel
    from transformers import AutoConfig

    cfg = AutoConfig.from_pretrained(model_dir)
    num_layers = cfg.num_hidden_layers
    cfg.num_hidden_layers = 1
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        head = Eagle3DraftModel.from_training_args(
            cfg, t2d=t2d, d2t=d2t, verifier_name_or_path=model_dir, draft_vocab_size=int(t2d.sum()),
            norm_before_residual=True, ttt_steps=settings.ttt_steps, draft_attn_impl="sdpa",
            target_layer_ids=aux_layer_ids(num_layers))
    weights: dict[str, torch.Tensor] = {}
    for f in sorted(Path(model_dir).glob("*.safetensors")):
        weights.update(load_file(f))
    embed = weights["model.embed_tokens.weight"].float()
    lm = weights.get("lm_head.weight", embed).float()  # a tied target (SmolLM2) has no lm_head of its own
    with torch.no_grad():
        head.embed_tokens.weight.copy_(embed)
        head.lm_head.weight.copy_(lm[t2d])
        head.verifier_lm_head.weight.copy_(lm[t2d])
        head.verifier_norm.weight.copy_(weights["model.norm.weight"].float())
    head.lm_head.weight.requires_grad_(True)
    return head


def expected_acceptance_length(cond_acc: list[float]) -> float:
    """1 + a0 + a0 a1 + ... : the mean tokens per step a head with these per-position conditional
    accuracies would give under greedy verification (draft tokens all inside the draft vocabulary)."""
    total, p = 1.0, 1.0
    for a in cond_acc:
        p *= 0.0 if math.isnan(a) else a  # no position reached this step: nothing accepted there
        total += p
    return total


@dataclass
class _Curve:
    rows: list[dict[str, Any]] = field(default_factory=list)


def _metrics(met: dict[str, torch.Tensor], steps: int) -> dict[str, float]:
    out = {}
    for k in range(steps):
        for kind in ("full", "cond"):
            tot = float(met[f"{kind}_acc_{k}_total"])
            out[f"{kind}_acc_{k}"] = float(met[f"{kind}_acc_{k}_sum"]) / tot if tot else float("nan")
    return out


@torch.no_grad()
def evaluate(head: Any, batches: list[dict[str, torch.Tensor]], settings: TrainSettings, loss_config: Any) -> dict[str, float]:
    """Held-out loss and per-position accuracy on response positions only (where drafting happens)."""
    sums: dict[str, float] = {}
    loss_sum = 0.0
    head.eval()
    device = next(head.parameters()).device
    for b in batches:
        b = {k: v.to(device) for k, v in b.items()}
        _, loss, met = head(b["hidden_states"], b["input_ids"], b["document_ids"], loss_mask=b["loss_mask"],
                            position_ids=b["position_ids"], verifier_last_hidden_states=b["verifier_last_hidden_states"],
                            ttt_steps=settings.ttt_steps, loss_config=loss_config)
        loss_sum += float(loss)
        for k, v in met.items():
            sums[k] = sums.get(k, 0.0) + float(v)
    head.train()
    res = _metrics(sums, settings.ttt_steps)
    res["loss"] = loss_sum / max(1, len(batches))
    res["expected_acceptance_length"] = expected_acceptance_length([res[f"cond_acc_{k}"] for k in range(settings.ttt_steps)])
    return res


def fit(head: Any, train: list[dict[str, torch.Tensor]], val: list[dict[str, torch.Tensor]], settings: TrainSettings,
        on_row: Callable[[dict[str, Any]], None], progress: Any = None) -> list[dict[str, Any]]:
    """AdamW with a linear warm-up and a cosine decay over ``epochs`` passes; training loss on every
    position (the KL target is the target's own distribution wherever it is read), held-out figures on
    response positions after each epoch. ``on_row`` gets every logged row as it is made."""
    from speculators.losses import resolve_loss_config

    loss_config = resolve_loss_config("kl_div", "eager")
    device = next(head.parameters()).device
    params = [p for p in head.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=settings.lr, weight_decay=0.0)
    total = settings.epochs * len(train)

    def lr_at(step: int) -> float:
        if step < settings.warmup_steps:
            return settings.lr * (step + 1) / settings.warmup_steps
        frac = (step - settings.warmup_steps) / max(1, total - settings.warmup_steps)
        return settings.lr * 0.5 * (1 + math.cos(math.pi * frac))

    gen = torch.Generator().manual_seed(settings.seed)
    rows: list[dict[str, Any]] = []
    step, tokens, t0 = 0, 0, time.monotonic()
    row = {"step": 0, "epoch": 0, "tokens": 0, "split": "val", **evaluate(head, val, settings, loss_config)}
    rows.append(row)
    on_row(row)
    head.train()
    for epoch in range(1, settings.epochs + 1):
        for i in torch.randperm(len(train), generator=gen).tolist():
            b = {k: v.to(device) for k, v in train[i].items()}
            for g in opt.param_groups:
                g["lr"] = lr_at(step)
            everywhere = b["document_ids"] >= 0
            _, loss, met = head(b["hidden_states"], b["input_ids"], b["document_ids"], loss_mask=everywhere,
                                position_ids=b["position_ids"], verifier_last_hidden_states=b["verifier_last_hidden_states"],
                                ttt_steps=settings.ttt_steps, loss_config=loss_config)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(params, 1.0)
            opt.step()
            step += 1
            tokens += int(b["input_ids"].shape[1])
            if progress is not None:
                progress.update(1)
            if step % settings.log_every == 0 or step == total:
                row = {"step": step, "epoch": epoch, "tokens": tokens, "split": "train", "loss": float(loss.detach()),
                       "lr": lr_at(step - 1), "elapsed_s": round(time.monotonic() - t0, 1),
                       **_metrics({k: v.detach() for k, v in met.items()}, settings.ttt_steps)}
                rows.append(row)
                on_row(row)
        row = {"step": step, "epoch": epoch, "tokens": tokens, "split": "val", "elapsed_s": round(time.monotonic() - t0, 1),
               **evaluate(head, val, settings, loss_config)}
        rows.append(row)
        on_row(row)
    return rows


def save_head(head: Any, out: Path) -> list[str]:
    """speculators' config and the head's weights (bf16; ``d2t`` as is) without the embedding and the
    verifier's copies: vLLM shares the target's embedding when a head carries none."""
    from safetensors.torch import save_file

    out.mkdir(parents=True, exist_ok=True)
    skip = ("embed_tokens.", "verifier_lm_head.", "verifier_norm.", "t2d")
    state = {k: (v.detach().to(torch.bfloat16) if v.is_floating_point() else v.detach()).cpu().contiguous()
             for k, v in head.state_dict().items() if not k.startswith(skip)}
    save_file(state, str(out / "model.safetensors"), metadata={"format": "pt"})
    cfg = head.config.to_dict()
    cfg.pop("auto_map", None)  # vLLM reads speculators' config itself: no remote code to trust
    (out / "config.json").write_text(json.dumps(cfg, indent=2, sort_keys=True) + "\n")
    return sorted(state)
