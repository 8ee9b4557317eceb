"""Stick-breaking attention in log space over query chunks, O(T) memory (O(T·W) time with a window).

With z_{t,j} = q_t·k_j/√Dh and β = sigmoid(z), the weight of key j is β_{t,j} Π_{j<l} (1 - β_{t,l}) over the
allowed keys l after j, so log A_{t,j} = z_{t,j} - Σ_{l>=j} softplus(z_{t,l}) (as log σ(z) = z - softplus(z) and
log(1 - σ(z)) = -softplus(z)): one reverse cumulative sum of softplus along the keys. A chunk of queries builds its
(chunk, keys) block only (keys in increasing position; disallowed keys add 0 to the sum and take no share), under
activation checkpointing, so nothing of size T×T exists and autograd gives every gradient.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor

from markovformer.ops.precision import compute_dtype
from markovformer.ops.query_chunks import Chunk, ChunkMask, query_chunks, recomputed
from markovformer.ops.stick_breaking_attention.naive import stick_breaking_allowed

DEFAULT_CHUNK = 64  # queries per chunk


def stick_breaking_block(q_rows: Tensor, k_keys: Tensor, v_keys: Tensor, allowed: Tensor) -> Tensor:
    """q_rows (B, H, R, Dh), keys (B, H, S, D*) in increasing position, allowed (B or 1, 1, R, S) -> (B, H, R, Dv).
    Half-precision inputs are broken in float32 and cast back."""
    compute = compute_dtype(q_rows)
    logits = (q_rows @ k_keys.transpose(-1, -2)).to(compute) / math.sqrt(q_rows.shape[-1])
    # -log(1 - β) = softplus(z) of each allowed key, exact at any z: F.softplus returns z itself above z = 20,
    # dropping e^{-z} (2e-9 at z = 20), far above float64's rounding
    spent = torch.where(allowed, -F.logsigmoid(-logits), 0.0)
    after_and_at = spent.flip(-1).cumsum(-1).flip(-1)  # Σ_{l >= j} over allowed keys
    # masked before exp: exp of a hidden key's logit can overflow, and where's backward would give 0 * inf = NaN
    weights = torch.exp(torch.where(allowed, logits - after_and_at, float("-inf")))
    return weights.to(v_keys.dtype) @ v_keys


def _chunk(q_rows: Tensor, k_keys: Tensor, v_keys: Tensor, mask: ChunkMask, chunk: Chunk) -> Tensor:
    """One chunk, its mask built here: the backward pass rebuilds it instead of keeping it."""
    return stick_breaking_block(q_rows, k_keys, v_keys, mask.allowed(chunk))


def stick_breaking_attention_chunked(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    *,
    window: int | None,
    attend_current: bool = False,
    attention_mask: Tensor | None = None,
    chunk_size: int = DEFAULT_CHUNK,
    segment_ids: Tensor | None = None,
) -> Tensor:
    """(B, H, T, Dv); arguments as ``stick_breaking_attention``."""
    mask = ChunkMask.of(q, window=window, causal=True, attention_mask=attention_mask, segment_ids=segment_ids,
                        sees_itself=attend_current)  # the rule of ``stick_breaking_allowed``
    outputs = [recomputed(_chunk, q[:, :, chunk.rows], k[:, :, chunk.keys], v[:, :, chunk.keys], mask, chunk)
               for chunk in query_chunks(q.shape[-2], chunk_size, window)]  # fmt: skip
    return torch.cat(outputs, dim=-2)


def stick_breaking_over_cache(
    q: Tensor,
    keys: Tensor,
    values: Tensor,
    query_positions: Tensor,
    key_positions: Tensor,
    key_real: Tensor,
    *,
    window: int | None,
    attend_current: bool = False,
) -> Tensor:
    """Stick-breaking attention of new queries (B, H, Tq, Dh) at ``query_positions`` over cache slots (B, H, C, Dh)
    at ``key_positions`` (C,; < 0: empty) in position order (a cache's ``visible`` slots);
    key_real (B, C). -> (B, H, Tq, Dv)."""
    allowed = stick_breaking_allowed(query_positions, key_positions, window, attend_current) & (key_positions >= 0)
    return stick_breaking_block(q, keys, values, allowed[None, None] & key_real[:, None, None, :])
