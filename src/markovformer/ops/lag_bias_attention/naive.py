"""Reference Markov-biased attention: dense (T, T) scores, masks and bias. For tests and small inputs only."""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor

from markovformer.ops.lags import dense_lag_bias, lag_matrix, visible
from markovformer.ops.masked_softmax import masked_softmax


def dense_allowed(
    seq_len: int, window: int | None, causal: bool, attention_mask: Tensor | None, device: torch.device
) -> Tensor:
    """Boolean (B or 1, 1, T, T): key j visible from query t under the window, causality and key padding."""
    positions = torch.arange(seq_len, device=device)
    allowed = visible(lag_matrix(positions, positions), window, causal)[None, None]
    if attention_mask is not None:
        allowed = allowed & attention_mask.bool()[:, None, None, :]
    return allowed


def lag_bias_attention_naive(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    past_bias: Tensor | None = None,
    future_bias: Tensor | None = None,
    *,
    window: int | None,
    causal: bool,
    attention_mask: Tensor | None = None,
    dropout_p: float = 0.0,
) -> tuple[Tensor, Tensor]:
    """Return (output (B, H, T, Dv), attention probabilities (B, H, T, T))."""
    seq_len = q.shape[-2]
    positions = torch.arange(seq_len, device=q.device)
    scores = (q @ k.transpose(-1, -2)) / math.sqrt(q.shape[-1])
    bias = dense_lag_bias(lag_matrix(positions, positions), past_bias, future_bias)
    if bias is not None:
        scores = scores + bias
    probs = masked_softmax(scores, dense_allowed(seq_len, window, causal, attention_mask, q.device))
    attended = F.dropout(probs, dropout_p) if dropout_p > 0 else probs
    return attended @ v, probs
