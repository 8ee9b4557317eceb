"""Softmax over allowed keys only, with rows that allow nothing returning zeros (never NaN): the explicit form
and the fused ``scaled_dot_product_attention`` form."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor

from markovformer.ops.precision import compute_dtype


def masked_softmax(scores: Tensor, allowed: Tensor) -> Tensor:
    """Softmax of ``scores`` along the last axis over entries where ``allowed`` is True.

    ``allowed`` broadcasts against ``scores``. Half-precision inputs are normalised in float32 and cast
    back. A row with no allowed entry, or whose allowed scores are all -inf, gets all-zero probabilities, so its
    attention output is zero.
    """
    # The dtype's most negative finite value, not -inf: exp underflows to exactly 0 beside any allowed entry, and
    # a row with nothing allowed stays finite (uniform) until it is zeroed below. The product with ``allowed`` also
    # zeroes the masked entries of a row whose allowed scores are all -inf (they would take its whole mass).
    scores = scores.masked_fill(~allowed, torch.finfo(scores.dtype).min)
    weights = torch.softmax(scores, dim=-1, dtype=compute_dtype(scores)) * allowed
    return weights.to(scores.dtype)


def masked_sdpa(q: Tensor, k: Tensor, v: Tensor, allowed: Tensor | None, dropout_p: float = 0.0) -> Tensor:
    """``scaled_dot_product_attention`` of (B, H, Tq, Dh) queries over (B, H, Tk, Dh) keys where ``allowed``
    (broadcasting to (B, H, Tq, Tk); None = every key) is True; a query with no allowed key returns zeros."""
    if allowed is None:
        return F.scaled_dot_product_attention(q, k, v, dropout_p=dropout_p)
    # SDPA returns NaN for a row with nothing allowed: let such rows see everything, then zero them.
    has_key = allowed.any(-1, keepdim=True)
    heads = F.scaled_dot_product_attention(q, k, v, attn_mask=allowed | ~has_key, dropout_p=dropout_p)
    return heads * has_key.to(heads.dtype)
