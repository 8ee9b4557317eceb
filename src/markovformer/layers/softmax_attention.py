"""Vanilla softmax attention (the Transformer baseline) through ``scaled_dot_product_attention``."""

from __future__ import annotations

import torch.nn.functional as F
from torch import nn

from markovformer.layers.attention import CoreOutput, SelfAttention
from markovformer.ops.banded_attention import banded_attention_naive
from markovformer.ops.banded_attention.naive import dense_allowed
from markovformer.ops.masked_softmax import masked_sdpa


class SoftmaxCore(nn.Module):
    def __init__(self, *, causal: bool, dropout: float = 0.0) -> None:
        super().__init__()
        self.causal, self.dropout = causal, dropout

    def forward(self, x, q, k, v, attention_mask=None, return_weights=False, q_raw=None) -> CoreOutput:
        dropout = self.dropout if self.training else 0.0
        if return_weights:
            heads, weights = banded_attention_naive(
                q, k, v, window=None, causal=self.causal, attention_mask=attention_mask, dropout_p=dropout
            )
            return CoreOutput(heads, {}, weights)
        if attention_mask is None:
            return CoreOutput(
                F.scaled_dot_product_attention(q, k, v, dropout_p=dropout, is_causal=self.causal), {}, None
            )
        allowed = dense_allowed(q.shape[-2], None, self.causal, attention_mask, q.device)
        return CoreOutput(masked_sdpa(q, k, v, allowed, dropout), {}, None)


class SoftmaxAttention(SelfAttention):
    """Plain multi-head softmax attention over all (allowed) keys; no Markov bias."""

    def __init__(
        self, *, d_model: int, n_heads: int, causal: bool = True, dropout: float = 0.0, rotary: bool = True
    ) -> None:
        core = SoftmaxCore(causal=causal, dropout=dropout)
        super().__init__(d_model=d_model, n_heads=n_heads, cores=[core], heads_per_core=[n_heads], rotary=rotary)


__all__ = ["SoftmaxAttention", "SoftmaxCore"]
