"""Forgetting attention in O(T) memory: exact softmax over query chunks, each chunk recomputed in the backward pass.

The decay bias is a difference of prefix sums, D_{t,j} = c_t - c_j with c = cumsum(log f) (for j <= t; the mirror
image c_j - c_t for j > t), so a chunk of queries builds its (chunk, keys) block of scores and bias from q, k and
c alone: nothing of size T×T exists. Each chunk runs under activation checkpointing, so autograd keeps only the
inputs and each chunk's output, and the backward rebuilds one chunk's block at a time; every gradient (q, k, v and
the log forget gates through the prefix sums) is autograd's. A causal chunk reads the keys up to its end, and with a
window only the W keys before its start: O(T·W) time for local scope, O(T²) (half of it when causal) for global.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor

from markovformer.ops.masked_softmax import masked_softmax
from markovformer.ops.precision import compute_dtype
from markovformer.ops.query_chunks import Chunk, ChunkMask, query_chunks, recomputed

DEFAULT_CHUNK = 64  # queries per chunk


def _chunk(q_rows, k_keys, v_keys, c_rows, c_keys, mask: ChunkMask, chunk: Chunk, dropout_p: float) -> Tensor:
    """One chunk: q_rows (B, H, R, Dh), keys (B, H, S, D*), prefix sums c_rows (B, H, R) and c_keys (B, H, S)
    -> (B, H, R, Dv). Its mask and signs are built here: the backward pass rebuilds them instead of keeping them."""
    lags = mask.lags(chunk)
    direction = torch.where(lags >= 0, 1.0, -1.0).to(q_rows.dtype)  # +1 for keys at or before the query, -1 after
    allowed = mask.allowed(chunk, lags)
    scores = q_rows @ k_keys.transpose(-1, -2) / math.sqrt(q_rows.shape[-1])
    # a signed difference, not |c_t - c_j|: abs has no gradient where gates of exactly 1 make the two sums equal
    scores = scores + direction * (c_rows[..., :, None] - c_keys[..., None, :])
    probs = masked_softmax(scores, allowed)  # in the bias's float32 when q, k are half precision
    if dropout_p > 0:
        probs = F.dropout(probs, dropout_p)
    return probs.to(v_keys.dtype) @ v_keys


def forgetting_attention_chunked(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    log_forget: Tensor,
    *,
    window: int | None,
    causal: bool,
    attention_mask: Tensor | None = None,
    dropout_p: float = 0.0,
    chunk_size: int = DEFAULT_CHUNK,
    segment_ids: Tensor | None = None,
) -> Tensor:
    """(B, H, T, Dv); arguments as ``forgetting_attention``. ``chunk_size``: queries per chunk. ``segment_ids``:
    packed documents, masked per chunk (the chunk's (R, S) block, no (T, T) tensor)."""
    prefix = log_forget.to(compute_dtype(log_forget)).cumsum(-1)  # differenced below: float32 at least
    mask = ChunkMask.of(q, window=window, causal=causal, attention_mask=attention_mask, segment_ids=segment_ids)
    outputs = []
    for chunk in query_chunks(q.shape[-2], chunk_size, window, causal):
        pieces = (q[:, :, chunk.rows], k[:, :, chunk.keys], v[:, :, chunk.keys], prefix[..., chunk.rows],
                  prefix[..., chunk.keys])  # fmt: skip
        outputs.append(recomputed(_chunk, *pieces, mask, chunk, dropout_p))
    return torch.cat(outputs, dim=-2)
