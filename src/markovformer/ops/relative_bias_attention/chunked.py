"""Relative-bias attention in O(T) memory: exact softmax over query chunks, each recomputed in the backward pass.

The bias depends on the lag only, so a chunk of queries looks its (chunk, keys) block up from the (H, 2T-1)
per-lag vector: nothing of size T×T exists. Each chunk runs under activation checkpointing; every gradient (q, k, v
and the per-lag biases through the lookup) is autograd's. A chunk reads only the keys its window and causality
allow: O(T·W) time for local scope, O(T²) (half of it when causal) for global.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor

from markovformer.ops.lags import lag_matrix, visible
from markovformer.ops.masked_softmax import masked_softmax
from markovformer.ops.query_chunks import query_chunks, recomputed
from markovformer.ops.segments import same_segment

DEFAULT_CHUNK = 64  # queries per chunk


def _chunk(q_rows, k_keys, v_keys, lag_bias, columns, allowed, dropout_p: float) -> Tensor:
    """q_rows (B, H, R, Dh), keys (B, H, S, D*), lag_bias (H, 2T-1), columns (R, S) its column per (query, key),
    allowed (B or 1, 1, R, S) -> (B, H, R, Dv)."""
    scores = q_rows @ k_keys.transpose(-1, -2) / math.sqrt(q_rows.shape[-1]) + lag_bias[:, columns]
    probs = masked_softmax(scores, allowed)
    if dropout_p > 0:
        probs = F.dropout(probs, dropout_p)
    return probs @ v_keys


def relative_bias_attention_chunked(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    lag_bias: Tensor,
    *,
    window: int | None,
    causal: bool,
    attention_mask: Tensor | None = None,
    dropout_p: float = 0.0,
    chunk_size: int = DEFAULT_CHUNK,
    segment_ids: Tensor | None = None,
) -> Tensor:
    """(B, H, T, Dv); arguments as ``relative_bias_attention`` (``segment_ids`` masked per chunk block)."""
    seq_len = q.shape[-2]
    lag_bias = lag_bias.to(q.dtype)
    positions = torch.arange(seq_len, device=q.device)
    key_real = None if attention_mask is None else attention_mask.bool()[:, None, None, :]
    outputs = []
    for start, end, low, high in query_chunks(seq_len, chunk_size, window, causal):
        lags = lag_matrix(positions[start:end], positions[low:high])
        allowed = visible(lags, window, causal)[None, None]
        if key_real is not None:
            allowed = allowed & key_real[..., low:high]
        if segment_ids is not None:
            allowed = allowed & same_segment(segment_ids, slice(start, end), slice(low, high))
        pieces = (q[:, :, start:end], k[:, :, low:high], v[:, :, low:high], lag_bias, lags + seq_len - 1, allowed)
        outputs.append(recomputed(_chunk, *pieces, dropout_p))
    return torch.cat(outputs, dim=-2)
