"""Banded (look-around) Markov attention: O(T·W) time and memory, contiguous 3-D ``bmm`` only.

The sequence is cut into query blocks of C positions. Block b's queries see the keys
``[bC - W_left, bC + C + W_right)``: one contiguous window of L = C + W_left + W_right keys, gathered once into a
(B·H·nb, L, Dh) tensor so both matmuls are plain batched 3-D products (5-D broadcast matmuls are far slower in
backward on CPU). Per-lag biases are scattered straight into the (C, L) score rows; no T×T tensor exists.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor

from markovformer.ops.lags import lag_key_offsets, lag_matrix, visible
from markovformer.ops.masked_softmax import masked_softmax

MIN_BLOCK = 16  # measured best for W <= 16 on CPU: smaller blocks starve the matmuls, larger ones waste the band


def default_block_size(window: int) -> int:
    return max(window, MIN_BLOCK)


def _windows(x: Tensor, left: int, right: int, block: int, num_blocks: int) -> Tensor:
    """(B, H, T, D) -> (B·H·nb, L, D): the key window of every query block, zero-padded at the edges."""
    batch, heads, seq_len, dim = x.shape
    padded = F.pad(x, (0, 0, left, num_blocks * block - seq_len + right))
    span = block + left + right
    windows = padded.unfold(2, span, block)  # (B, H, nb, D, L), a view
    return windows.transpose(-1, -2).reshape(batch * heads * num_blocks, span, dim)


def banded_attention_banded(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    past_bias: Tensor | None = None,
    future_bias: Tensor | None = None,
    *,
    window: int,
    causal: bool,
    attention_mask: Tensor | None = None,
    dropout_p: float = 0.0,
    block_size: int | None = None,
) -> Tensor:
    """Local-scope Markov attention. Shapes as the naive reference; returns (B, H, T, Dv)."""
    batch, heads, seq_len, head_dim = q.shape
    block = block_size or default_block_size(window)
    num_blocks = -(-seq_len // block)
    left, right = window, (0 if causal else window)
    span = block + left + right

    q_blocks = F.pad(q * (1.0 / math.sqrt(head_dim)), (0, 0, 0, num_blocks * block - seq_len))
    q_blocks = q_blocks.reshape(batch * heads * num_blocks, block, head_dim)
    scores = torch.bmm(q_blocks, _windows(k, left, right, block, num_blocks).transpose(1, 2))

    # Query i of a block sits at window offset left + i; a lag beyond the window can never be seen.
    query_offsets = torch.arange(block, device=q.device) + left
    for bias, direction, reach in ((past_bias, "past", left), (future_bias, "future", right)):
        if bias is None or reach == 0:
            continue
        bias = bias[..., :reach]
        index = lag_key_offsets(query_offsets, bias.shape[-1], direction)
        bias_blocks = F.pad(bias, (0, 0, 0, num_blocks * block - seq_len)).to(scores.dtype)
        bias_blocks = bias_blocks.reshape(batch * heads * num_blocks, block, bias.shape[-1])
        scores = scores.scatter_add(-1, index.expand_as(bias_blocks), bias_blocks)

    key_offsets = torch.arange(span, device=q.device)
    band = visible(lag_matrix(query_offsets, key_offsets), window, causal)  # (C, L)
    key_present = torch.ones(batch, seq_len, device=q.device) if attention_mask is None else attention_mask
    key_present = F.pad(key_present.to(q.dtype), (left, num_blocks * block - seq_len + right))
    key_present = key_present.unfold(1, span, block).bool()  # (B, nb, L); out-of-range keys are absent
    allowed = band[None, None, None] & key_present[:, None, :, None, :]  # (B, 1, nb, C, L)

    probs = masked_softmax(scores.view(batch, heads, num_blocks, block, span), allowed)
    if dropout_p > 0:
        probs = F.dropout(probs, dropout_p)
    probs = probs.reshape(batch * heads * num_blocks, block, span)
    out = torch.bmm(probs, _windows(v, left, right, block, num_blocks))
    return out.view(batch, heads, num_blocks * block, v.shape[-1])[:, :, :seq_len]
