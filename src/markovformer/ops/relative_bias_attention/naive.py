"""Reference relative-bias attention: the dense (T, T) bias b_h(t - j) looked up lag by lag, masks and softmax.
Tests, inspection and small T only."""

from __future__ import annotations

import math

import torch.nn.functional as F
from torch import Tensor

from markovformer.ops.lag_bias_attention.naive import dense_allowed
from markovformer.ops.masked_softmax import masked_softmax


def dense_relative_bias(lag_bias: Tensor, seq_len: int) -> Tensor:
    """(H, 2T-1) per-lag biases (column ``lag + T - 1``) -> (H, T, T) with entry [h, t, j] = lag_bias[h, t-j+T-1]."""
    dense = lag_bias.new_empty(lag_bias.shape[0], seq_len, seq_len)
    for t in range(seq_len):
        for j in range(seq_len):
            dense[:, t, j] = lag_bias[:, t - j + seq_len - 1]
    return dense


def relative_bias_attention_naive(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    lag_bias: Tensor,
    *,
    window: int | None,
    causal: bool,
    attention_mask: Tensor | None = None,
    dropout_p: float = 0.0,
    segment_ids: Tensor | None = None,
) -> tuple[Tensor, Tensor]:
    """Return (output (B, H, T, Dv), attention probabilities (B, H, T, T)); arguments as
    ``relative_bias_attention``."""
    seq_len = q.shape[-2]
    scores = (q @ k.transpose(-1, -2)) / math.sqrt(q.shape[-1]) + dense_relative_bias(lag_bias, seq_len).to(q.dtype)
    probs = masked_softmax(scores, dense_allowed(seq_len, window, causal, attention_mask, q.device,
                                                     segment_ids))  # fmt: skip
    attended = F.dropout(probs, dropout_p) if dropout_p > 0 else probs
    return attended @ v, probs
