"""An EAGLE-3 head trained here, for the target it will draft for (``make drafter``).

The recipe is the one vLLM's ``speculators`` documents, run on the machine at hand:

1. **Prompts** that are not the evaluation panels (:mod:`tools/make_workloads.py --train
   <file>`: the bundled generators on another seed, every evaluation prompt dropped, plus
   questions about Python's standard library), or the user's own JSONL (``DATA=``).
2. **Responses from the target itself** (self-distillation), generated greedily through a real
   vLLM server (:mod:`specnb.drafter.generate`): the head learns what *this* target says, on the
   engine that will serve it. Token ids come from the server, so what is trained on is what
   the engine tokenised.
3. **The target's hidden states** at the three layers EAGLE-3 reads (2, L/2, L-3 by
   speculators' and vLLM's convention) and its last layer, from one ``transformers`` forward per
   conversation (:mod:`specnb.drafter.train`).
4. **Training** speculators' own model class (``Eagle3DraftModel``, one decoder layer, a reduced
   draft vocabulary from the responses' token counts, the verifier's embedding and head rows),
   with its training-time test (three drafting steps unrolled) and its KL loss against the
   target's distribution, in a short torch loop: speculators' trainer assumes CUDA (its fused loss
   is a Triton kernel, its attention flex attention compiled for a GPU), so the loop here calls
   the same model's ``forward`` with the ``eager`` loss and SDPA attention.
5. **Saved for vLLM unmodified**: speculators' config, the head's weights in bf16 without the
   embedding (vLLM shares the target's), ``d2t`` for the draft vocabulary; a provenance file
   with the command, the seed and the hashes of the prompts and responses; the training curve
   as a ledger (``ledgers/drafter-training/``) and its figure.

``speculators`` is not a dependency of the package: ``make drafter`` installs it and the three
libraries it imports (``--no-deps``: its own requirements pull torchvision and torchaudio, which
would replace the CPU build's torch). Serving the head needs only vLLM.
"""

from __future__ import annotations

__all__: list[str] = []
