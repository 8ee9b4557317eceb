"""Linformer self-attention (Wang, Li, Khabsa, Fang & Ma 2020, "Linformer: Self-Attention with Linear Complexity").

Keys and values are compressed along the sequence by learned projections E, F ∈ R^{k×N} (N = ``max_position``,
k = ``linformer_k``), shared by the heads of a layer (the paper's headwise sharing):

    head = softmax(q (E K)ᵀ / √Dh) (F V)          O(T·k) time and memory

Every compressed row mixes every position, so each output reads the whole sequence, the future included:
Linformer is non-causal by construction and a causal layer is refused. Shorter inputs use the first T columns of
E and F (as the authors' fairseq code slices them). Padding: a real token's column is its rank among the real
tokens of its row, and padded keys/values are zeroed, so any padding leaves the real tokens' outputs unchanged.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from markovformer.layers.attention import CoreOutput, SelfAttention
from markovformer.ops.padding import zero_padding

CAUSAL_MESSAGE = (
    "Linformer is non-causal: its projections E, F mix keys and values of the whole sequence, so every output "
    "reads future positions (Wang et al. 2020 define it for encoders only). Use it with causal=False (sequence "
    "classification, token classification, CTC), or pick a causal kind such as 'retnet', 'rwkv' or 'hyena'."
)


class LinformerCore(nn.Module):
    """softmax(q (E K)ᵀ/√Dh)(F V) over already-projected heads; E, F (k, N) initialised Xavier-normal."""

    supports_state = False  # its length projections mix the whole sequence: no incremental decoding

    def __init__(self, *, max_position: int | None, linformer_k: int = 64, causal: bool = False, dropout: float = 0.0):
        super().__init__()
        if causal:
            raise ValueError(CAUSAL_MESSAGE)
        if max_position is None or max_position < 1 or linformer_k < 1:
            raise ValueError(
                f"Linformer needs max_position (the longest sequence, got {max_position!r}) and linformer_k >= 1 "
                f"(got {linformer_k!r})"
            )
        self.max_position, self.projected_length, self.dropout = max_position, linformer_k, dropout
        std = math.sqrt(2.0 / (linformer_k + max_position))
        self.key_projection = nn.Parameter(torch.randn(linformer_k, max_position) * std)  # E
        self.value_projection = nn.Parameter(torch.randn(linformer_k, max_position) * std)  # F

    def projections(self, seq_len: int, attention_mask: Tensor | None) -> tuple[Tensor, Tensor]:
        """E and F as used on this batch, (B, k, T) (or (1, k, T) without a mask): column t of a row is the rank of
        token t among the row's real tokens; padded columns are zero."""
        if seq_len > self.max_position:
            raise ValueError(f"sequence length {seq_len} exceeds the Linformer projections' length, max_positions="
                             f"{self.max_position} (pooling='cls' adds a position before the tokens)")  # fmt: skip
        if attention_mask is None:
            return self.key_projection[None, :, :seq_len], self.value_projection[None, :, :seq_len]
        real = attention_mask.long()
        rank = (real.cumsum(-1) - 1).clamp_min(0)  # (B, T)
        keep = real[:, None, :].to(self.key_projection.dtype)
        pair = (self.key_projection, self.value_projection)
        key_projection, value_projection = (weight[:, rank].transpose(0, 1) * keep for weight in pair)
        return key_projection, value_projection

    def forward(self, x, q, k, v, attention_mask=None, return_weights=False, q_raw=None, state=None) -> CoreOutput:
        """q, k, v (B, H, T, Dh). Returns heads (B, H, T, Dh) and, when asked, the effective token-to-token mixing
        softmax(...)·F (B, H, T, T), whose product with V is the output."""
        key_projection, value_projection = self.projections(q.shape[-2], attention_mask)
        key_projection, value_projection = key_projection.to(k.dtype), value_projection.to(v.dtype)
        keys = torch.einsum("brt,bhtd->bhrd", key_projection, k)
        values = torch.einsum("brt,bhtd->bhrd", value_projection, v)
        probs = torch.softmax(q @ keys.transpose(-1, -2) / math.sqrt(q.shape[-1]), dim=-1)
        probs = F.dropout(probs, self.dropout, self.training)
        heads = zero_padding(probs @ values, attention_mask, time_dim=2)
        weights = None
        if return_weights:
            weights = zero_padding(probs @ value_projection[:, None], attention_mask, time_dim=2)
        return CoreOutput(heads, {}, weights)


class LinformerAttention(SelfAttention):
    """Multi-head Linformer attention in the shared frame (QKV, rotary, W_O). Non-causal only."""

    def __init__(
        self, *, d_model: int, n_heads: int, max_position: int | None = None, linformer_k: int = 64,
        causal: bool = False, rotary: bool = True, attention_bias: bool = False, dropout: float = 0.0,
    ) -> None:  # fmt: skip
        core = LinformerCore(max_position=max_position, linformer_k=linformer_k, causal=causal, dropout=dropout)
        super().__init__(d_model=d_model, n_heads=n_heads, cores=[core], heads_per_core=[n_heads], rotary=rotary,
                         attention_bias=attention_bias)


__all__ = ["CAUSAL_MESSAGE", "LinformerAttention", "LinformerCore"]
