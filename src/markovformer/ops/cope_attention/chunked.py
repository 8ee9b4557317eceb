"""CoPE attention over query chunks, O(T) memory (O(T·W) time with a window).

A query's logits on the integer positions, q_t·e[p] for p = 0..P-1, are computed once per query ((B, H, R, P), as in
the paper), and each key's fractional position p_{t,j} interpolates between two of them: q·e(p) is linear in e.
A chunk builds its (chunk, keys) block of gates, positions (one reverse cumulative sum along the keys, which are in
increasing position) and scores, under activation checkpointing, so nothing of size T×T exists.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

from markovformer.ops.lags import lag_matrix, visible
from markovformer.ops.masked_softmax import masked_softmax
from markovformer.ops.precision import compute_dtype
from markovformer.ops.query_chunks import Chunk, ChunkMask, query_chunks, recomputed

DEFAULT_CHUNK = 64  # queries per chunk


def cope_block(q_rows: Tensor, k_keys: Tensor, v_keys: Tensor, position_embeddings: Tensor, allowed: Tensor) -> Tensor:
    """q_rows (B, H, R, Dh), keys (B, H, S, D*) in increasing position, position_embeddings (P, Dh), allowed (B or
    1, 1, R, S) -> (B, H, R, Dv). Half-precision inputs count positions and score in float32 (bfloat16 positions
    near 32..63 step by 0.25) and are cast back for the value product."""
    npos, compute = position_embeddings.shape[0], compute_dtype(q_rows)
    logits = (q_rows @ k_keys.transpose(-1, -2)).to(compute) / math.sqrt(q_rows.shape[-1])
    gates = torch.where(allowed, torch.sigmoid(logits), 0.0)
    place = gates.flip(-1).cumsum(-1).flip(-1).clamp(max=npos - 1)  # Σ_{l >= j} g_{t,l}
    below = place.floor()
    fraction = place - below
    on_integers = (q_rows @ position_embeddings.to(q_rows.dtype).T).to(compute)  # (B, H, R, P): q_t·e[p]
    lower = on_integers.gather(-1, below.long())
    upper = on_integers.gather(-1, below.long().add(1).clamp(max=npos - 1))
    scores = logits + (1 - fraction) * lower + fraction * upper
    return masked_softmax(scores, allowed).to(v_keys.dtype) @ v_keys


def _chunk(q_rows: Tensor, k_keys: Tensor, v_keys: Tensor, position_embeddings: Tensor, mask: ChunkMask,
           chunk: Chunk) -> Tensor:  # fmt: skip
    """One chunk, its mask built here: the backward pass rebuilds it instead of keeping it."""
    return cope_block(q_rows, k_keys, v_keys, position_embeddings, mask.allowed(chunk))


def cope_attention_chunked(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    position_embeddings: Tensor,
    *,
    window: int | None,
    attention_mask: Tensor | None = None,
    chunk_size: int = DEFAULT_CHUNK,
    segment_ids: Tensor | None = None,
) -> Tensor:
    """(B, H, T, Dv); arguments as ``cope_attention``."""
    mask = ChunkMask.of(q, window=window, causal=True, attention_mask=attention_mask, segment_ids=segment_ids)
    outputs = [recomputed(_chunk, q[:, :, chunk.rows], k[:, :, chunk.keys], v[:, :, chunk.keys], position_embeddings,
                          mask, chunk) for chunk in query_chunks(q.shape[-2], chunk_size, window)]  # fmt: skip
    return torch.cat(outputs, dim=-2)


def cope_over_cache(
    q: Tensor,
    keys: Tensor,
    values: Tensor,
    position_embeddings: Tensor,
    query_positions: Tensor,
    key_positions: Tensor,
    key_real: Tensor,
    *,
    window: int | None,
) -> Tensor:
    """CoPE attention of new queries (B, H, Tq, Dh) at ``query_positions`` over cache slots (B, H, C, Dh) at
    ``key_positions`` (C,; < 0: empty) in position order (a cache's ``visible`` slots);
    key_real (B, C). -> (B, H, Tq, Dv)."""
    allowed = visible(lag_matrix(query_positions, key_positions), window, causal=True) & (key_positions >= 0)
    return cope_block(q, keys, values, position_embeddings, allowed[None, None] & key_real[:, None, None, :])
