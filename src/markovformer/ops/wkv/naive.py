"""The WKV operator of RWKV-4 (Peng et al. 2023 §3.3) term by term, dense (T×T): the reference.

    wkv_t = (Σ_{i<t} e^{-(t-1-i)w + k_i} v_i + e^{u+k_t} v_t) / (Σ_{i<t} e^{-(t-1-i)w + k_i} + e^{u+k_t})

Non-causal (bidirectional) WKV adds the mirrored sum over i > t with weights e^{-(i-1-t)w + k_i}.
Overflows once k reaches ~700 in float64; the stable forms are ``recurrent`` and ``scan``.
"""

from __future__ import annotations

import torch
from torch import Tensor


def wkv_naive(w: Tensor, u: Tensor, k: Tensor, v: Tensor, causal: bool = True) -> Tensor:
    """The WKV sums term by term. w, u (C,); k, v (B, T, C). Returns (B, T, C). Unstable for large k."""
    steps = torch.arange(k.shape[1], device=k.device)
    distance = (steps[:, None] - steps[None, :]).abs()  # |t - i|
    log_weight = -(distance[..., None] - 1) * w + k[:, None, :, :]  # (B, T, T, C): query t, key i
    log_weight = torch.where((distance == 0)[..., None], (u + k)[:, None, :, :], log_weight)
    if causal:
        log_weight = log_weight.masked_fill((steps[:, None] < steps[None, :])[..., None], float("-inf"))
    weight = torch.exp(log_weight)
    return (weight * v[:, None]).sum(2) / weight.sum(2)


__all__ = ["wkv_naive"]
