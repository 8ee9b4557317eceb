"""Linear attention in O(T): key sums when bidirectional, chunked prefix sums when causal (SPEC 2.5).

Causal: split T into chunks of C. A query sees (a) earlier keys of its own chunk through a (C, C) causal
product and (b) all earlier chunks through the running state S = sum phi(k) v^T, z = sum phi(k), taken as an
exclusive torch.cumsum over chunks. No Python loop over steps or chunks; memory O(T C + (T / C) F Dv).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor

from markovformer.ops.linear_attention.naive import compute_dtype, key_mask, normalise


def _exclusive_cumsum(x: Tensor, dim: int) -> Tensor:
    """Sum of the strictly earlier entries along ``dim`` (shift then cumsum, no subtraction of large sums)."""
    shifted = x.narrow(dim, 0, x.shape[dim] - 1)
    zeros = torch.zeros_like(x.narrow(dim, 0, 1))
    return torch.cat([zeros, shifted], dim=dim).cumsum(dim=dim)


def _bidirectional(q: Tensor, k: Tensor, v: Tensor) -> tuple[Tensor, Tensor]:
    """Numerator (B, H, T, Dv) and denominator (B, H, T, 1) from sums over all (already masked) keys."""
    state = torch.einsum("bhtf,bhtd->bhfd", k, v)
    key_sum = k.sum(dim=-2)
    return q @ state, (q @ key_sum.unsqueeze(-1))


def _causal(q: Tensor, k: Tensor, v: Tensor, chunk_size: int) -> tuple[Tensor, Tensor]:
    """Numerator (B, H, T, Dv) and denominator (B, H, T, 1) over keys j <= t, chunk by chunk in parallel."""
    batch, heads, length, _ = q.shape
    num_chunks = -(-length // chunk_size)
    pad = num_chunks * chunk_size - length
    # Zero-padded tail positions add nothing to any sum and are cropped at the end.
    q, k, v = (F.pad(x, (0, 0, 0, pad)).unflatten(2, (num_chunks, chunk_size)) for x in (q, k, v))
    within_chunk = torch.ones(chunk_size, chunk_size, dtype=torch.bool, device=q.device).tril()
    scores = q @ k.transpose(-2, -1)
    scores = torch.where(within_chunk, scores, torch.zeros_like(scores))
    numerator = scores @ v
    denominator = scores.sum(dim=-1, keepdim=True)
    state = _exclusive_cumsum(torch.einsum("bhncf,bhncd->bhnfd", k, v), dim=2)
    key_sum = _exclusive_cumsum(k.sum(dim=-2), dim=2)
    numerator = numerator + q @ state
    denominator = denominator + q @ key_sum.unsqueeze(-1)
    crop = (batch, heads, num_chunks * chunk_size)
    return (
        numerator.reshape(*crop, -1)[:, :, :length],
        denominator.reshape(*crop, 1)[:, :, :length],
    )


def linear_attention_chunked(
    q_features: Tensor,
    k_features: Tensor,
    v: Tensor,
    *,
    causal: bool,
    attention_mask: Tensor | None = None,
    chunk_size: int = 64,
    normaliser: str = "positive",
) -> Tensor:
    """Linear attention without a (T, T) matrix; same result as ``linear_attention_naive`` up to rounding.

    q_features, k_features (B, H, T, F); v (B, H, T, Dv); attention_mask (B, T), 1 = real, 0 = padding.
    Returns (B, H, T, Dv) in ``v``'s dtype. ``chunk_size`` only matters when causal.
    """
    if chunk_size < 1:
        raise ValueError(f"chunk_size must be >= 1, got {chunk_size}")
    dtype = compute_dtype(q_features)
    batch, _, length, _ = q_features.shape
    real = key_mask(attention_mask, batch, length, q_features.device)[:, None, :, None]
    zero = torch.zeros((), dtype=dtype, device=q_features.device)
    q = q_features.to(dtype)
    # Padded keys are removed by zeroing their features and values (where, not *, so inf/NaN cannot leak).
    k = torch.where(real, k_features.to(dtype), zero)
    values = torch.where(real, v.to(dtype), zero)
    if causal:
        numerator, denominator = _causal(q, k, values, chunk_size)
        has_key = real.cumsum(dim=2) > 0
    else:
        numerator, denominator = _bidirectional(q, k, values)
        has_key = real.any(dim=2, keepdim=True)
    return normalise(numerator, denominator, has_key, normaliser).to(v.dtype)
