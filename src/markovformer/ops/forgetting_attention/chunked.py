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

from markovformer.ops.lags import lag_matrix, visible
from markovformer.ops.masked_softmax import masked_softmax
from markovformer.ops.precision import compute_dtype
from markovformer.ops.query_chunks import query_chunks, recomputed
from markovformer.ops.segments import same_segment

DEFAULT_CHUNK = 64  # queries per chunk


def _chunk(q_rows, k_keys, v_keys, c_rows, c_keys, direction, allowed, dropout_p: float) -> Tensor:
    """One chunk: q_rows (B, H, R, Dh), keys (B, H, S, D*), prefix sums c_rows (B, H, R) and c_keys (B, H, S),
    direction (R, S) +1 for keys at or before the query and -1 after, allowed (B or 1, 1, R, S) -> (B, H, R, Dv)."""
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
    seq_len = q.shape[-2]
    prefix = log_forget.to(compute_dtype(log_forget)).cumsum(-1)  # differenced below: float32 at least
    positions = torch.arange(seq_len, device=q.device)
    key_real = None if attention_mask is None else attention_mask.bool()[:, None, None, :]
    outputs = []
    for start, end, low, high in query_chunks(seq_len, chunk_size, window, causal):
        lags = lag_matrix(positions[start:end], positions[low:high])
        allowed = visible(lags, window, causal)[None, None]
        direction = torch.where(lags >= 0, 1.0, -1.0).to(q.dtype)
        if key_real is not None:
            allowed = allowed & key_real[..., low:high]
        if segment_ids is not None:
            allowed = allowed & same_segment(segment_ids, slice(start, end), slice(low, high))
        pieces = (q[:, :, start:end], k[:, :, low:high], v[:, :, low:high], prefix[..., start:end],
                  prefix[..., low:high], direction, allowed)  # fmt: skip
        outputs.append(recomputed(_chunk, *pieces, dropout_p))
    return torch.cat(outputs, dim=-2)
