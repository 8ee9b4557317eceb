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

from markovformer.ops.masked_softmax import masked_softmax
from markovformer.ops.query_chunks import Chunk, ChunkMask, query_chunks, recomputed

DEFAULT_CHUNK = 64  # queries per chunk


def _chunk(q_rows, k_keys, v_keys, lag_bias, mask: ChunkMask, chunk: Chunk, dropout_p: float) -> Tensor:
    """q_rows (B, H, R, Dh), keys (B, H, S, D*), lag_bias (H, 2T-1) -> (B, H, R, Dv). The chunk's bias columns and
    mask are built here: the backward pass rebuilds them instead of keeping them."""
    lags = mask.lags(chunk)
    scores = q_rows @ k_keys.transpose(-1, -2) / math.sqrt(q_rows.shape[-1]) + lag_bias[:, lags + mask.seq_len - 1]
    probs = masked_softmax(scores, mask.allowed(chunk, lags))
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
    lag_bias = lag_bias.to(q.dtype)
    mask = ChunkMask.of(q, window=window, causal=causal, attention_mask=attention_mask, segment_ids=segment_ids)
    outputs = [recomputed(_chunk, q[:, :, chunk.rows], k[:, :, chunk.keys], v[:, :, chunk.keys], lag_bias, mask, chunk,
                          dropout_p) for chunk in query_chunks(q.shape[-2], chunk_size, window, causal)]  # fmt: skip
    return torch.cat(outputs, dim=-2)
