"""A decoder of a given shape with random weights, and one engine step of it: ``b`` sequences, each
with ``q`` new tokens (q = 1 decodes, q = K + 1 verifies K drafts) against ``L`` cached tokens.

What a step does, per layer: RMS norm, fused QKV projection, rotary embedding of the new tokens,
their keys and values written into the cache, attention of the new tokens over the cache (torch's
scaled-dot-product attention, grouped-query, causal to the lower right among the new tokens; a
local layer of a sliding-window model reads its last ``sliding_window`` tokens), output
projection, RMS norm, and the MLP (SiLU-gated) or, for a mixture of experts, the router's top-k and
the experts as one grouped matrix multiply (``torch._grouped_mm``, a per-expert loop where it is
missing). Then the final norm and the logits of every new token (verification needs all q).

It is not vLLM: no paged KV, no fused norms or activations, no quantized kernels. How far its
ratios are from an engine's is measured on CPU against ``specnb anatomy`` (docs/gpu.md).

torch and the standard library only.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from specnb.probe.shapes import Shape

__all__ = ["ProbeModel", "KvCache"]


@dataclass
class _Layer:
    # dense weights in a serving engine's layout, [out, in] (torch.nn.Linear's), applied by F.linear
    wqkv: torch.Tensor
    wo: torch.Tensor
    norm1: torch.Tensor
    norm2: torch.Tensor
    w_gate_up: torch.Tensor | None = None  # dense MLP [2i, h]
    w_down: torch.Tensor | None = None  # [h, i]
    router: torch.Tensor | None = None  # MoE [E, h]
    e_gate_up: torch.Tensor | None = None  # [E, h, 2mi]
    e_down: torch.Tensor | None = None  # [E, mi, h]


class KvCache:
    """Keys and values per layer, contiguous: [b, kv_heads, capacity, head_dim] each. ``shared``:
    every layer reads and writes one buffer (for a cache too large to hold per layer; its bytes
    still stream from memory once per layer, so the step's time is the same within noise)."""

    def __init__(self, shape: Shape, b: int, capacity: int, device: torch.device, dtype: torch.dtype,
                 shared: bool = False):
        kv = (b, shape.num_key_value_heads, capacity, shape.head_dim)
        n = 1 if shared else shape.num_hidden_layers
        self.k = [torch.zeros(kv, device=device, dtype=dtype) for _ in range(n)]
        self.v = [torch.zeros(kv, device=device, dtype=dtype) for _ in range(n)]
        self.shared = shared
        for t in self.k + self.v:  # filled, as a cache of real keys would be
            t.normal_(0, 1)

    def layer(self, i: int) -> tuple[torch.Tensor, torch.Tensor]:
        j = 0 if self.shared else i
        return self.k[j], self.v[j]

    @staticmethod
    def nbytes(shape: Shape, b: int, capacity: int, dtype_bytes: int, shared: bool = False) -> int:
        per_layer = 2 * b * shape.num_key_value_heads * capacity * shape.head_dim * dtype_bytes
        return per_layer * (1 if shared else shape.num_hidden_layers)


class ProbeModel:
    """The decoder's weights (random, in ``dtype``) and its step. ``shared_layers``: every layer
    uses the first layer's weights (for a model too large to hold; a layer's weights stream from
    memory either way, so the step's time is the same within noise for layers larger than the
    device's cache)."""

    def __init__(self, shape: Shape, device: torch.device, dtype: torch.dtype, shared_layers: bool = False,
                 seed: int = 0, exact_window: bool | None = None):
        self.shape, self.device, self.dtype, self.shared_layers = shape, device, dtype, shared_layers
        # a local layer's q > 1 step: the exact band mask (a dense boolean mask, which CUDA's flash
        # attention refuses), or, on a GPU, the lower-right causal mask over the first new token's
        # window: each new token then reads up to q - 1 keys more than its window (of thousands)
        self.exact_window = device.type != "cuda" if exact_window is None else exact_window
        torch.manual_seed(seed)
        h, d = shape.hidden_size, shape.head_dim
        self.q_heads, self.kv_heads = shape.num_attention_heads, shape.num_key_value_heads

        def w(*size: int, fan_in: int) -> torch.Tensor:
            t = torch.empty(size, device=device, dtype=dtype)
            return t.normal_(0, 1 / math.sqrt(fan_in))

        n = 1 if shared_layers else shape.num_hidden_layers
        self.layers: list[_Layer] = []
        for _ in range(n):
            lay = _Layer(wqkv=w((self.q_heads + 2 * self.kv_heads) * d, h, fan_in=h),
                         wo=w(h, self.q_heads * d, fan_in=self.q_heads * d),
                         norm1=torch.ones(h, device=device, dtype=dtype), norm2=torch.ones(h, device=device, dtype=dtype))
            if shape.moe:
                e, mi = shape.num_experts, shape.moe_intermediate_size
                lay.router = w(e, h, fan_in=h)
                lay.e_gate_up, lay.e_down = w(e, h, 2 * mi, fan_in=h), w(e, mi, h, fan_in=mi)
            else:
                i = shape.intermediate_size
                lay.w_gate_up, lay.w_down = w(2 * i, h, fan_in=h), w(h, i, fan_in=i)
            self.layers.append(lay)
        self.embed = w(shape.vocab_size, h, fan_in=h)
        self.lm_head = self.embed if shape.tie_word_embeddings else w(shape.vocab_size, h, fan_in=h)
        self.final_norm = torch.ones(h, device=device, dtype=dtype)
        self.inv_freq = 1.0 / (10000.0 ** (torch.arange(0, d, 2, device=device, dtype=torch.float32) / d))
        self.moe_kernel = self._moe_kernel() if shape.moe else None
        # the per-expert loop reads the counts on the host: such a step cannot be a CUDA graph
        self.capturable = self.moe_kernel != "loop"

    @staticmethod
    def nbytes(shape: Shape, dtype_bytes: int, shared_layers: bool = False) -> int:
        n = 1 if shared_layers else shape.num_hidden_layers
        emb = shape.vocab_size * shape.hidden_size * (1 if shape.tie_word_embeddings else 2)
        return (n * shape.layer_params() + emb) * dtype_bytes

    def _moe_kernel(self) -> str:
        """``grouped_mm`` where torch's grouped matrix multiply runs on this device and dtype, else
        ``loop`` (one matmul per expert with tokens: an upper bound on a fused kernel's time)."""
        if not hasattr(torch, "_grouped_mm"):
            return "loop"
        try:
            a = torch.zeros(16, 16, device=self.device, dtype=self.dtype)
            b = torch.zeros(2, 16, 16, device=self.device, dtype=self.dtype)
            torch._grouped_mm(a, b, offs=torch.tensor([8, 16], device=self.device, dtype=torch.int32))
            return "grouped_mm"
        except Exception:  # noqa: BLE001 - any refusal of the kernel means the loop
            return "loop"

    def _rms(self, x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        xf = x.float()
        return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + 1e-6)).to(x.dtype) * w

    def _rope(self, x: torch.Tensor, pos: torch.Tensor) -> torch.Tensor:
        # x [b, heads, q, d]; pos [q]
        ang = pos.float()[:, None] * self.inv_freq[None, :]
        cos, sin = ang.cos().to(x.dtype), ang.sin().to(x.dtype)
        x1, x2 = x[..., ::2], x[..., 1::2]
        return torch.cat((x1 * cos - x2 * sin, x1 * sin + x2 * cos), dim=-1)

    def _mlp(self, lay: _Layer, x: torch.Tensor) -> torch.Tensor:
        gate, up = F.linear(x, lay.w_gate_up).chunk(2, dim=-1)
        return F.linear(F.silu(gate) * up, lay.w_down)

    def _moe(self, lay: _Layer, x: torch.Tensor) -> torch.Tensor:
        s = self.shape
        weights, experts = torch.topk(torch.softmax(F.linear(x, lay.router).float(), dim=-1), s.num_experts_per_tok, dim=-1)
        weights = (weights / weights.sum(-1, keepdim=True)).to(x.dtype)
        flat = experts.reshape(-1)
        order = torch.argsort(flat)
        token_of = order // s.num_experts_per_tok
        xs = x[token_of]
        if self.moe_kernel == "grouped_mm":
            # the counts without a sync to the host (bincount sizes its output from the data), so the
            # step can be captured as a CUDA graph
            counts = torch.zeros(s.num_experts, device=x.device, dtype=torch.int64)
            counts.scatter_add_(0, flat, torch.ones_like(flat))
            offs = torch.cumsum(counts, 0).to(torch.int32)
            gate, up = torch._grouped_mm(xs, lay.e_gate_up, offs=offs).chunk(2, dim=-1)
            ys = torch._grouped_mm(F.silu(gate) * up, lay.e_down, offs=offs)
        else:
            ys = torch.empty_like(xs)
            counts = torch.bincount(flat, minlength=s.num_experts).tolist()
            start = 0
            for e, c in enumerate(counts):
                if c:
                    gate, up = (xs[start:start + c] @ lay.e_gate_up[e]).chunk(2, dim=-1)
                    ys[start:start + c] = (F.silu(gate) * up) @ lay.e_down[e]
                    start += c
        out = torch.zeros_like(x)
        out.index_add_(0, token_of, ys * weights.reshape(-1)[order][:, None])
        return out

    def step(self, tokens: torch.Tensor, cache: KvCache, cached: int) -> torch.Tensor:
        """One step: ``tokens`` [b, q] new tokens after ``cached`` tokens per sequence; writes
        their keys and values into ``cache`` and returns the logits of every new token [b*q, V]."""
        s = self.shape
        b, q = tokens.shape
        d = s.head_dim
        pos = torch.arange(cached, cached + q, device=self.device)
        x = self.embed[tokens.reshape(-1)]  # [b*q, h]
        total = cached + q
        mask = None
        if q > 1:
            from torch.nn.attention.bias import causal_lower_right
        band = None  # a local layer's mask (the same for every local layer): each new token reads its own window

        for i in range(s.num_hidden_layers):
            lay = self.layers[0 if self.shared_layers else i]
            qkv = F.linear(self._rms(x, lay.norm1), lay.wqkv)
            qh, kh, vh = qkv.view(b, q, -1, d).transpose(1, 2).split([self.q_heads, self.kv_heads, self.kv_heads], 1)
            qh, kh = self._rope(qh, pos), self._rope(kh, pos)
            kc, vc = cache.layer(i)
            kc[:, :, cached:total] = kh
            vc[:, :, cached:total] = vh
            local = s.is_local(i)
            lo = max(0, cached + 1 - s.sliding_window) if local else 0
            keys, values = kc[:, :, lo:total], vc[:, :, lo:total]
            if q > 1 and local and self.exact_window:
                if band is None:
                    qp = pos[:, None]
                    kp = torch.arange(lo, total, device=self.device)[None, :]
                    band = (kp <= qp) & (kp > qp - s.sliding_window)
                mask = band
            elif q > 1:
                mask = causal_lower_right(q, total - lo)
            att = F.scaled_dot_product_attention(qh, keys, values, attn_mask=mask,
                                                 enable_gqa=self.q_heads != self.kv_heads)
            x = x + F.linear(att.transpose(1, 2).reshape(b * q, -1), lay.wo)
            y = self._rms(x, lay.norm2)
            x = x + (self._moe(lay, y) if s.moe else self._mlp(lay, y))
        return F.linear(self._rms(x, self.final_norm), self.lm_head)
