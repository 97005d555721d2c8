"""An EAGLE-3 head's drafts along a given text, as the engine would propose them (for ``specnb predict``).

vLLM drafts with an EAGLE-3 head greedily (``draft_sample_method = "greedy"``, its default): the
drafts are the head's argmax, with no draft distribution, so a draft is accepted with the
target's probability of it at the request's temperature, as an n-gram draft is
(:mod:`specnb.analysis.predicted`). Along a sampled text the engine's steps are fixed by the text
itself: the token emitted at a drafted position equals the draft exactly when the draft was
accepted. So one target forward over the text (its aux layers' states, in ``transformers``) and
one pass of the head over them with the text's own tokens fed back (the head's training-time
test: step ``m``'s input is the text's token where the head drafted ``m`` tokens before it) give
every draft the engine makes *up to and including a step's first mismatch*: before it, the
drafts are the text, which is what teacher forcing feeds. Drafts after a mismatch would need the
head run on its own rejected draft; the prediction does not need them (see
:func:`specnb.analysis.predicted.summarize_path_steps`; the steps are
:func:`specnb.analysis.predicted.eagle_walk`'s).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

__all__ = ["HeadDrafter"]


class HeadDrafter:
    """A committed head (``make drafter``'s folder) and its target, in fp32 on ``device``."""

    def __init__(self, target: str | Path, head: str | Path, device: str = "cpu"):
        import torch
        from safetensors.torch import load_file
        from transformers import AutoModelForCausalLM

        from specnb.drafter import train as tr

        cfg = json.loads((Path(head) / "config.json").read_text())
        self.layers = list(cfg["eagle_aux_hidden_state_layer_ids"])
        weights = load_file(str(Path(head) / "model.safetensors"))
        d2t = weights["d2t"].long()
        t2d = torch.zeros(int(json.loads((Path(target) / "config.json").read_text())["vocab_size"]), dtype=torch.bool)
        t2d[torch.arange(len(d2t)) + d2t] = True
        self.d2t = d2t
        settings = tr.TrainSettings(draft_vocab=len(d2t))
        self.head = tr.build_head(str(target), t2d, d2t, settings)
        missing, unexpected = self.head.load_state_dict({k: v.float() if v.is_floating_point() else v
                                                         for k, v in weights.items()}, strict=False)
        if unexpected or [k for k in missing if not k.startswith(("embed_tokens.", "verifier_", "t2d"))]:
            raise ValueError(f"{head}: not a head of {target} (missing {missing}, unexpected {unexpected})")
        self.head.to(device).eval()
        self.target = AutoModelForCausalLM.from_pretrained(str(target), dtype=torch.float32).to(device).eval()
        self.device = device

    def drafts(self, ids: Sequence[int], k: int) -> list[list[int]]:
        """``out[m][j]``: the target token the head drafts ``m + 1`` positions after token ``j + 1``
        from the target's state at ``j`` (the text's tokens fed where earlier drafts stand)."""
        import torch

        with torch.no_grad():
            x = torch.tensor([list(ids)], dtype=torch.long, device=self.device)
            hs = self.target.model(input_ids=x, output_hidden_states=True).hidden_states
            aux = torch.cat([hs[i][0] for i in self.layers], dim=-1)[None, :-1]
            n = aux.shape[1]
            got = self.head(aux, x[:, 1:], torch.zeros(1, n, dtype=torch.long, device=self.device),
                            position_ids=torch.arange(1, n + 1, device=self.device)[None], ttt_steps=k)
        return [(d[0].cpu() + self.d2t[d[0].cpu()]).tolist() for d in got]
