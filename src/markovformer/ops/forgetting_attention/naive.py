"""Reference forgetting attention: the dense (T, T) decay bias D_{t,j}, masks and softmax. Tests and small T only."""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor

from markovformer.ops.lag_bias_attention.naive import dense_allowed
from markovformer.ops.masked_softmax import masked_softmax


def dense_decay_bias(log_forget: Tensor) -> Tensor:
    """(B, H, T) log forget gates -> (B, H, T, T) bias: D_{t,j} = sum_{l=j+1..t} log f_l for j <= t, and the
    mirror image sum_{l=t+1..j} log f_l for j > t (the bidirectional case), written with explicit sums."""
    seq_len = log_forget.shape[-1]
    positions = torch.arange(seq_len, device=log_forget.device)
    t, j = positions[:, None], positions[None, :]
    low, high = torch.minimum(t, j), torch.maximum(t, j)
    # l in (low, high]: the gates strictly after the earlier position, up to and including the later one
    between = (positions[None, None, :] > low[..., None]) & (positions[None, None, :] <= high[..., None])
    return torch.einsum("bhl,tjl->bhtj", log_forget, between.to(log_forget.dtype))


def forgetting_attention_naive(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    log_forget: Tensor,
    *,
    window: int | None,
    causal: bool,
    attention_mask: Tensor | None = None,
    dropout_p: float = 0.0,
    segment_ids: Tensor | None = None,
) -> tuple[Tensor, Tensor]:
    """Return (output (B, H, T, Dv), attention probabilities (B, H, T, T)); arguments as ``forgetting_attention``."""
    seq_len = q.shape[-2]
    scores = (q @ k.transpose(-1, -2)) / math.sqrt(q.shape[-1]) + dense_decay_bias(log_forget)
    probs = masked_softmax(scores, dense_allowed(seq_len, window, causal, attention_mask, q.device,
                                                     segment_ids))  # fmt: skip
    attended = F.dropout(probs, dropout_p) if dropout_p > 0 else probs
    return attended.to(v.dtype) @ v, probs
