"""Attention of a few new queries over a key/value cache (incremental decoding), with per-lag Markov biases placed
by ``ops.lags``. Its reference is the full forward of the same layer: the model tests compare them at every step."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor

from markovformer.ops.lags import lag_matrix, lag_slot, visible
from markovformer.ops.masked_softmax import masked_softmax


def cached_attention(
    q: Tensor,
    keys: Tensor,
    values: Tensor,
    query_positions: Tensor,
    key_positions: Tensor,
    key_real: Tensor,
    *,
    window: int | None,
    past_bias: Tensor | None = None,
    query_log_decay: Tensor | None = None,
    key_log_decay: Tensor | None = None,
) -> Tensor:
    """Causal attention of queries over cached keys.

    Args:
        q: (B, H, Tq, Dh) queries at ``query_positions`` (Tq,).
        keys, values: (B, H, C, Dh) cache slots holding the keys at ``key_positions`` (C,); a slot with position
            < 0 is empty. The slots may be in any order (a rolling cache).
        key_real: (B, C) False where the slot holds padding (or nothing).
        window: W, the query at t sees keys t-W..t (W + 1 keys), or None for global scope.
        past_bias: (B, H, Tq, K) per-lag biases: slot k-1 is added to the score of the key at lag k.
        query_log_decay, key_log_decay: (B, H, Tq) and (B, H, C) cumulative log forget gates G of the queries and
            keys (forgetting attention, ALiBi): the score of query t on key j gains G_t - G_j. Both or neither.

    Returns:
        (B, H, Tq, Dh); a query with no visible key gives zeros.
    """
    lags = lag_matrix(query_positions, key_positions)  # (Tq, C)
    allowed = visible(lags, window, causal=True) & (key_positions >= 0)[None, :]
    allowed = allowed[None, None] & key_real[:, None, None, :]
    scores = torch.matmul(q, keys.transpose(-1, -2)) * q.shape[-1] ** -0.5
    if past_bias is not None:
        slots = lag_slot(lags, past_bias.shape[-1], "past")  # (Tq, C), -1 where the lag has no bias
        index = slots.clamp_min(0)[None, None].expand(*past_bias.shape[:2], -1, -1)
        scores = scores + torch.where(slots >= 0, past_bias.gather(-1, index), 0.0)
    if query_log_decay is not None:
        scores = scores + (query_log_decay[..., :, None] - key_log_decay[..., None, :])
    return torch.matmul(masked_softmax(scores, allowed).to(values.dtype), values)


def newest_query_attention(
    q: Tensor, keys: Tensor, values: Tensor, key_real: Tensor | None, *, past_bias: Tensor | None = None,
    key_log_decay: Tensor | None = None, empty_slots: int = 0,
) -> Tensor:  # fmt: skip
    """``cached_attention`` of one query (B, H, 1, Dh) over keys (B, H, C, Dh) in position order that end with its
    own (a cache's ``visible`` slots right after the query's key was written, every one within its window): the
    key in slot C-1-k is at lag k, so the lags are fixed and the Markov bias of lag k is a slice, not a gather.
    key_real (B, C) is False at padding and empty slots (None: no padding; then the first ``empty_slots`` slots,
    which no position has reached yet, are the only ones masked); key_log_decay (B, H, C) relative to the query."""
    count = keys.shape[2]
    if key_real is None and key_log_decay is None and not torch.compiler.is_compiling():
        # nothing masked: one kernel, the bias as its float mask (fewer operations; a compiled step fuses the
        # products below itself, and faster than this kernel)
        bias = None
        if (past_bias is not None and count > 1) or empty_slots:
            bias = q.new_zeros(*q.shape[:3], count)
        if past_bias is not None and count > 1:
            lags = min(past_bias.shape[-1], count - 1)
            placed = past_bias if lags == past_bias.shape[-1] else past_bias[..., :lags]
            bias[..., count - 1 - lags : count - 1] = placed.flip(-1)  # lag k at slot C-1-k
        if empty_slots:
            bias[..., :empty_slots] = torch.finfo(bias.dtype).min
        return F.scaled_dot_product_attention(q, keys, values, attn_mask=bias)
    scores = torch.matmul(q, keys.transpose(-1, -2)) * q.shape[-1] ** -0.5
    if past_bias is not None and count > 1:
        lags = min(past_bias.shape[-1], count - 1)
        bias = past_bias if lags == past_bias.shape[-1] else past_bias[..., :lags]
        scores[..., count - 1 - lags : count - 1].add_(bias.flip(-1))  # lag k at slot C-1-k
    if key_log_decay is not None:
        scores = scores - key_log_decay[..., None, :]
    if key_real is None:
        if empty_slots:
            scores[..., :empty_slots] = torch.finfo(scores.dtype).min
        weights = torch.softmax(scores, dim=-1, dtype=torch.float32 if scores.dtype not in (torch.float32,
                                torch.float64) else None)  # fmt: skip
        return torch.matmul(weights if weights.dtype == values.dtype else weights.to(values.dtype), values)
    # masked_softmax, in place and with the fewest operations (a decoding step pays for each)
    allowed = key_real.view(key_real.shape[0], 1, 1, count)
    scores = scores.masked_fill_(allowed.logical_not(), torch.finfo(scores.dtype).min)
    if scores.dtype in (torch.float32, torch.float64):
        weights = torch.softmax(scores, dim=-1)
    else:  # half precision: normalised in float32
        weights = torch.softmax(scores, dim=-1, dtype=torch.float32).to(scores.dtype)
    weights = weights * allowed.any(dim=-1, keepdim=True)  # a query with no visible key gives zeros
    return torch.matmul(weights if weights.dtype == values.dtype else weights.to(values.dtype), values)


__all__ = ["cached_attention", "newest_query_attention"]
