"""Softmax over allowed keys only, with rows that allow nothing returning zeros (never NaN)."""

from __future__ import annotations

import torch
from torch import Tensor


def masked_softmax(scores: Tensor, allowed: Tensor) -> Tensor:
    """Softmax of ``scores`` along the last axis over entries where ``allowed`` is True.

    ``allowed`` broadcasts against ``scores``. Half-precision inputs are normalised in float32 and cast
    back. A row with no allowed entry gets all-zero probabilities, so its attention output is zero.
    """
    # The dtype's most negative finite value, not -inf: exp underflows to exactly 0 beside any allowed entry, and
    # a row with nothing allowed stays finite (uniform) until it is zeroed below.
    scores = scores.masked_fill(~allowed, torch.finfo(scores.dtype).min)
    compute_dtype = torch.promote_types(scores.dtype, torch.float32)
    weights = torch.softmax(scores, dim=-1, dtype=compute_dtype)
    weights = weights * allowed.any(dim=-1, keepdim=True)
    return weights.to(scores.dtype)
