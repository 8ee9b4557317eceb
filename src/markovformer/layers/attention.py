"""The frame every self-attention kind shares: QKV projection, rotary position, per-head cores, output projection.

An attention kind is one or more *cores*, each a module that maps already-projected heads
``(x, q, k, v) -> heads`` for a slice of the heads. The frame splits the heads among its cores (hybrid "split"
attention has two), runs them and concatenates their outputs. To add a kind: write a core (see
``markov_attention.MarkovCore``), a small ``SelfAttention`` subclass that builds it, and register it in
``layers.registry``.
"""

from __future__ import annotations

from typing import NamedTuple

import torch
from torch import Tensor, nn

from markovformer.layers.position import RotaryEmbedding


class AttentionOutput(NamedTuple):
    output: Tensor  # (B, T, D)
    gates: dict[str, Tensor] | None  # direction -> (B, H_markov, T, K [+1]), when asked and the kind has gates
    weights: Tensor | None  # dense attention probabilities (B, H, T, T), when asked (small T only)


class CoreOutput(NamedTuple):
    heads: Tensor  # (B, h, T, Dh)
    gates: dict[str, Tensor]
    weights: Tensor | None  # (B, h, T, T) when asked


class SelfAttention(nn.Module):
    """Projections and head bookkeeping around one or more attention cores.

    Args:
        d_model, n_heads: model width and number of heads (Dh = d_model / n_heads).
        cores: modules with ``forward(x, q, k, v, attention_mask, return_weights, q_raw) -> CoreOutput``.
        heads_per_core: how many heads each core owns, in order; sums to n_heads.
        rotary: apply rotary position embedding to q and k before the cores.
    """

    def __init__(
        self, *, d_model: int, n_heads: int, cores: list[nn.Module], heads_per_core: list[int], rotary: bool
    ) -> None:
        super().__init__()
        if d_model % n_heads:
            raise ValueError(f"d_model={d_model} must be divisible by n_heads={n_heads}")
        if sum(heads_per_core) != n_heads or len(cores) != len(heads_per_core):
            raise ValueError(f"heads_per_core {heads_per_core} must assign all {n_heads} heads to the cores")
        self.d_model, self.n_heads, self.head_dim = d_model, n_heads, d_model // n_heads
        self.qkv = nn.Linear(d_model, 3 * d_model, bias=False)
        self.out_proj = nn.Linear(d_model, d_model, bias=False)
        self.rotary = RotaryEmbedding(self.head_dim) if rotary else None
        self.cores = nn.ModuleList(cores)
        self.heads_per_core = [h for h in heads_per_core]

    def forward(
        self,
        x: Tensor,
        attention_mask: Tensor | None = None,
        return_gates: bool = False,
        return_weights: bool = False,
    ) -> Tensor | AttentionOutput:
        """x: (B, T, D); attention_mask: (B, T), 1 = real token. Returns (B, T, D) or an AttentionOutput."""
        batch, seq_len, _ = x.shape
        q, k, v = self.qkv(x).view(batch, seq_len, 3, self.n_heads, self.head_dim).permute(2, 0, 3, 1, 4)
        q_raw = q
        if self.rotary is not None:
            q, k = self.rotary(q), self.rotary(k)
        heads, gates, weights = [], {}, []
        start = 0
        for core, count in zip(self.cores, self.heads_per_core, strict=True):
            if count == 0:
                continue
            part = slice(start, start + count)
            start += count
            result = core(x, q[:, part], k[:, part], v[:, part], attention_mask, return_weights, q_raw[:, part])
            heads.append(result.heads)
            gates.update(result.gates)
            weights.append(result.weights)
        merged = heads[0] if len(heads) == 1 else torch.cat(heads, dim=1)
        output = self.out_proj(merged.transpose(1, 2).reshape(batch, seq_len, self.d_model))
        if not (return_gates or return_weights):
            return output
        return AttentionOutput(
            output,
            gates if return_gates else None,
            torch.cat(weights, dim=1) if return_weights else None,
        )
