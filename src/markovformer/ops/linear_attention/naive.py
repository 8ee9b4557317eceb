"""Quadratic reference for linear attention, and the one normalisation rule every backend calls.

With features phi_q, phi_k, a query t attends to visible keys j (not padding; j <= t when causal) with weights
A[t, j] = phi_q[t]·phi_k[j], normalised by their sum. This file builds the dense (T, T) weights; it is the
obviously correct twin that the chunked path is tested against.
"""

from __future__ import annotations

import torch
from torch import Tensor

from markovformer.ops.precision import autocast_off, compute_dtype
from markovformer.ops.segments import same_segment

NORMALISERS = ("positive", "signed")

# A signed (trig) denominator smaller than this in magnitude is clamped to it. A positive one means "no attention
# mass" (row -> 0) only below the dtype's smallest normal number: FAVOR+ sums have no fixed scale, so any larger
# threshold would silently zero real rows of small sums.
DENOMINATOR_EPS = 1e-12


def normalise(numerator: Tensor, denominator: Tensor, has_key: Tensor, normaliser: str) -> Tensor:
    """Divide attention sums by their normaliser, safely.

    numerator (..., T, X); denominator and has_key (..., T, 1), has_key True where a query sees any key.
    ``"positive"``: rows whose denominator is below the dtype's smallest normal number (or that see no key) return
    zeros.
    ``"signed"`` (trig features): the denominator keeps its sign but becomes +DENOMINATOR_EPS when smaller in
    magnitude; rows that see no key still return zeros. Never NaN/inf, gradients included.
    """
    if normaliser == "positive":
        keep = has_key & (denominator >= torch.finfo(denominator.dtype).tiny)
        # Dividing by 1 where the row is dropped keeps the unused branch (and its gradient) finite.
        safe = torch.where(keep, denominator, torch.ones_like(denominator))
    elif normaliser == "signed":
        keep = has_key
        # Sign-aware clamp: |d| < eps becomes +eps, so a near-cancelling trig sum cannot divide by ~0.
        safe = torch.where(
            denominator.abs() < DENOMINATOR_EPS, torch.full_like(denominator, DENOMINATOR_EPS), denominator
        )
    else:
        raise ValueError(f"unknown normaliser {normaliser!r}; expected one of {NORMALISERS}")
    return torch.where(keep, numerator / safe, torch.zeros_like(numerator))


def key_mask(attention_mask: Tensor | None, batch: int, length: int, device: torch.device) -> Tensor:
    """Boolean (B, T) mask of real keys; all True when ``attention_mask`` is None."""
    if attention_mask is None:
        return torch.ones(batch, length, dtype=torch.bool, device=device)
    return attention_mask.to(device=device) != 0


@autocast_off  # float32 or wider under mixed precision too, as the chunked path
def linear_attention_weights(
    q_features: Tensor,
    k_features: Tensor,
    *,
    causal: bool,
    attention_mask: Tensor | None = None,
    normaliser: str = "positive",
    segment_ids: Tensor | None = None,
) -> Tensor:
    """Dense normalised weights (B, H, T, T) from q_features, k_features (B, H, T, F), in float32 or wider.

    Entry [t, j] is zero where key j is padding or (causal) j > t, or (``segment_ids`` (B, T), packed documents)
    lies in another document; a row that sees no key is all zeros.
    """
    dtype = compute_dtype(q_features)
    batch, _, length, _ = q_features.shape
    real = key_mask(attention_mask, batch, length, q_features.device)
    allowed = real[:, None, None, :]
    if causal:
        allowed = allowed & torch.ones(length, length, dtype=torch.bool, device=q_features.device).tril()
    if segment_ids is not None:
        allowed = allowed & same_segment(segment_ids.to(q_features.device))
    scores = q_features.to(dtype) @ k_features.to(dtype).transpose(-2, -1)
    scores = torch.where(allowed, scores, torch.zeros_like(scores))
    has_key = allowed.any(dim=-1, keepdim=True)
    return normalise(scores, scores.sum(dim=-1, keepdim=True), has_key, normaliser)


@autocast_off
def linear_attention_naive(
    q_features: Tensor,
    k_features: Tensor,
    v: Tensor,
    *,
    causal: bool,
    attention_mask: Tensor | None = None,
    normaliser: str = "positive",
    segment_ids: Tensor | None = None,
) -> Tensor:
    """Quadratic linear attention: q_features, k_features (B, H, T, F), v (B, H, T, Dv) -> (B, H, T, Dv).

    ``attention_mask`` (B, T): 1 = real token, 0 = padding. Output has ``v``'s dtype. ``segment_ids``: see
    ``linear_attention_weights``.
    """
    weights = linear_attention_weights(
        q_features, k_features, causal=causal, attention_mask=attention_mask, normaliser=normaliser,
        segment_ids=segment_ids,
    )  # fmt: skip
    real = key_mask(attention_mask, v.shape[0], v.shape[2], v.device)[:, None, :, None]
    # Zeroing padded values too keeps a non-finite padding value from leaking through 0 * inf.
    values = torch.where(real, v.to(weights.dtype), torch.zeros((), dtype=weights.dtype, device=v.device))
    return (weights @ values).to(v.dtype)
