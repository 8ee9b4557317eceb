"""Softmax over allowed keys only, with rows that allow nothing returning zeros (never NaN)."""

from __future__ import annotations

import torch
from torch import Tensor


def masked_softmax(scores: Tensor, allowed: Tensor) -> Tensor:
    """Softmax of ``scores`` along the last axis over entries where ``allowed`` is True.

    ``allowed`` broadcasts against ``scores``. Half-precision inputs are normalised in float32 and cast
    back. A row with no allowed entry gets all-zero probabilities, so its attention output is zero.
    """
    out_dtype = scores.dtype
    if scores.dtype in (torch.float16, torch.bfloat16):
        scores = scores.float()
    scores = scores.masked_fill(~allowed, float("-inf"))
    row_max = scores.amax(dim=-1, keepdim=True).detach()
    # An all-masked row has max -inf; shifting by 0 instead keeps exp(-inf) = 0 and avoids inf - inf.
    row_max = torch.where(torch.isfinite(row_max), row_max, torch.zeros_like(row_max))
    weights = torch.exp(scores - row_max)
    total = weights.sum(dim=-1, keepdim=True)
    weights = weights / total.clamp_min(torch.finfo(weights.dtype).tiny)
    return weights.to(out_dtype)
