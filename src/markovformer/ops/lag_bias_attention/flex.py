"""Markov attention through FlexAttention (CUDA): a ``score_mod`` that adds the gated per-lag bias, and a
``BlockMask`` for the window, causality, key padding and packed documents (``segment_ids``: a query sees keys of
its own document only), so the kernel skips every block outside the band and outside the query's document.

FlexAttention differentiates through the bias tensors it reads, so ``past_bias`` / ``future_bias`` get gradients
without any (T, T) tensor. It has no backward on CPU: ``flex_available`` says where this path exists, and the
dispatcher never picks it elsewhere. ``compiled=False`` runs FlexAttention's eager reference (dense, O(T²)), which
tests use to pin this file's score and mask functions to the naive path on a machine without a GPU.
"""

from __future__ import annotations

from functools import lru_cache

import torch
from torch import Tensor

from markovformer.ops.lags import visible
from markovformer.ops.precision import autocast_off


def flex_importable() -> bool:
    try:
        from torch.nn.attention import flex_attention  # noqa: F401
    except ImportError:
        return False
    return True


def flex_available(device: torch.device) -> bool:
    """True where this path runs forward and backward: CUDA devices with a torch that ships FlexAttention."""
    return device.type == "cuda" and flex_importable()


FLEX_MIN_HEAD_DIM = 16  # FlexAttention's compiled kernel refuses smaller query/key and value dimensions
# Shorter sequences are one of FlexAttention's 128-position blocks, where its kernel saves nothing over a dense one,
# and each new length compiles it again (17-23 s for a first step on an H100; most likely what a generate() call's
# 16-token prompt paid there, about 14 s that its per-step times do not account for).
FLEX_MIN_LENGTH = 128


def flex_supports(head_dim: int, value_dim: int) -> bool:
    """True when FlexAttention's kernel takes these head dimensions: both at least ``FLEX_MIN_HEAD_DIM``, and, on a
    torch whose FlexAttention takes only the head dimensions it lists (powers of two, in torch 2.6), listed."""
    listed = _listed_head_dim()
    return min(head_dim, value_dim) >= FLEX_MIN_HEAD_DIM and all(listed(dim) for dim in (head_dim, value_dim))


@lru_cache(maxsize=1)
def _listed_head_dim():
    """torch's own rule of the head dimensions FlexAttention takes, where it has one (a private helper of torch
    2.6, gone by 2.13, which takes any); else a rule that takes every dimension."""
    try:
        from torch.nn.attention._utils import _supported_head_dim
    except ImportError:
        return lambda dim: True
    return _supported_head_dim


@lru_cache(maxsize=1)
def compiled_flex_attention():
    """``flex_attention`` compiled once per process (its eager form materialises the full score matrix)."""
    from torch.nn.attention.flex_attention import flex_attention

    return torch.compile(flex_attention, dynamic=False)


def _mask_mod(window: int | None, causal: bool, present: Tensor | None, segments: Tensor | None = None):
    """The window and causality rule (``lags.visible``), key padding and, with ``segments`` (B, T) of packed
    documents (``ops.segments``, -1 = padding), the same-document rule as a FlexAttention mask function."""

    def mask_mod(b, h, q_idx, kv_idx):
        allowed = visible(q_idx - kv_idx, window, causal)
        if present is not None:
            allowed = allowed & present[b, kv_idx]
        if segments is not None:
            key = segments[b, kv_idx]
            allowed = allowed & (key == segments[b, q_idx]) & (key >= 0)
        return allowed

    return mask_mod


@lru_cache(maxsize=16)
def _cached_block_mask(seq_len: int, window: int | None, causal: bool, device: torch.device):
    from torch.nn.attention.flex_attention import create_block_mask

    mask_mod = _mask_mod(window, causal, None)
    return create_block_mask(mask_mod, None, None, seq_len, seq_len, device=device, _compile=device.type == "cuda")


def block_mask_for(seq_len: int, window: int | None, causal: bool, attention_mask: Tensor | None, device: torch.device,
                   segment_ids: Tensor | None = None):  # fmt: skip
    """The ``BlockMask`` of the visibility rule (``lags.visible``) for this window, causality, key padding and
    packed documents (``segment_ids`` (B, T), -1 = padding); one mask per batch row when either is given."""
    if attention_mask is None and segment_ids is None:  # the same for every call of this shape: build it once
        return _cached_block_mask(seq_len, window, causal, device)
    from torch.nn.attention.flex_attention import create_block_mask

    present = None if attention_mask is None else attention_mask.to(device).bool()
    segments = None if segment_ids is None else segment_ids.to(device).long()
    batch = (present if present is not None else segments).shape[0]
    mask_mod = _mask_mod(window, causal, present, segments)
    # Compiled on CUDA, so the mask is evaluated block by block, never as a (B, T, T) tensor.
    return create_block_mask(mask_mod, batch, None, seq_len, seq_len, device=device, _compile=device.type == "cuda")


def _score_mod(past_bias: Tensor | None, future_bias: Tensor | None, reach_past: int, reach_future: int):
    """Add past_bias[b, h, t, k-1] to the score on key t-k (1 <= k <= K) and future_bias[..., k-1] on key t+k."""
    past_count = 0 if past_bias is None else min(past_bias.shape[-1], reach_past)
    future_count = 0 if future_bias is None else min(future_bias.shape[-1], reach_future)

    def score_mod(score, b, h, q_idx, kv_idx):
        lag = q_idx - kv_idx
        if past_count:
            slot = (lag - 1).clamp(0, past_count - 1)
            score = torch.where((lag >= 1) & (lag <= past_count), score + past_bias[b, h, q_idx, slot], score)
        if future_count:
            slot = (-lag - 1).clamp(0, future_count - 1)
            score = torch.where((lag <= -1) & (lag >= -future_count), score + future_bias[b, h, q_idx, slot], score)
        return score

    return score_mod


@autocast_off
def lag_bias_attention_flex(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    past_bias: Tensor | None = None,
    future_bias: Tensor | None = None,
    *,
    window: int | None,
    causal: bool,
    attention_mask: Tensor | None = None,
    segment_ids: Tensor | None = None,
    compiled: bool = True,
) -> Tensor:
    """Local (``window``) or global (``window=None``) Markov attention; shapes as the naive reference.

    ``segment_ids`` (B, T) long: packed documents (``ops.segments``), a query sees keys of its own only.
    No dropout (FlexAttention has none). A query with no visible key returns zeros. Inputs of mixed dtypes (autocast
    leaves rotated queries and keys in float32 beside bfloat16 values) run in their common dtype, autocast off.
    """
    from torch.nn.attention.flex_attention import flex_attention

    seq_len = q.shape[-2]
    unbounded = seq_len  # no lag reaches further than the sequence
    reach_past = unbounded if window is None else window
    reach_future = 0 if causal else reach_past
    dtype = torch.promote_types(torch.promote_types(q.dtype, k.dtype), v.dtype)
    q, k, v = q.to(dtype), k.to(dtype), v.to(dtype)
    biases = [None if b is None else b.to(dtype) for b in (past_bias, future_bias)]
    score_mod = _score_mod(*biases, reach_past, reach_future)
    block_mask = block_mask_for(seq_len, window, causal, attention_mask, q.device, segment_ids)
    attend = compiled_flex_attention() if compiled else flex_attention
    return attend(q, k, v, score_mod=score_mod, block_mask=block_mask)
