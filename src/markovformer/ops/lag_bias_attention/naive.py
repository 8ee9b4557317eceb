"""Reference Markov-biased attention: dense (T, T) scores, masks and bias. For tests and small inputs only."""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor

from markovformer.ops.lags import dense_lag_bias, lag_matrix, visible
from markovformer.ops.masked_softmax import masked_softmax
from markovformer.ops.segments import same_segment


def dense_allowed(
    seq_len: int, window: int | None, causal: bool, attention_mask: Tensor | None, device: torch.device,
    segment_ids: Tensor | None = None,
) -> Tensor:  # fmt: skip
    """Boolean (B or 1, 1, T, T): key j visible from query t under the window, causality and key padding (and, with
    ``segment_ids`` (B, T) of packed documents, in the query's document only)."""
    positions = torch.arange(seq_len, device=device)
    allowed = visible(lag_matrix(positions, positions), window, causal)[None, None]
    if attention_mask is not None:
        allowed = allowed & attention_mask.bool()[:, None, None, :]
    if segment_ids is not None:
        allowed = allowed & same_segment(segment_ids.to(device))
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
    segment_ids: Tensor | None = None,
) -> tuple[Tensor, Tensor]:
    """Return (output (B, H, T, Dv), attention probabilities (B, H, T, T)), both in q's dtype (the other inputs are
    cast to it, as the fast paths do). ``segment_ids``: see ``dense_allowed``."""
    k, v, past_bias, future_bias = (None if x is None else x.to(q.dtype) for x in (k, v, past_bias, future_bias))
    seq_len = q.shape[-2]
    positions = torch.arange(seq_len, device=q.device)
    scores = (q @ k.transpose(-1, -2)) / math.sqrt(q.shape[-1])
    bias = dense_lag_bias(lag_matrix(positions, positions), past_bias, future_bias)
    if bias is not None:
        scores = scores + bias
    probs = masked_softmax(scores, dense_allowed(seq_len, window, causal, attention_mask, q.device, segment_ids))
    attended = F.dropout(probs, dropout_p) if dropout_p > 0 else probs
    return attended @ v, probs
